package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lanes-dev/lanes/internal/mcptest"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched/mcptools"
)

var (
	mcpServerOnce sync.Once
	mcpServerBin  string
	mcpServerErr  error
)

// mcpTestServer returns the MCP test server (internal/mcptest/server),
// built once beside the lanectl binary, which TestMain removes.
func mcpTestServer(t *testing.T) string {
	t.Helper()
	mcpServerOnce.Do(func() { mcpServerBin, mcpServerErr = mcptest.Build(filepath.Dir(lanectlBin)) })
	if mcpServerErr != nil {
		t.Fatal(mcpServerErr)
	}
	return mcpServerBin
}

// mcpFixture is a directory with the test server's log, and the
// server's TOML entry.
type mcpFixture struct {
	dir, log string
}

func newMCPFixture(t *testing.T) *mcpFixture {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &mcpFixture{dir: dir, log: filepath.Join(dir, "server.log")}
}

// stdio is the [mcp_servers.files] entry of the test server started with
// a command.
func (f *mcpFixture) stdio(t *testing.T) string {
	return fmt.Sprintf("[mcp_servers.files]\ncommand = [%q, \"--root\", \".\", \"--log\", %q]\n", mcpTestServer(t), f.log)
}

// httpServer starts the test server over streamable HTTP, for every
// replica to share, and returns its [mcp_servers.files] entry.
func (f *mcpFixture) httpServer(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(mcpTestServer(t), "--root", f.dir, "--log", f.log, "--http", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the test server's endpoint: %v", err)
	}
	return fmt.Sprintf("[mcp_servers.files]\nurl = %q\n", strings.TrimSpace(line))
}

// toolsFile writes tools.toml, with the fixture's directory as workspace.
func (f *mcpFixture) toolsFile(t *testing.T, src string) string {
	t.Helper()
	path := filepath.Join(f.dir, "tools.toml")
	writeFile(t, path, "[runner]\nworkspace = \".\"\n"+src, 0o600)
	return path
}

// proxyClient starts `lanectl mcp serve` with args, as an MCP client
// starts its server, and returns the client's session; its stderr goes
// to stderr. The proxy stops when t ends (its standard input closes).
func proxyClient(t *testing.T, stderr *syncBuffer, args ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(lanectlBin, append([]string{"mcp", "serve"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LANES_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stderr = stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting to lanectl mcp serve: %v; its stderr: %s", err, stderr)
	}
	t.Cleanup(func() {
		if err := cs.Close(); err != nil {
			t.Errorf("lanectl mcp serve ended with %v; stderr: %s", err, stderr)
		}
	})
	return cs
}

// mcpCall is a tools/call under way.
type mcpCall struct {
	res  *mcp.CallToolResult
	err  error
	done chan struct{}
}

func startCall(cs *mcp.ClientSession, name string, args map[string]any) *mcpCall {
	c := &mcpCall{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		c.res, c.err = cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	}()
	return c
}

// result waits for c and returns its result's text, failing t on an
// error or an isError result.
func (c *mcpCall) result(t *testing.T) string {
	t.Helper()
	<-c.done
	if c.err != nil {
		t.Fatalf("CallTool() = %v", c.err)
	}
	if c.res.IsError {
		t.Fatalf("CallTool() = isError %q", resultText(c.res))
	}
	return resultText(c.res)
}

func resultText(r *mcp.CallToolResult) string {
	var parts []string
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// queue returns how many hold and wait for key in s's namespace.
func (s *server) queue(t *testing.T, key string) (holders, waiters int) {
	t.Helper()
	for _, k := range s.inspect(t).Keys {
		if k.Key == key {
			return len(k.Holders), len(k.Waiters)
		}
	}
	return 0, 0
}

// Issue 14's demonstration, on real Redis: three `lanectl mcp serve`
// replicas sharing a namespace, each driven by its own MCP client, in
// front of one MCP server. The slow tool, declared with concurrency = {
// key = "x", limit = 1 }, never runs twice at once on the server, and
// calls on the key start in the order their proxies received them;
// append calls on one file through lock_keys land in that order, each
// with a greater fencing token; lanectl status shows a proxy call with
// its tool and MCP request id.
func TestMCPServeReplicasSerialiseAKeyRealRedis(t *testing.T) {
	s := newRealRedis(t)
	f := newMCPFixture(t)
	tools := f.toolsFile(t, f.httpServer(t)+`
[tools.slow]
concurrency = { key = "x", limit = 1 }
[tools.append]
lock_keys = ["file:{path}"]
`)
	var stderr [3]syncBuffer
	var clients [3]*mcp.ClientSession
	for i := range clients {
		clients[i] = proxyClient(t, &stderr[i], s.args("--tools", tools, "--wait", "0")...)
	}

	// In order: A holds x (it waits for a gate), B and C queue behind it,
	// each through another replica.
	gate := filepath.Join(f.dir, "gate")
	a := startCall(clients[0], "slow", map[string]any{"label": "A", "ms": 1, "until": gate})
	eventually(t, "A holds concurrency:x", func() bool { h, _ := s.queue(t, "concurrency:x"); return h == 1 })
	b := startCall(clients[1], "slow", map[string]any{"label": "B", "ms": 1})
	eventually(t, "B waits for concurrency:x", func() bool { _, w := s.queue(t, "concurrency:x"); return w == 1 })
	c := startCall(clients[2], "slow", map[string]any{"label": "C", "ms": 1})
	eventually(t, "C waits for concurrency:x", func() bool { _, w := s.queue(t, "concurrency:x"); return w == 2 })

	code, out, errOut := runBin(t, s.args("status", "--json", "concurrency:x")...)
	var st statusView
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st.Keys) != 1 || len(st.Keys[0].Holders) != 1 {
		t.Fatalf("status = %d %s %s; want the holder of concurrency:x", code, out, errOut)
	}
	h := st.Keys[0].Holders[0]
	if h.Tool != "slow" || !regexp.MustCompile(`^[0-9]+$`).MatchString(h.CallID) || h.Entry == "" || !strings.HasPrefix(h.Entry, "mcp-") || !strings.HasSuffix(h.Entry, "/"+h.CallID) {
		t.Errorf("status holder = %+v; want tool slow, the MCP request id as call id, entry mcp-RUN/ID", h)
	}

	writeFile(t, gate, "", 0o600)
	for _, call := range []*mcpCall{a, b, c} {
		call.result(t)
	}
	log, err := mcptest.ReadLog(f.log)
	if err != nil {
		t.Fatal(err)
	}
	if got := mcptest.Labels(log, "start"); !reflect.DeepEqual(got, []string{"A", "B", "C"}) {
		t.Errorf("slow calls started in order %v; want A, B, C, the order the proxies received them", got)
	}

	// At once: four calls from each replica; never two on the server.
	var burst []*mcpCall
	for i, cs := range clients {
		for j := range 4 {
			burst = append(burst, startCall(cs, "slow", map[string]any{"label": fmt.Sprintf("r%d-%d", i, j), "ms": 20}))
		}
	}
	for _, call := range burst {
		call.result(t)
	}
	log, err = mcptest.ReadLog(f.log)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(mcptest.Labels(log, "end")); n != 15 {
		t.Errorf("%d slow calls ended; want 15", n)
	}
	if most := mcptest.MostAtOnce(log); most != 1 {
		t.Errorf("the server ran %d slow calls at once; want 1 (concurrency key x, limit 1): %+v", most, log)
	}

	// Appends on one file, each through another replica, land in order.
	gate2 := filepath.Join(f.dir, "gate2")
	key := "lock:file:" + filepath.Join(f.dir, "notes.txt")
	first := startCall(clients[0], "append", map[string]any{"path": "notes.txt", "text": "one", "until": gate2})
	eventually(t, "one holds the file's lock key", func() bool { h, _ := s.queue(t, key); return h == 1 })
	second := startCall(clients[1], "append", map[string]any{"path": "notes.txt", "text": "two"})
	eventually(t, "two waits for the file", func() bool { _, w := s.queue(t, key); return w == 1 })
	third := startCall(clients[2], "append", map[string]any{"path": "notes.txt", "text": "three"})
	eventually(t, "three waits for the file", func() bool { _, w := s.queue(t, key); return w == 2 })
	writeFile(t, gate2, "", 0o600)
	for _, call := range []*mcpCall{first, second, third} {
		call.result(t)
	}
	if b, _ := os.ReadFile(filepath.Join(f.dir, "notes.txt")); string(b) != "one\ntwo\nthree\n" {
		t.Errorf("notes.txt = %q; want one, two, three in the order received", b)
	}
	log, _ = mcptest.ReadLog(f.log)
	var last uint64
	for _, label := range []string{"one", "two", "three"} {
		e, ok := mcptest.Find(log, "start", label)
		if tok := e.Tokens[key]; !ok || tok <= last {
			t.Errorf("append %s reached the server with token %d for %s; want one above %d", label, tok, key, last)
		} else {
			last = tok
		}
	}
	s.assertEmpty(t)
}

// A call the lanes refuse comes back as an isError result saying why, and
// at once or after --wait, never a hang: a wait past --wait, a limit that
// disagrees with the holder's. Real Redis, across processes: the test
// holds the keys.
func TestMCPServeRefusalIsErrorRealRedis(t *testing.T) {
	s := newRealRedis(t)
	f := newMCPFixture(t)
	tools := f.toolsFile(t, f.stdio(t)+`
[tools.slow]
concurrency = { key = "x", limit = 1 }
[tools.append]
concurrency = { key = "y", limit = 1 }
`)
	s.hold(t, "concurrency:x")
	sess := s.session(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := sess.Acquire(ctx, lanes.Request{Lanes: []lanes.Lane{{Key: "concurrency:y", Limit: 2}}}); err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cs := proxyClient(t, &stderr, s.args("--tools", tools, "--wait", "200ms")...)
	res := startCall(cs, "slow", map[string]any{"label": "a", "ms": 1})
	<-res.done
	if res.err != nil || !res.res.IsError || !strings.Contains(resultText(res.res), "TOOL_WAIT_TIMEOUT") || !strings.Contains(resultText(res.res), "waited 200ms") {
		t.Errorf("slow behind a holder = %v %+v; want isError TOOL_WAIT_TIMEOUT", res.err, res.res)
	}
	res = startCall(cs, "append", map[string]any{"path": "p", "text": "t"})
	<-res.done
	if res.err != nil || !res.res.IsError || !strings.Contains(resultText(res.res), "TOOL_LIMIT_MISMATCH") || !strings.Contains(resultText(res.res), "limit 2") {
		t.Errorf("append against limit 2 = %v %+v; want isError TOOL_LIMIT_MISMATCH naming both limits", res.err, res.res)
	}
	if _, w := s.queue(t, "concurrency:x"); w != 0 {
		t.Errorf("concurrency:x has %d waiters after the refusal; want none", w)
	}
}

// Over streamable HTTP: the endpoint on standard error, the tenant from
// the Lanes-Tenant header, and SIGTERM ends the server with exit 0.
// Real Redis.
func TestMCPServeHTTPRealRedis(t *testing.T) {
	s := newRealRedis(t)
	f := newMCPFixture(t)
	tools := filepath.Join(f.dir, "tools.toml")
	writeFile(t, tools, "[runner]\nworkspace = \".\"\nper_tenant = 2\n"+f.stdio(t), 0o600)
	p := startBin(t, s.args("mcp", "serve", "--tools", tools, "--http", "127.0.0.1:0", "--events")...)
	var endpoint string
	eventually(t, "the proxy says where it serves", func() bool {
		m := regexp.MustCompile(`serving MCP at (http://\S+/mcp)`).FindStringSubmatch(p.stderr.String())
		if m != nil {
			endpoint = m[1]
		}
		return m != nil
	})
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	hc := &http.Client{Transport: tenantHeader{"acme"}}
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("Connect() = %v; stderr %s", err, p.stderr)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"label": "h", "ms": 1}})
	if err != nil || res.IsError {
		t.Fatalf("CallTool() = %v %+v", err, res)
	}
	tokens, _ := res.Meta[mcptools.MetaTokens].(map[string]any)
	if tokens["tenant:acme"] == nil {
		t.Errorf("result _meta = %v; want a token for tenant:acme", res.Meta)
	}
	cs.Close()
	p.signal(t, syscall.SIGTERM)
	code := p.wait(t)
	if code != 0 {
		t.Errorf("mcp serve after SIGTERM exited %d; want 0; stderr %s", code, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), "finished") || !strings.Contains(p.stderr.String(), "slow  ok") {
		t.Errorf("stderr = %q; want the call's event line", p.stderr)
	}
	s.assertEmpty(t)
}

type tenantHeader struct{ tenant string }

func (h tenantHeader) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set(mcptools.TenantHeader, h.tenant)
	return http.DefaultTransport.RoundTrip(req)
}

// lanectl batch on a model response whose tools come from an MCP server:
// outcomes as for commands, a server that fails named on stderr, its
// tools' calls failing alone. Real Redis.
func TestBatchWithMCPServerRealRedis(t *testing.T) {
	s := newRealRedis(t)
	f := newMCPFixture(t)
	writeFile(t, filepath.Join(f.dir, "a.txt"), "hello", 0o600)
	tools := f.toolsFile(t, f.stdio(t)+`
[mcp_servers.broken]
command = ["./no-such-server"]
prefix = "b_"

[tools.append]
lock_keys = ["file:{path}"]
`)
	calls := filepath.Join(f.dir, "response.json")
	writeFile(t, calls, `{"content":[
	  {"type":"tool_use","id":"c1","name":"read","input":{"path":"a.txt"}},
	  {"type":"tool_use","id":"c2","name":"append","input":{"path":"b.txt","text":"x"}},
	  {"type":"tool_use","id":"c3","name":"fail","input":{"why":"nope"}},
	  {"type":"tool_use","id":"c4","name":"b_read","input":{}}]}`, 0o600)
	code, out, errOut := runBin(t, s.args("batch", "--tools", tools, "--calls", calls, "--json")...)
	if code != 0 {
		t.Fatalf("batch exited %d; stderr %s", code, errOut)
	}
	if !strings.Contains(errOut, "lanectl: warning: MCP server broken: cannot start") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("stderr = %q; want one warning naming the broken server", errOut)
	}
	var view []batchOutcome
	if err := json.Unmarshal([]byte(out), &view); err != nil || len(view) != 4 {
		t.Fatalf("batch --json = %s; %v", out, err)
	}
	want := []struct{ status, code, text string }{
		{"ok", "", "hello"},
		{"ok", "", "appended x"},
		{"error", "TOOL_ERROR", "nope"},
		{"error", "TOOL_ERROR", "MCP server broken: cannot start"},
	}
	for i, w := range want {
		v := view[i]
		if v.Status != w.status || v.Code != w.code || !strings.Contains(v.Output+v.Error, w.text) {
			t.Errorf("call %s = %s %s %q %q; want %s %s %q", v.ID, v.Status, v.Code, v.Output, v.Error, w.status, w.code, w.text)
		}
	}
	if key := "lock:file:" + filepath.Join(f.dir, "b.txt"); view[1].Tokens[key] == 0 {
		t.Errorf("append's tokens = %v; want one for %s", view[1].Tokens, key)
	}
	s.assertEmpty(t)
}

// Bad input to mcp serve: one line, the usage or data exit status.
func TestMCPServeBadInput(t *testing.T) {
	f := newMCPFixture(t)
	clash := f.toolsFile(t, f.stdio(t)+strings.Replace(f.stdio(t), "[mcp_servers.files]", "[mcp_servers.more]", 1))
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"mcp"}, exitUsage, "mcp needs a command"},
		{[]string{"mcp", "frob"}, exitUsage, `unknown command "frob" for mcp`},
		{[]string{"mcp", "serve"}, exitUsage, "mcp serve needs --tools FILE"},
		{[]string{"mcp", "serve", "--tools", clash, "--wait", "-1s"}, exitUsage, "--wait must not be negative"},
		{[]string{"mcp", "serve", "--tools", clash, "--http", "nonsense"}, exitUsage, `bad --http "nonsense"`},
		{[]string{"mcp", "serve", "--tools", filepath.Join(f.dir, "none.toml"), "--local"}, exitDataErr, "cannot read"},
		{[]string{"mcp", "serve", "--tools", clash, "--local"}, exitDataErr, "tool append is offered by mcp_servers.files and by mcp_servers.more"},
	} {
		code, _, stderr := runInProcess(t, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("lanectl %v = %d %q; want %d and %q", tt.args, code, stderr, tt.code, tt.want)
		}
		assertOneLine(t, stderr)
	}
}

// (Found by an outside trial.) `lanectl mcp serve` told its clients
// serverInfo {"name": "lanes", "version": "1"}; the version is now
// lanectl's own, the one --version prints. With --local: no Redis.
func TestMCPServeNamesLanectlVersion(t *testing.T) {
	f := newMCPFixture(t)
	tools := f.toolsFile(t, "[tools.hi]\ncommand = [\"true\"]\n")
	out, err := exec.Command(lanectlBin, "--version").Output()
	fields := strings.Fields(string(out))
	if err != nil || len(fields) < 2 {
		t.Fatalf("lanectl --version = %q, %v", out, err)
	}
	var stderr syncBuffer
	cs := proxyClient(t, &stderr, "--tools", tools, "--local")
	info := cs.InitializeResult().ServerInfo
	if info.Name != "lanes" || info.Version != fields[1] || info.Version == "1" {
		t.Errorf("serverInfo = %+v; want lanes, version %q (lanectl --version: %q)", info, fields[1], out)
	}
	if got := mainVersion("v9.8.7-test", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}); got != "v9.8.7-test" {
		t.Errorf("mainVersion(stamped) = %q; want v9.8.7-test", got)
	}
	if got := mainVersion("", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}); got != "devel" {
		t.Errorf("mainVersion(unstamped, devel) = %q; want devel", got)
	}
}

// (Found by an outside trial.) One line on standard input that was not
// JSON ended `lanectl mcp serve` with exit 70, the requests it had read
// before unanswered. Each bad line now gets a JSON-RPC error (-32700 for
// what is not JSON, -32600 for JSON that is no request), every request
// before and after it its answer, and the proxy exits 0 when its input
// ends. Standard input stays open until every answer arrived.
func TestMCPServeStdioBadLineAnsweredAndServingGoesOn(t *testing.T) {
	f := newMCPFixture(t)
	tools := f.toolsFile(t, "[tools.hi]\ncommand = [\"sh\", \"-c\", \"cat >/dev/null; echo hi\"]\n")
	cmd, stdin, stdout, stderr := startServeLocal(t, tools)
	call := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"hi","arguments":{"n":%d}}}`, id, id)
	}
	lines := []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		call(3), call(4), call(5),
		`this is not json`, // line 7
		call(6),
		`{"id":7,"method":"ping"}`, // JSON, but no jsonrpc "2.0"
		`{"jsonrpc":"2.0","id":8,"method":"ping"}   `,
		call(9),
	}
	if _, err := io.WriteString(stdin, strings.Join(lines, "\n")+"\n"); err != nil {
		t.Fatal(err)
	}
	type reply struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	want := map[string]string{ // id: "result", or the error code
		"1": "result", "2": "result", "3": "result", "4": "result", "5": "result",
		"null": "-32700", "6": "result", "7": "-32600", "8": "result", "9": "result",
	}
	got := map[string]string{}
	replies := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for len(got) < len(want) && sc.Scan() {
			var r reply
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				replies <- fmt.Errorf("a reply that is not JSON: %q", sc.Text())
				return
			}
			id := string(r.ID)
			switch {
			case r.Error != nil:
				got[id] = fmt.Sprint(r.Error.Code)
				if id == "null" && !strings.HasPrefix(r.Error.Message, "parse error: input line 7 is not JSON") {
					replies <- fmt.Errorf("the parse error says %q; want it to name line 7", r.Error.Message)
					return
				}
			case r.Result != nil:
				if id != "1" && id != "2" && id != "8" && !strings.Contains(string(r.Result), "hi") {
					replies <- fmt.Errorf("call %s answered %s; want the tool's hi", id, r.Result)
					return
				}
				got[id] = "result"
			}
		}
		replies <- sc.Err()
	}()
	select {
	case err := <-replies:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitFor):
		t.Fatalf("not every reply after %v; want %v; stderr: %s", waitFor, want, stderr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("replies %v; want %v; stderr: %s", got, want, stderr)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("lanectl mcp serve, its input ended: %v; want exit 0; stderr: %s", err, stderr)
	}
}

// startServeLocal starts the built `lanectl mcp serve --tools tools
// --local` with pipes to its standard input and output; it is killed when
// t ends.
func startServeLocal(t *testing.T, tools string) (*exec.Cmd, io.WriteCloser, io.ReadCloser, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(lanectlBin, "mcp", "serve", "--tools", tools, "--local")
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, stdin, stdout, stderr
}
