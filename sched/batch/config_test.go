package batch_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/sched"
	"github.com/lanes-dev/lanes/sched/batch"
)

// parse parses src, taken from a file in dir, and fails t on an error.
func parse(t *testing.T, src, dir string) sched.Config {
	t.Helper()
	cfg, err := batch.ParseConfig([]byte(src), dir)
	if err != nil {
		t.Fatalf("ParseConfig(%q) = %v; want no error", src, err)
	}
	return cfg
}

func TestParseConfigConcurrencyForms(t *testing.T) {
	for _, tt := range []struct {
		form string
		want sched.Concurrency
	}{
		{"", sched.Concurrency{}},
		{"concurrency = 0", sched.Concurrency{}},
		{"concurrency = 3", sched.Concurrency{Limit: 3}},
		{`concurrency = { key = "rfd", limit = 2 }`, sched.Concurrency{Key: "rfd", Limit: 2}},
		{`concurrency = { key = "rfd" }`, sched.Concurrency{Key: "rfd", Limit: 1}},
		{`concurrency = { key = "rfd", limit = 0 }`, sched.Concurrency{Key: "rfd", Unbounded: true}},
		{"[tools.t.concurrency]\nkey = \"rfd\"\nlimit = 4", sched.Concurrency{Key: "rfd", Limit: 4}},
	} {
		cfg := parse(t, "[tools.t]\ncommand = [\"true\"]\n"+tt.form, "")
		if got := cfg.Tools["t"].Concurrency; got != tt.want {
			t.Errorf("%q: Concurrency = %+v; want %+v", tt.form, got, tt.want)
		}
	}
}

func TestParseConfigDefaults(t *testing.T) {
	cfg := parse(t, "", "")
	if !reflect.DeepEqual(cfg.Runner, sched.DefaultRunner()) || len(cfg.Tools) != 0 {
		t.Errorf("ParseConfig(\"\") = %+v; want the default runner and no tools", cfg)
	}
	cfg = parse(t, "[tools.t]\ncommand = [\"true\"]", "")
	tool := cfg.Tools["t"]
	if tool.Run == nil || tool.Safe != nil || tool.ReadOnlyHint || tool.Idempotent || tool.Timeout != 0 ||
		tool.FanOut != nil || tool.Disabled || tool.LockKeys != nil || tool.Concurrency != (sched.Concurrency{}) {
		t.Errorf("tool with only a command = %+v; want a body and every other field unset", tool)
	}
	if r := cfg.Runner; r.MaxConcurrentTools != 10 || r.Sequential || r.OnToolError != sched.Surface {
		t.Errorf("Runner = %+v; want max_concurrent_tools 10, parallel calls, surface", r)
	}
}

func TestParseConfigEveryField(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := parse(t, `
[runner]
max_concurrent_tools = 8
per_tenant = 16
per_tool = { search = 4 }
parallel_tool_calls = false
on_tool_error = "fail_run"
workspace = "ws"

[tools.search]
command = ["search"]
read_only_hint = true
fan_out = true

[tools.rfd_renumber]
command = ["./tools/rfd", "renumber"]
concurrency = { key = "rfd" }
safe = false
idempotent = true
timeout = "10s"
fan_out = { on_error = "stop" }
enabled = false
lock_keys = ["draft:{id}"]
`, dir)
	want := sched.Runner{MaxConcurrentTools: 8, PerTenant: 16, PerTool: map[string]int{"search": 4}, Sequential: true, OnToolError: sched.FailRun}
	if !reflect.DeepEqual(cfg.Runner, want) {
		t.Errorf("Runner = %+v; want %+v", cfg.Runner, want)
	}
	s := cfg.Tools["search"]
	if !s.ReadOnlyHint || s.Safe != nil || s.FanOut == nil || s.FanOut.OnError != sched.Continue {
		t.Errorf("search = %+v; want read_only_hint, no safe, fan_out continue", s)
	}
	r := cfg.Tools["rfd_renumber"]
	if safe, err := r.Safe(nil); safe || err != nil {
		t.Errorf("rfd_renumber Safe() = %v, %v; want false, nil", safe, err)
	}
	if !r.Idempotent || r.Timeout != 10*time.Second || r.FanOut == nil || r.FanOut.OnError != sched.Stop || !r.Disabled || r.LockKeys == nil {
		t.Errorf("rfd_renumber = %+v; want idempotent, 10s, fan_out stop, disabled, lock keys", r)
	}
	keys, err := r.LockKeys(context.Background(), []byte(`{"id": "d1"}`))
	if err != nil || !reflect.DeepEqual(keys, []string{"draft:d1"}) {
		t.Errorf("LockKeys({id: d1}) = %q, %v; want [draft:d1]", keys, err)
	}
}

// TestParseConfigErrors checks that every rejection is one line, is
// sched.ErrConfig, and names the tool and the field at fault.
func TestParseConfigErrors(t *testing.T) {
	const tool = "[tools.rfd_renumber]\ncommand = [\"true\"]\n"
	for _, tt := range []struct {
		name string
		src  string
		want []string // each must appear in the error
	}{
		{"syntax", "[tools", []string{"toml: line 1"}},
		{"unknown top-level key", "bogus = 1", []string{"bogus: unknown key"}},
		{"unknown runner key", "[runner]\nmax_tools = 3", []string{"runner.max_tools: unknown key"}},
		{"unknown tool key", tool + "comand = [\"x\"]", []string{"tools.rfd_renumber.comand: unknown key (did you mean command?)"}},
		{"key in other capitals", tool + "Timeout = \"1s\"", []string{"tools.rfd_renumber.Timeout: unknown key (did you mean timeout?)"}},
		{"unknown concurrency key", tool + "concurrency = { key = \"rfd\", lmit = 2 }", []string{"tools.rfd_renumber.concurrency.lmit: unknown key"}},
		{"unknown fan_out key", tool + "fan_out = { on_eror = \"stop\" }", []string{"tools.rfd_renumber.fan_out.on_eror: unknown key"}},
		{"unknown keys under an unknown table", "[tools.a]\ncommand = [\"x\"]\n[tools.a.extra]\nx = 1\ny = 2", []string{"tools.a.extra: unknown key"}},
		{"tools not a table", "tools = 3", []string{"tools: must be a table, not the integer 3"}},
		{"tool not a table", "tools.rfd_renumber = \"x\"", []string{"tools.rfd_renumber: must be a table"}},
		{"timeout not a duration", tool + "timeout = \"ten seconds\"", []string{`tools.rfd_renumber.timeout: "ten seconds" is not a duration`}},
		{"timeout an integer", tool + "timeout = 10", []string{"tools.rfd_renumber.timeout: must be a string, not the integer 10"}},
		{"timeout negative", tool + "timeout = \"-1s\"", []string{"tools.rfd_renumber.timeout:", "negative"}},
		{"concurrency a float", tool + "concurrency = 1.5", []string{"tools.rfd_renumber.concurrency: must be an integer or a table"}},
		{"concurrency a string", tool + "concurrency = \"rfd\"", []string{"tools.rfd_renumber.concurrency: must be an integer or a table"}},
		{"concurrency negative", tool + "concurrency = -1", []string{"tools.rfd_renumber.concurrency: -1 is negative"}},
		{"concurrency too large", tool + "concurrency = 9999999999", []string{"tools.rfd_renumber.concurrency:", "above the largest limit"}},
		{"concurrency table without key", tool + "concurrency = { limit = 2 }", []string{"tools.rfd_renumber.concurrency: a table needs a key"}},
		{"concurrency empty key", tool + "concurrency = { key = \"\" }", []string{"tools.rfd_renumber.concurrency.key: is empty"}},
		{"concurrency key a number", tool + "concurrency = { key = 5 }", []string{"tools.rfd_renumber.concurrency.key: must be a string"}},
		{"concurrency limit a string", tool + "concurrency = { key = \"rfd\", limit = \"2\" }", []string{"tools.rfd_renumber.concurrency.limit: must be an integer"}},
		{"safe a string", tool + "safe = \"yes\"", []string{"tools.rfd_renumber.safe: must be true or false"}},
		{"read_only_hint an integer", tool + "read_only_hint = 1", []string{"tools.rfd_renumber.read_only_hint: must be true or false"}},
		{"idempotent a string", tool + "idempotent = \"true\"", []string{"tools.rfd_renumber.idempotent: must be true or false"}},
		{"enabled a string", tool + "enabled = \"no\"", []string{"tools.rfd_renumber.enabled: must be true or false"}},
		{"command missing", "[tools.rfd_renumber]\nsafe = true", []string{"tools.rfd_renumber.command: is missing"}},
		{"command a string", "[tools.rfd_renumber]\ncommand = \"./rfd\"", []string{"tools.rfd_renumber.command: must be an array of strings"}},
		{"command empty", "[tools.rfd_renumber]\ncommand = []", []string{"tools.rfd_renumber.command: is empty"}},
		{"command element a number", "[tools.rfd_renumber]\ncommand = [\"rfd\", 2]", []string{"tools.rfd_renumber.command: element 1 must be a string"}},
		{"command empty program", "[tools.rfd_renumber]\ncommand = [\"\"]", []string{"tools.rfd_renumber.command: names an empty program"}},
		{"fan_out on_error unknown", tool + "concurrency = 1\nfan_out = { on_error = \"halt\" }", []string{`tools.rfd_renumber.fan_out.on_error: must be "continue" or "stop", not "halt"`}},
		{"fan_out an integer", tool + "fan_out = 3", []string{"tools.rfd_renumber.fan_out: must be true, false or a table"}},
		{"lock_keys a string", tool + "lock_keys = \"file:{path}\"", []string{"tools.rfd_renumber.lock_keys: must be an array of strings"}},
		{"lock_keys unclosed", tool + "lock_keys = [\"file:{path\"]", []string{"tools.rfd_renumber.lock_keys: element 0", `"{" without "}"`}},
		{"lock_keys empty name", tool + "lock_keys = [\"draft:{}\"]", []string{"tools.rfd_renumber.lock_keys: element 0", "names no argument"}},
		{"lock_keys stray brace", tool + "lock_keys = [\"a}\"]", []string{"tools.rfd_renumber.lock_keys: element 0"}},
		{"on_tool_error unknown", "[runner]\non_tool_error = \"explode\"", []string{`runner.on_tool_error: must be "surface" or "fail_run", not "explode"`}},
		{"max_concurrent_tools 0", "[runner]\nmax_concurrent_tools = 0", []string{"runner.max_concurrent_tools: 0 is below 1"}},
		{"per_tenant negative", "[runner]\nper_tenant = -2", []string{"runner.per_tenant: -2 is negative"}},
		{"per_tool a string", tool + "[runner]\nper_tool = { rfd_renumber = \"4\" }", []string{"runner.per_tool.rfd_renumber: must be an integer"}},
		{"per_tool names no tool", tool + "[runner]\nper_tool = { ghost = 4 }", []string{"per_tool names ghost, which is not a declared tool"}},
		{"parallel_tool_calls a string", "[runner]\nparallel_tool_calls = \"yes\"", []string{"runner.parallel_tool_calls: must be true or false"}},
		{"workspace missing", "[runner]\nworkspace = \"/no/such/lanes/dir\"", []string{"runner.workspace:", "no such file"}},
		{"workspace a file", "[runner]\nworkspace = \"/etc/hostname\"", []string{"runner.workspace:", "not a directory"}},
		{"two limits for one key", `
[tools.rfd_renumber]
command = ["true"]
concurrency = { key = "rfd" }
[tools.rfd_publish]
command = ["true"]
enabled = false
concurrency = { key = "rfd", limit = 2 }
`, []string{`concurrency key "rfd" has different limits`, "rfd_publish says 2", "rfd_renumber says 1"}},
		{"limit 0 disagrees", `
[tools.a]
command = ["true"]
concurrency = { key = "x", limit = 0 }
[tools.b]
command = ["true"]
concurrency = { key = "x" }
`, []string{`concurrency key "x" has different limits`, "a says 0", "b says 1"}},
		{"stop with unbounded concurrency", tool + "fan_out = { on_error = \"stop\" }", []string{"tool rfd_renumber", `fan_out.on_error = "stop" needs a concurrency limit of at least 1`}},
		{"a default for every tool", "[tools.\"*\"]\ncommand = [\"true\"]\nsafe = true", []string{`tools."*": a default for every tool is not supported`, "declare each tool"}},
		{"safe_if malformed", tool + "safe_if = 'args.mode == '", []string{"tools.rfd_renumber.safe_if: is not a valid CEL expression"}},
		{"safe_if not a boolean", tool + "safe_if = '1 + 2'", []string{"tools.rfd_renumber.safe_if: gives int, not a boolean"}},
		{"safe_if empty", tool + "safe_if = ' '", []string{"tools.rfd_renumber.safe_if: is empty"}},
		{"safe_if a boolean", tool + "safe_if = true", []string{"tools.rfd_renumber.safe_if: must be a string"}},
		{"safe_if and safe", tool + "safe = true\nsafe_if = 'true'", []string{"tools.rfd_renumber.safe_if: and safe are both set"}},
		{"unmarked unknown", "[runner]\nunmarked = \"serial\"", []string{`runner.unmarked: must be "barrier" or "parallel", not "serial"`}},
		{"retention not a duration", "[runner]\nretention = \"a day\"", []string{`runner.retention: "a day" is not a duration`}},
		{"retention too long", "[runner]\nretention = \"8760h\"", []string{"runner.retention: 8760h0m0s is out of range 1ms..720h0m0s"}},
		{"retention 0", "[runner]\nretention = \"0s\"", []string{"runner.retention: 0s is out of range"}},
		{"fan_out enabled a string", tool + "fan_out = { enabled = \"yes\" }", []string{"tools.rfd_renumber.fan_out.enabled: must be true or false"}},
		{"tool name with a space", "[tools.\"rfd renumber\"]\ncommand = [\"true\"]", []string{`tool name "rfd renumber" must be 1 to 256 printable bytes without spaces`}},
		{"tool name with a line break", "[tools.\"a\\nb\"]\ncommand = [\"true\"]\ntimeout = 3", []string{`tools."a\nb".timeout: must be a string`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := batch.ParseConfig([]byte(tt.src), "")
			assertOneLine(t, err)
			if !errors.Is(err, sched.ErrConfig) {
				t.Errorf("ParseConfig() = %v; want an error that is sched.ErrConfig", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ParseConfig() = %q; want it to contain %q", err, w)
				}
			}
		})
	}
}

// Issue 11, part 4: the new keys. unmarked and retention on the runner,
// safe_if as a CEL expression over the arguments (an evaluation error
// means unsafe), fan_out = { enabled, on_error }.
func TestParseConfigIssue11Keys(t *testing.T) {
	cfg := parse(t, `
[runner]
unmarked = "parallel"
retention = "36h"

[tools.file]
command = ["true"]
safe_if = 'args.mode == "read" || (has(args.count) && args.count < 3)'

[tools.fan]
command = ["true"]
concurrency = 1
fan_out = { enabled = true, on_error = "stop" }

[tools.nofan]
command = ["true"]
fan_out = { enabled = false, on_error = "continue" }
`, "")
	if r := cfg.Runner; r.Unmarked != sched.UnmarkedParallel || r.Retention != 36*time.Hour {
		t.Errorf("Runner = %+v; want unmarked parallel, retention 36h", r)
	}
	safe := cfg.Tools["file"].Safe
	for args, want := range map[string]bool{
		`{"mode": "read"}`:                true,
		`{"mode": "write"}`:               false,
		`{"mode": "write", "count": 2}`:   true,
		`{"mode": "write", "count": 2.0}`: true,
		`{"mode": "write", "count": 3}`:   false,
		`{}`:                              false, // no such key: an evaluation error, unsafe
		`{"mode": 7}`:                     false, // a type mismatch
		`[{"mode": "read"}]`:              false, // a fan-out's list
	} {
		got, err := safe(json.RawMessage(args))
		if got != want {
			t.Errorf("safe_if(%s) = %v, %v; want %v", args, got, err, want)
		}
	}
	if fo := cfg.Tools["fan"].FanOut; fo == nil || fo.OnError != sched.Stop {
		t.Errorf("fan: FanOut = %+v; want enabled, stop", fo)
	}
	if fo := cfg.Tools["nofan"].FanOut; fo != nil {
		t.Errorf("nofan: FanOut = %+v; want none (enabled = false)", fo)
	}
}

// TestParseConfigReportsEveryProblem checks that two problems are both
// named, in one line.
func TestParseConfigReportsEveryProblem(t *testing.T) {
	_, err := batch.ParseConfig([]byte("[tools.a]\ncommand = [\"x\"]\ntimeout = 5\n[tools.b]\ncommand = [\"x\"]\nsafe = 1\nbogus = true\n"), "")
	assertOneLine(t, err)
	for _, w := range []string{"tools.a.timeout", "tools.b.safe", "tools.b.bogus: unknown key"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("ParseConfig() = %q; want it to name %s", err, w)
		}
	}
}

// script writes an executable shell script at path.
func script(t *testing.T, path, body string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// realDir returns dir with every symlink followed (t.TempDir may be under
// one, as on macOS).
func realDir(t *testing.T, dir string) string {
	t.Helper()
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	return real
}

// TestLoadConfigRelativePaths checks that a relative command path and the
// workspace are taken against the file's directory, and that the command
// runs in the workspace.
func TestLoadConfigRelativePaths(t *testing.T) {
	dir := realDir(t, t.TempDir())
	script(t, filepath.Join(dir, "tools", "where"), `pwd`)
	if err := os.Mkdir(filepath.Join(dir, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tools.toml")
	src := "[runner]\nworkspace = \"ws\"\n[tools.where]\ncommand = [\"./tools/where\"]\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := batch.LoadConfig(path)
	if err != nil {
		t.Fatalf("LoadConfig() = %v", err)
	}
	out, err := cfg.Tools["where"].Run(context.Background(), sched.Invocation{CallID: "c", Tool: "where", Args: []byte("{}")})
	if want := filepath.Join(dir, "ws"); err != nil || out != want {
		t.Errorf("where = %q, %v; want %q (the workspace)", out, err, want)
	}
}

func TestLoadConfigErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.toml")
	_, err := batch.LoadConfig(missing)
	assertOneLine(t, err)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("LoadConfig(missing) = %v; want a not-exist error naming the file", err)
	}

	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[tools.a]\ncommand = [\"x\"]\ntimeout = \"soon\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = batch.LoadConfig(bad)
	assertOneLine(t, err)
	if want := bad + `: tools.a.timeout: "soon" is not a duration`; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("LoadConfig(bad) = %q; want it to start with %q", err, want)
	}
}

// The README's TOML example of lanectl batch is a configuration that
// parses, with the safety the README says of each tool.
func TestREADMEExampleParses(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "\n```toml\n[runner]")
	src, _, closed := strings.Cut(rest, "\n```")
	if !ok || !closed {
		t.Fatal("README.md has no ```toml block that starts with [runner]")
	}
	cfg := parse(t, "[runner]"+src, t.TempDir())
	if cfg.Runner.Unmarked != sched.UnmarkedBarrier || cfg.Runner.Retention != 24*time.Hour {
		t.Errorf("README runner = %+v", cfg.Runner)
	}
	w := cfg.Tools["write_file"]
	for args, want := range map[string]bool{`{"path": "a", "mode": "append"}`: true, `{"path": "a", "mode": "truncate"}`: false} {
		if got, _ := w.Safe(json.RawMessage(args)); got != want {
			t.Errorf("README write_file safe_if(%s) = %v; want %v", args, got, want)
		}
	}
}

// Regression (review of rate lanes, finding 4): a fixed cost above its
// rate's limit fails the load, not every call; a rate-only tool beside a
// concurrency limit on the same key is named as having none.
func TestParseConfigRateCostAndLimitWords(t *testing.T) {
	for _, tt := range []struct{ name, toml, want string }{
		{"cost above the rate", `
[tools.ask]
command = ["true"]
rate = { key = "p", limit = 10, per = "1s" }
cost = 11
`, `tools.ask.cost: 11 is above the limit of the rate of key "p", 10`},
		{"rate alone beside a limit", `
[tools.a]
command = ["true"]
rate = { key = "p", limit = 2, per = "2s" }
[tools.b]
command = ["true"]
concurrency = { key = "p", limit = 3 }
`, `a says 0 (no concurrency limit), b says 3`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := batch.ParseConfig([]byte(tt.toml), t.TempDir())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseConfig() = %v; want it to contain %q", err, tt.want)
			}
		})
	}
}

// read_only_hint = true makes a tool idempotent too, as MCP's readOnlyHint
// does, unless idempotent is written: a read-only call cut off in flight
// is "safe to call again", not "indeterminate" (found by a README trial).
func TestParseConfigReadOnlyIsIdempotent(t *testing.T) {
	for _, tt := range []struct {
		fields string
		want   bool
	}{
		{"read_only_hint = true", true},
		{"read_only_hint = true\nidempotent = false", false},
		{"read_only_hint = false", false},
		{"idempotent = true", true},
	} {
		cfg := parse(t, "[tools.t]\ncommand = [\"true\"]\n"+tt.fields, "")
		if got := cfg.Tools["t"].Idempotent; got != tt.want {
			t.Errorf("%q: Idempotent = %v; want %v", tt.fields, got, tt.want)
		}
	}
}
