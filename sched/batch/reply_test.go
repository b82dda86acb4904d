package batch_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lanes-dev/lanes/sched"
	"github.com/lanes-dev/lanes/sched/batch"
)

// replyOutcomes are the outcomes of the three calls of testdata/reply's
// responses: read_file ok, touch ok without output, rfd_renumber cut off.
func replyOutcomes() []sched.Outcome {
	return []sched.Outcome{
		{Status: sched.OK, Output: "# A <draft> & more\n"},
		{Status: sched.OK},
		{Status: sched.Indeterminate, Code: sched.CodeIndeterminate, Err: errors.New("cancelled in flight (deadline)")},
	}
}

func readResponse(t *testing.T, name string) *batch.Response {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "reply", name))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := batch.ReadResponse(data)
	if err != nil {
		t.Fatalf("ReadResponse(%s) = %v", name, err)
	}
	return resp
}

// TestReplyWholeResponses reads each provider's whole reply object (text,
// thinking, reasoning, usage, stop reason around the calls) and checks the
// reply, byte for byte: one result per call in the response's order, a
// custom tool's call answered without running.
func TestReplyWholeResponses(t *testing.T) {
	const (
		okText    = `# A <draft> & more\n`
		emptyText = `The call succeeded and wrote no output.`
		cutText   = `Cut off before it finished: cancelled in flight (deadline). It may have taken effect: check before calling it again.`
		customTxt = `The call failed: a custom tool's call (free-form input, not JSON arguments); lanectl batch runs function tools only`
	)
	for _, tc := range []struct {
		file   string
		format batch.Format
		want   string
	}{
		{"anthropic.json", batch.Anthropic, `[{"role":"user","content":[` +
			`{"type":"tool_result","tool_use_id":"toolu_01A","content":"` + okText + `"},` +
			`{"type":"tool_result","tool_use_id":"toolu_01B","content":"` + emptyText + `"},` +
			`{"type":"tool_result","tool_use_id":"toolu_01C","content":"` + cutText + `","is_error":true}]}]`},
		{"openai-chat.json", batch.OpenAIChat, `[` +
			`{"role":"tool","tool_call_id":"call_A","content":"` + okText + `"},` +
			`{"role":"tool","tool_call_id":"call_B","content":"` + emptyText + `"},` +
			`{"role":"tool","tool_call_id":"call_X","content":"` + customTxt + `"},` +
			`{"role":"tool","tool_call_id":"call_C","content":"` + cutText + `"}]`},
		{"openai-responses.json", batch.OpenAIResponses, `[` +
			`{"type":"function_call_output","call_id":"call_A","output":"` + okText + `"},` +
			`{"type":"function_call_output","call_id":"call_B","output":"` + emptyText + `"},` +
			`{"type":"custom_tool_call_output","call_id":"call_X","output":"` + customTxt + `"},` +
			`{"type":"function_call_output","call_id":"call_C","output":"` + cutText + `"}]`},
	} {
		t.Run(tc.file, func(t *testing.T) {
			resp := readResponse(t, tc.file)
			if resp.Format != tc.format || len(resp.Calls) != 3 {
				t.Fatalf("ReadResponse() = %s with %d calls; want %s with 3", resp.Format, len(resp.Calls), tc.format)
			}
			got, err := resp.Reply(replyOutcomes(), batch.DefaultWording())
			if err != nil {
				t.Fatalf("Reply() = %v", err)
			}
			if string(got) != tc.want {
				t.Errorf("Reply() =\n%s\nwant\n%s", got, tc.want)
			}
			if len(resp.Unanswered) != 0 {
				t.Errorf("Unanswered = %q; want none", resp.Unanswered)
			}
		})
	}
}

// TestReplyNoCalls: a response without a tool call (a final answer) has an
// empty reply in every form.
func TestReplyNoCalls(t *testing.T) {
	for _, in := range []string{
		`{"type":"message","role":"assistant","content":[{"type":"text","text":"Done."}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":2}}`,
		`{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Done.","refusal":null},"finish_reason":"stop"}],"usage":{"total_tokens":7}}`,
		`{"object":"chat.completion","choices":[]}`,
		`{"object":"response","status":"completed","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Done."}]}]}`,
	} {
		resp, err := batch.ReadResponse([]byte(in))
		if err != nil {
			t.Fatalf("ReadResponse(%s) = %v", in, err)
		}
		got, err := resp.Reply(nil, batch.DefaultWording())
		if err != nil || string(got) != "[]" {
			t.Errorf("Reply() of %s = %s, %v; want [], nil", in, got, err)
		}
	}
}

// TestReplyEveryStatus: each status gets its own text, is_error is set
// for every one but ok, and the output a failed call wrote follows its
// text.
func TestReplyEveryStatus(t *testing.T) {
	outcomes := []sched.Outcome{
		{Status: sched.OK, Output: "fine"},
		{Status: sched.Failed, Code: sched.CodeToolError, Err: errors.New("exit status 2: no such file"), Output: "partial"},
		{Status: sched.TimedOut, Code: sched.CodeTimeout, Err: errors.New("tool t timed out: it ran past its ceiling of 1s")},
		{Status: sched.NeverDispatched, Code: sched.CodeNeverStarted, Err: errors.New("never dispatched: the run's --deadline of 1s passed")},
		{Status: sched.SafeToRetry, Code: sched.CodeSafeToRetry, Err: errors.New("cancelled in flight (lease lost)")},
		{Status: sched.Indeterminate, Code: sched.CodeIndeterminate, Err: errors.New("it was in flight when the run that started it stopped: not run again")},
		{Status: sched.Interrupted, Code: sched.CodeInterrupted, Err: errors.New("not run yet: the batch paused")},
		{Status: sched.OK, Code: sched.CodeOutputNotStored, Stored: true},
		{}, // never settled: read as never dispatched
	}
	want := []struct {
		text    string
		isError bool
	}{
		{"fine", false},
		{"The call failed: exit status 2: no such file\n\npartial", true},
		{"The call ran past its time limit and was stopped: tool t timed out: it ran past its ceiling of 1s. It may have taken effect in part: check before calling it again.", true},
		{"Not run: never dispatched: the run's --deadline of 1s passed. Nothing was done; you may call it again.", true},
		{"Cut off before it finished: cancelled in flight (lease lost). The tool is idempotent: it is safe to call it again.", true},
		{"Cut off before it finished: it was in flight when the run that started it stopped: not run again. It may have taken effect: check before calling it again.", true},
		{"Paused: not run yet: the batch paused. Do not call it again until the run resumes.", true},
		{"The call succeeded in an earlier attempt, but its output was too large to keep and is lost. Call it again only if repeating it is safe.", false},
		{"Not run: not run. Nothing was done; you may call it again.", true},
	}
	var content []string
	for i := range outcomes {
		content = append(content, `{"type":"tool_use","id":"t`+string(rune('0'+i))+`","name":"x","input":{}}`)
	}
	resp, err := batch.ReadResponse([]byte(`{"content":[` + strings.Join(content, ",") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := resp.Reply(outcomes, batch.DefaultWording())
	if err != nil {
		t.Fatal(err)
	}
	var msgs []struct {
		Role    string `json:"role"`
		Content []struct {
			Type      string `json:"type"`
			ToolUseID string `json:"tool_use_id"`
			Content   string `json:"content"`
			IsError   bool   `json:"is_error"`
		} `json:"content"`
	}
	if err := json.Unmarshal(raw, &msgs); err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].Role != "user" || len(msgs[0].Content) != len(want) {
		t.Fatalf("Reply() = %s; want one user message with %d results", raw, len(want))
	}
	for i, b := range msgs[0].Content {
		if b.Type != "tool_result" || b.ToolUseID != "t"+string(rune('0'+i)) || b.Content != want[i].text || b.IsError != want[i].isError {
			t.Errorf("result %d = %+v; want tool_result t%d, %q, is_error %v", i, b, i, want[i].text, want[i].isError)
		}
	}
}

// TestReplyFannedOut: a fanned-out call that did not end ok tells each
// operation's status, so the model knows which took effect.
func TestReplyFannedOut(t *testing.T) {
	o := sched.Outcome{Status: sched.Failed, Code: sched.CodeToolError, Err: errors.New("exit status 1: gone"), Output: `["deleted a",""]`,
		Operations: []sched.Outcome{
			{Status: sched.OK, Output: "deleted a"},
			{Status: sched.Failed, Code: sched.CodeToolError, Err: errors.New("exit status 1: gone")},
			{Status: sched.NeverDispatched, Code: sched.CodeNeverStarted, Err: errors.New("never dispatched: an earlier operation of call c failed")},
		}}
	got, isError := batch.DefaultWording().Text(o)
	want := "The call failed: exit status 1: gone\n\nOperations, in written order:\n#0 ok\n#1 error: exit status 1: gone\n" +
		"#2 never_dispatched: never dispatched: an earlier operation of call c failed\n\n[\"deleted a\",\"\"]"
	if got != want || !isError {
		t.Errorf("Text() = %q, %v; want %q, true", got, isError, want)
	}
}

// TestReplyNeverFewer: outcomes that do not match the calls are refused,
// never answered in part.
func TestReplyNeverFewer(t *testing.T) {
	resp := readResponse(t, "anthropic.json")
	if _, err := resp.Reply(replyOutcomes()[:2], batch.DefaultWording()); err == nil {
		t.Error("Reply() with 2 outcomes for 3 calls = nil; want an error")
	}
}

// TestReplyUnanswered: Responses items the reply cannot answer are named,
// so the runner can answer them.
func TestReplyUnanswered(t *testing.T) {
	resp, err := batch.ReadResponse([]byte(`{"output":[
		{"type":"web_search_call","id":"ws_1","status":"completed"},
		{"type":"computer_call","id":"cu_1","call_id":"call_cu","action":{"type":"screenshot"}},
		{"type":"function_call","call_id":"call_1","name":"x","arguments":""}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"output[1]: a computer_call"}; !reflect.DeepEqual(resp.Unanswered, want) {
		t.Errorf("Unanswered = %q; want %q", resp.Unanswered, want)
	}
	got, err := resp.Reply([]sched.Outcome{{Status: sched.OK, Output: "1"}}, batch.DefaultWording())
	if want := `[{"type":"function_call_output","call_id":"call_1","output":"1"}]`; err != nil || string(got) != want {
		t.Errorf("Reply() = %s, %v; want %s", got, err, want)
	}
}

// TestReplyBadCustomCall: a custom tool's call with a field of the wrong
// type is an error naming it, on one line.
func TestReplyBadCustomCall(t *testing.T) {
	for in, want := range map[string]string{
		`{"choices":[{"message":{"tool_calls":[{"type":"custom","id":7,"custom":{"name":"sql"}}]}}]}`: "choices[0].message.tool_calls[0].id must be a string",
		`{"choices":[{"message":{"tool_calls":[{"type":"custom","id":"c","custom":[]}]}}]}`:           "choices[0].message.tool_calls[0].custom must be an object",
		`{"output":[{"type":"custom_tool_call","call_id":{},"name":"sql"}]}`:                          "output[0].call_id must be a string",
	} {
		_, err := batch.ReadResponse([]byte(in))
		assertOneLine(t, err)
		if err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("ReadResponse(%s) = %v; want it to name %q", in, err, want)
		}
	}
}

// TestWordingFromTOML: the [reply] table replaces the texts it names, the
// others keep their default, and ParseConfig accepts it.
func TestWordingFromTOML(t *testing.T) {
	file := []byte(`
[tools.x]
command = ["true"]

[reply]
never_dispatched = "SKIPPED {tool} ({code}): {error}"
error = "FAILED: {error}\n{output}"
`)
	if _, err := batch.ParseConfig(file, ""); err != nil {
		t.Fatalf("ParseConfig() = %v", err)
	}
	w, err := batch.ParseWording(file)
	if err != nil {
		t.Fatalf("ParseWording() = %v", err)
	}
	got, _ := w.Text(sched.Outcome{Tool: "x", Status: sched.NeverDispatched, Code: sched.CodeNeverStarted, Err: errors.New("why")})
	if want := "SKIPPED x (TOOL_NEVER_DISPATCHED): why"; got != want {
		t.Errorf("never_dispatched text = %q; want %q", got, want)
	}
	got, _ = w.Text(sched.Outcome{Status: sched.Failed, Err: errors.New("boom"), Output: "out {error}"})
	if want := "FAILED: boom\nout {error}"; got != want { // {output} placed once; what it put in is not read again
		t.Errorf("error text = %q; want %q", got, want)
	}
	if w.Indeterminate != batch.DefaultWording().Indeterminate {
		t.Errorf("indeterminate = %q; want the default", w.Indeterminate)
	}
	if err := w.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
}

// TestWordingTOMLErrors: a bad [reply] fails ParseConfig (and
// ParseWording) with one line naming the key.
func TestWordingTOMLErrors(t *testing.T) {
	for body, want := range map[string]string{
		`never_dispatched = "Not run: {reason}"`: `reply.never_dispatched: unknown placeholder {reason} (known: {tool}, {error}, {code}, {output})`,
		`error = "  "`:                           `reply.error: is empty`,
		`timed_out = 3`:                          `reply.timed_out: must be a string, not the integer 3`,
		`indeterminat = "x"`:                     `reply.indeterminat: unknown key (did you mean indeterminate?)`,
	} {
		file := []byte("[tools.x]\ncommand = [\"true\"]\n\n[reply]\n" + body + "\n")
		_, err := batch.ParseConfig(file, "")
		assertOneLine(t, err)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseConfig(%s) = %v; want %q", body, err, want)
		}
		if !errors.Is(err, sched.ErrConfig) {
			t.Errorf("ParseConfig(%s) = %v; want errors.Is(err, sched.ErrConfig)", body, err)
		}
	}
	if _, err := batch.ParseConfig([]byte("reply = 1\n"), ""); err == nil || !strings.Contains(err.Error(), "reply: must be a table") {
		t.Errorf("ParseConfig(reply = 1) = %v; want reply: must be a table", err)
	}
	if _, err := batch.ParseWording([]byte("[reply]\nerror = \"{x}\"\n")); err == nil || !strings.Contains(err.Error(), "reply.error: unknown placeholder {x}") {
		t.Errorf("ParseWording() = %v; want the placeholder named", err)
	}
}

// TestLoadWordingNamesTheFile: LoadWording's errors start with the path.
func TestLoadWordingNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tools.toml")
	if err := os.WriteFile(path, []byte("[reply]\nerror = \"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := batch.LoadWording(path)
	assertOneLine(t, err)
	if err == nil || !strings.HasPrefix(err.Error(), path+": reply.error") {
		t.Errorf("LoadWording() = %v; want it to start with %s: reply.error", err, path)
	}
	if _, err := batch.LoadWording(path + ".missing"); err == nil || !strings.Contains(err.Error(), "cannot read") {
		t.Errorf("LoadWording(missing) = %v; want cannot read", err)
	}
}

// TestReadmeWordingTable: the README's table of texts is DefaultWording,
// every key of it, and its [reply] example parses.
func TestReadmeWordingTable(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(data), "| status | key | default text |\n")
	if !ok {
		t.Fatal("README.md has no table of the reply's texts")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	d := batch.DefaultWording()
	want := map[string]string{
		"error": d.Error, "timed_out": d.TimedOut, "never_dispatched": d.NeverDispatched, "safe_to_retry": d.SafeToRetry,
		"indeterminate": d.Indeterminate, "interrupted": d.Interrupted, "no_output": d.NoOutput, "output_not_stored": d.OutputNotStored,
	}
	seen := map[string]bool{}
	for _, row := range strings.Split(table, "\n")[1:] { // past the |---| line
		cells := strings.Split(strings.Trim(row, "|"), "|")
		if len(cells) != 3 {
			t.Fatalf("README row %q; want 3 cells", row)
		}
		key, text := strings.Trim(strings.TrimSpace(cells[1]), "`"), strings.TrimSpace(cells[2])
		if w, ok := want[key]; !ok || w != text {
			t.Errorf("README: %s = %q; DefaultWording has %q", key, text, w)
		}
		seen[key] = true
	}
	if len(seen) != len(want) {
		t.Errorf("README's table has %d keys; want %d", len(seen), len(want))
	}
	_, example, _ := strings.Cut(string(data), "```toml\n[reply]\n")
	example, _, _ = strings.Cut(example, "```")
	w, err := batch.ParseWording([]byte("[reply]\n" + example))
	if err != nil || w.NeverDispatched == d.NeverDispatched {
		t.Errorf("README's [reply] example: %v, never_dispatched %q; want it parsed and replaced", err, w.NeverDispatched)
	}
}
