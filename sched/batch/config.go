package batch

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
)

// The TOML form as decoded: every field a Primitive, so that each is
// checked, and reported, under its own key. MetaData.Undecoded then lists
// the keys no field took: the unknown ones.
type (
	fileTOML struct {
		Runner     toml.Primitive `toml:"runner"`
		Tools      toml.Primitive `toml:"tools"`
		Reply      toml.Primitive `toml:"reply"` // checked here, read by ParseWording
		MCPServers toml.Primitive `toml:"mcp_servers"`
	}
	runnerTOML struct {
		MaxConcurrentTools toml.Primitive `toml:"max_concurrent_tools"`
		PerTenant          toml.Primitive `toml:"per_tenant"`
		PerTool            toml.Primitive `toml:"per_tool"`
		ParallelToolCalls  toml.Primitive `toml:"parallel_tool_calls"`
		OnToolError        toml.Primitive `toml:"on_tool_error"`
		Workspace          toml.Primitive `toml:"workspace"`
		Unmarked           toml.Primitive `toml:"unmarked"`
		Retention          toml.Primitive `toml:"retention"`
	}
	toolTOML struct {
		Command      toml.Primitive `toml:"command"`
		Concurrency  toml.Primitive `toml:"concurrency"`
		Rate         toml.Primitive `toml:"rate"`
		Cost         toml.Primitive `toml:"cost"`
		Safe         toml.Primitive `toml:"safe"`
		SafeIf       toml.Primitive `toml:"safe_if"`
		ReadOnlyHint toml.Primitive `toml:"read_only_hint"`
		Idempotent   toml.Primitive `toml:"idempotent"`
		Timeout      toml.Primitive `toml:"timeout"`
		FanOut       toml.Primitive `toml:"fan_out"`
		Enabled      toml.Primitive `toml:"enabled"`
		LockKeys     toml.Primitive `toml:"lock_keys"`
		Description  toml.Primitive `toml:"description"`
		InputSchema  toml.Primitive `toml:"input_schema"`
	}
	concurrencyTOML struct {
		Key   toml.Primitive `toml:"key"`
		Limit toml.Primitive `toml:"limit"`
	}
	rateTOML struct {
		Key   toml.Primitive `toml:"key"`
		Limit toml.Primitive `toml:"limit"`
		Per   toml.Primitive `toml:"per"`
	}
	fanOutTOML struct {
		Enabled toml.Primitive `toml:"enabled"`
		OnError toml.Primitive `toml:"on_error"`
	}
)

// ParseConfig parses the TOML form of a configuration (see the package
// documentation) and validates it with sched.Config.Validate. dir is
// the directory of the file it came from: a relative command path and the
// workspace are taken against it ("" means the working directory).
//
// Its error is a *ConfigError, one line, each problem naming its key:
// `tools.rfd.timeout: "ten seconds" is not a duration`. A configuration
// with [mcp_servers] is such an error too: its tools are known only once
// its servers are asked, so it is read with Parse and File.Resolve.
func ParseConfig(data []byte, dir string) (sched.Config, error) {
	f, err := Parse(data, dir)
	if err != nil {
		return sched.Config{}, err
	}
	if len(f.Servers) > 0 {
		return sched.Config{}, &ConfigError{Problems: []string{"mcp_servers: the tools of MCP servers are known only once the servers are asked; read this configuration with batch.Parse or batch.Load and File.Resolve"}}
	}
	return f.Config, nil
}

// Parse parses the TOML form of a configuration (see the package
// documentation), as ParseConfig does, into a File: the runner, the tools
// declared with a command, and the MCP servers to ask for the rest (see
// File.Resolve). Without [mcp_servers], File.Config is what ParseConfig
// returns, validated; with them, Resolve validates the whole.
//
// Its error is a *ConfigError, one line, each problem naming its key.
func Parse(data []byte, dir string) (*File, error) {
	var ft fileTOML
	md, err := toml.Decode(string(data), &ft)
	if err != nil {
		return nil, &ConfigError{Problems: []string{oneLine(err.Error())}, err: err}
	}
	p := &parser{md: md}
	f := &File{Info: map[string]ToolInfo{}, overrides: map[string]toolDecl{}}
	cfg := sched.Config{Runner: sched.DefaultRunner(), Tools: map[string]sched.Tool{}}
	workspace := ""
	if p.has(toml.Key{"runner"}) {
		workspace = p.runner(&cfg.Runner, ft.Runner, dir)
	}
	if k := (toml.Key{"mcp_servers"}); p.has(k) {
		f.Servers = p.servers(k, ft.MCPServers, dir, workspace)
		p.hasServers = true
	}
	if k := (toml.Key{"tools"}); p.has(k) {
		var tools map[string]toml.Primitive
		if p.table(k, ft.Tools, &tools) {
			names := make([]string, 0, len(tools))
			for n := range tools {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				if n == "*" {
					// RFD 129: no default on tools."*"; whether calls
					// conflict depends on what each tool does.
					p.fail(toml.Key{"tools", n}, `a default for every tool is not supported: whether a tool's calls conflict depends on what the tool does (RFD 129), so declare each tool under its own name`)
					continue
				}
				d, ok := p.tool(n, tools[n], dir, workspace)
				switch {
				case !ok:
				case d.command || !p.hasServers:
					cfg.Tools[n] = d.tool
					f.Info[n] = d.info
				default:
					f.overrides[n] = d // a tool of an MCP server, or a problem Resolve reports
				}
			}
		}
	}
	if p.has(toml.Key{"reply"}) {
		p.reply(ft.Reply)
	}
	p.unknownKeys()
	if len(p.problems) > 0 {
		return nil, &ConfigError{Problems: p.problems}
	}
	f.Config = cfg
	if len(f.Servers) == 0 {
		if err := validate(cfg); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// validate runs cfg.Validate, its error a *ConfigError.
func validate(cfg sched.Config) error {
	if err := cfg.Validate(); err != nil {
		msg := strings.TrimPrefix(err.Error(), sched.ErrConfig.Error()+": ")
		return &ConfigError{Problems: []string{oneLine(msg)}, err: err}
	}
	return nil
}

// parser collects the problems of one configuration.
type parser struct {
	md         toml.MetaData
	problems   []string
	bad        []toml.Key // keys with a problem: nothing under them is reported again
	hasServers bool       // the configuration has [mcp_servers]: a tool may come from one
}

func (p *parser) fail(k toml.Key, format string, a ...any) {
	p.problems = append(p.problems, oneLine(k.String()+": "+fmt.Sprintf(format, a...)))
	p.bad = append(p.bad, k)
}

func (p *parser) has(k toml.Key) bool { return p.md.IsDefined(k...) }

// at returns k with name appended, without sharing k's array.
func at(k toml.Key, name string) toml.Key { return append(slices.Clip(k), name) }

// value returns the plain Go value of v, at k, which must be defined.
func (p *parser) value(k toml.Key, v toml.Primitive) any {
	var x any
	if err := p.md.PrimitiveDecode(v, &x); err != nil {
		p.fail(k, "%v", err)
		return nil
	}
	return x
}

// table decodes the table v at k into into (a struct of Primitives or a map
// of them), which marks its known keys decoded.
func (p *parser) table(k toml.Key, v toml.Primitive, into any) bool {
	x := p.value(k, v)
	if _, ok := x.(map[string]any); !ok {
		if x != nil {
			p.fail(k, "must be a table, not %s", describe(x))
		}
		return false
	}
	if err := p.md.PrimitiveDecode(v, into); err != nil {
		p.fail(k, "%v", err)
		return false
	}
	return true
}

// limit returns the integer x at k, a limit of at least lowest.
func (p *parser) limit(k toml.Key, x any, lowest int64) (int, bool) {
	n, ok := x.(int64)
	switch {
	case !ok:
		p.fail(k, "must be an integer, not %s", describe(x))
	case n < lowest && lowest == 0:
		p.fail(k, "%d is negative", n)
	case n < lowest:
		p.fail(k, "%d is below %d", n, lowest)
	case n > lanes.MaxLimit:
		p.fail(k, "%d is above the largest limit, %d", n, lanes.MaxLimit)
	default:
		return int(n), true
	}
	return 0, false
}

func (p *parser) bool(k toml.Key, v toml.Primitive) (bool, bool) {
	x := p.value(k, v)
	b, ok := x.(bool)
	if !ok {
		p.fail(k, "must be true or false, not %s", describe(x))
	}
	return b, ok
}

func (p *parser) string(k toml.Key, v toml.Primitive) (string, bool) {
	x := p.value(k, v)
	s, ok := x.(string)
	if !ok {
		p.fail(k, "must be a string, not %s", describe(x))
	}
	return s, ok
}

func (p *parser) strings(k toml.Key, v toml.Primitive) ([]string, bool) {
	x := p.value(k, v)
	list, ok := x.([]any)
	if !ok {
		p.fail(k, "must be an array of strings, not %s", describe(x))
		return nil, false
	}
	out := make([]string, len(list))
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			p.fail(k, "element %d must be a string, not %s", i, describe(e))
			return nil, false
		}
		out[i] = s
	}
	return out, true
}

// runner decodes [runner] into r and returns the workspace root, absolute,
// or "" for the working directory.
func (p *parser) runner(r *sched.Runner, v toml.Primitive, dir string) (workspace string) {
	k := toml.Key{"runner"}
	var rt runnerTOML
	if !p.table(k, v, &rt) {
		return ""
	}
	if f := at(k, "max_concurrent_tools"); p.has(f) {
		if n, ok := p.limit(f, p.value(f, rt.MaxConcurrentTools), 1); ok {
			r.MaxConcurrentTools = n
		}
	}
	if f := at(k, "per_tenant"); p.has(f) {
		if n, ok := p.limit(f, p.value(f, rt.PerTenant), 0); ok {
			r.PerTenant = n
		}
	}
	if f := at(k, "per_tool"); p.has(f) {
		var per map[string]toml.Primitive
		if p.table(f, rt.PerTool, &per) {
			r.PerTool = map[string]int{}
			for name, pv := range per {
				tk := at(f, name)
				if n, ok := p.limit(tk, p.value(tk, pv), 0); ok {
					r.PerTool[name] = n
				}
			}
		}
	}
	if f := at(k, "parallel_tool_calls"); p.has(f) {
		if b, ok := p.bool(f, rt.ParallelToolCalls); ok {
			r.Sequential = !b
		}
	}
	if f := at(k, "on_tool_error"); p.has(f) {
		if s, ok := p.string(f, rt.OnToolError); ok {
			switch s {
			case "surface":
				r.OnToolError = sched.Surface
			case "fail_run":
				r.OnToolError = sched.FailRun
			default:
				p.fail(f, `must be "surface" or "fail_run", not %q`, s)
			}
		}
	}
	if f := at(k, "workspace"); p.has(f) {
		if s, ok := p.string(f, rt.Workspace); ok {
			workspace = p.workspace(f, s, dir)
		}
	}
	if f := at(k, "unmarked"); p.has(f) {
		if s, ok := p.string(f, rt.Unmarked); ok {
			switch s {
			case "barrier":
				r.Unmarked = sched.UnmarkedBarrier
			case "parallel":
				r.Unmarked = sched.UnmarkedParallel
			default:
				p.fail(f, `must be "barrier" or "parallel", not %q`, s)
			}
		}
	}
	if f := at(k, "retention"); p.has(f) {
		if d, ok := p.duration(f, rt.Retention); ok {
			if d < time.Millisecond || d > lanes.MaxRetention {
				p.fail(f, "%v is out of range 1ms..%v", d, lanes.MaxRetention)
			} else {
				r.Retention = d
			}
		}
	}
	return workspace
}

// duration decodes a Go duration written as a string, at least 0.
func (p *parser) duration(k toml.Key, v toml.Primitive) (time.Duration, bool) {
	s, ok := p.string(k, v)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		p.fail(k, `%q is not a duration (write one like "10s" or "1m30s")`, s)
	case d < 0:
		p.fail(k, "%q is negative", s)
	default:
		return d, true
	}
	return 0, false
}

// workspace returns the absolute path of the workspace s, checked to be a
// directory.
func (p *parser) workspace(k toml.Key, s, dir string) string {
	if s == "" {
		p.fail(k, "is empty; leave it out for the working directory")
		return ""
	}
	path := s
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		p.fail(k, "%q: %v", s, err)
		return ""
	case !fi.IsDir():
		p.fail(k, "%q is not a directory", s)
		return ""
	}
	return path
}

// toolDecl is one [tools.NAME] as written.
type toolDecl struct {
	tool    sched.Tool
	info    ToolInfo
	command bool            // it has a command
	set     map[string]bool // the fields written, by TOML name
}

// toolFields are the fields of [tools.NAME], by TOML name.
var toolFields = []string{"command", "concurrency", "rate", "cost", "safe", "safe_if", "read_only_hint", "idempotent",
	"timeout", "fan_out", "enabled", "lock_keys", "description", "input_schema"}

// tool decodes [tools.NAME].
func (p *parser) tool(name string, v toml.Primitive, dir, workspace string) (toolDecl, bool) {
	k := toml.Key{"tools", name}
	var tt toolTOML
	if !p.table(k, v, &tt) {
		return toolDecl{}, false
	}
	before := len(p.problems)
	d := toolDecl{set: map[string]bool{}}
	for _, f := range toolFields {
		d.set[f] = p.has(at(k, f))
	}
	d.command = d.set["command"]
	var t sched.Tool
	if f := at(k, "enabled"); p.has(f) {
		if b, ok := p.bool(f, tt.Enabled); ok {
			t.Disabled = !b
		}
	}
	if f := at(k, "command"); p.has(f) {
		if argv, ok := p.strings(f, tt.Command); ok {
			switch {
			case len(argv) == 0:
				p.fail(f, "is empty; it needs at least the program to run")
			case argv[0] == "":
				p.fail(f, "names an empty program")
			default:
				argv[0] = resolveCommand(argv[0], dir)
				t.Run = Command(argv, workspace)
			}
		}
	} else if !t.Disabled && !p.hasServers {
		p.fail(f, "is missing; an enabled tool needs a command to run")
	}
	if f := at(k, "concurrency"); p.has(f) {
		t.Concurrency, _ = p.concurrency(f, tt.Concurrency)
	}
	if f := at(k, "rate"); p.has(f) {
		t.Rate = p.rate(f, tt.Rate)
	}
	if f := at(k, "cost"); p.has(f) {
		t.Cost = p.cost(f, tt.Cost)
		// A fixed cost above the rate's limit could never be granted:
		// refused at load, not at every call.
		if n, ok := p.value(f, tt.Cost).(int64); ok && t.Rate != nil && n > int64(t.Rate.Limit) {
			p.fail(f, "%d is above the limit of the rate of key %q, %d: a call could never be granted", n, t.Rate.Key, t.Rate.Limit)
		}
	}
	if f := at(k, "safe"); p.has(f) {
		if b, ok := p.bool(f, tt.Safe); ok {
			t.Safe = sched.Always(b)
		}
	}
	if f := at(k, "safe_if"); p.has(f) {
		if s, ok := p.string(f, tt.SafeIf); ok {
			switch fn, err := safeIf(s); {
			case p.has(at(k, "safe")):
				p.fail(f, "and safe are both set; give one")
			case err != nil:
				p.fail(f, "%v", err)
			default:
				t.Safe = fn
			}
		}
	}
	if f := at(k, "read_only_hint"); p.has(f) {
		t.ReadOnlyHint, _ = p.bool(f, tt.ReadOnlyHint)
	}
	if f := at(k, "idempotent"); p.has(f) {
		t.Idempotent, _ = p.bool(f, tt.Idempotent)
	} else if t.ReadOnlyHint {
		t.Idempotent = true // a tool that changes nothing may run again, as MCP's readOnlyHint says
	}
	if f := at(k, "timeout"); p.has(f) {
		t.Timeout, _ = p.duration(f, tt.Timeout)
	}
	if f := at(k, "fan_out"); p.has(f) {
		t.FanOut = p.fanOut(f, tt.FanOut)
	}
	if f := at(k, "lock_keys"); p.has(f) {
		if list, ok := p.strings(f, tt.LockKeys); ok {
			ts := make([]template, 0, len(list))
			for i, s := range list {
				tpl, err := parseTemplate(s)
				if err != nil {
					p.fail(f, "element %d, %q: %v", i, s, err)
					continue
				}
				ts = append(ts, tpl)
			}
			if len(ts) > 0 {
				t.LockKeys = lockKeys(ts, workspace)
			}
		}
	}
	if f := at(k, "description"); p.has(f) {
		d.info.Description, _ = p.string(f, tt.Description)
	}
	if f := at(k, "input_schema"); p.has(f) {
		d.info.InputSchema = p.inputSchema(f, tt.InputSchema)
	}
	d.tool = t
	return d, len(p.problems) == before
}

// concurrency decodes the RFD 129 forms: N, { key, limit }, { key }.
func (p *parser) concurrency(k toml.Key, v toml.Primitive) (sched.Concurrency, bool) {
	switch x := p.value(k, v).(type) {
	case int64:
		n, ok := p.limit(k, x, 0)
		return sched.Concurrency{Limit: n}, ok
	case map[string]any:
		var ct concurrencyTOML
		if !p.table(k, v, &ct) {
			return sched.Concurrency{}, false
		}
		c := sched.Concurrency{Limit: 1}
		kk := at(k, "key")
		if !p.has(kk) {
			p.fail(k, `a table needs a key: { key = "name" } or { key = "name", limit = N }`)
			return sched.Concurrency{}, false
		}
		s, ok := p.string(kk, ct.Key)
		if !ok {
			return sched.Concurrency{}, false
		}
		if s == "" {
			p.fail(kk, "is empty")
			return sched.Concurrency{}, false
		}
		c.Key = s
		if lk := at(k, "limit"); p.has(lk) {
			if c.Limit, ok = p.limit(lk, p.value(lk, ct.Limit), 0); !ok {
				return sched.Concurrency{}, false
			}
			c.Unbounded = c.Limit == 0 // { key, limit = 0 }: named, limits nothing
		}
		return c, true
	case nil:
		return sched.Concurrency{}, false
	default:
		p.fail(k, "must be an integer or a table { key, limit }, not %s", describe(x))
		return sched.Concurrency{}, false
	}
}

// fanOut decodes true, false or { enabled = BOOL, on_error = "continue" |
// "stop" }; enabled defaults to true in the table.
func (p *parser) fanOut(k toml.Key, v toml.Primitive) *sched.FanOut {
	switch x := p.value(k, v).(type) {
	case bool:
		if x {
			return &sched.FanOut{}
		}
		return nil
	case map[string]any:
		var ft fanOutTOML
		if !p.table(k, v, &ft) {
			return nil
		}
		fo := &sched.FanOut{}
		enabled := true
		if f := at(k, "enabled"); p.has(f) {
			enabled, _ = p.bool(f, ft.Enabled)
		}
		if f := at(k, "on_error"); p.has(f) {
			s, ok := p.string(f, ft.OnError)
			switch {
			case !ok:
			case s == "continue":
				fo.OnError = sched.Continue
			case s == "stop":
				fo.OnError = sched.Stop
			default:
				p.fail(f, `must be "continue" or "stop", not %q`, s)
			}
		}
		if !enabled {
			return nil
		}
		return fo
	case nil:
		return nil
	default:
		p.fail(k, "must be true, false or a table { on_error = ... }, not %s", describe(x))
		return nil
	}
}

// resolveCommand returns the program argv0 names: a path with a slash that
// is relative is taken against dir; a bare name is left for a PATH lookup.
func resolveCommand(argv0, dir string) string {
	if filepath.IsAbs(argv0) || !strings.ContainsRune(argv0, '/') && !strings.ContainsRune(argv0, filepath.Separator) {
		return argv0
	}
	path := filepath.Join(dir, argv0)
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}
