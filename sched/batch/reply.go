package batch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lanes-dev/lanes/sched"
)

// Response is one model response as a batch reads it: its form, the tool
// calls to run, and every call the message that answers it must answer.
// ReadResponse returns one; Reply writes that message.
type Response struct {
	Format Format
	// Calls are the calls to run, as ReadCalls returns them.
	Calls []sched.Call
	// Unanswered names the items of the response that call for an answer
	// the reply cannot give, one line each (`output[2]: a computer_call`):
	// an OpenAI Responses computer, shell, local shell or apply_patch call,
	// or an MCP approval request. The next request needs their answers
	// beside the reply; the runner gives them.
	Unanswered []string

	answers []answer
}

// answer is one call the reply answers, in the response's order: one of
// Calls, or a call batch does not run (a custom tool's call, answered
// never_dispatched).
type answer struct {
	id     string
	call   int    // index in Calls; -1 for a call that is not run
	tool   string // the name of a call that is not run
	custom bool   // a custom tool's call: answered with custom_tool_call_output in OpenAI Responses
}

// notRun is why a custom tool's call is answered without running.
const notRun = "a custom tool's call (free-form input, not JSON arguments); lanectl batch runs function tools only"

// unanswerable are the OpenAI Responses output items, run by the client,
// whose answer is not text: a reply cannot give it.
var unanswerable = map[string]bool{
	"computer_call": true, "local_shell_call": true, "shell_call": true,
	"apply_patch_call": true, "mcp_approval_request": true,
}

// ReadResponse reads one model response as ReadCalls does, with its error
// for JSON that is not one, and also what the message that answers it must
// answer: its tool calls, and in OpenAI's forms the calls of custom tools
// (free-form input), which are answered without running. The response may
// be the whole object the provider's API returns: text, thinking, usage
// and stop reason around the calls are left out.
func ReadResponse(data []byte) (*Response, error) {
	calls, format, err := ReadCalls(data)
	if err != nil {
		return nil, err
	}
	top, _ := objectMap(data)
	r := reader{top: top, format: format}
	resp := &Response{Format: format, Calls: calls}
	switch format {
	case Anthropic:
		err = r.anthropicAnswers(resp)
	case OpenAIChat:
		err = r.chatAnswers(resp)
	case OpenAIResponses:
		err = r.responsesAnswers(resp)
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// anthropicAnswers lists the tool_use blocks: Anthropic has no other call
// a client answers (server_tool_use and mcp_tool_use are answered by the
// server).
func (r reader) anthropicAnswers(resp *Response) error {
	for i := range resp.Calls {
		resp.answers = append(resp.answers, answer{id: resp.Calls[i].ID, call: i})
	}
	return nil
}

// chatAnswers lists choices[0].message.tool_calls[]: functions, which run,
// and custom tools' calls, which do not.
func (r reader) chatAnswers(resp *Response) error {
	choices, _ := r.list(r.top["choices"], "choices")
	if len(choices) == 0 {
		return nil
	}
	choice, _ := objectMap(choices[0])
	msg, _ := objectMap(choice["message"])
	items, _ := r.list(msg["tool_calls"], "choices[0].message.tool_calls")
	next := 0
	for i, raw := range items {
		path := fmt.Sprintf("choices[0].message.tool_calls[%d]", i)
		tc, _ := objectMap(raw)
		typ, _ := r.string(tc, "type", path)
		if typ == "" || typ == "function" {
			if next >= len(resp.Calls) {
				return errCallCount
			}
			resp.answers = append(resp.answers, answer{id: resp.Calls[next].ID, call: next})
			next++
			continue
		}
		a := answer{call: -1, custom: true, tool: typ + " tool"}
		var err error
		if a.id, err = r.string(tc, "id", path); err != nil {
			return err
		}
		if typ == "custom" && present(tc, "custom") {
			c, err := r.object(tc["custom"], path+".custom")
			if err != nil {
				return err
			}
			if a.tool, err = r.string(c, "name", path+".custom"); err != nil {
				return err
			}
		}
		resp.answers = append(resp.answers, a)
	}
	return nil
}

// responsesAnswers lists output[]'s function_call items, which run, and
// custom_tool_call items, which do not; the items a reply cannot answer go
// to Unanswered.
func (r reader) responsesAnswers(resp *Response) error {
	items, _ := r.list(r.top["output"], "output")
	next := 0
	for i, raw := range items {
		path := fmt.Sprintf("output[%d]", i)
		it, _ := objectMap(raw)
		typ, _ := r.string(it, "type", path)
		switch {
		case typ == "function_call":
			if next >= len(resp.Calls) {
				return errCallCount
			}
			resp.answers = append(resp.answers, answer{id: resp.Calls[next].ID, call: next})
			next++
		case typ == "custom_tool_call":
			a := answer{call: -1, custom: true}
			var err error
			if a.id, err = r.string(it, "call_id", path); err != nil {
				return err
			}
			if a.tool, err = r.string(it, "name", path); err != nil {
				return err
			}
			resp.answers = append(resp.answers, a)
		case unanswerable[typ]:
			resp.Unanswered = append(resp.Unanswered, fmt.Sprintf("%s: a %s", path, typ))
		}
	}
	return nil
}

// The messages of a reply, their fields in the order the providers'
// documentation writes them.
type (
	anthropicMessage struct {
		Role    string            `json:"role"`
		Content []anthropicResult `json:"content"`
	}
	anthropicResult struct {
		Type      string `json:"type"`
		ToolUseID string `json:"tool_use_id"`
		Content   string `json:"content"`
		IsError   bool   `json:"is_error,omitempty"`
	}
	chatToolMessage struct {
		Role       string `json:"role"`
		ToolCallID string `json:"tool_call_id"`
		Content    string `json:"content"`
	}
	responsesOutput struct {
		Type   string `json:"type"`
		CallID string `json:"call_id"`
		Output string `json:"output"`
	}
)

// Reply returns the message that answers the response, in its own form,
// given the outcomes of its Calls (one per call, in call order, as
// sched.Result holds them): a JSON array to append to the conversation,
// one result per call the response made, in the order it made them.
//
//   - Anthropic Messages: one user message whose content holds a
//     tool_result block per tool_use (tool_use_id, content, and is_error
//     true for a call that did not end ok);
//   - OpenAI Chat Completions: one tool message per tool call
//     (tool_call_id, content);
//   - OpenAI Responses: one function_call_output item per function_call
//     (call_id, output), and a custom_tool_call_output per custom tool's
//     call.
//
// A call that ended ok is answered with its output; any other with w's
// text for it (Wording.Text); a custom tool's call, which batch cannot
// run, as an error (TOOL_UNKNOWN) saying so, so that the model does not
// call it again. A response without calls gives an empty array. Reply
// fails only when outcomes do not match Calls in number.
func (r *Response) Reply(outcomes []sched.Outcome, w Wording) (json.RawMessage, error) {
	if len(outcomes) != len(r.Calls) {
		return nil, fmt.Errorf("%d outcomes for %d calls: want one per call", len(outcomes), len(r.Calls))
	}
	var items []any
	var results []anthropicResult
	for _, a := range r.answers {
		o := sched.Outcome{CallID: a.id, Tool: a.tool, Status: sched.Failed, Code: sched.CodeUnknownTool, Err: errNotRun}
		if a.call >= 0 {
			o = outcomes[a.call]
			o.CallID, o.Tool = r.Calls[a.call].ID, r.Calls[a.call].Tool
		}
		text, isError := w.Text(o)
		switch r.Format {
		case Anthropic:
			results = append(results, anthropicResult{Type: "tool_result", ToolUseID: a.id, Content: text, IsError: isError})
		case OpenAIChat:
			items = append(items, chatToolMessage{Role: "tool", ToolCallID: a.id, Content: text})
		default:
			typ := "function_call_output"
			if a.custom {
				typ = "custom_tool_call_output"
			}
			items = append(items, responsesOutput{Type: typ, CallID: a.id, Output: text})
		}
	}
	if len(results) > 0 {
		items = append(items, anthropicMessage{Role: "user", Content: results})
	}
	if items == nil {
		items = []any{}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // a tool's output keeps its <, > and &
	if err := enc.Encode(items); err != nil {
		return nil, err
	}
	return json.RawMessage(bytes.TrimRight(b.Bytes(), "\n")), nil
}

// errCallCount would mean that ReadCalls and the answers' reader disagree
// on what a call is: a reply must never answer fewer calls than ran.
var errCallCount = errors.New("the response's calls could not be matched with their answers")

// errNotRun is the reason given for a custom tool's call.
var errNotRun = errors.New(notRun)
