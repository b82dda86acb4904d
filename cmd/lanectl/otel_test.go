package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/lanes-dev/lanes/lanes"
)

// The tests of this file use lanectl as an operator would: the binary with
// the standard OTEL_* variables and TRACEPARENT, and watch's /metrics
// scraped over HTTP and read with the Prometheus text parser. Their Redis
// is the real server (LANES_REDIS_URL, else 127.0.0.1:6379), each in
// namespaces of its own, or miniredis where the name says so.

// parentTrace is the W3C trace context the tests start lanectl under.
const parentTrace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// runBinEnv runs the lanectl binary with args to its end, in this
// process's environment less LANES_* and OTEL_*, plus env.
func runBinEnv(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(lanectlBin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LANES_") && !strings.HasPrefix(kv, "OTEL_") && !strings.HasPrefix(kv, "TRACE") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	go func() {
		<-ctx.Done()
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
	}()
	if err := cmd.Run(); err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("lanectl %q: %v", args, err)
		}
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

var traceparentRE = regexp.MustCompile(`(?m)^TRACEPARENT=(00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2})$`)

// Without any OTEL_* exporter, `lanectl lock` passes the TRACEPARENT it was
// started with to its command as it is: the trace goes on through it.
func TestLockPassesTraceparentThrough(t *testing.T) {
	s := newMiniredis(t)
	code, out, stderr := runBinEnv(t, []string{"TRACEPARENT=" + parentTrace},
		s.args("lock", "k", "--", "sh", "-c", `echo "TRACEPARENT=$TRACEPARENT"`)...)
	if code != 0 {
		t.Fatalf("lock = %d, stderr %q", code, stderr)
	}
	if !strings.Contains(out, "TRACEPARENT="+parentTrace+"\n") {
		t.Errorf("the command saw %q; want TRACEPARENT=%s", out, parentTrace)
	}
}

// span is one span as the console exporter (OTEL_TRACES_EXPORTER=console)
// prints it.
type span struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
	Links []struct {
		SpanContext struct{ SpanID string }
	}
}

func (s span) attr(k string) string {
	for _, a := range s.Attributes {
		if a.Key == k {
			return fmt.Sprint(a.Value.Value)
		}
	}
	return ""
}

// consoleSpans reads the spans the console exporter printed in out.
func consoleSpans(t *testing.T, out string) map[string][]span {
	t.Helper()
	spans := map[string][]span{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "{") {
			continue
		}
		var sp span
		if err := json.Unmarshal(sc.Bytes(), &sp); err != nil {
			t.Fatalf("console exporter printed %q: %v", sc.Text(), err)
		}
		spans[sp.Name] = append(spans[sp.Name], sp)
	}
	return spans
}

// With OTEL_TRACES_EXPORTER=console, `lanectl lock` on the real Redis
// server traces the command: "lanectl lock" a child of TRACEPARENT's span,
// lanes.wait and lanes.hold under it (the hold linked to the wait), the
// FCALL of the enqueue step under the wait, and the command gets the hold's
// span as its TRACEPARENT.
func TestRealRedisLockTraced(t *testing.T) {
	s := newRealRedis(t)
	code, out, stderr := runBinEnv(t, []string{"TRACEPARENT=" + parentTrace, "OTEL_TRACES_EXPORTER=console", "OTEL_SERVICE_NAME=lanectl-test"},
		s.args("lock", "gpu", "--", "sh", "-c", `echo "TRACEPARENT=$TRACEPARENT"`)...)
	if code != 0 {
		t.Fatalf("lock = %d, stderr %q; want 0", code, stderr)
	}
	// The spans go to stderr: stdout is the command's alone (a README
	// trial found them mixed into batch --json's outcomes).
	m := traceparentRE.FindStringSubmatch(out)
	if m == nil || strings.Count(out, "\n") != 1 {
		t.Fatalf("the command printed %q; want its TRACEPARENT line alone", out)
	}
	spans := consoleSpans(t, stderr)
	one := func(name string) span {
		t.Helper()
		if len(spans[name]) != 1 {
			t.Fatalf("%d %q spans; want 1 (output %s)", len(spans[name]), name, out)
		}
		return spans[name][0]
	}
	cmd, wait, hold := one("lanectl lock"), one("lanes.wait"), one("lanes.hold")
	if cmd.SpanContext.TraceID != "0af7651916cd43dd8448eb211c80319c" || cmd.Parent.SpanID != "b7ad6b7169203331" {
		t.Errorf("lanectl lock's trace %s, parent %s; want TRACEPARENT's", cmd.SpanContext.TraceID, cmd.Parent.SpanID)
	}
	if wait.Parent.SpanID != cmd.SpanContext.SpanID || hold.Parent.SpanID != cmd.SpanContext.SpanID {
		t.Errorf("lanes.wait's parent %s, lanes.hold's %s; want lanectl lock's %s", wait.Parent.SpanID, hold.Parent.SpanID, cmd.SpanContext.SpanID)
	}
	if len(hold.Links) != 1 || hold.Links[0].SpanContext.SpanID != wait.SpanContext.SpanID {
		t.Errorf("lanes.hold's links %+v; want one, to lanes.wait %s", hold.Links, wait.SpanContext.SpanID)
	}
	if m[2] != "0af7651916cd43dd8448eb211c80319c" || m[3] != hold.SpanContext.SpanID {
		t.Errorf("the command's TRACEPARENT %s; want trace 0af7…, parent lanes.hold %s", m[1], hold.SpanContext.SpanID)
	}
	var enqueue *span
	for _, name := range []string{"FCALL", "EVALSHA"} {
		for _, sp := range spans[name] {
			if sp.attr("lanes.script") == "enqueue" {
				enqueue = &sp
			}
		}
	}
	if enqueue == nil || enqueue.Parent.SpanID != wait.SpanContext.SpanID {
		t.Fatalf("enqueue step span %+v; want one, a child of lanes.wait", enqueue)
	}
	for k, v := range map[string]string{"lanes.namespace": s.ns, "db.system.name": "redis", "server.port": "6379", "db.namespace": "0"} {
		if got := enqueue.attr(k); got != v && !(k == "server.port" && !strings.Contains(s.url, ":6379")) {
			t.Errorf("enqueue span's %s = %q; want %q", k, got, v)
		}
	}
	for _, name := range []string{"lanectl lock", "lanes.wait", "lanes.hold"} {
		if got := one(name).attr("lanes.namespace"); got != s.ns {
			t.Errorf("%s's lanes.namespace = %q; want %q", name, got, s.ns)
		}
	}
}

// `lanectl batch` gives each tool command the trace context of its
// execute_tool span (console exporter), and, untraced, TRACEPARENT as it
// came. On miniredis.
func TestBatchPassesTraceparent(t *testing.T) {
	s := newMiniredis(t)
	d := newBatchDir(t, "\n[tools.tp]\ncommand = [\"./tools/tp\"]\nsafe = true\n")
	out := filepath.Join(d.dir, "tp.out") // the tool writes what it saw here
	writeFile(t, filepath.Join(d.dir, "tools", "tp"), "#!/bin/sh\necho \"TRACEPARENT=$TRACEPARENT\" > "+out+"\ncat\n", 0o755)
	calls := d.calls(t, "anthropic", toolCall{"call_1", "tp", `{}`})
	read := func() string {
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	code, _, stderr := runBinEnv(t, []string{"TRACEPARENT=" + parentTrace}, s.args("batch", "--json", "--tools", d.tools, "--calls", calls)...)
	if code != 0 {
		t.Fatalf("batch = %d, stderr %q", code, stderr)
	}
	if got := read(); got != "TRACEPARENT="+parentTrace+"\n" {
		t.Errorf("untraced, the tool saw %q; want TRACEPARENT=%s", got, parentTrace)
	}

	code, stdout, stderr := runBinEnv(t, []string{"TRACEPARENT=" + parentTrace, "OTEL_TRACES_EXPORTER=console"},
		s.args("batch", "--json", "--tools", d.tools, "--calls", calls)...)
	if code != 0 {
		t.Fatalf("batch = %d, stderr %q", code, stderr)
	}
	if got := decodeBatch(t, stdout); len(got) != 1 || got[0].Status != "ok" {
		t.Errorf("traced, batch --json printed %q; want one outcome, ok, and no span", stdout)
	}
	m := traceparentRE.FindStringSubmatch(read())
	tools := consoleSpans(t, stderr)["execute_tool tp"]
	if m == nil || len(tools) != 1 || m[2] != "0af7651916cd43dd8448eb211c80319c" || m[3] != tools[0].SpanContext.SpanID {
		t.Errorf("traced, the tool saw %q, execute_tool spans %+v; want the execute_tool span in the caller's trace", read(), tools)
	}
}

// scrape reads http://addr/metrics with the Prometheus text parser.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return mf
}

// sample returns the value of family's series whose labels include every
// one of labels, and how many series matched.
func sample(mf map[string]*dto.MetricFamily, family string, labels map[string]string) (float64, int) {
	var v float64
	n := 0
	for _, m := range mf[family].GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := len(have) >= len(labels)
		for k, want := range labels {
			if have[k] != want {
				match = false
			}
		}
		if !match {
			continue
		}
		n++
		switch {
		case m.Gauge != nil:
			v = m.Gauge.GetValue()
		case m.Counter != nil:
			v = m.Counter.GetValue()
		}
	}
	return v, n
}

var metricsAddrRE = regexp.MustCompile(`metrics of namespace \S+ at http://(\S+)/metrics`)

// startWatchMetrics runs `lanectl watch --metrics-addr 127.0.0.1:0` on s
// with extra flags, in this process, and returns the address it serves.
func startWatchMetrics(t *testing.T, s *server, extra ...string) string {
	t.Helper()
	p := startInProcess(t, s.args(append([]string{"watch", "--json", "--metrics-addr", "127.0.0.1:0"}, extra...)...)...)
	var addr string
	eventually(t, "watch says where it serves metrics", func() bool {
		m := metricsAddrRE.FindStringSubmatch(p.stderr.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	return addr
}

// Two namespaces of the real Redis server hold the same key gpu: the
// Prometheus series of `watch --metrics-addr` tell them apart by
// lanes_namespace; keys are reported by class (a file's lock key as
// file), by name only when --metrics-key names them; the counters exist
// before any lease expired.
func TestRealRedisWatchMetricsPerNamespace(t *testing.T) {
	a, b := newRealRedis(t), newRealRedis(t)
	a.hold(t, "gpu")
	a.hold(t, "lock:file:/srv/drafts/008.md")
	b.hold(t, "gpu")
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := a.session(t).Enqueue(ctx, lanes.Request{Lanes: []lanes.Lane{{Key: "gpu", Limit: 1}}}); err != nil {
		t.Fatal(err)
	}
	addrA := startWatchMetrics(t, a, "--metrics-key", "gpu")
	addrB := startWatchMetrics(t, b)

	mfA, mfB := scrape(t, addrA), scrape(t, addrB)
	for _, c := range []struct {
		mf     map[string]*dto.MetricFamily
		family string
		labels map[string]string
		want   float64
	}{
		{mfA, "lanes_holders", map[string]string{"lanes_namespace": a.ns, "lanes_key": "gpu"}, 1},
		{mfA, "lanes_waiters", map[string]string{"lanes_namespace": a.ns, "lanes_key": "gpu"}, 1},
		{mfA, "lanes_holders", map[string]string{"lanes_namespace": a.ns, "lanes_key_class": "file"}, 1},
		{mfB, "lanes_holders", map[string]string{"lanes_namespace": b.ns, "lanes_key_class": "other"}, 1},
		{mfB, "lanes_waiters", map[string]string{"lanes_namespace": b.ns, "lanes_key_class": "other"}, 0},
		{mfA, "lanes_leases_expired_total", map[string]string{"lanes_namespace": a.ns}, 0},
		{mfB, "lanes_waiters_evicted_total", map[string]string{"lanes_namespace": b.ns}, 0},
	} {
		if got, n := sample(c.mf, c.family, c.labels); n != 1 || got != c.want {
			t.Errorf("%s%v = %v (%d series); want %v in one series", c.family, c.labels, got, n, c.want)
		}
	}
	if w, n := sample(mfA, "lanes_wait_oldest_seconds", map[string]string{"lanes_namespace": a.ns, "lanes_key": "gpu"}); n != 1 || w <= 0 || w > waitFor.Seconds() {
		t.Errorf("lanes_wait_oldest_seconds of gpu = %v (%d series); want the waiter's wait", w, n)
	}
	for _, m := range mfB["lanes_holders"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "lanes_key" || (l.GetName() == "lanes_namespace" && l.GetValue() != b.ns) {
				t.Errorf("namespace %s's series %v: want no lanes_key (no --metrics-key) and only its namespace", b.ns, m.GetLabel())
			}
		}
	}
}

// A --metrics-addr that cannot be listened on fails watch with one line.
func TestWatchMetricsAddrInUse(t *testing.T) {
	s := newMiniredis(t)
	addr := startWatchMetrics(t, s)
	code, _, stderr := runInProcess(t, s.args("watch", "--metrics-addr", addr)...)
	if code != exitCannotListen || !strings.Contains(stderr, "cannot listen") {
		t.Errorf("watch on a port in use = %d, %q; want %d saying it cannot listen", code, stderr, exitCannotListen)
	}
	assertOneLine(t, stderr)
	code, _, stderr = runInProcess(t, s.args("watch", "--json", "--metrics-addr", addr)...)
	if code != exitCannotListen {
		t.Errorf("--json watch on a port in use = %d; want %d", code, exitCannotListen)
	}
	assertJSONError(t, stderr, "cannot_listen", exitCannotListen)
}

// A variable that names no exporter turns its signal off with one line
// that names the variable and its value, and the command runs on (a README
// trial got "unknown exporter or metrics producer" for a trace exporter).
// With console, metrics go to stderr as spans do. On miniredis.
func TestOTELBadExporterNamed(t *testing.T) {
	s := newMiniredis(t)
	for _, tc := range []struct{ env, want string }{
		{"OTEL_TRACES_EXPORTER=bogus", `lanectl: traces off: OTEL_TRACES_EXPORTER="bogus" names no exporter lanectl has (otlp, console or none)`},
		{"OTEL_METRICS_EXPORTER=jaeger", `lanectl: metrics off: OTEL_METRICS_EXPORTER="jaeger" names no exporter lanectl has (otlp, console, prometheus or none)`},
	} {
		code, out, stderr := runBinEnv(t, []string{tc.env}, s.args("lock", "k", "--", "echo", "ran")...)
		if code != 0 || out != "ran\n" || stderr != tc.want+"\n" {
			t.Errorf("%s lock = %d, stdout %q, stderr %q; want 0, the command's output, and %q", tc.env, code, out, stderr, tc.want)
		}
	}
	code, out, stderr := runBinEnv(t, []string{"OTEL_METRICS_EXPORTER=console"}, s.args("lock", "k", "--", "echo", "ran")...)
	if code != 0 || out != "ran\n" || !strings.Contains(stderr, `"ScopeMetrics"`) {
		t.Errorf("OTEL_METRICS_EXPORTER=console lock = %d, stdout %q, stderr %q; want 0, the command's output alone, the metrics on stderr", code, out, stderr)
	}
}
