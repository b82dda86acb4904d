package mcptools_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lanes-dev/lanes/internal/mcptest"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
	"github.com/lanes-dev/lanes/sched/batch"
	"github.com/lanes-dev/lanes/sched/mcptools"
)

// calls records what a proxy's OnCall is told.
type calls struct {
	mu  sync.Mutex
	all []mcptools.CallOutcome
}

func (c *calls) add(o mcptools.CallOutcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.all = append(c.all, o)
}

func (c *calls) list() []mcptools.CallOutcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]mcptools.CallOutcome(nil), c.all...)
}

// newProxy returns a proxy for r on in-memory lanes (backend b, or a new
// one), whose calls are recorded in rec.
func newProxy(t *testing.T, r *batch.Resolved, b lanes.Backend, o mcptools.ProxyOptions) (*mcptools.Proxy, *calls) {
	t.Helper()
	if b == nil {
		b = lanes.NewMemory()
	}
	sess, err := lanes.NewSession(context.Background(), mcptools.WithoutRecords(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	rec := &calls{}
	o.OnCall = rec.add
	p, err := mcptools.NewProxy(r, sess, o)
	if err != nil {
		t.Fatalf("NewProxy() = %v", err)
	}
	t.Cleanup(p.Wait)
	return p, rec
}

// serveStdio serves p on pipes and returns the other ends: what the
// client writes and reads. The proxy stops when t ends.
func serveStdio(t testing.TB, p *mcptools.Proxy) (io.WriteCloser, io.ReadCloser) {
	t.Helper()
	clientR, proxyW := io.Pipe()
	proxyR, clientW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.ServeStdio(ctx, proxyR, proxyW) }()
	t.Cleanup(func() {
		clientW.Close()
		cancel()
		select {
		case <-done:
		case <-time.After(bound):
			t.Error("the proxy did not stop")
		}
		clientR.Close()
	})
	return clientW, clientR
}

// connect returns an SDK client session with p over stdio pipes.
func connect(t testing.TB, p *mcptools.Proxy) *mcp.ClientSession {
	t.Helper()
	w, r := serveStdio(t, p)
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.IOTransport{Reader: r, Writer: w}, nil)
	if err != nil {
		t.Fatalf("Connect() = %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callTool(t *testing.T, cs *mcp.ClientSession, name, args string) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: json.RawMessage(args)})
	if err != nil {
		t.Fatalf("CallTool(%s) = %v", name, err)
	}
	return res
}

func text(r *mcp.CallToolResult) string {
	var parts []string
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// The proxy offers the servers' tools and the commands, and passes the
// server's result on, with what the lanes made of the call in _meta.
func TestProxyOffersAndRunsTools(t *testing.T) {
	f := newFixture(t)
	if err := os.WriteFile(filepath.Join(f.dir, "a.txt"), []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := f.mustResolve(t, f.stdio("files")+`
[tools.append]
lock_keys = ["file:{path}"]
[tools.echo]
command = ["cat"]
description = "Echo the arguments"
input_schema = { type = "object", properties = { word = { type = "string" } } }
safe = true
[tools.off]
command = ["true"]
enabled = false
`)
	p, rec := newProxy(t, r, nil, mcptools.ProxyOptions{})
	cs := connect(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*mcp.Tool{}
	var names []string
	for _, tl := range list.Tools {
		byName[tl.Name] = tl
		names = append(names, tl.Name)
	}
	if want := []string{"append", "echo", "fail", "read", "slow"}; !reflect.DeepEqual(names, want) {
		t.Errorf("tools/list = %v; want %v (off is disabled)", names, want)
	}
	if rd := byName["read"]; rd == nil || rd.Annotations == nil || !rd.Annotations.ReadOnlyHint || rd.Description != "Read a file" {
		t.Errorf("read = %+v; want the server's description and annotations", rd)
	}
	if e := byName["echo"]; e == nil || e.Description != "Echo the arguments" || !strings.Contains(mustJSON(t, e.InputSchema), `"word"`) {
		t.Errorf("echo = %+v; want the description and input schema of [tools.echo]", e)
	}

	if res := callTool(t, cs, "read", `{"path":"a.txt"}`); res.IsError || text(res) != "hello" || res.Meta[mcptools.MetaStatus] != "ok" {
		t.Errorf("read = %+v %q; want hello, lanes/status ok", res, text(res))
	}
	res := callTool(t, cs, "append", `{"path":"b.txt","text":"one"}`)
	key := "lock:file:" + filepath.Join(evalSymlinks(t, f.dir), "b.txt")
	tokens, _ := res.Meta[mcptools.MetaTokens].(map[string]any)
	if res.IsError || text(res) != "appended one" || tokens[key] == nil {
		t.Errorf("append = %q, meta %v; want appended, with the token of %s", text(res), res.Meta, key)
	}
	start, _ := mcptest.Find(f.waitLog(t, "append's start", func(l []mcptest.Entry) bool { _, ok := mcptest.Find(l, "start", "one"); return ok }), "start", "one")
	if got, want := start.Tokens[key], uint64(tokens[key].(float64)); got != want {
		t.Errorf("the server got token %d for %s; want the call's, %d", got, key, want)
	}
	if res := callTool(t, cs, "fail", `{"why":"no"}`); !res.IsError || text(res) != "no" || res.Meta[mcptools.MetaCode] != "TOOL_ERROR" {
		t.Errorf("fail = %+v %q; want the server's isError result, code TOOL_ERROR", res, text(res))
	}
	if res := callTool(t, cs, "echo", `{"word":"hi"}`); res.IsError || text(res) != `{"word":"hi"}` {
		t.Errorf("echo = %+v %q; want the command's output", res, text(res))
	}
	for _, c := range rec.list() {
		if c.RequestID == "" || strings.HasPrefix(c.RequestID, "call-") {
			t.Errorf("call %+v: request id %q; want the client's JSON-RPC id", c.Outcome.Tool, c.RequestID)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// When the lanes refuse a call, the client gets an isError result saying
// why, at once or after --wait, never a hang: a wait past the bound, a
// limit that disagrees with another replica's. Nothing is left queued.
func TestProxyRefusalsAreIsError(t *testing.T) {
	f := newFixture(t)
	r := f.mustResolve(t, f.stdio("files")+`
[tools.slow]
concurrency = { key = "x" }
[tools.append]
concurrency = { key = "y", limit = 1 }
`)
	mem := lanes.NewMemory()
	other, err := lanes.NewSession(context.Background(), mem)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	for _, l := range []lanes.Lane{{Key: "concurrency:x", Limit: 1}, {Key: "concurrency:y", Limit: 2}} {
		lease, err := other.Acquire(ctx, lanes.Request{Lanes: []lanes.Lane{l}})
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(context.Background())
	}
	p, _ := newProxy(t, r, mem, mcptools.ProxyOptions{Wait: 150 * time.Millisecond})
	cs := connect(t, p)

	res := callTool(t, cs, "slow", `{"label":"a","ms":1}`)
	if !res.IsError || !strings.Contains(text(res), "TOOL_WAIT_TIMEOUT") || !strings.Contains(text(res), "waited 150ms for its lanes") || res.Meta[mcptools.MetaCode] != "TOOL_WAIT_TIMEOUT" {
		t.Errorf("slow behind a holder = %+v %q; want isError TOOL_WAIT_TIMEOUT saying how long it waited", res, text(res))
	}
	res = callTool(t, cs, "append", `{"path":"b","text":"b"}`)
	if !res.IsError || !strings.Contains(text(res), "TOOL_LIMIT_MISMATCH") || !strings.Contains(text(res), `"concurrency:y"`) {
		t.Errorf("append with another limit = %+v %q; want isError TOOL_LIMIT_MISMATCH naming the key", res, text(res))
	}
	snap, err := mem.Inspect(ctx, []string{"concurrency:x", "concurrency:y"})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range snap.Keys {
		if len(k.Waiters) != 0 || len(k.Holders) != 1 {
			t.Errorf("%s: holders %v waiters %v; want only the other session's holder", k.Key, k.Holders, k.Waiters)
		}
	}
	if log, _ := mcptest.ReadLog(f.log); len(log) != 0 {
		t.Errorf("the server's log = %+v; want nothing: no refused call reached it", log)
	}
}

// The proxy names each call by its MCP request id, whatever the client's
// _meta says: string and number ids, and a holder's call id is that id.
func TestProxyCallIDIsTheRequestID(t *testing.T) {
	f := newFixture(t)
	r := f.mustResolve(t, f.stdio("files")+"[tools.slow]\nconcurrency = { key = \"x\" }\n")
	mem := lanes.NewMemory()
	p, rec := newProxy(t, r, mem, mcptools.ProxyOptions{})
	w, rd := serveStdio(t, p)
	replies := bufio.NewScanner(rd)
	replies.Buffer(nil, 1<<20)
	send := func(msg string) {
		if _, err := io.WriteString(w, msg+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	next := func() map[string]any {
		if !replies.Scan() {
			t.Fatalf("no reply from the proxy: %v", replies.Err())
		}
		var m map[string]any
		if err := json.Unmarshal(replies.Bytes(), &m); err != nil {
			t.Fatalf("reply %q: %v", replies.Text(), err)
		}
		return m
	}
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if m := next(); m["error"] != nil {
		t.Fatalf("initialize = %v", m)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	gate := filepath.Join(f.dir, "gate")
	send(`{"jsonrpc":"2.0","id":"abc-1","method":"tools/call","params":{"name":"slow","arguments":{"label":"held","ms":1,"until":"` + gate + `"},"_meta":{"lanes/requestId":"spoofed"}}}`)
	f.waitLog(t, "the held call's start", func(l []mcptest.Entry) bool { _, ok := mcptest.Find(l, "start", "held"); return ok })
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	snap, err := mem.Inspect(ctx, []string{"concurrency:x"})
	if err != nil || len(snap.Keys) != 1 || len(snap.Keys[0].Holders) != 1 {
		t.Fatalf("Inspect() = %+v, %v; want one holder of concurrency:x", snap, err)
	}
	if h := snap.Keys[0].Holders[0]; h.CallID != "abc-1" || h.Tool != "slow" || !strings.HasPrefix(h.ID, "mcp-") || !strings.HasSuffix(h.ID, "/abc-1") {
		t.Errorf("holder = entry %s, call id %s, tool %s; want mcp-RUN/abc-1, call id abc-1, tool slow", h.ID, h.CallID, h.Tool)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if m := next(); m["id"] != "abc-1" || m["error"] != nil {
		t.Errorf("reply = %v; want the result of abc-1", m)
	}
	send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"slow","arguments":{"label":"seven","ms":1}}}`)
	if m := next(); m["id"] != float64(7) {
		t.Errorf("reply = %v; want the result of 7", m)
	}
	var ids []string
	for _, c := range rec.list() {
		ids = append(ids, c.RequestID)
	}
	if want := []string{"abc-1", "7"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("request ids = %v; want %v", ids, want)
	}
}

// Over streamable HTTP, a session's tenant is its Lanes-Tenant header, the
// tenant lane is taken with it, and a bad header is an isError result.
func TestProxyHTTPTenantHeader(t *testing.T) {
	f := newFixture(t)
	r := f.mustResolve(t, f.stdio("files")+"[runner]\nper_tenant = 4\n")
	p, rec := newProxy(t, r, nil, mcptools.ProxyOptions{Tenant: "default-tenant"})
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(srv.Close) // after the sessions' cleanups: they end their sessions first
	session := func(tenant string) *mcp.ClientSession {
		hc := &http.Client{Transport: headerTransport{tenant}}
		client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
		if err != nil {
			t.Fatalf("Connect() = %v", err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	res := callTool(t, session("acme"), "slow", `{"label":"a","ms":1}`)
	tokens, _ := res.Meta[mcptools.MetaTokens].(map[string]any)
	if res.IsError || tokens["tenant:acme"] == nil {
		t.Errorf("slow for acme = %+v; want ok, holding tenant:acme", res)
	}
	callTool(t, session(""), "slow", `{"label":"b","ms":1}`)
	res = callTool(t, session(strings.Repeat("x", lanes.MaxFieldLen+1)), "slow", `{"label":"c","ms":1}`)
	if !res.IsError || !strings.Contains(text(res), "bad Lanes-Tenant header") {
		t.Errorf("slow with a bad tenant = %+v %q; want isError naming the header", res, text(res))
	}
	var tenants []string
	for _, c := range rec.list() {
		tenants = append(tenants, c.Tenant)
	}
	if want := []string{"acme", "default-tenant"}; !reflect.DeepEqual(tenants, want) {
		t.Errorf("tenants = %v; want %v", tenants, want)
	}
}

type headerTransport struct{ tenant string }

func (h headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if h.tenant != "" {
		req = req.Clone(req.Context())
		req.Header.Set(mcptools.TenantHeader, h.tenant)
	}
	return http.DefaultTransport.RoundTrip(req)
}

// A client that cancels its call cancels the server's call too: the
// proxy passes the cancellation on.
func TestProxyPassesTheClientsCancelOn(t *testing.T) {
	f := newFixture(t)
	r := f.mustResolve(t, f.stdio("files"))
	p, rec := newProxy(t, r, nil, mcptools.ProxyOptions{})
	cs := connect(t, p)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"label": "cut", "ms": 60000}})
		done <- err
	}()
	f.waitLog(t, "the call's start", func(l []mcptest.Entry) bool { _, ok := mcptest.Find(l, "start", "cut"); return ok })
	cancel()
	if err := <-done; err == nil {
		t.Error("CallTool() = nil after its cancel; want an error")
	}
	f.waitLog(t, "the server's call cancelled", func(l []mcptest.Entry) bool { _, ok := mcptest.Find(l, "cancelled", "cut"); return ok })
	deadline := time.Now().Add(bound)
	for len(rec.list()) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := rec.list(); len(got) != 1 || got[0].Outcome.Status != sched.Indeterminate {
		t.Errorf("outcomes = %+v; want the cut call indeterminate", got)
	}
}

// A tool whose server describes it with an input schema the SDK refuses
// is left out and said so; the others are offered.
func TestProxySkipsToolsItCannotDescribe(t *testing.T) {
	r := &batch.Resolved{
		Config: sched.Config{Tools: map[string]sched.Tool{
			"bad":  {Run: func(context.Context, sched.Invocation) (string, error) { return "", nil }},
			"good": {Run: func(context.Context, sched.Invocation) (string, error) { return "", nil }},
		}},
		Tools: map[string]batch.ToolInfo{
			"bad":  {Server: "s", Remote: "bad", Definition: json.RawMessage(`{"name":"bad","inputSchema":{"type":"array"}}`)},
			"good": {Server: "s", Remote: "good", Definition: json.RawMessage(`{"name":"good","inputSchema":{"type":"object"}}`)},
		},
	}
	p, _ := newProxy(t, r, nil, mcptools.ProxyOptions{})
	if got := p.Tools(); !reflect.DeepEqual(got, []string{"good"}) {
		t.Errorf("Tools() = %v; want only good", got)
	}
	if s := p.Skipped(); len(s) != 1 || !strings.Contains(s[0], "tool bad left out") || !strings.Contains(s[0], `type "object"`) {
		t.Errorf("Skipped() = %q; want bad, saying why", s)
	}
}

// rawStdio serves a proxy of the files server over pipes a test writes
// JSON-RPC lines to and reads the answers from, as a client without the
// SDK would: done gets ServeStdio's result.
func rawStdio(t *testing.T) (f *fixture, clientR *io.PipeReader, clientW, proxyW *io.PipeWriter, done chan error) {
	f = newFixture(t)
	r := f.mustResolve(t, f.stdio("files"))
	p, _ := newProxy(t, r, nil, mcptools.ProxyOptions{})
	clientR, proxyW = io.Pipe()
	proxyR, clientW := io.Pipe()
	done = make(chan error, 1)
	go func() { done <- p.ServeStdio(context.Background(), proxyR, proxyW) }()
	return f, clientR, clientW, proxyW, done
}

// rawHandshake is a client's initialize (id 1) and initialized, as lines.
const rawHandshake = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}` + "\n" +
	`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n"

// A client that closes standard input right after its requests still
// gets their answers: the proxy ends the session once every request it
// read was answered, or given up by the client's notifications/cancelled.
func TestProxyAnswersBeforeTheEndOfInput(t *testing.T) {
	f, clientR, clientW, proxyW, done := rawStdio(t)
	replies := make(chan []string, 1)
	go func() {
		var got []string
		sc := bufio.NewScanner(clientR)
		for sc.Scan() {
			var m struct {
				ID any `json:"id"`
			}
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				got = append(got, fmt.Sprint(m.ID))
			}
		}
		replies <- got
	}()
	gate := filepath.Join(f.dir, "never")
	io.WriteString(clientW, rawHandshake+
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow","arguments":{"label":"two","ms":50}}}`+"\n"+
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"slow","arguments":{"label":"three","ms":1,"until":"`+gate+`"}}}`+"\n")
	f.waitLog(t, "three's start", hasStart("three"))
	io.WriteString(clientW, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`+"\n")
	clientW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ServeStdio() = %v; want nil at the end of the input", err)
		}
	case <-time.After(bound):
		t.Fatal("the proxy did not end after its input and its answers")
	}
	proxyW.Close()
	got := map[string]bool{}
	for _, id := range <-replies {
		got[id] = true
	}
	if !got["1"] || !got["2"] {
		t.Errorf("answers to %v; want initialize and call 2 answered (3, cancelled, may be or not)", got)
	}
	f.waitLog(t, "three cancelled", func(l []mcptest.Entry) bool { _, ok := mcptest.Find(l, "cancelled", "three"); return ok })
}

func hasStart(label string) func([]mcptest.Entry) bool {
	return func(l []mcptest.Entry) bool { _, ok := mcptest.Find(l, "start", label); return ok }
}

// Close ends the calls in flight: one waiting without a bound for a key
// another holds leaves its queue, its client gets an isError result, and
// Wait returns; a later call is refused.
func TestProxyCloseEndsCallsInFlight(t *testing.T) {
	f := newFixture(t)
	r := f.mustResolve(t, f.stdio("files")+"[tools.slow]\nconcurrency = { key = \"x\" }\n")
	mem := lanes.NewMemory()
	other, err := lanes.NewSession(context.Background(), mem)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	lease, err := other.Acquire(ctx, lanes.Request{Lanes: []lanes.Lane{{Key: "concurrency:x", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	p, _ := newProxy(t, r, mem, mcptools.ProxyOptions{}) // no Wait: as long as the client waits
	cs := connect(t, p)
	got := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, _ := cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"label": "w", "ms": 1}})
		got <- res
	}()
	for {
		snap, err := mem.Inspect(ctx, []string{"concurrency:x"})
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Keys) == 1 && len(snap.Keys[0].Waiters) == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the call never queued")
		}
		time.Sleep(time.Millisecond)
	}
	p.Close()
	select {
	case res := <-got:
		if res == nil || !res.IsError || !strings.Contains(text(res), "shutting down") {
			t.Errorf("the waiting call = %+v; want isError saying the proxy is shutting down", res)
		}
	case <-time.After(bound):
		t.Fatal("Close did not end the waiting call")
	}
	within := make(chan struct{})
	go func() { p.Wait(); close(within) }()
	select {
	case <-within:
	case <-time.After(bound):
		t.Fatal("Wait did not return after Close")
	}
	if res := callTool(t, cs, "slow", `{"label":"late","ms":1}`); !res.IsError || !strings.Contains(text(res), "shutting down") {
		t.Errorf("a call after Close = %+v; want isError", res)
	}
	snap, _ := mem.Inspect(ctx, []string{"concurrency:x"})
	if len(snap.Keys) != 1 || len(snap.Keys[0].Waiters) != 0 {
		t.Errorf("concurrency:x after Close = %+v; want only the other holder", snap.Keys)
	}
}

// Regression (break-it review of 2026-12-04, finding 6): a request with
// the id of one still in flight was dropped by the SDK with no answer,
// and a client that reused the id took the first call's answer for the
// second's. It is answered at once with an invalid-request error, and not
// run; the first runs on.
func TestProxyRefusesAnIDInFlight(t *testing.T) {
	f, clientR, clientW, proxyW, done := rawStdio(t)
	type reply struct {
		ID    any `json:"id"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	replies := make(chan reply, 16)
	go func() {
		sc := bufio.NewScanner(clientR)
		for sc.Scan() {
			var m reply
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				replies <- m
			}
		}
		close(replies)
	}()
	gate := filepath.Join(f.dir, "never")
	io.WriteString(clientW, rawHandshake+
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"slow","arguments":{"label":"first","ms":1,"until":"`+gate+`"}}}`+"\n")
	f.waitLog(t, "first's start", hasStart("first"))
	io.WriteString(clientW, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"slow","arguments":{"label":"second","ms":1}}}`+"\n")
	var got []reply
	for len(got) == 0 || got[len(got)-1].Error == nil {
		select {
		case m, ok := <-replies:
			if !ok {
				t.Fatalf("the proxy's output ended after %+v; want the second request of id 3 refused", got)
			}
			got = append(got, m)
		case <-time.After(bound):
			t.Fatalf("no answer to the second request of id 3 (answers %+v); want it refused at once", got)
		}
	}
	last := got[len(got)-1]
	if last.Error == nil || fmt.Sprint(last.ID) != "3" || last.Error.Code != -32600 || !strings.Contains(last.Error.Message, "still in flight") {
		t.Fatalf("answers %+v; want the second request of id 3 refused with -32600, still in flight", got)
	}
	io.WriteString(clientW, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`+"\n")
	clientW.Close()
	select {
	case <-done:
	case <-time.After(bound):
		t.Fatal("the proxy did not end after its input")
	}
	proxyW.Close()
	log, err := mcptest.ReadLog(f.log)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := mcptest.Find(log, "start", "second"); ok {
		t.Error("the refused request ran")
	}
}
