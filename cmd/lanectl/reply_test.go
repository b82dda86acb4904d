package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The tests of `batch --reply` run the lanectl binary on the tools of
// batch_test.go, with --local, and against miniredis and the real Redis
// server where lanes span processes.

// replyItem is one item of a reply in any of the three forms: an
// Anthropic message (role, content blocks), a Chat tool message or a
// Responses item.
type replyItem struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	Type       string          `json:"type"`
	CallID     string          `json:"call_id"`
	Output     string          `json:"output"`
}

// anthropicResult is one tool_result block.
type anthropicResult struct {
	Type      string `json:"type"`
	ToolUseID string `json:"tool_use_id"`
	Content   string `json:"content"`
	IsError   bool   `json:"is_error"`
}

// answerText is one answer of a reply, whatever its form: the id it answers,
// its text and, for Anthropic, is_error.
type answerText struct {
	id, text string
	isError  bool
}

// decodeReply reads the reply lanectl printed in format into its answers,
// in order, failing t unless the reply has the form's shape.
func decodeReply(t *testing.T, format, out string) []answerText {
	t.Helper()
	var items []replyItem
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&items); err != nil {
		t.Fatalf("batch --reply printed %q: %v", out, err)
	}
	var got []answerText
	switch format {
	case "anthropic":
		if len(items) == 0 {
			return nil
		}
		if len(items) != 1 || items[0].Role != "user" {
			t.Fatalf("reply = %s; want one user message", out)
		}
		var blocks []anthropicResult
		d := json.NewDecoder(bytes.NewReader(items[0].Content))
		d.DisallowUnknownFields()
		if err := d.Decode(&blocks); err != nil {
			t.Fatalf("reply content %s: %v", items[0].Content, err)
		}
		for _, b := range blocks {
			if b.Type != "tool_result" {
				t.Errorf("block type %q; want tool_result", b.Type)
			}
			got = append(got, answerText{b.ToolUseID, b.Content, b.IsError})
		}
	case "openai-chat":
		for _, it := range items {
			var text string
			if it.Role != "tool" || json.Unmarshal(it.Content, &text) != nil {
				t.Fatalf("reply item %+v; want a tool message with a string content", it)
			}
			got = append(got, answerText{it.ToolCallID, text, false})
		}
	case "openai-responses":
		for _, it := range items {
			if it.Type != "function_call_output" {
				t.Fatalf("reply item %+v; want a function_call_output", it)
			}
			got = append(got, answerText{it.CallID, it.Output, false})
		}
	}
	return got
}

// checkReply fails t unless got answers the ids of ws in order, each text
// starting with the wanted prefix and, in Anthropic's form, flagged as an
// error when wanted.
func checkReply(t *testing.T, format string, got []answerText, ws []answerText) {
	t.Helper()
	if len(got) != len(ws) {
		t.Fatalf("reply has %d results; want %d: %+v", len(got), len(ws), got)
	}
	for i, w := range ws {
		g := got[i]
		if g.id != w.id || !strings.HasPrefix(g.text, w.text) {
			t.Errorf("result %d = %s %q; want %s %q...", i, g.id, g.text, w.id, w.text)
		}
		if format == "anthropic" && g.isError != w.isError {
			t.Errorf("result %d (%s) is_error = %v; want %v", i, g.id, g.isError, w.isError)
		}
	}
}

// TestBatchReplyFormats: in each form, the reply answers every call in
// call order: an ok call with its output, an unknown tool and a failed
// tool with the failure's text (is_error in Anthropic's form).
func TestBatchReplyFormats(t *testing.T) {
	for _, format := range []string{"anthropic", "openai-chat", "openai-responses"} {
		t.Run(format, func(t *testing.T) {
			d := newBatchDir(t, "")
			file := d.calls(t, format, toolCall{"c1", "echo", `{"q":"first"}`}, toolCall{"c2", "nope", `{}`},
				toolCall{"c3", "fail", `{}`}, toolCall{"c4", "echo", `{"q":"last"}`})
			code, out, stderr := runBin(t, "batch", "--local", "--tools", d.tools, "--calls", file, "--reply")
			if code != 0 || stderr != "" {
				t.Fatalf("batch --reply = %d, stderr %q; want 0 and nothing", code, stderr)
			}
			checkReply(t, format, decodeReply(t, format, out), []answerText{
				{"c1", `{"q":"first"}`, false},
				{"c2", `The call failed: unknown tool "nope"`, true},
				{"c3", "The call failed: exit status 4: boom: c3", true},
				{"c4", `{"q":"last"}`, false},
			})
		})
	}
}

// TestBatchReplyJSON: --reply --json prints {"reply", "outcomes"}: the
// same reply as --reply, and the outcomes as --json prints them.
func TestBatchReplyJSON(t *testing.T) {
	d := newBatchDir(t, "")
	file := d.calls(t, "openai-chat", toolCall{"c1", "echo", `{"q":1}`}, toolCall{"c2", "fail", `{}`})
	code, out, stderr := runBin(t, "batch", "--local", "--tools", d.tools, "--calls", file, "--reply", "--json")
	if code != 0 {
		t.Fatalf("batch --reply --json = %d, stderr %q; want 0", code, stderr)
	}
	var got struct {
		Reply    json.RawMessage `json:"reply"`
		Outcomes []batchJSON     `json:"outcomes"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("batch --reply --json printed %q: %v", out, err)
	}
	checkOutcomes(t, got.Outcomes, []want{{"c1", "echo", "ok", ""}, {"c2", "fail", "error", "boom: c2"}})
	checkReply(t, "openai-chat", decodeReply(t, "openai-chat", string(got.Reply)), []answerText{
		{"c1", `{"q":1}`, false}, {"c2", "The call failed: exit status 4: boom: c2", true},
	})
	_, alone, _ := runBin(t, "batch", "--local", "--tools", d.tools, "--calls", file, "--reply")
	var a, b bytes.Buffer
	if json.Compact(&a, got.Reply) != nil || json.Compact(&b, []byte(alone)) != nil || a.String() != b.String() {
		t.Errorf("--reply --json's reply = %s; --reply alone printed %s", got.Reply, alone)
	}
}

// TestBatchReplyNoCalls: a response without a tool call (the model's last
// answer, whole, with usage and stop reason) gets an empty reply and exit
// 0, without Redis: none answers at the URL given.
func TestBatchReplyNoCalls(t *testing.T) {
	d := newBatchDir(t, "")
	final := filepath.Join(d.dir, "final.json")
	writeFile(t, final, `{"id":"msg_9","type":"message","role":"assistant","model":"claude-sonnet-4-5",
		"content":[{"type":"text","text":"RFD 8 is now RFD 11."}],"stop_reason":"end_turn","stop_sequence":null,
		"usage":{"input_tokens":812,"output_tokens":14}}`, 0o644)
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{nil, "[]\n"},
		{[]string{"--json"}, "{\n  \"reply\": [],\n  \"outcomes\": []\n}\n"},
	} {
		args := append([]string{"--redis", "redis://127.0.0.1:1", "batch", "--tools", d.tools, "--calls", final, "--reply"}, tc.flags...)
		code, out, stderr := runBin(t, args...)
		if code != 0 || out != tc.want || stderr != "" {
			t.Errorf("lanectl %q = %d, %q, stderr %q; want 0, %q", args, code, out, stderr, tc.want)
		}
	}
}

// TestBatchReplyWording: the [reply] table of --tools replaces a text; a
// run cut by --deadline answers the call in flight indeterminate and the
// one after it never dispatched, each with its text.
func TestBatchReplyWording(t *testing.T) {
	d := newBatchDir(t, `
[reply]
never_dispatched = "SKIPPED {tool} ({code}): {error}"
`)
	file := d.calls(t, "anthropic", toolCall{"c1", "slow", `{}`}, toolCall{"c2", "echo", `{}`})
	code, out, stderr := runBin(t, "batch", "--local", "--deadline", "300ms", "--tools", d.tools, "--calls", file, "--reply")
	if code != 0 {
		t.Fatalf("batch --reply --deadline = %d, stderr %q; want 0", code, stderr)
	}
	checkReply(t, "anthropic", decodeReply(t, "anthropic", out), []answerText{
		{"c1", "Cut off before it finished: cancelled in flight (the run's --deadline of 300ms passed). It may have taken effect", true},
		{"c2", "SKIPPED echo (TOOL_NEVER_DISPATCHED): never dispatched: the run's --deadline of 300ms passed", true},
	})
}

// TestBatchReplyBadInput: --reply's own mistakes get one line and their
// exit code, before anything runs.
func TestBatchReplyBadInput(t *testing.T) {
	d := newBatchDir(t, "")
	bad := newBatchDir(t, "\n[reply]\nerror = \"{why}\"\n")
	file := d.calls(t, "anthropic", toolCall{"c1", "echo", `{}`})
	cp := filepath.Join(d.dir, "cp.json")
	writeFile(t, cp, `{"run_id":"r","runner":{},"calls":[{"id":"x1","tool":"echo","args":{}}],"outcomes":[{"call_id":"x1","tool":"echo","status":""}]}`, 0o600)
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--tools", d.tools, "--resume", cp, "--reply"}, exitUsage, "--reply with --resume needs --calls FILE"},
		{[]string{"--tools", bad.tools, "--calls", file, "--reply"}, exitDataErr, bad.tools + ": reply.error: unknown placeholder {why}"},
		{[]string{"--tools", d.tools, "--resume", cp, "--calls", file, "--reply"}, exitDataErr, "is not the response of the checkpoint " + cp + ": call 0 is c1 echo, in the checkpoint x1 echo"},
	} {
		code, out, stderr := runInProcess(t, append([]string{"batch", "--local"}, tc.args...)...)
		assertOneLine(t, stderr)
		if code != tc.code || out != "" || !strings.Contains(stderr, tc.msg) {
			t.Errorf("batch %q = %d, %q, stderr %q; want %d and %q", tc.args, code, out, stderr, tc.code, tc.msg)
		}
	}
}

// TestBatchReplyPauseAndResume: a paused batch's reply answers the call
// it did not run "paused"; --resume with --calls (the response) and
// --reply answers every call, the one run before the pause from the
// checkpoint, without running it again.
func TestBatchReplyPauseAndResume(t *testing.T) {
	dir := t.TempDir()
	log, gate, cp := filepath.Join(dir, "exec.log"), filepath.Join(dir, "gate"), filepath.Join(dir, "checkpoint.json")
	d := newBatchDir(t, fmt.Sprintf(`
[runner]
max_concurrent_tools = 1

[tools.read]
command = ["sh", "-c", %q, "sh", %q, %q, "c1"]
read_only_hint = true
`, gateScript, log, gate))
	file := d.calls(t, "openai-responses", toolCall{"c1", "read", `{}`}, toolCall{"c2", "read", `{}`})
	flags := []string{"batch", "--local", "--reply", "--run-id", "paused-reply", "--tools", d.tools, "--checkpoint", cp, "--calls", file}
	p := startBin(t, flags...)
	eventually(t, "c1 runs", func() bool { return countLines(t, log, "start c1") == 1 })
	p.signal(t, syscall.SIGUSR1)
	writeFile(t, gate, "", 0o644)
	if code := p.wait(t); code != 0 {
		t.Fatalf("paused batch = %d, stderr %q; want 0", code, p.stderr)
	}
	checkReply(t, "openai-responses", decodeReply(t, "openai-responses", p.stdout.String()), []answerText{
		{"c1", "did c1", false}, {"c2", "Paused: not run yet: the batch paused", true},
	})
	code, out, stderr := runBin(t, append(flags, "--resume", cp)...)
	if code != 0 {
		t.Fatalf("batch --resume --reply = %d, stderr %q; want 0", code, stderr)
	}
	checkReply(t, "openai-responses", decodeReply(t, "openai-responses", out), []answerText{{"c1", "did c1", false}, {"c2", "did c2", false}})
	if n := countLines(t, log, "start c1"); n != 1 {
		t.Errorf("c1 executed %d times; want once (log %q)", n, logLines(t, log))
	}
}

// TestBatchReplyAcrossProcesses: against miniredis and the real Redis
// server, two batches started at once share the rfd lane; each reply
// answers its own calls, with the outputs its tools wrote, and no entry is
// left.
func TestBatchReplyAcrossProcesses(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		d := newBatchDir(t, "")
		a := d.calls(t, "anthropic", toolCall{"a1", "rfd_renumber", `{"rfd":8}`}, toolCall{"a2", "echo", `{"q":"a"}`})
		b := filepath.Join(d.dir, "b.json")
		writeFile(t, b, response(t, "openai-chat", toolCall{"b1", "rfd_renumber", `{"rfd":7}`}), 0o644)
		pa := startBin(t, s.args("batch", "--tools", d.tools, "--calls", a, "--reply")...)
		pb := startBin(t, s.args("batch", "--tools", d.tools, "--calls", b, "--reply")...)
		if ca, cb := pa.wait(t), pb.wait(t); ca != 0 || cb != 0 {
			t.Fatalf("batches = %d, %d, stderr %q, %q; want 0, 0", ca, cb, pa.stderr, pb.stderr)
		}
		checkReply(t, "anthropic", decodeReply(t, "anthropic", pa.stdout.String()), []answerText{{"a1", `{"rfd":8}`, false}, {"a2", `{"q":"a"}`, false}})
		checkReply(t, "openai-chat", decodeReply(t, "openai-chat", pb.stdout.String()), []answerText{{"b1", `{"rfd":7}`, false}})
		if n := len(logLines(t, d.log)); n != 2 {
			t.Errorf("rfd log has %d lines; want 2 (one per rfd call): %q", n, logLines(t, d.log))
		}
		s.assertEmpty(t)
	})
}

// TestBatchReplyUnanswered: an OpenAI Responses item the reply cannot
// answer (a computer_call) is named on standard error; the function calls
// are answered.
func TestBatchReplyUnanswered(t *testing.T) {
	d := newBatchDir(t, "")
	file := filepath.Join(d.dir, "computer.json")
	writeFile(t, file, `{"object":"response","output":[
		{"type":"computer_call","id":"cu_1","call_id":"call_cu","action":{"type":"screenshot"},"status":"completed"},
		{"type":"function_call","call_id":"c1","name":"echo","arguments":"{\"q\":2}"}]}`, 0o644)
	code, out, stderr := runBin(t, "batch", "--local", "--tools", d.tools, "--calls", file, "--reply")
	if code != 0 {
		t.Fatalf("batch --reply = %d, stderr %q; want 0", code, stderr)
	}
	checkReply(t, "openai-responses", decodeReply(t, "openai-responses", out), []answerText{{"c1", `{"q":2}`, false}})
	if want := "lanectl: warning: output[0]: a computer_call: --reply cannot answer it"; !strings.HasPrefix(stderr, want) || strings.Count(stderr, "\n") != 1 {
		t.Errorf("stderr = %q; want one line starting %q", stderr, want)
	}
}
