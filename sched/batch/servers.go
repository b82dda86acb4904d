package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
)

// DefaultStartTimeout bounds how long an MCP server has to start, answer
// initialize and list its tools, unless its start_timeout says otherwise.
const DefaultStartTimeout = 30 * time.Second

// MCPServer is one [mcp_servers.NAME] entry of a configuration: an MCP
// server whose tools are tools of the batch. It has a Command (the stdio
// transport) or a URL (streamable HTTP), never both.
type MCPServer struct {
	Name string // NAME
	// Command is the program and its arguments: a relative path with a
	// slash taken against the configuration file's directory, a bare name
	// looked up in PATH, as for a tool's command.
	Command []string
	// Env holds variables added to the command's environment, which is
	// otherwise this process's.
	Env map[string]string
	// Dir is where the command runs: the workspace, or "" for the working
	// directory.
	Dir string
	// URL is the endpoint of a server reached over streamable HTTP.
	URL string
	// Prefix is put before the name of every tool the server lists: the
	// name the model calls it by and [tools.NAME] declares it under.
	Prefix string
	// StartTimeout bounds the start, the initialization and the listing
	// of the server's tools; 0 means DefaultStartTimeout.
	StartTimeout time.Duration
}

// RemoteTool is one tool a ToolServer lists.
type RemoteTool struct {
	Name string // as the server names it, without the Prefix
	// ReadOnlyHint and IdempotentHint are the tool's MCP annotations: the
	// defaults of its sched.Tool's ReadOnlyHint and Idempotent.
	ReadOnlyHint   bool
	IdempotentHint bool
	// Definition is the tool as the server described it (an MCP Tool:
	// name, description, inputSchema, annotations...), JSON.
	Definition json.RawMessage
	// Run calls the tool on the server.
	Run sched.Body
}

// ToolServer is an MCP server connected and asked for its tools. Package
// sched/mcptools makes them (mcptools.Connect); this package names only
// this interface, so that a program that reads configurations without MCP
// servers does not build an MCP client in.
type ToolServer interface {
	// Tools returns the tools the server listed.
	Tools() []RemoteTool
	// Close ends the session with the server, and stops its command.
	Close() error
}

// Connector starts or reaches the server s, asks it for its tools and
// returns it. ctx bounds the start and the listing only. Its error says
// what failed (the start, initialize, tools/list) in one line.
type Connector func(ctx context.Context, s MCPServer) (ToolServer, error)

// ToolInfo is what a configuration says of a tool beside its sched.Tool:
// what an MCP server offering the tools (`lanectl mcp serve`) lists.
type ToolInfo struct {
	// Server names the [mcp_servers] entry that offers the tool, "" for a
	// tool that is a command; Remote is its name there.
	Server string
	Remote string
	// Description and InputSchema are [tools.NAME]'s description and
	// input_schema (a JSON Schema object, JSON), when written.
	Description string
	InputSchema json.RawMessage
	// Definition is the server's own description of the tool (RemoteTool's
	// Definition), for a tool of an MCP server.
	Definition json.RawMessage
}

// File is a configuration as read, before its MCP servers are asked for
// their tools.
type File struct {
	// Config holds the runner and the tools declared with a command.
	Config sched.Config
	// Servers are the [mcp_servers] entries, by name.
	Servers []MCPServer
	// Info is what [tools.NAME] says of the tools of Config beside them.
	Info map[string]ToolInfo

	overrides map[string]toolDecl // [tools.NAME] without a command
}

// Load reads the TOML configuration at path into a File, as LoadConfig
// reads one without MCP servers; relative paths in it are taken against
// the file's directory. Its error is one line that starts with path.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("cannot read %s: %w", path, err)
	}
	f, err := Parse(data, filepath.Dir(path))
	if err != nil {
		return nil, inFile(path, err)
	}
	return f, nil
}

// inFile names path in the configuration error err.
func inFile(path string, err error) error {
	var ce *ConfigError
	if errors.As(err, &ce) {
		ce.File = path
		return ce
	}
	return &ConfigError{File: path, Problems: []string{oneLine(err.Error())}, err: err}
}

// ServerError is an MCP server that could not be started or asked for its
// tools. Only the calls of its tools fail for it.
type ServerError struct {
	Server string // its [mcp_servers] name
	Err    error
}

func (e *ServerError) Error() string { return "MCP server " + e.Server + ": " + oneLine(e.Err.Error()) }

// Unwrap returns the Connector's error.
func (e *ServerError) Unwrap() error { return e.Err }

// Resolved is a configuration whose MCP servers were asked for their
// tools. Close it once its batches ran: that stops the servers.
type Resolved struct {
	// Config has every tool: the commands, the tools the servers listed
	// (with what [tools.NAME] overrides), and the tools [tools.NAME]
	// declares for a server that failed, whose calls fail with its error.
	Config sched.Config
	// Tools describes each tool of Config that can be called: the commands
	// and the tools the servers listed.
	Tools map[string]ToolInfo
	// Failed are the servers that could not be started or asked for their
	// tools, by name.
	Failed []*ServerError
	// Skipped says, one line each, which tools a server listed under a
	// name that cannot be a tool's (see sched.Config.Validate), and were
	// left out.
	Skipped []string

	specs   []MCPServer  // the [mcp_servers] entries
	servers []ToolServer // those that answered
}

// Resolve starts or reaches f's MCP servers with connect, all at once, and
// returns the configuration whose tools are f's commands and every tool
// the servers list, under its name or the server's Prefix and its name.
// A tool's MCP annotations give its defaults: readOnlyHint makes it
// ReadOnlyHint (safe, by sched's rule) and Idempotent, idempotentHint
// Idempotent; every field its [tools.NAME] writes overrides them.
//
// A server that fails (its start, initialize, tools/list, or
// start_timeout) is in Failed, and the calls of its tools fail with its
// error, the others run. The error of Resolve is a *ConfigError naming
// the tools and servers at fault: a tool name two servers offer, or a
// server and a command; a [tools.NAME] without a command that no server
// offers while every server answered; what sched.Config.Validate refuses.
// Then every server it started is stopped again.
func (f *File) Resolve(ctx context.Context, connect Connector) (*Resolved, error) {
	r := &Resolved{
		Config: sched.Config{Runner: f.Config.Runner, Tools: make(map[string]sched.Tool, len(f.Config.Tools))},
		Tools:  make(map[string]ToolInfo, len(f.Config.Tools)),
		specs:  f.Servers,
	}
	for name, t := range f.Config.Tools {
		r.Config.Tools[name] = t
		r.Tools[name] = f.Info[name]
	}
	servers := connectAll(ctx, f.Servers, connect)
	var problems []string
	offeredBy := map[string]string{}
	for i, s := range f.Servers {
		ts, err := servers[i].ts, servers[i].err
		if err != nil {
			r.Failed = append(r.Failed, &ServerError{Server: s.Name, Err: err})
			continue
		}
		r.servers = append(r.servers, ts)
		for _, rt := range ts.Tools() {
			name := s.Prefix + rt.Name
			if err := validToolName(name); err != nil {
				r.Skipped = append(r.Skipped, fmt.Sprintf("MCP server %s: tool %.60q left out: %v", s.Name, name, err))
				continue
			}
			if other, ok := offeredBy[name]; ok {
				problems = append(problems, fmt.Sprintf("tool %s is offered by mcp_servers.%s and by mcp_servers.%s; give one of them a prefix", name, other, s.Name))
				continue
			}
			offeredBy[name] = s.Name
			if _, ok := f.Config.Tools[name]; ok {
				problems = append(problems, fmt.Sprintf("tool %s is offered by mcp_servers.%s and declared with a command in tools.%s; rename the command or give the server a prefix", name, s.Name, name))
				continue
			}
			t := sched.Tool{ReadOnlyHint: rt.ReadOnlyHint, Idempotent: rt.IdempotentHint || rt.ReadOnlyHint, Run: rt.Run}
			info := ToolInfo{Server: s.Name, Remote: rt.Name, Definition: rt.Definition}
			if d, ok := f.overrides[name]; ok {
				t = d.apply(t)
				info.Description, info.InputSchema = d.info.Description, d.info.InputSchema
			}
			r.Config.Tools[name] = t
			r.Tools[name] = info
		}
	}
	for _, name := range sortedKeys(f.overrides) {
		if _, ok := offeredBy[name]; ok {
			continue
		}
		d := f.overrides[name]
		switch err := r.Unavailable(name); {
		case d.tool.Disabled:
			r.Config.Tools[name] = d.tool // declared, disabled: validated, never run
		case err != nil:
			t := d.tool
			t.Run = func(context.Context, sched.Invocation) (string, error) { return "", err }
			r.Config.Tools[name] = t
		default:
			problems = append(problems, fmt.Sprintf("tools.%s.command: is missing, and no MCP server offers a tool of that name (%s)", name, strings.Join(serverNames(f.Servers), ", ")))
		}
	}
	if len(problems) == 0 {
		if err := validate(r.Config); err != nil {
			r.Close()
			return nil, err
		}
		return r, nil
	}
	r.Close()
	return nil, &ConfigError{Problems: problems}
}

// connected is what a Connector gave for one server.
type connected struct {
	ts  ToolServer
	err error
}

// connectAll connects to every server at once, each within its start
// timeout, and returns what each gave, in the order of servers.
func connectAll(ctx context.Context, servers []MCPServer, connect Connector) []connected {
	out := make([]connected, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := s.StartTimeout
			if d <= 0 {
				d = DefaultStartTimeout
			}
			sctx, cancel := context.WithTimeoutCause(ctx, d, fmt.Errorf("it did not start and list its tools within %v", d))
			defer cancel()
			ts, err := connect(sctx, s)
			if err != nil && sctx.Err() != nil && ctx.Err() == nil {
				err = fmt.Errorf("%w (%v)", context.Cause(sctx), err)
			}
			if err == nil && ts == nil {
				err = errors.New("the connector returned no server")
			}
			out[i] = connected{ts, err}
		}()
	}
	wg.Wait()
	return out
}

// Unavailable returns, for a tool no server listed, the error of each
// failed server that could have offered it (its prefix starts the name):
// nil when there is none.
func (r *Resolved) Unavailable(tool string) error {
	var errs []error
	for _, f := range r.Failed {
		if strings.HasPrefix(tool, r.prefix(f.Server)) {
			errs = append(errs, f)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("tool %s is unavailable: %w", tool, joined(errs))
}

// joined is errors.Join on one line: the errors' texts separated by "; ".
type joined []error

func (j joined) Error() string {
	texts := make([]string, len(j))
	for i, err := range j {
		texts[i] = err.Error()
	}
	return strings.Join(texts, "; ")
}

func (j joined) Unwrap() []error { return j }

func (r *Resolved) prefix(server string) string {
	for _, s := range r.specs {
		if s.Name == server {
			return s.Prefix
		}
	}
	return ""
}

// ConfigFor returns r.Config for a batch of calls: a call of a tool that
// no server listed, and that a failed server could have offered, fails
// with that server's error (see Unavailable) instead of "unknown tool".
func (r *Resolved) ConfigFor(calls []sched.Call) sched.Config {
	cfg := r.Config
	for _, c := range calls {
		if _, ok := cfg.Tools[c.Tool]; ok || validToolName(c.Tool) != nil {
			continue
		}
		err := r.Unavailable(c.Tool)
		if err == nil {
			continue
		}
		if len(cfg.Tools) == len(r.Config.Tools) { // copy once, before the first change
			tools := make(map[string]sched.Tool, len(r.Config.Tools)+1)
			for n, t := range r.Config.Tools {
				tools[n] = t
			}
			cfg.Tools = tools
		}
		cfg.Tools[c.Tool] = sched.Tool{Safe: sched.Always(true), Run: func(context.Context, sched.Invocation) (string, error) { return "", err }}
	}
	return cfg
}

// Close stops the servers Resolve started and ends the sessions with the
// others, all at once, and returns their errors joined.
func (r *Resolved) Close() error {
	errs := make([]error, len(r.servers))
	var wg sync.WaitGroup
	for i, s := range r.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Close()
		}()
	}
	wg.Wait()
	r.servers = nil
	return errors.Join(errs...)
}

// apply returns t with the fields d writes in place of t's.
func (d toolDecl) apply(t sched.Tool) sched.Tool {
	w := d.tool
	if d.set["enabled"] {
		t.Disabled = w.Disabled
	}
	if d.set["concurrency"] {
		t.Concurrency = w.Concurrency
	}
	if d.set["rate"] {
		t.Rate = w.Rate
	}
	if d.set["cost"] {
		t.Cost = w.Cost
	}
	if d.set["safe"] || d.set["safe_if"] {
		t.Safe = w.Safe
	}
	if d.set["read_only_hint"] {
		t.ReadOnlyHint = w.ReadOnlyHint
	}
	if d.set["idempotent"] {
		t.Idempotent = w.Idempotent
	} else if d.set["read_only_hint"] && w.ReadOnlyHint {
		t.Idempotent = true
	}
	if d.set["timeout"] {
		t.Timeout = w.Timeout
	}
	if d.set["fan_out"] {
		t.FanOut = w.FanOut
	}
	if d.set["lock_keys"] {
		t.LockKeys = w.LockKeys
	}
	return t
}

// validToolName reports why name cannot be a tool's, as
// sched.Config.Validate would.
func validToolName(name string) error {
	if err := lanes.ValidateEntryID(name); err != nil || len(name) > lanes.MaxFieldLen {
		return fmt.Errorf("a tool name must be 1 to %d printable bytes without spaces", lanes.MaxFieldLen)
	}
	return nil
}

func serverNames(servers []MCPServer) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = "mcp_servers." + s.Name
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The TOML form of [mcp_servers.NAME].
type serverTOML struct {
	Command      toml.Primitive `toml:"command"`
	Env          toml.Primitive `toml:"env"`
	URL          toml.Primitive `toml:"url"`
	Prefix       toml.Primitive `toml:"prefix"`
	StartTimeout toml.Primitive `toml:"start_timeout"`
}

// maxServerName bounds the name of an [mcp_servers] entry.
const maxServerName = 64

// servers decodes [mcp_servers], by name.
func (p *parser) servers(k toml.Key, v toml.Primitive, dir, workspace string) []MCPServer {
	var all map[string]toml.Primitive
	if !p.table(k, v, &all) {
		return nil
	}
	var out []MCPServer
	for _, name := range sortedKeys(all) {
		if s, ok := p.server(at(k, name), name, all[name], dir, workspace); ok {
			out = append(out, s)
		}
	}
	return out
}

// server decodes [mcp_servers.NAME].
func (p *parser) server(k toml.Key, name string, v toml.Primitive, dir, workspace string) (MCPServer, bool) {
	var st serverTOML
	if !p.table(k, v, &st) {
		return MCPServer{}, false
	}
	before := len(p.problems)
	if lanes.ValidateEntryID(name) != nil || len(name) > maxServerName {
		p.fail(k, "a server's name must be 1 to %d printable bytes without spaces", maxServerName)
	}
	s := MCPServer{Name: name, Dir: workspace}
	hasCommand, hasURL := p.has(at(k, "command")), p.has(at(k, "url"))
	switch {
	case hasCommand && hasURL:
		p.fail(k, "has both command and url; give command for a server on standard input and output, or url for one over HTTP")
	case !hasCommand && !hasURL:
		p.fail(k, `needs command = ["program", "arg"...] (standard input and output) or url = "http://..." (streamable HTTP)`)
	}
	if f := at(k, "command"); hasCommand {
		if argv, ok := p.strings(f, st.Command); ok {
			switch {
			case len(argv) == 0:
				p.fail(f, "is empty; it needs at least the program to run")
			case argv[0] == "":
				p.fail(f, "names an empty program")
			default:
				argv[0] = resolveCommand(argv[0], dir)
				s.Command = argv
			}
		}
	}
	if f := at(k, "env"); p.has(f) {
		if !hasCommand && hasURL {
			p.fail(f, "is for a server started with command, not one reached by url")
		}
		s.Env = p.env(f, st.Env)
	}
	if f := at(k, "url"); hasURL {
		if raw, ok := p.string(f, st.URL); ok {
			u, err := url.Parse(raw)
			switch {
			case err != nil:
				p.fail(f, "%q is not a URL: %v", raw, err)
			case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
				p.fail(f, "%q must be an http:// or https:// URL with a host", raw)
			default:
				s.URL = raw
			}
		}
	}
	if f := at(k, "prefix"); p.has(f) {
		if prefix, ok := p.string(f, st.Prefix); ok {
			if lanes.ValidateEntryID(prefix) != nil {
				p.fail(f, "%.60q must be printable, without spaces, and not empty", prefix)
			} else {
				s.Prefix = prefix
			}
		}
	}
	if f := at(k, "start_timeout"); p.has(f) {
		if d, ok := p.duration(f, st.StartTimeout); ok {
			if d == 0 {
				p.fail(f, "is 0; leave it out for the default, %v", DefaultStartTimeout)
			}
			s.StartTimeout = d
		}
	}
	return s, len(p.problems) == before
}

// env decodes a table of strings: variable names to values.
func (p *parser) env(k toml.Key, v toml.Primitive) map[string]string {
	var m map[string]toml.Primitive
	if !p.table(k, v, &m) {
		return nil
	}
	out := make(map[string]string, len(m))
	for _, name := range sortedKeys(m) {
		f := at(k, name)
		if name == "" || strings.ContainsAny(name, "=\x00") {
			p.fail(f, "is not a variable name")
			continue
		}
		if s, ok := p.string(f, m[name]); ok {
			if strings.ContainsRune(s, 0) {
				p.fail(f, "holds a NUL byte")
				continue
			}
			out[name] = s
		}
	}
	return out
}

// freeForm reports whether k lies inside a value of any shape: a tool's
// input_schema, read whole.
func freeForm(k toml.Key) bool {
	return len(k) > 3 && k[0] == "tools" && k[2] == "input_schema"
}

// inputSchema decodes a tool's input_schema: a table, a JSON Schema
// object of type "object", returned as JSON.
func (p *parser) inputSchema(k toml.Key, v toml.Primitive) json.RawMessage {
	x := p.value(k, v)
	m, ok := x.(map[string]any)
	if !ok {
		if x != nil {
			p.fail(k, `must be a table, a JSON Schema such as { type = "object", properties = { path = { type = "string" } } }, not %s`, describe(x))
		}
		return nil
	}
	if m["type"] != "object" {
		p.fail(k, `must have type = "object": a tool's arguments are an object`)
		return nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		p.fail(k, "cannot be written as JSON: %v", err)
		return nil
	}
	return b
}
