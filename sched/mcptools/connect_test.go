package mcptools_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/mcptest"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
	"github.com/lanes-dev/lanes/sched/batch"
	"github.com/lanes-dev/lanes/sched/mcptools"
)

// bound bounds every wait of a test for another process.
const bound = 20 * time.Second

// fixture is a directory with a tools.toml and the test server's log.
type fixture struct {
	dir, log string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	return &fixture{dir: dir, log: filepath.Join(dir, "server.log")}
}

// stdio is the TOML of the test server started with a command.
func (f *fixture) stdio(name string, extra ...string) string {
	argv := []string{serverBin, "--root", ".", "--log", f.log}
	argv = append(argv, extra...)
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = fmt.Sprintf("%q", a)
	}
	return fmt.Sprintf("[mcp_servers.%s]\ncommand = [%s]\n", name, strings.Join(q, ", "))
}

// httpServer starts the test server over streamable HTTP and returns its
// endpoint; it is stopped when t ends.
func (f *fixture) httpServer(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(serverBin, "--root", f.dir, "--log", f.log, "--http", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the test server's endpoint: %v", err)
	}
	return strings.TrimSpace(line)
}

// resolve writes src as the fixture's tools.toml (with a workspace of the
// fixture's directory), loads it and resolves it with mcptools.Connect.
func (f *fixture) resolve(t *testing.T, src string) (*batch.Resolved, error) {
	t.Helper()
	path := filepath.Join(f.dir, "tools.toml")
	if strings.Contains(src, "[runner]\n") {
		src = strings.Replace(src, "[runner]\n", "[runner]\nworkspace = \".\"\n", 1)
	} else {
		src = "[runner]\nworkspace = \".\"\n" + src
	}
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	file, err := batch.Load(path)
	if err != nil {
		t.Fatalf("Load() = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	r, err := file.Resolve(ctx, mcptools.Connect)
	if r != nil {
		t.Cleanup(func() {
			if err := r.Close(); err != nil {
				t.Errorf("Resolved.Close() = %v", err)
			}
		})
	}
	return r, err
}

func (f *fixture) mustResolve(t *testing.T, src string) *batch.Resolved {
	t.Helper()
	r, err := f.resolve(t, src)
	if err != nil {
		t.Fatalf("Resolve() = %v", err)
	}
	return r
}

// logLines waits until the server's log satisfies ok, and returns it.
func (f *fixture) waitLog(t *testing.T, what string, ok func([]mcptest.Entry) bool) []mcptest.Entry {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		log, err := mcptest.ReadLog(f.log)
		if err != nil {
			t.Fatal(err)
		}
		if ok(log) {
			return log
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server's log never showed %s: %+v", what, log)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// runBatch runs calls on in-memory lanes with cfg.
func runBatch(t *testing.T, cfg sched.Config, calls ...sched.Call) []sched.Outcome {
	t.Helper()
	sess, err := lanes.NewSession(context.Background(), lanes.NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	s, err := sched.New(cfg, sess)
	if err != nil {
		t.Fatalf("sched.New() = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	res, err := s.Run(ctx, calls, sched.Options{})
	if err != nil {
		t.Fatalf("Run() = %v", err)
	}
	s.Wait()
	return res.Outcomes
}

func call(id, tool, args string) sched.Call {
	return sched.Call{ID: id, Tool: tool, Args: json.RawMessage(args)}
}

// The tools a real MCP server lists (stdio and streamable HTTP) are tools
// of the batch: text content is the output, isError an error outcome with
// the text, readOnlyHint the default of ReadOnlyHint, and the server gets
// the call's fencing tokens in _meta.
func TestServerToolsRunInABatch(t *testing.T) {
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			f := newFixture(t)
			server := f.stdio("files")
			if transport == "http" {
				server = fmt.Sprintf("[mcp_servers.files]\nurl = %q\n", f.httpServer(t))
			}
			if err := os.WriteFile(filepath.Join(f.dir, "a.txt"), []byte("hello"), 0o600); err != nil {
				t.Fatal(err)
			}
			r := f.mustResolve(t, server+"[tools.append]\nlock_keys = [\"file:{path}\"]\n")
			if rd := r.Config.Tools["read"]; !rd.ReadOnlyHint || !rd.Idempotent {
				t.Errorf("read = %+v; want ReadOnlyHint and Idempotent from its readOnlyHint", rd)
			}
			if fl := r.Config.Tools["fail"]; fl.ReadOnlyHint || !fl.Idempotent {
				t.Errorf("fail = %+v; want Idempotent from its idempotentHint", fl)
			}
			if info := r.Tools["append"]; info.Server != "files" || info.Remote != "append" || !strings.Contains(string(info.Definition), `"inputSchema"`) {
				t.Errorf("Tools[append] = %+v; want the files server's tool with its description", info)
			}
			out := runBatch(t, r.Config,
				call("1", "read", `{"path":"a.txt"}`),
				call("2", "append", `{"path":"b.txt","text":"one"}`),
				call("3", "fail", `{"why":"the disk is on fire"}`),
			)
			if out[0].Status != sched.OK || out[0].Output != "hello" {
				t.Errorf("read = %s %q %v; want ok hello", out[0].Status, out[0].Output, out[0].Err)
			}
			if out[1].Status != sched.OK || out[1].Output != "appended one" {
				t.Errorf("append = %s %q %v; want ok", out[1].Status, out[1].Output, out[1].Err)
			}
			if out[2].Status != sched.Failed || out[2].Code != sched.CodeToolError || out[2].Err == nil || out[2].Err.Error() != "the disk is on fire" {
				t.Errorf("fail = %s %s %v; want error with the tool's text", out[2].Status, out[2].Code, out[2].Err)
			}
			if b, _ := os.ReadFile(filepath.Join(f.dir, "b.txt")); string(b) != "one\n" {
				t.Errorf("b.txt = %q; want the appended line", b)
			}
			key := "lock:file:" + filepath.Join(evalSymlinks(t, f.dir), "b.txt")
			log := f.waitLog(t, "the append's start", func(l []mcptest.Entry) bool { _, ok := mcptest.Find(l, "start", "one"); return ok })
			start, _ := mcptest.Find(log, "start", "one")
			if tok := start.Tokens[key]; tok == 0 || tok != out[1].Tokens[key] {
				t.Errorf("the server got tokens %v; want %s = the call's token %d", start.Tokens, key, out[1].Tokens[key])
			}
		})
	}
}

func evalSymlinks(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A call cut off by its timeout is reported timed out at once, and the
// server is sent notifications/cancelled: its handler's context ends.
func TestTimeoutSendsCancelled(t *testing.T) {
	f := newFixture(t)
	r := f.mustResolve(t, f.stdio("files")+"[tools.slow]\ntimeout = \"200ms\"\n")
	out := runBatch(t, r.Config, call("1", "slow", `{"label":"long","ms":60000}`))
	if out[0].Status != sched.TimedOut || out[0].Code != sched.CodeTimeout {
		t.Errorf("slow = %s %s %v; want timed_out", out[0].Status, out[0].Code, out[0].Err)
	}
	f.waitLog(t, "the call cancelled", func(l []mcptest.Entry) bool { _, ok := mcptest.Find(l, "cancelled", "long"); return ok })
}

// A cancelled batch cancels the server's call too.
func TestCancelledBatchSendsCancelled(t *testing.T) {
	f := newFixture(t)
	r := f.mustResolve(t, f.stdio("files"))
	sess, err := lanes.NewSession(context.Background(), lanes.NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	s, err := sched.New(r.Config, sess)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan []sched.Outcome)
	go func() {
		res, _ := s.Run(ctx, []sched.Call{call("1", "slow", `{"label":"cut","ms":60000}`)}, sched.Options{})
		done <- res.Outcomes
	}()
	f.waitLog(t, "the call's start", func(l []mcptest.Entry) bool { _, ok := mcptest.Find(l, "start", "cut"); return ok })
	cancel()
	var out []sched.Outcome
	select {
	case out = <-done:
	case <-time.After(bound):
		t.Fatal("the cancelled batch did not return")
	}
	s.Wait()
	if out[0].Status != sched.Indeterminate {
		t.Errorf("slow = %s %v; want indeterminate (cut off in flight, not idempotent)", out[0].Status, out[0].Err)
	}
	f.waitLog(t, "the call cancelled", func(l []mcptest.Entry) bool { _, ok := mcptest.Find(l, "cancelled", "cut"); return ok })
}

// A server that cannot start, or cannot list its tools, is an error naming
// it, with why; the other server's tools run, and the calls of its own
// fail with its error.
func TestServerThatFailsToStartOrList(t *testing.T) {
	f := newFixture(t)
	r := f.mustResolve(t, f.stdio("good")+
		"[mcp_servers.missing]\ncommand = [\"./no-such-server\"]\nprefix = \"m_\"\n"+
		fmt.Sprintf("[mcp_servers.crashing]\ncommand = [%q, \"--fail-start\", \"config file is corrupt\"]\nprefix = \"c_\"\n", serverBin)+
		fmt.Sprintf("[mcp_servers.unlisted]\ncommand = [%q, \"--fail-list\", \"the index is rebuilding\"]\nprefix = \"u_\"\n", serverBin))
	if len(r.Failed) != 3 {
		t.Fatalf("Failed = %v; want the missing, the crashing and the unlisted server", r.Failed)
	}
	msgs := map[string]string{}
	for _, e := range r.Failed {
		msgs[e.Server] = e.Error()
	}
	if m := msgs["missing"]; !strings.HasPrefix(m, "MCP server missing: cannot start ") || !strings.Contains(m, "no-such-server") {
		t.Errorf("missing's error = %q; want it named, with the program it could not start", m)
	}
	if m := msgs["crashing"]; !strings.HasPrefix(m, "MCP server crashing: ") || !strings.Contains(m, "exit status 3") || !strings.Contains(m, "config file is corrupt") {
		t.Errorf("crashing's error = %q; want it named, with its exit and its standard error", m)
	}
	if m := msgs["unlisted"]; !strings.HasPrefix(m, "MCP server unlisted: tools/list: ") || !strings.Contains(m, "the index is rebuilding") {
		t.Errorf("unlisted's error = %q; want it named, with tools/list's error", m)
	}
	calls := []sched.Call{call("1", "read", `{"path":"x"}`), call("2", "c_read", `{}`)}
	if err := os.WriteFile(filepath.Join(f.dir, "x"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := runBatch(t, r.ConfigFor(calls), calls...)
	if out[0].Status != sched.OK {
		t.Errorf("read = %s %v; want ok: the good server answered", out[0].Status, out[0].Err)
	}
	if out[1].Status != sched.Failed || !strings.Contains(out[1].Err.Error(), "MCP server crashing") {
		t.Errorf("c_read = %s %v; want error naming the crashing server", out[1].Status, out[1].Err)
	}
}

// A server reached by url that does not answer is an error naming it.
func TestServerURLThatDoesNotAnswer(t *testing.T) {
	f := newFixture(t)
	r := f.mustResolve(t, "[mcp_servers.gone]\nurl = \"http://127.0.0.1:1/mcp\"\nstart_timeout = \"5s\"\n")
	if len(r.Failed) != 1 || !strings.HasPrefix(r.Failed[0].Error(), "MCP server gone: cannot reach http://127.0.0.1:1/mcp") {
		t.Errorf("Failed = %v; want the gone server with its url", r.Failed)
	}
}

// Two servers offering one name: a configuration error naming both.
func TestTwoRealServersClash(t *testing.T) {
	f := newFixture(t)
	_, err := f.resolve(t, f.stdio("a")+f.stdio("b"))
	if err == nil || !strings.Contains(err.Error(), "is offered by mcp_servers.a and by mcp_servers.b") {
		t.Errorf("Resolve() = %v; want a clash naming both servers", err)
	}
	r := f.mustResolve(t, f.stdio("a")+f.stdio("b")+"prefix = \"b_\"\n")
	if _, ok := r.Tools["b_read"]; !ok {
		t.Errorf("Tools = %v; want b_read with the prefix", r.Tools)
	}
}

// A server that never answers initialize fails once its start_timeout
// passes, and is stopped.
func TestServerThatNeverAnswers(t *testing.T) {
	f := newFixture(t)
	r := f.mustResolve(t, "[mcp_servers.mute]\ncommand = [\"sleep\", \"60\"]\nstart_timeout = \"300ms\"\n")
	if len(r.Failed) != 1 || !strings.Contains(r.Failed[0].Error(), "MCP server mute: it did not start and list its tools within 300ms") {
		t.Errorf("Failed = %v; want the mute server and its start timeout", r.Failed)
	}
}
