package batch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/lanes-dev/lanes/internal/jsonkind"
	"github.com/lanes-dev/lanes/sched"
)

// Format names the form of a model response ReadCalls read.
type Format string

// The forms ReadCalls reads.
const (
	Anthropic       Format = "anthropic"        // Anthropic Messages: content[] blocks of type tool_use
	OpenAIChat      Format = "openai-chat"      // OpenAI Chat Completions: choices[0].message.tool_calls[]
	OpenAIResponses Format = "openai-responses" // OpenAI Responses: output[] items of type function_call
)

// errShape is the answer to JSON that is none of the three forms.
var errShape = errors.New(`not a model response: want Anthropic Messages ({"content": [...]}), OpenAI Chat Completions ({"choices": [...]}) or OpenAI Responses ({"output": [...]}) JSON`)

// ReadCalls returns the tool calls of one model response, in the order the
// model wrote them, and the response's form, told by its top-level field:
// "choices" (OpenAI Chat Completions), "output" (OpenAI Responses) or
// "content" (Anthropic Messages). Anything but a tool call (text, thinking,
// a message item, a server-side tool's call) is left out; a response without
// tool calls gives an empty slice.
//
// Arguments are kept as written: empty or missing arguments are {}, and an
// OpenAI arguments string that is not JSON is kept as its raw bytes. The
// arguments are not judged here: arguments that cannot be used (not JSON,
// nested deeper than encoding/json reads, not an object) fail their own
// call in the scheduler, while the others run, in every form. The response
// itself is read at any depth. The error, for a response unreadable as a
// whole (not JSON, none of the three forms, a field of the wrong type), is
// one line naming the field.
func ReadCalls(data []byte) ([]sched.Call, Format, error) {
	if err := checkDocument(data); err != nil {
		return nil, "", fmt.Errorf("not JSON: %s", oneLine(jsonError(data, err)))
	}
	top, ok := objectMap(data)
	if !ok {
		return nil, "", errShape
	}
	r := reader{top: top}
	switch {
	case present(top, "choices"):
		r.format = OpenAIChat
		return r.chat()
	case present(top, "output"):
		r.format = OpenAIResponses
		return r.responses()
	case present(top, "content"):
		r.format = Anthropic
		return r.anthropic()
	}
	return nil, "", errShape
}

// jsonError describes why data is not JSON.
func jsonError(data []byte, err error) string {
	if err == nil {
		return "invalid JSON"
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return "the input is empty"
	}
	return err.Error()
}

// present reports whether o has field f, other than null.
func present(o map[string]json.RawMessage, f string) bool {
	v, ok := o[f]
	return ok && !isNull(v)
}

func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

// reader reads the fields of one response, naming them in its errors.
type reader struct {
	format Format
	top    map[string]json.RawMessage
}

func (r reader) errorf(path, format string, a ...any) error {
	return fmt.Errorf("%s response: %s %s", r.format, path, fmt.Sprintf(format, a...))
}

// list returns the array at path; null or missing is empty.
func (r reader) list(v json.RawMessage, path string) ([]json.RawMessage, error) {
	if v == nil || isNull(v) {
		return nil, nil
	}
	out, ok := splitArray(v)
	if !ok {
		return nil, r.errorf(path, "must be an array, not %s", jsonkind.Of(v))
	}
	return out, nil
}

// object returns the object at path.
func (r reader) object(v json.RawMessage, path string) (map[string]json.RawMessage, error) {
	out, ok := objectMap(v)
	if v == nil || !ok {
		return nil, r.errorf(path, "must be an object, not %s", jsonkind.Of(v))
	}
	return out, nil
}

// string returns the string field f of o; null or missing is "".
func (r reader) string(o map[string]json.RawMessage, f, path string) (string, error) {
	v, ok := o[f]
	if !ok || isNull(v) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", r.errorf(path+"."+f, "must be a string, not %s", jsonkind.Of(v))
	}
	return s, nil
}

// input returns Anthropic's input object as the call's arguments: missing
// or null is {}. An input written over several lines is compacted: the
// response's indentation would reach the tool (a command's stdin, an MCP
// call) and what lanectl prints; one on a single line is kept as written.
func input(v json.RawMessage) json.RawMessage {
	if v == nil || isNull(v) {
		return json.RawMessage(`{}`)
	}
	var b bytes.Buffer
	if bytes.ContainsAny(v, "\r\n") && json.Compact(&b, v) == nil {
		return b.Bytes()
	}
	return v
}

// arguments returns OpenAI's arguments as the call's arguments: the JSON
// text a string holds, kept as raw bytes even when it is not JSON; an empty
// string, null or missing is {}; any other JSON value is taken as it is.
func arguments(v json.RawMessage) json.RawMessage {
	if v == nil || isNull(v) {
		return json.RawMessage(`{}`)
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return v
	}
	if strings.TrimSpace(s) == "" {
		return json.RawMessage(`{}`)
	}
	return json.RawMessage(s)
}

// anthropic reads content[] blocks of type tool_use.
func (r reader) anthropic() ([]sched.Call, Format, error) {
	blocks, err := r.list(r.top["content"], "content")
	if err != nil {
		return nil, "", err
	}
	calls := []sched.Call{}
	for i, raw := range blocks {
		path := fmt.Sprintf("content[%d]", i)
		b, err := r.object(raw, path)
		if err != nil {
			return nil, "", err
		}
		typ, err := r.string(b, "type", path)
		if err != nil {
			return nil, "", err
		}
		if typ != "tool_use" {
			continue
		}
		c := sched.Call{Args: input(b["input"])}
		if c.ID, err = r.string(b, "id", path); err != nil {
			return nil, "", err
		}
		if c.Tool, err = r.string(b, "name", path); err != nil {
			return nil, "", err
		}
		calls = append(calls, c)
	}
	return calls, r.format, nil
}

// chat reads choices[0].message.tool_calls[] of type function.
func (r reader) chat() ([]sched.Call, Format, error) {
	choices, err := r.list(r.top["choices"], "choices")
	if err != nil {
		return nil, "", err
	}
	if len(choices) == 0 {
		return []sched.Call{}, r.format, nil
	}
	choice, err := r.object(choices[0], "choices[0]")
	if err != nil {
		return nil, "", err
	}
	msg, err := r.object(choice["message"], "choices[0].message")
	if err != nil {
		return nil, "", err
	}
	items, err := r.list(msg["tool_calls"], "choices[0].message.tool_calls")
	if err != nil {
		return nil, "", err
	}
	calls := []sched.Call{}
	for i, raw := range items {
		path := fmt.Sprintf("choices[0].message.tool_calls[%d]", i)
		tc, err := r.object(raw, path)
		if err != nil {
			return nil, "", err
		}
		typ, err := r.string(tc, "type", path)
		if err != nil {
			return nil, "", err
		}
		if typ != "" && typ != "function" {
			continue // a custom tool's call: not a function with JSON arguments
		}
		fn, err := r.object(tc["function"], path+".function")
		if err != nil {
			return nil, "", err
		}
		c := sched.Call{Args: arguments(fn["arguments"])}
		if c.ID, err = r.string(tc, "id", path); err != nil {
			return nil, "", err
		}
		if c.Tool, err = r.string(fn, "name", path+".function"); err != nil {
			return nil, "", err
		}
		calls = append(calls, c)
	}
	return calls, r.format, nil
}

// responses reads output[] items of type function_call.
func (r reader) responses() ([]sched.Call, Format, error) {
	items, err := r.list(r.top["output"], "output")
	if err != nil {
		return nil, "", err
	}
	calls := []sched.Call{}
	for i, raw := range items {
		path := fmt.Sprintf("output[%d]", i)
		it, err := r.object(raw, path)
		if err != nil {
			return nil, "", err
		}
		typ, err := r.string(it, "type", path)
		if err != nil {
			return nil, "", err
		}
		if typ != "function_call" {
			continue
		}
		c := sched.Call{Args: arguments(it["arguments"])}
		if c.ID, err = r.string(it, "call_id", path); err != nil {
			return nil, "", err
		}
		if c.ID == "" { // call_id is what function_call_output answers; id is the item's
			if c.ID, err = r.string(it, "id", path); err != nil {
				return nil, "", err
			}
		}
		if c.Tool, err = r.string(it, "name", path); err != nil {
			return nil, "", err
		}
		calls = append(calls, c)
	}
	return calls, r.format, nil
}
