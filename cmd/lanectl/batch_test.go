package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The tests of this file run the lanectl binary on tools that are shell
// scripts in t.TempDir(), with --local or against miniredis and the real
// Redis server (skipped when none answers).

// batchJSON is the contract of `batch --json`, written out again here so
// that a change of a tag in batch.go fails the tests.
type batchJSON struct {
	ID         string            `json:"id"`
	Tool       string            `json:"tool"`
	Status     string            `json:"status"`
	Code       string            `json:"code"`
	Output     string            `json:"output"`
	Error      string            `json:"error"`
	QueuedMS   int64             `json:"queued_ms"`
	RanMS      int64             `json:"ran_ms"`
	Tokens     map[string]uint64 `json:"tokens"`
	Stored     bool              `json:"stored"`
	Operations []batchJSON       `json:"operations"`
}

// batchDir is a directory of tools for `lanectl batch`: tools.toml, the
// scripts it names under tools/, and the log the rfd tool appends to.
type batchDir struct {
	dir   string
	tools string // path of tools.toml
	log   string // "$LANES_CALL_ID $LANES_TOKENS" per rfd_renumber call, in run order
}

// batchTools is the configuration of every batch test: echo is read-only
// and prints its arguments; rfd_renumber shares the concurrency key rfd
// (limit 1) and is safe, so its calls share a phase and only the key
// orders them; fail exits 4; ghost names a program that does not exist;
// slow runs sleep 60.
const batchTools = `
[tools.echo]
command = ["./tools/echo"]
read_only_hint = true

[tools.rfd_renumber]
command = ["./tools/rfd"]
concurrency = { key = "rfd" }
safe = true

[tools.fail]
command = ["./tools/fail"]

[tools.ghost]
command = ["./tools/does-not-exist"]

[tools.slow]
command = ["./tools/slow"]
`

// newBatchDir writes the tools of batchTools, and extra TOML after them.
func newBatchDir(t *testing.T, extra string) *batchDir {
	t.Helper()
	d := &batchDir{dir: t.TempDir()}
	d.tools = filepath.Join(d.dir, "tools.toml")
	d.log = filepath.Join(d.dir, "rfd.log")
	if err := os.Mkdir(filepath.Join(d.dir, "tools"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"echo": `cat`,
		"rfd":  fmt.Sprintf(`printf '%%s %%s\n' "$LANES_CALL_ID" "$LANES_TOKENS" >> %q; sleep 0.02; cat`, d.log),
		"fail": `echo "boom: $LANES_CALL_ID" >&2; exit 4`,
		"slow": fmt.Sprintf(`echo $$ > %q; exec sleep 60`, filepath.Join(d.dir, "slow.pid")),
	} {
		writeFile(t, filepath.Join(d.dir, "tools", name), "#!/bin/sh\n"+body+"\n", 0o755)
	}
	writeFile(t, d.tools, batchTools+extra, 0o644)
	return d
}

// calls writes a model response in format with calls and returns its path.
func (d *batchDir) calls(t *testing.T, format string, calls ...toolCall) string {
	t.Helper()
	path := filepath.Join(d.dir, "calls-"+format+".json")
	writeFile(t, path, response(t, format, calls...), 0o644)
	return path
}

// toolCall is one call of a response; args is the arguments' text (JSON,
// but for an OpenAI format any string).
type toolCall struct{ id, tool, args string }

// response renders calls as a model response in format, with text mixed in
// as the APIs do.
func response(t *testing.T, format string, calls ...toolCall) string {
	t.Helper()
	var v any
	switch format {
	case "anthropic":
		content := []any{map[string]any{"type": "text", "text": "I'll run the tools."}}
		for _, c := range calls {
			content = append(content, map[string]any{"type": "tool_use", "id": c.id, "name": c.tool, "input": json.RawMessage(c.args)})
		}
		v = map[string]any{"id": "msg_01", "type": "message", "role": "assistant", "content": content, "stop_reason": "tool_use"}
	case "openai-chat":
		tcs := []any{}
		for _, c := range calls {
			tcs = append(tcs, map[string]any{"id": c.id, "type": "function", "function": map[string]any{"name": c.tool, "arguments": c.args}})
		}
		v = map[string]any{"id": "chatcmpl-1", "object": "chat.completion", "choices": []any{
			map[string]any{"index": 0, "finish_reason": "tool_calls", "message": map[string]any{"role": "assistant", "content": nil, "tool_calls": tcs}},
		}}
	case "openai-responses":
		output := []any{map[string]any{"type": "message", "id": "msg_1", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": "Running."}}}}
		for _, c := range calls {
			output = append(output, map[string]any{"type": "function_call", "id": "fc_" + c.id, "call_id": c.id, "name": c.tool, "arguments": c.args, "status": "completed"})
		}
		v = map[string]any{"id": "resp_1", "object": "response", "status": "completed", "output": output}
	default:
		t.Fatalf("unknown format %q", format)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// decodeBatch decodes the output of `batch --json`.
func decodeBatch(t *testing.T, out string) []batchJSON {
	t.Helper()
	var got []batchJSON
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("batch --json printed %q: %v", out, err)
	}
	return got
}

// want is what one outcome must be: its id, tool and status, and a text
// its error contains ("" for no error).
type want struct{ id, tool, status, err string }

// checkOutcomes fails t unless got matches ws, in order.
func checkOutcomes(t *testing.T, got []batchJSON, ws []want) {
	t.Helper()
	if len(got) != len(ws) {
		t.Fatalf("batch printed %d outcomes; want %d: %+v", len(got), len(ws), got)
	}
	for i, w := range ws {
		g := got[i]
		if g.ID != w.id || g.Tool != w.tool || g.Status != w.status {
			t.Errorf("outcome %d = %s %s %s (error %q); want %s %s %s", i, g.ID, g.Tool, g.Status, g.Error, w.id, w.tool, w.status)
		}
		if (w.err == "") != (g.Error == "") || !strings.Contains(g.Error, w.err) {
			t.Errorf("outcome %d (%s) error = %q; want one containing %q", i, g.ID, g.Error, w.err)
		}
		if g.Tokens == nil {
			t.Errorf("outcome %d (%s) tokens = null; want an object", i, g.ID)
		}
	}
}

// TestBatchFormats runs one batch in each of the three formats: an unknown
// tool, arguments that are not JSON, a command that does not exist and a
// failing tool each get their own outcome, and the other calls run.
func TestBatchFormats(t *testing.T) {
	for _, format := range []string{"anthropic", "openai-chat", "openai-responses"} {
		t.Run(format, func(t *testing.T) {
			d := newBatchDir(t, "")
			calls := []toolCall{
				{"c1", "echo", `{"q":"first"}`},
				{"c2", "nope", `{}`},
				{"c3", "ghost", `{}`},
				{"c4", "fail", `{}`},
				{"c5", "rfd_renumber", `{"rfd":129}`},
				{"c6", "echo", `{"q":"last"}`},
			}
			ws := []want{
				{"c1", "echo", "ok", ""},
				{"c2", "nope", "error", `unknown tool "nope"`},
				{"c3", "ghost", "error", "command not found: " + filepath.Join(d.dir, "tools", "does-not-exist")},
				{"c4", "fail", "error", "exit status 4: boom: c4"},
				{"c5", "rfd_renumber", "ok", ""},
				{"c6", "echo", "ok", ""},
			}
			if format != "anthropic" { // Anthropic's input is JSON by construction
				calls = append(calls, toolCall{"c7", "echo", `{"q": "trunc`})
				ws = append(ws, want{"c7", "echo", "error", "arguments of echo are not JSON"})
			}
			code, out, stderr := runBin(t, "batch", "--local", "--json", "--tools", d.tools, "--calls", d.calls(t, format, calls...))
			if code != 0 || stderr != "" {
				t.Fatalf("batch = %d, stderr %q; want 0 and nothing", code, stderr)
			}
			got := decodeBatch(t, out)
			checkOutcomes(t, got, ws)
			if got[0].Output != `{"q":"first"}` || got[5].Output != `{"q":"last"}` || got[4].Output != `{"rfd":129}` {
				t.Errorf("outputs = %q, %q, %q; want each call's arguments echoed", got[0].Output, got[4].Output, got[5].Output)
			}
			if got[4].Tokens["concurrency:rfd"] == 0 || len(got[0].Tokens) != 0 {
				t.Errorf("tokens = %v (rfd_renumber), %v (echo); want concurrency:rfd for rfd_renumber, none for echo", got[4].Tokens, got[0].Tokens)
			}
		})
	}
}

// TestBatchJSONShape checks the exact fields of `batch --json`.
func TestBatchJSONShape(t *testing.T) {
	d := newBatchDir(t, "")
	calls := d.calls(t, "anthropic", toolCall{"c1", "rfd_renumber", `{"n":1}`}, toolCall{"c2", "fail", `{}`})
	code, out, stderr := runBin(t, "batch", "--local", "--json", "--tools", d.tools, "--calls", calls)
	if code != 0 {
		t.Fatalf("batch = %d, stderr %q; want 0", code, stderr)
	}
	var raw []map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("batch --json printed %q: %v", out, err)
	}
	fields := []string{"code", "error", "id", "output", "queued_ms", "ran_ms", "status", "stored", "tokens", "tool"}
	for i, o := range raw {
		var keys []string
		for k := range o {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, fields) {
			t.Errorf("outcome %d has fields %v; want exactly %v", i, keys, fields)
		}
		if _, ok := o["stored"].(bool); !ok {
			t.Errorf("outcome %d: stored = %#v; want a boolean", i, o["stored"])
		}
		for _, f := range []string{"id", "tool", "status", "code", "output", "error"} {
			if _, ok := o[f].(string); !ok {
				t.Errorf("outcome %d: %s = %#v; want a string", i, f, o[f])
			}
		}
		for _, f := range []string{"queued_ms", "ran_ms"} {
			if n, ok := o[f].(float64); !ok || n < 0 || n != float64(int64(n)) {
				t.Errorf("outcome %d: %s = %#v; want a whole number", i, f, o[f])
			}
		}
		if _, ok := o["tokens"].(map[string]any); !ok {
			t.Errorf("outcome %d: tokens = %#v; want an object, never null", i, o["tokens"])
		}
	}
	got := decodeBatch(t, out)
	checkOutcomes(t, got, []want{{"c1", "rfd_renumber", "ok", ""}, {"c2", "fail", "error", "exit status 4"}})
	if got[0].Error != "" || got[0].Code != "" || got[0].Tokens["concurrency:rfd"] != 1 || got[0].Output != `{"n":1}` {
		t.Errorf("c1 = %+v; want no error, no code, concurrency:rfd=1, its arguments as output", got[0])
	}
	if got[1].Code != "TOOL_ERROR" || got[1].Stored {
		t.Errorf("c2 = %+v; want code TOOL_ERROR, not stored", got[1])
	}
}

// TestBatchRenumberInOrder runs four renumber calls of one phase that share
// the concurrency key rfd: they run one at a time in written order, with
// growing tokens, in memory, on miniredis and on real Redis.
func TestBatchRenumberInOrder(t *testing.T) {
	check := func(t *testing.T, args []string, flags ...string) {
		d := newBatchDir(t, "")
		var calls []toolCall
		for i := 1; i <= 4; i++ {
			calls = append(calls, toolCall{fmt.Sprintf("toolu_%d", i), "rfd_renumber", fmt.Sprintf(`{"from": %d}`, 128+i)})
		}
		args = append(args, "batch", "--json", "--tools", d.tools, "--calls", d.calls(t, "anthropic", calls...))
		args = append(args, flags...)
		code, out, stderr := runBin(t, args...)
		if code != 0 || stderr != "" {
			t.Fatalf("batch = %d, stderr %q; want 0 and nothing", code, stderr)
		}
		got := decodeBatch(t, out)
		b, err := os.ReadFile(d.log)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		if len(lines) != 4 {
			t.Fatalf("the log has %q; want 4 lines", lines)
		}
		var last uint64
		for i, l := range lines {
			id, tokens, _ := strings.Cut(l, " ")
			tok, err := strconv.ParseUint(strings.TrimPrefix(tokens, "concurrency:rfd="), 10, 64)
			if id != calls[i].id || err != nil || !strings.HasPrefix(tokens, "concurrency:rfd=") || tok <= last {
				t.Errorf("log line %d = %q; want %s concurrency:rfd=N, N above %d", i, l, calls[i].id, last)
			}
			if got[i].Tokens["concurrency:rfd"] != tok {
				t.Errorf("outcome %d tokens = %v; want concurrency:rfd=%d as the tool saw", i, got[i].Tokens, tok)
			}
			last = tok
		}
	}
	t.Run("local", func(t *testing.T) { check(t, nil, "--local") })
	forEachServer(t, func(t *testing.T, s *server) {
		check(t, s.args())
		s.assertEmpty(t)
	})
}

// TestBatchRedis runs a batch against miniredis and real Redis: its
// entries leave the namespace, and a second run's tokens go on from the
// first's.
func TestBatchRedis(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		d := newBatchDir(t, "")
		calls := d.calls(t, "openai-responses", toolCall{"call_1", "echo", `{"a": 1}`}, toolCall{"call_2", "rfd_renumber", `{}`}, toolCall{"call_3", "nope", `{}`})
		var tokens []uint64
		for run := range 2 {
			code, out, stderr := runBin(t, s.args("batch", "--json", "--tenant", "acme", "--run-id", fmt.Sprintf("run-%d", run), "--tools", d.tools, "--calls", calls)...)
			if code != 0 || stderr != "" {
				t.Fatalf("run %d: batch = %d, stderr %q; want 0 and nothing", run, code, stderr)
			}
			got := decodeBatch(t, out)
			checkOutcomes(t, got, []want{{"call_1", "echo", "ok", ""}, {"call_2", "rfd_renumber", "ok", ""}, {"call_3", "nope", "error", "unknown tool"}})
			tokens = append(tokens, got[1].Tokens["concurrency:rfd"])
		}
		if tokens[0] == 0 || tokens[1] <= tokens[0] {
			t.Errorf("concurrency:rfd tokens of two runs = %v; want them growing", tokens)
		}
		s.assertEmpty(t)
	})
}

// TestBatchLocalNeedsNoRedis points --redis at a port nobody listens on:
// with --local the batch runs, without it lanectl exits 69.
func TestBatchLocalNeedsNoRedis(t *testing.T) {
	d := newBatchDir(t, "")
	calls := d.calls(t, "openai-chat", toolCall{"call_1", "rfd_renumber", `{"x": 1}`})
	code, out, stderr := runBin(t, "--redis", "redis://127.0.0.1:1", "batch", "--local", "--json", "--tools", d.tools, "--calls", calls)
	if code != 0 || stderr != "" {
		t.Fatalf("batch --local = %d, stderr %q; want 0 and nothing", code, stderr)
	}
	checkOutcomes(t, decodeBatch(t, out), []want{{"call_1", "rfd_renumber", "ok", ""}})

	code, _, stderr = runBin(t, "--redis", "redis://127.0.0.1:1", "batch", "--tools", d.tools, "--calls", calls)
	if code != exitUnavailable {
		t.Errorf("batch without --local and no Redis = %d; want %d", code, exitUnavailable)
	}
	assertOneLine(t, stderr)
}

// TestBatchDataErrors checks exit 65 and one line for files batch cannot
// use.
func TestBatchDataErrors(t *testing.T) {
	d := newBatchDir(t, "")
	good := d.calls(t, "anthropic", toolCall{"c1", "echo", `{}`})
	conflict := filepath.Join(d.dir, "conflict.toml")
	writeFile(t, conflict, batchTools+"\n[tools.rfd_publish]\ncommand = [\"true\"]\nenabled = false\nconcurrency = { key = \"rfd\", limit = 3 }\n", 0o644)
	badType := filepath.Join(d.dir, "bad-type.toml")
	writeFile(t, badType, "[tools.rfd_renumber]\ncommand = [\"x\"]\ntimeout = \"ten seconds\"\n", 0o644)
	syntax := filepath.Join(d.dir, "syntax.toml")
	writeFile(t, syntax, "[tools\n", 0o644)
	unknown := filepath.Join(d.dir, "unknown.json")
	writeFile(t, unknown, `{"message": {"tool_calls": []}}`, 0o644)
	notJSON := filepath.Join(d.dir, "not.json")
	writeFile(t, notJSON, "tool_use: echo\n", 0o644)
	missing := filepath.Join(d.dir, "missing")
	star := filepath.Join(d.dir, "star.toml")
	writeFile(t, star, batchTools+"\n[tools.\"*\"]\ncommand = [\"true\"]\nsafe = true\n", 0o644)
	badCEL := filepath.Join(d.dir, "cel.toml")
	writeFile(t, badCEL, batchTools+"\n[tools.file]\ncommand = [\"true\"]\nsafe_if = 'args.mode ==='\n", 0o644)
	notCheckpoint := filepath.Join(d.dir, "not-a-checkpoint.json")
	writeFile(t, notCheckpoint, `{"calls": [1]}`, 0o644)

	for _, tt := range []struct {
		name, tools, calls string
		want               []string
	}{
		{"conflicting limits", conflict, good, []string{conflict, `concurrency key "rfd" has different limits`, "rfd_publish says 3", "rfd_renumber says 1"}},
		{"wrong type", badType, good, []string{badType, `tools.rfd_renumber.timeout: "ten seconds" is not a duration`}},
		{"TOML syntax", syntax, good, []string{syntax, "toml: line"}},
		{"unknown format", d.tools, unknown, []string{unknown, "Anthropic Messages", "OpenAI Chat Completions", "OpenAI Responses"}},
		{"calls not JSON", d.tools, notJSON, []string{notJSON, "not JSON"}},
		{"tools file missing", missing, good, []string{"cannot read " + missing, "no such file"}},
		{"calls file missing", d.tools, missing, []string{"cannot read " + missing, "no such file"}},
		{"tools file a directory", d.dir, good, []string{"cannot read " + d.dir}},
		{"a default for every tool", star, good, []string{star, `tools."*": a default for every tool is not supported`}},
		{"malformed safe_if", badCEL, good, []string{badCEL, "tools.file.safe_if: is not a valid CEL expression"}},
		{"resume from a file that is no checkpoint", d.tools, "resume:" + notCheckpoint, []string{notCheckpoint, "is not a checkpoint of lanectl batch"}},
		{"resume from a missing file", d.tools, "resume:" + missing, []string{"cannot read the checkpoint " + missing, "no such file"}},
		// Regression (README trial of 2026-12-04): valid TOML that
		// declares no tool ran every call to TOOL_UNKNOWN and exited 0.
		{"a tools file that declares no tool", os.DevNull, good, []string{os.DevNull + " declares no tool"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			from := []string{"--calls", tt.calls}
			if f, ok := strings.CutPrefix(tt.calls, "resume:"); ok {
				from = []string{"--resume", f}
			}
			code, out, stderr := runBin(t, append([]string{"batch", "--local", "--tools", tt.tools}, from...)...)
			if code != exitDataErr || out != "" {
				t.Errorf("batch = %d, stdout %q; want %d and nothing", code, out, exitDataErr)
			}
			assertOneLine(t, stderr)
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr = %q; want it to contain %q", stderr, w)
				}
			}
		})
	}
}

func TestBatchUsageErrors(t *testing.T) {
	d := newBatchDir(t, "")
	calls := d.calls(t, "anthropic")
	for _, args := range [][]string{
		{"batch", "--calls", calls},
		{"batch", "--tools", d.tools},
		{"batch", "--tools", d.tools, "--calls", calls, "extra"},
		{"batch", "--tools", d.tools, "--calls", calls, "--run-id", "has space"},
		{"batch", "--tools", d.tools, "--calls", calls, "--run-id", strings.Repeat("r", 200)},
		{"batch", "--tools", d.tools, "--calls", calls, "--tenant", "bad\ntenant"},
		{"batch", "--tools", d.tools, "--calls", calls, "--no-such-flag"},
		{"batch", "--tools", d.tools, "--calls", calls, "--resume", calls},
		{"batch", "--tools", d.tools, "--calls", calls, "--deadline", "-1s"},
		{"batch", "--tools", d.tools, "--resume", calls, "--no-lanes"},
	} {
		code, _, stderr := runInProcess(t, args...)
		if code != exitUsage {
			t.Errorf("lanectl %q = %d; want %d", args, code, exitUsage)
		}
		if lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n"); !strings.HasPrefix(lines[len(lines)-1], "lanectl: ") {
			t.Errorf("lanectl %q stderr = %q; want it to end with one lanectl: line", args, stderr)
		}
	}
}

// TestBatchNoCalls runs a response without tool calls.
func TestBatchNoCalls(t *testing.T) {
	d := newBatchDir(t, "")
	calls := d.calls(t, "openai-chat")
	code, out, stderr := runInProcess(t, "batch", "--local", "--json", "--tools", d.tools, "--calls", calls)
	if code != 0 || stderr != "" || out != "[]\n" {
		t.Errorf("batch --json of no calls = %d, %q, stderr %q; want 0, []", code, out, stderr)
	}
	code, out, _ = runInProcess(t, "batch", "--local", "--tools", d.tools, "--calls", calls)
	if code != 0 || out != "no tool calls\n" {
		t.Errorf("batch of no calls = %d, %q; want 0, no tool calls", code, out)
	}
}

// TestBatchCallsFromStdin reads the response from standard input.
func TestBatchCallsFromStdin(t *testing.T) {
	d := newBatchDir(t, "")
	cmd := exec.Command(lanectlBin, "batch", "--local", "--json", "--tools", d.tools, "--calls", "-")
	cmd.Stdin = strings.NewReader(response(t, "openai-responses", toolCall{"call_1", "echo", `{"from": "stdin"}`}))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("batch --calls - = %v, stderr %q", err, stderr.String())
	}
	got := decodeBatch(t, string(out))
	checkOutcomes(t, got, []want{{"call_1", "echo", "ok", ""}})
	if got[0].Output != `{"from": "stdin"}` {
		t.Errorf("output = %q; want the arguments read from stdin", got[0].Output)
	}
}

// TestBatchHumanOutput checks the table: one aligned line per call, its
// output indented and cut at 10 lines, its error indented.
func TestBatchHumanOutput(t *testing.T) {
	d := newBatchDir(t, "\n[tools.lines]\ncommand = [\"seq\", \"15\"]\nread_only_hint = true\n")
	calls := d.calls(t, "anthropic",
		toolCall{"toolu_1", "rfd_renumber", `{"n":1}`},
		toolCall{"toolu_long_id", "lines", `{}`},
		toolCall{"toolu_3", "fail", `{}`},
	)
	code, out, stderr := runBin(t, "batch", "--local", "--tools", d.tools, "--calls", calls)
	if code != 0 || stderr != "" {
		t.Fatalf("batch = %d, stderr %q; want 0 and nothing", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	patterns := []string{
		`^toolu_1        rfd_renumber  ok     queued \d+ms  ran \d+ms  tokens concurrency:rfd=1$`,
		`^    \{"n":1\}$`,
		`^toolu_long_id  lines         ok     queued \d+ms  ran \d+ms$`,
		`^    1$`, `^    2$`, `^    3$`, `^    4$`, `^    5$`, `^    6$`, `^    7$`, `^    8$`, `^    9$`, `^    10$`,
		`^    … 5 more lines \(--json prints the whole output\)$`,
		`^toolu_3        fail          error  queued \d+ms  ran \d+ms  TOOL_ERROR$`,
		`^    error: exit status 4: boom: toolu_3$`,
	}
	if len(lines) != len(patterns) {
		t.Fatalf("batch printed %d lines; want %d:\n%s", len(lines), len(patterns), out)
	}
	for i, p := range patterns {
		if !regexp.MustCompile(p).MatchString(lines[i]) {
			t.Errorf("line %d = %q; want it to match %s", i, lines[i], p)
		}
	}
}

// TestBatchEvents checks that --events prints the timeline to stderr, one
// line per event.
func TestBatchEvents(t *testing.T) {
	d := newBatchDir(t, "")
	calls := d.calls(t, "anthropic", toolCall{"toolu_1", "rfd_renumber", `{}`}, toolCall{"toolu_2", "nope", `{}`})
	code, out, stderr := runBin(t, "batch", "--local", "--json", "--events", "--tools", d.tools, "--calls", calls)
	if code != 0 {
		t.Fatalf("batch --events = %d, stderr %q; want 0", code, stderr)
	}
	decodeBatch(t, out) // stdout stays JSON
	patterns := []string{
		`^ +\+0ms  read 2 tool calls \(anthropic\) from .*calls-anthropic\.json$`,
		`^ +\+\d+ms  settled   toolu_2  nope  error: unknown tool "nope"$`,
		`^ +\+\d+ms  queued    toolu_1  rfd_renumber`,
		`^ +\+\d+ms  granted   toolu_1  rfd_renumber  tokens concurrency:rfd=1$`,
		`^ +\+\d+ms  started   toolu_1  rfd_renumber$`,
		`^ +\+\d+ms  finished  toolu_1  rfd_renumber  ok$`,
	}
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if len(lines) != len(patterns) {
		t.Fatalf("--events printed %d lines; want %d:\n%s", len(lines), len(patterns), stderr)
	}
	for i, p := range patterns {
		if !regexp.MustCompile(p).MatchString(lines[i]) {
			t.Errorf("event line %d = %q; want it to match %s", i, lines[i], p)
		}
	}
}

// TestBatchSignalCancels sends SIGINT to a batch whose first call runs
// sleep 60: the call is cancelled (indeterminate: slow is not idempotent),
// the next never dispatched, the outcomes printed, sleep gone, exit 130.
func TestBatchSignalCancels(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		d := newBatchDir(t, "")
		calls := d.calls(t, "openai-chat", toolCall{"call_1", "slow", `{}`}, toolCall{"call_2", "echo", `{}`})
		p := startBin(t, s.args("batch", "--json", "--tools", d.tools, "--calls", calls)...)
		pidFile := filepath.Join(d.dir, "slow.pid")
		var pid int
		eventually(t, "the slow tool runs", func() bool {
			b, err := os.ReadFile(pidFile)
			if err == nil && strings.HasSuffix(string(b), "\n") {
				pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			}
			return pid > 0
		})
		p.signal(t, syscall.SIGINT)
		if code := p.wait(t); code != 130 {
			t.Errorf("batch interrupted by SIGINT = %d; want 130 (stderr %q)", code, p.stderr)
		}
		stderr := p.stderr.String()
		assertJSONError(t, stderr, "interrupted", 130) // --json: the error as JSON
		if !strings.Contains(stderr, "interrupted by SIGINT") {
			t.Errorf("stderr = %q; want interrupted by SIGINT", stderr)
		}
		checkOutcomes(t, decodeBatch(t, p.stdout.String()), []want{
			{"call_1", "slow", "indeterminate", "cancelled in flight"},
			{"call_2", "echo", "never_dispatched", "never dispatched"},
		})
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("kill(%d, 0) after lanectl exited = %v; want ESRCH: the tool still runs", pid, err)
		}
		s.assertEmpty(t)
	})
}

// TestExitDataErrIsItsOwn checks that 65 means nothing else in the table.
func TestExitDataErrIsItsOwn(t *testing.T) {
	for _, c := range []int{exitOK, exitNotFound, exitUsage, exitUnavailable, exitInternal, exitWaitTimeout,
		exitLeaseLost, exitLockCycle, exitCannotRun, exitCommandNotFound, exitSignal + int(syscall.SIGINT), exitSignal + int(syscall.SIGTERM)} {
		if c == exitDataErr {
			t.Errorf("exit code %d means data error and something else", c)
		}
	}
}

// TestBatchTokensEscaped runs the case of issue 17, part 3: a concurrency
// key and a lock key that hold "%", "," and "=" reach the tool escaped, as
// `lanectl lock` writes them, in memory, on miniredis and on real Redis.
func TestBatchTokensEscaped(t *testing.T) {
	check := func(t *testing.T, args []string, flags ...string) {
		d := newBatchDir(t, `
[tools.odd]
command = ["sh", "-c", "printf %s \"$LANES_TOKENS\""]
concurrency = { key = "a,b=c%d" }
lock_keys = ["k:{x}"]
`)
		args = append(args, "batch", "--json", "--tools", d.tools, "--calls", d.calls(t, "openai-chat", toolCall{"c1", "odd", `{"x": "p,q=r"}`}))
		code, out, stderr := runBin(t, append(args, flags...)...)
		if code != 0 {
			t.Fatalf("batch = %d, stderr %q", code, stderr)
		}
		got := decodeBatch(t, out)
		checkOutcomes(t, got, []want{{"c1", "odd", "ok", ""}})
		want := fmt.Sprintf("concurrency:a%%2Cb%%3Dc%%25d=%d,lock:k:p%%2Cq%%3Dr=%d", got[0].Tokens["concurrency:a,b=c%d"], got[0].Tokens["lock:k:p,q=r"])
		if got[0].Output != want || got[0].Tokens["lock:k:p,q=r"] == 0 {
			t.Errorf("LANES_TOKENS = %q; want %q", got[0].Output, want)
		}
	}
	t.Run("local", func(t *testing.T) { check(t, nil, "--local") })
	forEachServer(t, func(t *testing.T, s *server) {
		check(t, s.args())
		s.assertEmpty(t)
	})
}

// TestBatchFileKeysKernelPath runs issue 17, part 2, through batch: with
// ws/l a link to real/sub, calls writing real/plan.md and l/../plan.md hold
// one lock key, the file the kernel opens for both, so they run one after
// the other with growing tokens. In memory (--local), in each format.
func TestBatchFileKeysKernelPath(t *testing.T) {
	d := newBatchDir(t, `
[tools.edit]
command = ["sh", "-c", "cat >/dev/null; printf %s \"$LANES_TOKENS\""]
safe = true
lock_keys = ["file:{path}"]

[runner]
workspace = "ws"
`)
	ws := filepath.Join(d.dir, "ws")
	if err := os.MkdirAll(filepath.Join(ws, "real", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real/sub", filepath.Join(ws, "l")); err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(ws)
	if err != nil {
		t.Fatal(err)
	}
	key := "lock:file:" + filepath.Join(real, "real", "plan.md")
	for _, format := range []string{"anthropic", "openai-chat", "openai-responses"} {
		calls := d.calls(t, format, toolCall{"c1", "edit", `{"path": "real/plan.md"}`}, toolCall{"c2", "edit", `{"path": "l/../plan.md"}`})
		code, out, stderr := runBin(t, "batch", "--local", "--json", "--tools", d.tools, "--calls", calls)
		if code != 0 {
			t.Fatalf("%s: batch = %d, stderr %q", format, code, stderr)
		}
		got := decodeBatch(t, out)
		checkOutcomes(t, got, []want{{"c1", "edit", "ok", ""}, {"c2", "edit", "ok", ""}})
		if t1, t2 := got[0].Tokens[key], got[1].Tokens[key]; t1 == 0 || t2 <= t1 || len(got[0].Tokens) != 1 || len(got[1].Tokens) != 1 {
			t.Errorf("%s: tokens %v, %v; want both on %s alone, growing", format, got[0].Tokens, got[1].Tokens, key)
		}
	}
}

// TestBatchBadArgumentsFailAlone runs issue 17, part 5, in every format:
// arguments nested 10,001 levels deep, or that are not an object, fail
// their own call with their own outcome while the others run; the batch
// exits 0. OpenAI's arguments are also sent as JSON values, not strings,
// as some proxies do. In memory (--local): the lanes play no part.
func TestBatchBadArgumentsFailAlone(t *testing.T) {
	d := newBatchDir(t, "")
	deep := `{"x": ` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`
	calls := []toolCall{
		{"c1", "echo", `{"q": 1}`},
		{"c2", "echo", deep},
		{"c3", "echo", `"just a string"`},
		{"c4", "echo", `[1, 2]`},
		{"c5", "echo", `42`},
		{"c6", "echo", `{"q": 2}`},
	}
	ws := []want{
		{"c1", "echo", "ok", ""},
		{"c2", "echo", "error", "arguments of echo are nested more than 10000 levels deep"},
		{"c3", "echo", "error", "arguments of echo must be a JSON object, not a string"},
		{"c4", "echo", "error", "arguments of echo must be a JSON object, not an array"},
		{"c5", "echo", "error", "arguments of echo must be a JSON object, not a number"},
		{"c6", "echo", "ok", ""},
	}
	run := func(t *testing.T, path string, ws []want) {
		t.Helper()
		code, out, stderr := runBin(t, "batch", "--local", "--json", "--tools", d.tools, "--calls", path)
		if code != 0 || stderr != "" {
			t.Fatalf("batch = %d, stderr %q; want 0 and nothing", code, stderr)
		}
		got := decodeBatch(t, out)
		checkOutcomes(t, got, ws)
		if got[0].Output != `{"q": 1}` || got[5].Output != `{"q": 2}` {
			t.Errorf("outputs %q, %q; want the good calls' arguments", got[0].Output, got[5].Output)
		}
	}
	t.Run("anthropic", func(t *testing.T) {
		// Built by hand: encoding/json refuses to write the deep input.
		blocks := []string{`{"type": "text", "text": "Running."}`}
		for _, c := range calls {
			blocks = append(blocks, fmt.Sprintf(`{"type": "tool_use", "id": %q, "name": %q, "input": %s}`, c.id, c.tool, c.args))
		}
		path := filepath.Join(d.dir, "anthropic.json")
		writeFile(t, path, `{"role": "assistant", "content": [`+strings.Join(blocks, ",")+`]}`, 0o644)
		run(t, path, ws)
	})
	for _, format := range []string{"openai-chat", "openai-responses"} {
		t.Run(format, func(t *testing.T) { run(t, d.calls(t, format, calls...), ws) })
	}
	t.Run("openai-chat arguments as values", func(t *testing.T) {
		var tcs []string
		for _, c := range calls {
			tcs = append(tcs, fmt.Sprintf(`{"id": %q, "type": "function", "function": {"name": %q, "arguments": %s}}`, c.id, c.tool, c.args))
		}
		path := filepath.Join(d.dir, "values.json")
		writeFile(t, path, `{"choices": [{"message": {"tool_calls": [`+strings.Join(tcs, ",")+`]}}]}`, 0o644)
		values := slices.Clone(ws)
		values[2].err = "arguments of echo are not JSON" // a string value holds the arguments' JSON text
		run(t, path, values)
	})
	t.Run("a response cut short is unreadable as a whole", func(t *testing.T) {
		path := filepath.Join(d.dir, "cut.json")
		writeFile(t, path, response(t, "openai-chat", calls...)[:1000], 0o644)
		code, out, stderr := runBin(t, "batch", "--local", "--json", "--tools", d.tools, "--calls", path)
		if code != exitDataErr || out != "" || !strings.Contains(stderr, "not JSON") {
			t.Errorf("batch = %d, %q, stderr %q; want %d, nothing, not JSON", code, out, stderr, exitDataErr)
		}
		assertJSONError(t, stderr, "data_error", exitDataErr) // --json: the error as JSON
	})
}
