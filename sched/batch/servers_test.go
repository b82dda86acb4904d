package batch_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/sched"
	"github.com/lanes-dev/lanes/sched/batch"
)

func TestParseMCPServers(t *testing.T) {
	dir := t.TempDir()
	f, err := batch.Parse([]byte(`
[mcp_servers.files]
command = ["./files-server", "--root", "."]
env = { FILES_MODE = "rw", EMPTY = "" }
start_timeout = "5s"

[mcp_servers.notes]
url = "http://127.0.0.1:8931/mcp"
prefix = "notes_"

[tools.append]
lock_keys = ["file:{path}"]
timeout = "10s"
description = "Append a line to a file"
input_schema = { type = "object", properties = { path = { type = "string" }, text = { type = "string" } }, required = ["path"] }
`), dir)
	if err != nil {
		t.Fatalf("Parse() = %v", err)
	}
	want := []batch.MCPServer{
		{Name: "files", Command: []string{filepath.Join(dir, "files-server"), "--root", "."}, Env: map[string]string{"FILES_MODE": "rw", "EMPTY": ""}, StartTimeout: 5 * time.Second},
		{Name: "notes", URL: "http://127.0.0.1:8931/mcp", Prefix: "notes_"},
	}
	if !reflect.DeepEqual(f.Servers, want) {
		t.Errorf("Servers = %+v; want %+v", f.Servers, want)
	}
	if len(f.Config.Tools) != 0 {
		t.Errorf("Config.Tools = %v; want none: append has no command, it is a server's", f.Config.Tools)
	}
	if _, err := batch.ParseConfig([]byte("[mcp_servers.a]\nurl = \"http://h/mcp\""), dir); err == nil || !strings.Contains(err.Error(), "File.Resolve") {
		t.Errorf("ParseConfig(with mcp_servers) = %v; want an error pointing at Parse and File.Resolve", err)
	}
}

// Bad [mcp_servers] entries: one line naming the key, no panic.
func TestParseMCPServersBadInput(t *testing.T) {
	for _, tt := range []struct{ src, want string }{
		{"[mcp_servers.a]\ncommand = [\"x\"]\nurl = \"http://h/mcp\"", "mcp_servers.a: has both command and url"},
		{"[mcp_servers.a]\nprefix = \"p\"", "mcp_servers.a: needs command"},
		{"[mcp_servers.a]\ncommand = []", "mcp_servers.a.command: is empty"},
		{"[mcp_servers.a]\nurl = \"ftp://h/x\"", "must be an http:// or https:// URL"},
		{"[mcp_servers.a]\nurl = \"http://h/mcp\"\nenv = { A = \"1\" }", "mcp_servers.a.env: is for a server started with command"},
		{"[mcp_servers.a]\ncommand = [\"x\"]\nenv = { A = 1 }", "mcp_servers.a.env.A: must be a string"},
		{"[mcp_servers.a]\ncommand = [\"x\"]\nprefx = \"p\"", "mcp_servers.a.prefx: unknown key (did you mean prefix?)"},
		{"[mcp_servers.a]\ncommand = [\"x\"]\nprefix = \"a b\"", "mcp_servers.a.prefix:"},
		{"[mcp_servers.a]\ncommand = [\"x\"]\nstart_timeout = \"0s\"", "mcp_servers.a.start_timeout: is 0"},
		{"[mcp_servers.\"a b\"]\ncommand = [\"x\"]", "a server's name must be"},
		{"mcp_servers = 3", "mcp_servers: must be a table"},
		{"[tools.t]\ncommand = [\"true\"]\ninput_schema = { type = \"array\" }", `tools.t.input_schema: must have type = "object"`},
		{"[tools.t]\ncommand = [\"true\"]\ninput_schema = \"{}\"", "tools.t.input_schema: must be a table"},
		{"[tools.t]\ntimeout = \"1s\"", "tools.t.command: is missing"}, // no servers: a command is needed
	} {
		_, err := batch.Parse([]byte(tt.src), "")
		var ce *batch.ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, sched.ErrConfig) {
			t.Errorf("Parse(%q) = %v; want a *ConfigError", tt.src, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tt.want) || strings.Contains(msg, "\n") {
			t.Errorf("Parse(%q) = %q; want one line containing %q", tt.src, msg, tt.want)
		}
	}
}

// fakeServer is a ToolServer whose tools answer from the test.
type fakeServer struct {
	tools  []batch.RemoteTool
	mu     sync.Mutex
	closed int
}

func (s *fakeServer) Tools() []batch.RemoteTool { return s.tools }
func (s *fakeServer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed++
	return nil
}

func (s *fakeServer) closedTimes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func remote(name string, readOnly, idempotent bool) batch.RemoteTool {
	return batch.RemoteTool{Name: name, ReadOnlyHint: readOnly, IdempotentHint: idempotent,
		Definition: json.RawMessage(`{"name":"` + name + `","inputSchema":{"type":"object"}}`),
		Run: func(ctx context.Context, inv sched.Invocation) (string, error) {
			return "ran " + name, nil
		}}
}

// connector returns a Connector that answers with servers by name, or
// fails with failures by name.
func connector(servers map[string]*fakeServer, failures map[string]error) batch.Connector {
	return func(ctx context.Context, s batch.MCPServer) (batch.ToolServer, error) {
		if err := failures[s.Name]; err != nil {
			return nil, err
		}
		return servers[s.Name], nil
	}
}

func resolve(t *testing.T, src string, connect batch.Connector) (*batch.Resolved, error) {
	t.Helper()
	f, err := batch.Parse([]byte(src), "")
	if err != nil {
		t.Fatalf("Parse() = %v", err)
	}
	r, err := f.Resolve(context.Background(), connect)
	if r != nil {
		t.Cleanup(func() { r.Close() })
	}
	return r, err
}

// The tools of servers are tools of the batch, under their names or the
// server's prefix and their names; the annotations give the defaults, and
// what [tools.NAME] writes overrides them.
func TestResolveServersTools(t *testing.T) {
	files := &fakeServer{tools: []batch.RemoteTool{remote("read", true, false), remote("append", false, false), remote("put", false, true)}}
	notes := &fakeServer{tools: []batch.RemoteTool{remote("read", true, false)}}
	r, err := resolve(t, `
[mcp_servers.files]
command = ["files"]
[mcp_servers.notes]
url = "http://127.0.0.1:1/mcp"
prefix = "notes_"
[tools.append]
lock_keys = ["file:{path}"]
idempotent = true
[tools.read]
read_only_hint = false
concurrency = { key = "disk", limit = 2 }
[tools.echo]
command = ["echo"]
`, connector(map[string]*fakeServer{"files": files, "notes": notes}, nil))
	if err != nil {
		t.Fatalf("Resolve() = %v", err)
	}
	got := map[string]string{}
	for name, info := range r.Tools {
		got[name] = info.Server + "/" + info.Remote
	}
	want := map[string]string{"read": "files/read", "append": "files/append", "put": "files/put", "notes_read": "notes/read", "echo": "/"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Tools = %v; want %v", got, want)
	}
	tools := r.Config.Tools
	if tl := tools["notes_read"]; !tl.ReadOnlyHint || !tl.Idempotent || tl.LockKeys != nil {
		t.Errorf("notes_read = %+v; want ReadOnlyHint and Idempotent from readOnlyHint", tl)
	}
	if tl := tools["read"]; tl.ReadOnlyHint || !tl.Idempotent || tl.Concurrency != (sched.Concurrency{Key: "disk", Limit: 2}) {
		t.Errorf("read = %+v; want read_only_hint = false and the concurrency written, Idempotent from the annotation", tl)
	}
	if tl := tools["append"]; tl.ReadOnlyHint || !tl.Idempotent || tl.LockKeys == nil {
		t.Errorf("append = %+v; want the lock keys and idempotent written", tl)
	}
	if tl := tools["put"]; !tl.Idempotent || tl.ReadOnlyHint {
		t.Errorf("put = %+v; want Idempotent from idempotentHint", tl)
	}
	out, err := tools["notes_read"].Run(context.Background(), sched.Invocation{})
	if out != "ran read" || err != nil {
		t.Errorf("notes_read's body = %q, %v; want the notes server's read", out, err)
	}
	if len(r.Failed) != 0 {
		t.Errorf("Failed = %v; want none", r.Failed)
	}
	if err := r.Close(); err != nil || files.closedTimes() != 1 || notes.closedTimes() != 1 {
		t.Errorf("Close() = %v, servers closed %d and %d times; want each once", err, files.closedTimes(), notes.closedTimes())
	}
}

// A name two servers offer, or a server and a command, is a configuration
// error naming both, and the servers that were started are stopped.
func TestResolveNameClash(t *testing.T) {
	for _, tt := range []struct{ src, want string }{
		{"[mcp_servers.a]\ncommand = [\"a\"]\n[mcp_servers.b]\ncommand = [\"b\"]",
			"tool read is offered by mcp_servers.a and by mcp_servers.b; give one of them a prefix"},
		{"[mcp_servers.a]\ncommand = [\"a\"]\n[mcp_servers.b]\ncommand = [\"b\"]\nprefix = \"b_\"\n[tools.b_read]\ncommand = [\"true\"]",
			"tool b_read is offered by mcp_servers.b and declared with a command in tools.b_read"},
		{"[mcp_servers.a]\ncommand = [\"a\"]\n[mcp_servers.b]\ncommand = [\"b\"]\nprefix = \"b_\"\n[tools.write]\ntimeout = \"1s\"",
			"tools.write.command: is missing, and no MCP server offers a tool of that name (mcp_servers.a, mcp_servers.b)"},
		{"[mcp_servers.a]\ncommand = [\"a\"]\n[mcp_servers.b]\ncommand = [\"b\"]\nprefix = \"b_\"\n[tools.read]\nconcurrency = { key = \"k\", limit = 2 }\n[tools.b_read]\nconcurrency = { key = \"k\", limit = 3 }",
			`concurrency key "k"`},
	} {
		a := &fakeServer{tools: []batch.RemoteTool{remote("read", true, false)}}
		b := &fakeServer{tools: []batch.RemoteTool{remote("read", true, false)}}
		_, err := resolve(t, tt.src, connector(map[string]*fakeServer{"a": a, "b": b}, nil))
		if err == nil || !errors.Is(err, sched.ErrConfig) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Resolve(%q) = %v; want a configuration error containing %q", tt.src, err, tt.want)
		}
		if a.closedTimes() != 1 || b.closedTimes() != 1 {
			t.Errorf("Resolve(%q) closed the servers %d and %d times; want each once", tt.src, a.closedTimes(), b.closedTimes())
		}
	}
}

// A server that fails to start or list is named with its error; the calls
// of its tools fail with it, and the others run.
func TestResolveFailedServer(t *testing.T) {
	good := &fakeServer{tools: []batch.RemoteTool{remote("read", true, false)}}
	r, err := resolve(t, `
[mcp_servers.good]
command = ["good"]
[mcp_servers.broken]
command = ["broken"]
prefix = "b_"
[tools.b_write]
lock_keys = ["file:{path}"]
`, connector(map[string]*fakeServer{"good": good}, map[string]error{"broken": errors.New("cannot start broken: no such file")}))
	if err != nil {
		t.Fatalf("Resolve() = %v", err)
	}
	if len(r.Failed) != 1 || r.Failed[0].Server != "broken" || r.Failed[0].Error() != "MCP server broken: cannot start broken: no such file" {
		t.Fatalf("Failed = %v; want the broken server with its error", r.Failed)
	}
	if _, ok := r.Tools["b_write"]; ok {
		t.Errorf("Tools has b_write; want only the tools that can be called")
	}
	calls := []sched.Call{
		{ID: "1", Tool: "read", Args: json.RawMessage(`{}`)},
		{ID: "2", Tool: "b_write", Args: json.RawMessage(`{"path":"x"}`)},
		{ID: "3", Tool: "b_other", Args: json.RawMessage(`{}`)},
		{ID: "4", Tool: "nothing", Args: json.RawMessage(`{}`)},
	}
	res, err := sched.Run(context.Background(), r.ConfigFor(calls), calls, sched.Options{})
	if err != nil {
		t.Fatalf("Run() = %v", err)
	}
	o := res.Outcomes
	if o[0].Status != sched.OK || o[0].Output != "ran read" {
		t.Errorf("read = %s %q %v; want ok: its server answered", o[0].Status, o[0].Output, o[0].Err)
	}
	for _, i := range []int{1, 2} {
		if o[i].Status != sched.Failed || o[i].Err == nil || !strings.Contains(o[i].Err.Error(), "MCP server broken: cannot start broken") {
			t.Errorf("%s = %s %v; want error naming the broken server", calls[i].Tool, o[i].Status, o[i].Err)
		}
	}
	if o[3].Code != sched.CodeUnknownTool {
		t.Errorf("nothing = %s %v; want %s: no failed server has its prefix", o[3].Status, o[3].Err, sched.CodeUnknownTool)
	}
}

// A server's tool with a name that cannot be a tool's is left out and
// said so; the others stay.
func TestResolveSkipsBadToolNames(t *testing.T) {
	s := &fakeServer{tools: []batch.RemoteTool{remote("has space", false, false), remote("ok", false, false)}}
	r, err := resolve(t, "[mcp_servers.s]\ncommand = [\"s\"]", connector(map[string]*fakeServer{"s": s}, nil))
	if err != nil {
		t.Fatalf("Resolve() = %v", err)
	}
	if _, ok := r.Config.Tools["ok"]; !ok || len(r.Skipped) != 1 || !strings.Contains(r.Skipped[0], `"has space" left out`) {
		t.Errorf("Tools %v, Skipped %q; want ok kept and the bad name said", r.Tools, r.Skipped)
	}
}

// Load names the file in its errors, and reads relative paths against
// the file's directory.
func TestLoadNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tools.toml")
	if err := os.WriteFile(path, []byte("[mcp_servers.a]\ncommand = [\"bin/a\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := batch.Load(path)
	if err != nil || f.Servers[0].Command[0] != filepath.Join(dir, "bin/a") {
		t.Fatalf("Load() = %+v, %v; want the command against the file's directory", f, err)
	}
	if err := os.WriteFile(path, []byte("[mcp_servers.a]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := batch.Load(path); err == nil || !strings.HasPrefix(err.Error(), path+": mcp_servers.a: needs command") {
		t.Errorf("Load() = %v; want an error starting with the path", err)
	}
}

// A tool two failed servers could have offered fails with both servers'
// errors, on one line, each still found by errors.Is.
func TestUnavailableNamesEveryFailedServer(t *testing.T) {
	errA, errB := errors.New("cannot start a: no such file"), errors.New("cannot reach http://b: refused")
	r, err := resolve(t, `
[mcp_servers.a]
command = ["a"]
[mcp_servers.b]
url = "http://127.0.0.1:1/mcp"
`, connector(nil, map[string]error{"a": errA, "http://127.0.0.1:1/mcp": errB, "b": errB}))
	if err != nil {
		t.Fatalf("Resolve() = %v", err)
	}
	got := r.Unavailable("x")
	want := "tool x is unavailable: MCP server a: cannot start a: no such file; MCP server b: cannot reach http://b: refused"
	if got == nil || got.Error() != want {
		t.Fatalf("Unavailable(x) = %v; want %q", got, want)
	}
	if !errors.Is(got, errA) || !errors.Is(got, errB) {
		t.Errorf("errors.Is(%v, each server's error) = false; want true", got)
	}
}
