package replyoracle_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/lanes-dev/lanes/sched"
	"github.com/lanes-dev/lanes/sched/batch"
)

// The round trip of each form: the provider's whole response, as its API
// returns it (../../testdata/reply), parsed by the provider's SDK as its
// response type; the reply lanectl writes for it parsed by the SDK as the
// request's message type, nothing dropped; and a request for the next
// turn built by the SDK from the response and the reply, whose JSON pairs
// every call with its result as the API requires.

// outcomes are the outcomes of the three function calls of each testdata
// response: ok (with characters HTML would escape), ok without output,
// cut off in flight.
func outcomes() []sched.Outcome {
	return []sched.Outcome{
		{Status: sched.OK, Output: "# A <draft> & \"more\"\n"},
		{Status: sched.OK},
		{Status: sched.Indeterminate, Code: sched.CodeIndeterminate, Err: errors.New("cancelled in flight (deadline)")},
	}
}

// wantText is what the reply says of each answer, by call id.
func wantText(t *testing.T) map[string]string {
	t.Helper()
	w := batch.DefaultWording()
	texts := map[string]string{}
	for i, id := range []string{"A", "B", "C"} {
		texts[id], _ = w.Text(outcomes()[i])
	}
	texts["X"], _ = w.Text(sched.Outcome{Status: sched.Failed, Code: sched.CodeUnknownTool, Err: errors.New("a custom tool's call (free-form input, not JSON arguments); lanectl batch runs function tools only")})
	return texts
}

// readTestdata returns a testdata response and its reply.
func readTestdata(t *testing.T, name string) (data []byte, reply json.RawMessage) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "reply", name))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := batch.ReadResponse(data)
	if err != nil {
		t.Fatalf("ReadResponse(%s) = %v", name, err)
	}
	reply, err = resp.Reply(outcomes(), batch.DefaultWording())
	if err != nil {
		t.Fatalf("Reply() = %v", err)
	}
	return data, reply
}

// keysKept fails t unless every field of each item of ours is in the
// SDK's encoding of the same item: a field the SDK does not know, which
// it drops, would not reach the API.
func keysKept(t *testing.T, ours json.RawMessage, sdk any) {
	t.Helper()
	b, err := json.Marshal(sdk)
	if err != nil {
		t.Fatalf("marshal the SDK's value: %v", err)
	}
	var a, s []map[string]json.RawMessage
	if err := json.Unmarshal(ours, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if len(a) != len(s) {
		t.Fatalf("the SDK read %d items of %d: %s", len(s), len(a), b)
	}
	for i := range a {
		for k := range a[i] {
			if _, ok := s[i][k]; !ok {
				t.Errorf("item %d: the SDK dropped %q: ours %s, the SDK's %s", i, k, ours, b)
			}
		}
	}
}

// TestAnthropicRoundTrip: the reply is one user message of tool_result
// blocks, as anthropic.MessageParam reads it, and follows the response's
// tool_use blocks in a MessageNewParams.
func TestAnthropicRoundTrip(t *testing.T) {
	data, reply := readTestdata(t, "anthropic.json")
	var msg anthropic.Message
	if err := json.Unmarshal(data, &msg); err != nil {
		t.Fatalf("the SDK cannot read the response: %v", err)
	}
	calls, _, _ := batch.ReadCalls(data)
	var uses []string
	for _, b := range msg.Content {
		if b.Type == "tool_use" {
			uses = append(uses, b.ID)
			if c := calls[len(uses)-1]; c.ID != b.ID || c.Tool != b.Name || string(c.Args) != string(b.Input) {
				t.Errorf("ReadCalls() call %d = %s %s %s; the SDK reads %s %s %s", len(uses)-1, c.ID, c.Tool, c.Args, b.ID, b.Name, b.Input)
			}
		}
	}
	if len(uses) != len(calls) {
		t.Fatalf("the SDK reads %d tool_use blocks, ReadCalls %d calls", len(uses), len(calls))
	}

	var params []anthropic.MessageParam
	if err := json.Unmarshal(reply, &params); err != nil {
		t.Fatalf("the SDK cannot read the reply %s: %v", reply, err)
	}
	keysKept(t, reply, params)
	if len(params) != 1 || params[0].OfUser == nil {
		t.Fatalf("reply %s; want one user message", reply)
	}
	texts := wantText(t)
	var ids []string
	for i, b := range params[0].OfUser.Content {
		r := b.OfToolResult
		if r == nil {
			t.Fatalf("block %d of %s is not a tool_result", i, reply)
		}
		ids = append(ids, r.ToolUseID)
		var text strings.Builder
		for _, c := range r.Content {
			if c.OfText == nil {
				t.Fatalf("result %d: content other than text: %s", i, reply)
			}
			text.WriteString(c.OfText.Text)
		}
		id := strings.TrimPrefix(r.ToolUseID, "toolu_01")
		if text.String() != texts[id] {
			t.Errorf("result %s text %q; want %q", r.ToolUseID, text.String(), texts[id])
		}
		if wantErr := id == "C"; r.IsError.Value != wantErr || r.IsError.Valid() != wantErr {
			t.Errorf("result %s is_error = %v (set %v); want %v", r.ToolUseID, r.IsError.Value, r.IsError.Valid(), wantErr)
		}
	}
	if !slices.Equal(ids, uses) {
		t.Errorf("reply answers %q; want the tool_use ids %q, in order", ids, uses)
	}

	req := anthropic.MessageNewParams{
		Model:     "claude-sonnet-4-5",
		MaxTokens: 1024,
		Messages:  append([]anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Renumber RFD 8 to 11."))}, msg.ToParam()),
	}
	req.Messages = append(req.Messages, params...)
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	// The API's rule: each tool_use block has its tool_result in the next
	// message, before anything else there.
	var wire struct {
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type      string `json:"type"`
				ID        string `json:"id"`
				ToolUseID string `json:"tool_use_id"`
			} `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &wire); err != nil {
		t.Fatal(err)
	}
	if len(wire.Messages) != 3 || wire.Messages[1].Role != "assistant" || wire.Messages[2].Role != "user" {
		t.Fatalf("request messages %s; want user, assistant, user", body)
	}
	var asked, answered []string
	for _, b := range wire.Messages[1].Content {
		if b.Type == "tool_use" {
			asked = append(asked, b.ID)
		}
	}
	for _, b := range wire.Messages[2].Content[:len(asked)] {
		if b.Type == "tool_result" {
			answered = append(answered, b.ToolUseID)
		}
	}
	if !slices.Equal(asked, answered) || len(wire.Messages[2].Content) != len(asked) {
		t.Errorf("request pairs tool_use %q with tool_result %q; want every one, in order: %s", asked, answered, body)
	}
}

// TestChatRoundTrip: the reply is one tool message per tool call, as
// openai.ChatCompletionMessageParamUnion reads them, and answers every
// tool_call_id of the completion's message in a ChatCompletionNewParams,
// the custom tool's call too.
func TestChatRoundTrip(t *testing.T) {
	data, reply := readTestdata(t, "openai-chat.json")
	var completion openai.ChatCompletion
	if err := json.Unmarshal(data, &completion); err != nil {
		t.Fatalf("the SDK cannot read the response: %v", err)
	}
	var asked []string
	for _, tc := range completion.Choices[0].Message.ToolCalls {
		asked = append(asked, tc.ID)
	}
	if len(asked) != 4 {
		t.Fatalf("the SDK reads %d tool calls; want 4", len(asked))
	}

	var params []openai.ChatCompletionMessageParamUnion
	if err := json.Unmarshal(reply, &params); err != nil {
		t.Fatalf("the SDK cannot read the reply %s: %v", reply, err)
	}
	keysKept(t, reply, params)
	texts := wantText(t)
	var answered []string
	for i, p := range params {
		m := p.OfTool
		if m == nil || !m.Content.OfString.Valid() {
			t.Fatalf("message %d of %s is not a tool message with a string content", i, reply)
		}
		answered = append(answered, m.ToolCallID)
		if id := strings.TrimPrefix(m.ToolCallID, "call_"); m.Content.OfString.Value != texts[id] {
			t.Errorf("message %s content %q; want %q", m.ToolCallID, m.Content.OfString.Value, texts[id])
		}
	}
	if !slices.Equal(asked, answered) {
		t.Errorf("reply answers %q; want the tool call ids %q, in order", answered, asked)
	}

	req := openai.ChatCompletionNewParams{
		Model:    "gpt-4.1",
		Messages: append([]openai.ChatCompletionMessageParamUnion{openai.UserMessage("Renumber RFD 8 to 11."), completion.Choices[0].Message.ToParam()}, params...),
	}
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	// The API's rule: an assistant message with tool_calls is followed by
	// a tool message for each tool_call_id.
	var wire struct {
		Messages []struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID string `json:"id"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &wire); err != nil {
		t.Fatal(err)
	}
	var wireAsked, wireAnswered []string
	for _, m := range wire.Messages {
		for _, tc := range m.ToolCalls {
			wireAsked = append(wireAsked, tc.ID)
		}
		if m.Role == "tool" {
			wireAnswered = append(wireAnswered, m.ToolCallID)
		}
	}
	if len(wire.Messages) != 2+len(asked) || wire.Messages[1].Role != "assistant" || !slices.Equal(wireAsked, wireAnswered) {
		t.Errorf("request asks %q and answers %q; want every tool call answered after the assistant message: %s", wireAsked, wireAnswered, body)
	}
}

// TestResponsesRoundTrip: the reply is one function_call_output item per
// function_call (a custom_tool_call_output for the custom tool's call), as
// responses.ResponseInputParam reads them, and in a ResponseNewParams
// whose input is the response's output then the reply, every call has its
// output.
func TestResponsesRoundTrip(t *testing.T) {
	data, reply := readTestdata(t, "openai-responses.json")
	var resp responses.Response
	if err := json.Unmarshal(data, &resp); err != nil {
		t.Fatalf("the SDK cannot read the response: %v", err)
	}
	var asked []string
	var input responses.ResponseInputParam
	for i, item := range resp.Output {
		if item.Type == "function_call" || item.Type == "custom_tool_call" {
			asked = append(asked, item.CallID)
		}
		var in responses.ResponseInputItemUnionParam
		if err := json.Unmarshal([]byte(item.RawJSON()), &in); err != nil {
			t.Fatalf("the SDK cannot read output[%d] as an input item: %v", i, err)
		}
		input = append(input, in)
	}
	if len(asked) != 4 {
		t.Fatalf("the SDK reads %d calls; want 4", len(asked))
	}

	var params responses.ResponseInputParam
	if err := json.Unmarshal(reply, &params); err != nil {
		t.Fatalf("the SDK cannot read the reply %s: %v", reply, err)
	}
	keysKept(t, reply, params)
	texts := wantText(t)
	var answered []string
	for i, p := range params {
		var id, text string
		switch {
		case p.OfFunctionCallOutput != nil && p.OfFunctionCallOutput.Output.OfString.Valid():
			id, text = p.OfFunctionCallOutput.CallID.Value, p.OfFunctionCallOutput.Output.OfString.Value
		case p.OfCustomToolCallOutput != nil && p.OfCustomToolCallOutput.Output.OfString.Valid():
			id, text = p.OfCustomToolCallOutput.CallID, p.OfCustomToolCallOutput.Output.OfString.Value
			if id != "call_X" {
				t.Errorf("custom_tool_call_output answers %s; want the custom tool's call, call_X", id)
			}
		default:
			t.Fatalf("item %d of %s is not a function_call_output or custom_tool_call_output with a string output", i, reply)
		}
		answered = append(answered, id)
		if text != texts[strings.TrimPrefix(id, "call_")] {
			t.Errorf("item %s output %q; want %q", id, text, texts[strings.TrimPrefix(id, "call_")])
		}
	}
	if !slices.Equal(asked, answered) {
		t.Errorf("reply answers %q; want the call ids %q, in order", answered, asked)
	}

	req := responses.ResponseNewParams{
		Model: "gpt-4.1",
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: append(input, params...)},
	}
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	// The API's rule: every function_call (custom_tool_call) of the input
	// has a function_call_output (custom_tool_call_output) after it.
	var wire struct {
		Input []struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
		} `json:"input"`
	}
	if err := json.Unmarshal(body, &wire); err != nil {
		t.Fatal(err)
	}
	open := map[string]string{}
	for _, it := range wire.Input {
		switch it.Type {
		case "function_call", "custom_tool_call":
			open[it.CallID] = it.Type + "_output"
		case "function_call_output", "custom_tool_call_output":
			if open[it.CallID] != it.Type {
				t.Errorf("request has a %s for %s, which is not an open call of that kind: %s", it.Type, it.CallID, body)
			}
			delete(open, it.CallID)
		}
	}
	if len(open) != 0 {
		t.Errorf("request leaves calls without output: %v: %s", open, body)
	}
}

// TestEveryStatusParses: a reply with every status (and an empty output,
// which Anthropic refuses as a tool_result's content) is read by each SDK,
// is_error set for every one but ok, no content empty.
func TestEveryStatusParses(t *testing.T) {
	all := []sched.Outcome{
		{Status: sched.OK, Output: "fine"},
		{Status: sched.OK},
		{Status: sched.Failed, Code: sched.CodeToolError, Err: errors.New("exit status 2")},
		{Status: sched.TimedOut, Code: sched.CodeTimeout, Err: errors.New("tool t timed out")},
		{Status: sched.NeverDispatched, Code: sched.CodeNeverStarted},
		{Status: sched.SafeToRetry, Code: sched.CodeSafeToRetry, Err: errors.New("cancelled in flight")},
		{Status: sched.Indeterminate, Code: sched.CodeIndeterminate, Err: errors.New("cancelled in flight")},
		{Status: sched.Interrupted, Code: sched.CodeInterrupted, Err: errors.New("paused")},
		{Status: sched.OK, Code: sched.CodeOutputNotStored, Stored: true},
	}
	var blocks, chat, items []string
	for i := range all {
		id := "c" + string(rune('a'+i))
		blocks = append(blocks, `{"type":"tool_use","id":"`+id+`","name":"x","input":{}}`)
		chat = append(chat, `{"id":"`+id+`","type":"function","function":{"name":"x","arguments":"{}"}}`)
		items = append(items, `{"type":"function_call","call_id":"`+id+`","name":"x","arguments":"{}"}`)
	}
	replyOf := func(in string) json.RawMessage {
		resp, err := batch.ReadResponse([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		reply, err := resp.Reply(all, batch.DefaultWording())
		if err != nil {
			t.Fatal(err)
		}
		return reply
	}

	reply := replyOf(`{"content":[` + strings.Join(blocks, ",") + `]}`)
	var am []anthropic.MessageParam
	if err := json.Unmarshal(reply, &am); err != nil || len(am) != 1 || am[0].OfUser == nil {
		t.Fatalf("anthropic: the SDK reads %s as %v, %v", reply, am, err)
	}
	for i, b := range am[0].OfUser.Content {
		r := b.OfToolResult
		if r == nil || len(r.Content) != 1 || r.Content[0].OfText == nil || r.Content[0].OfText.Text == "" {
			t.Fatalf("anthropic: result %d of %s: want a tool_result with a non-empty text", i, reply)
		}
		if wantErr := all[i].Status != sched.OK; r.IsError.Value != wantErr {
			t.Errorf("anthropic: result %d (%s) is_error = %v; want %v", i, all[i].Status, r.IsError.Value, wantErr)
		}
	}

	reply = replyOf(`{"choices":[{"message":{"role":"assistant","tool_calls":[` + strings.Join(chat, ",") + `]}}]}`)
	var cm []openai.ChatCompletionMessageParamUnion
	if err := json.Unmarshal(reply, &cm); err != nil || len(cm) != len(all) {
		t.Fatalf("chat: the SDK reads %s as %d messages, %v", reply, len(cm), err)
	}
	for i, m := range cm {
		if m.OfTool == nil || m.OfTool.Content.OfString.Value == "" {
			t.Errorf("chat: message %d of %s: want a tool message with a non-empty content", i, reply)
		}
	}

	reply = replyOf(`{"output":[` + strings.Join(items, ",") + `]}`)
	var ri responses.ResponseInputParam
	if err := json.Unmarshal(reply, &ri); err != nil || len(ri) != len(all) {
		t.Fatalf("responses: the SDK reads %s as %d items, %v", reply, len(ri), err)
	}
	for i, it := range ri {
		if it.OfFunctionCallOutput == nil || it.OfFunctionCallOutput.Output.OfString.Value == "" {
			t.Errorf("responses: item %d of %s: want a function_call_output with a non-empty output", i, reply)
		}
	}
}
