package sched_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lanes-dev/lanes/internal/redistest"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
	"github.com/lanes-dev/lanes/sched"
)

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, a := range s.Attributes() {
		if a.Key == k {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// One batch of two calls on one concurrency key, traced with the SDK's
// in-memory recorder: a lanes.batch span; under it each call's lanes.wait
// and lanes.hold; under each hold the execute_tool span; and under the
// batch the backend's script spans; with the attributes the issue names.
// Metrics go to a manual reader.
func TestSpansAndMetricsOfOneBatch(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	b, err := redislane.New(c, redistest.Namespace("otel-"), redislane.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s, err := lanes.NewSession(context.Background(), b, lanes.WithTracerProvider(tp), lanes.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	read := func(ctx context.Context, inv sched.Invocation) (string, error) {
		// a holds k until b waits for it in the backend, so that b's grant
		// is a hand-off whatever the machine's load (b's step reaching
		// Redis after a's release was granted at once: no hand-off)
		for end := time.Now().Add(5 * time.Second); inv.CallID == "a" && time.Now().Before(end); time.Sleep(time.Millisecond) {
			if snap, err := b.Inspect(ctx, nil); err == nil && slices.ContainsFunc(snap.Keys, func(k lanes.KeyState) bool { return len(k.Waiters) > 0 }) {
				break
			}
		}
		time.Sleep(time.Millisecond)
		return "ok", nil
	}
	sc, err := sched.New(sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{
		"read": {Safe: safe, Concurrency: sched.Concurrency{Key: "k", Limit: 1}, Run: read},
	}}, s, sched.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	res, err := sc.Run(testCtx(t), calls("a:read", "b:read"), sched.Options{RunID: "run-otel", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, map[string]sched.Status{"a": sched.OK, "b": sched.OK})

	spans := rec.Ended()
	byName := map[string][]sdktrace.ReadOnlySpan{}
	byID := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range spans {
		byName[sp.Name()] = append(byName[sp.Name()], sp)
		byID[sp.SpanContext().SpanID().String()] = sp
	}
	parent := func(sp sdktrace.ReadOnlySpan) string {
		if p, ok := byID[sp.Parent().SpanID().String()]; ok {
			return p.Name()
		}
		return ""
	}
	if n := len(byName["lanes.batch"]); n != 1 {
		t.Fatalf("%d lanes.batch spans; want 1 (all: %v)", n, names(spans))
	}
	batch := byName["lanes.batch"][0]
	if v, _ := attr(batch, "lanes.run_id"); v.AsString() != "run-otel" {
		t.Errorf("lanes.batch run id = %v", v)
	}
	for _, name := range []string{"lanes.wait", "lanes.hold", "execute_tool read"} {
		if len(byName[name]) != 2 {
			t.Fatalf("%d %s spans; want 2 (all: %v)", len(byName[name]), name, names(spans))
		}
	}
	for _, w := range byName["lanes.wait"] {
		if parent(w) != "lanes.batch" {
			t.Errorf("lanes.wait's parent = %q; want lanes.batch", parent(w))
		}
		keys, _ := attr(w, lanes.AttrKeys)
		tool, _ := attr(w, lanes.AttrToolName)
		tenant, _ := attr(w, lanes.AttrTenant)
		outcome, _ := attr(w, lanes.AttrOutcome)
		if !slices.Equal(keys.AsStringSlice(), []string{"concurrency:k"}) || tool.AsString() != "read" || tenant.AsString() != "acme" || outcome.AsString() != "granted" {
			t.Errorf("lanes.wait attributes %v", w.Attributes())
		}
		if call, _ := attr(w, lanes.AttrCallID); call.AsString() == "b" {
			if pos, ok := attr(w, lanes.AttrPosition); !ok || pos.AsInt64() != 1 {
				t.Errorf("b's lanes.wait queue position = %v; want 1", pos)
			}
		}
	}
	for _, h := range byName["lanes.hold"] {
		if parent(h) != "lanes.batch" {
			t.Errorf("lanes.hold's parent = %q; want lanes.batch", parent(h))
		}
		if tok, _ := attr(h, lanes.AttrTokens); tok.AsString() == "" {
			t.Errorf("lanes.hold has no tokens: %v", h.Attributes())
		}
	}
	for _, e := range byName["execute_tool read"] {
		if parent(e) != "lanes.hold" {
			t.Errorf("execute_tool's parent = %q; want lanes.hold", parent(e))
		}
		if out, _ := attr(e, lanes.AttrOutcome); out.AsString() != "ok" {
			t.Errorf("execute_tool outcome = %v", out)
		}
	}
	// miniredis has no Functions: the steps run as EVALSHA, and each
	// enqueue step is a child of the wait it carries.
	enqueues := 0
	for _, sp := range byName["EVALSHA"] {
		if v, _ := attr(sp, "lanes.script"); v.AsString() == "enqueue" {
			enqueues++
			if parent(sp) != "lanes.wait" {
				t.Errorf("enqueue step's parent = %q; want lanes.wait", parent(sp))
			}
		}
	}
	if enqueues == 0 {
		t.Errorf("no EVALSHA span of the enqueue step (all: %v)", names(spans))
	}
	// lanes.namespace on every span; each hold linked to its call's wait.
	for _, sp := range spans {
		if v, _ := attr(sp, lanes.AttrNamespace); v.AsString() != b.Namespace() {
			t.Errorf("%s span's lanes.namespace = %q; want %q", sp.Name(), v.AsString(), b.Namespace())
		}
	}
	for _, h := range byName["lanes.hold"] {
		entry, _ := attr(h, lanes.AttrEntry)
		links := h.Links()
		if len(links) != 1 {
			t.Fatalf("lanes.hold of %s has %d links; want 1, to its wait", entry.AsString(), len(links))
		}
		w, ok := byID[links[0].SpanContext.SpanID().String()]
		if we, _ := attr(w, lanes.AttrEntry); !ok || w.Name() != "lanes.wait" || we != entry {
			t.Errorf("lanes.hold of %s links to %v; want its lanes.wait", entry.AsString(), links[0].SpanContext.SpanID())
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					got[mt.Name] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					got[mt.Name] += int64(p.Count)
				}
			}
		}
	}
	if got["lanes.grants"] != 2 || got["lanes.wait.duration"] != 2 || got["lanes.hold.duration"] != 2 {
		t.Errorf("metrics %v; want 2 grants, 2 waits and 2 holds recorded", got)
	}
	if got["lanes.handoff.duration"] != 1 {
		t.Errorf("metrics %v; want one hand-off (b's grant came with the hint)", got)
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}
