package batch_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanes-dev/lanes/sched"
	"github.com/lanes-dev/lanes/sched/batch"
)

// call is a sched.Call with its arguments as a string, for comparisons.
type call struct{ id, tool, args string }

func calls(cs []sched.Call) []call {
	out := make([]call, len(cs))
	for i, c := range cs {
		out[i] = call{c.ID, c.Tool, string(c.Args)}
	}
	return out
}

func TestReadCallsFixtures(t *testing.T) {
	for _, tt := range []struct {
		file   string
		format batch.Format
		want   []call
	}{
		{"anthropic_tool_use.json", batch.Anthropic, []call{
			{"toolu_01A09q90qw90lq917835lq9", "rfd_renumber", `{"from": 129, "to": 130}`},
			{"toolu_01B7bRzLpUwdVNMSWTpNwvP6", "write_file", `{"path": "rfd/0130/README.adoc", "content": "= RFD 130 Lanes\n\nDraft."}`},
			{"toolu_01C4kVqTXDgn6MJwqhQ8G5uK", "get_time", `{}`},
		}},
		{"anthropic_text_only.json", batch.Anthropic, []call{}},
		{"openai_chat_tool_calls.json", batch.OpenAIChat, []call{
			{"call_FthC9qRpsL5kBpwwyw6c7j4k", "rfd_renumber", `{"from":129,"to":130}`},
			{"call_Ryp8lZ5h4tjwEfRkUqZsc1nE", "get_time", `{}`},                                                   // "" is {}
			{"call_3kPdrYw7bqQ0mz8WQXhXz1Nl", "write_file", `{"path": "rfd/0130/README.adoc", "content": "= RFD`}, // kept, not JSON
			{"call_q7Zc2Wv1Nn4Hh6Ff8Jj0Kk2L", "search", `{"query": "lanes", "limit": 5}`},                         // after a custom call, left out
		}},
		{"openai_chat_text_only.json", batch.OpenAIChat, []call{}},
		{"openai_responses_function_calls.json", batch.OpenAIResponses, []call{
			{"call_unLAR8MvFNptuiZK6K6HCy5k", "rfd_renumber", `{"from":129,"to":130}`},
			{"call_8Xq2Lp0RvTn5WmZc3YbKd7Fh", "get_time", `{}`},
			{"call_Qm4Zs9Tt1Uu3Vv5Ww7Xx9Yy0", "write_file", `{"path": "rfd/0130/README.adoc", `},
		}},
		{"openai_responses_text_only.json", batch.OpenAIResponses, []call{}},
	} {
		data, err := os.ReadFile(filepath.Join("testdata", tt.file))
		if err != nil {
			t.Fatal(err)
		}
		got, format, err := batch.ReadCalls(data)
		if err != nil || format != tt.format || got == nil {
			t.Errorf("ReadCalls(%s) = %v, %q, %v; want %q, no error and a non-nil slice", tt.file, got, format, err, tt.format)
			continue
		}
		if g := calls(got); len(g) != len(tt.want) || (len(g) > 0 && !equalCalls(g, tt.want)) {
			t.Errorf("ReadCalls(%s) =\n%q\nwant\n%q", tt.file, g, tt.want)
		}
	}
}

func equalCalls(a, b []call) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestReadCallsSmallForms(t *testing.T) {
	for _, tt := range []struct {
		name   string
		json   string
		format batch.Format
		want   []call
	}{
		{"anthropic, input missing", `{"content": [{"type": "tool_use", "id": "t1", "name": "a"}]}`, batch.Anthropic, []call{{"t1", "a", "{}"}}},
		{"anthropic, input not an object", `{"content": [{"type": "tool_use", "id": "t1", "name": "a", "input": [1, 2]}]}`, batch.Anthropic, []call{{"t1", "a", "[1, 2]"}}},
		{"anthropic, input over lines", "{\"content\": [{\"type\": \"tool_use\", \"id\": \"t1\", \"name\": \"a\", \"input\": {\n  \"q\": \"a b\"\n}}]}", batch.Anthropic, []call{{"t1", "a", `{"q":"a b"}`}}},
		{"anthropic, content empty", `{"content": []}`, batch.Anthropic, []call{}},
		{"chat, no choices", `{"choices": []}`, batch.OpenAIChat, []call{}},
		{"chat, tool_calls null", `{"choices": [{"message": {"content": "hi", "tool_calls": null}}]}`, batch.OpenAIChat, []call{}},
		{"chat, only the first choice", `{"choices": [{"message": {"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{}"}}]}}, {"message": {"tool_calls": [{"id": "c2", "type": "function", "function": {"name": "b", "arguments": "{}"}}]}}]}`, batch.OpenAIChat, []call{{"c1", "a", "{}"}}},
		{"chat, blank arguments", `{"choices": [{"message": {"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "a", "arguments": "  \n"}}]}}]}`, batch.OpenAIChat, []call{{"c1", "a", "{}"}}},
		{"chat, arguments an object", `{"choices": [{"message": {"tool_calls": [{"id": "c1", "function": {"name": "a", "arguments": {"x": 1}}}]}}]}`, batch.OpenAIChat, []call{{"c1", "a", `{"x": 1}`}}},
		{"responses, id when no call_id", `{"output": [{"type": "function_call", "id": "fc_1", "name": "a", "arguments": "{\"x\":1}"}]}`, batch.OpenAIResponses, []call{{"fc_1", "a", `{"x":1}`}}},
		{"responses, output empty", `{"object": "response", "output": []}`, batch.OpenAIResponses, []call{}},
	} {
		got, format, err := batch.ReadCalls([]byte(tt.json))
		if err != nil || format != tt.format || got == nil || !equalCalls(calls(got), tt.want) || len(got) != len(tt.want) {
			t.Errorf("%s: ReadCalls() = %q, %q, %v; want %q, %q", tt.name, calls(got), format, err, tt.want, tt.format)
		}
	}
}

func TestReadCallsErrors(t *testing.T) {
	const shape = "not a model response: want Anthropic Messages"
	for _, tt := range []struct {
		name string
		json string
		want string
	}{
		{"empty", ``, "not JSON: the input is empty"},
		{"not JSON", `{"content": [`, "not JSON:"},
		{"an array", `[{"id": "c1", "name": "a", "arguments": "{}"}]`, shape},
		{"a string", `"hello"`, shape},
		{"null", `null`, shape},
		{"another object", `{"message": {"tool_calls": []}}`, shape},
		{"an API error", `{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}`, shape},
		{"content not a list", `{"content": "hello"}`, "anthropic response: content must be an array, not a string"},
		{"block not an object", `{"content": [1]}`, "anthropic response: content[0] must be an object, not a number"},
		{"id a number", `{"content": [{"type": "text"}, {"type": "tool_use", "id": 5, "name": "a"}]}`, "anthropic response: content[1].id must be a string, not a number"},
		{"choices not a list", `{"choices": {}}`, "openai-chat response: choices must be an array, not an object"},
		{"no message", `{"choices": [{"finish_reason": "stop"}]}`, "openai-chat response: choices[0].message must be an object, not nothing"},
		{"function missing", `{"choices": [{"message": {"tool_calls": [{"id": "c", "type": "function"}]}}]}`, "openai-chat response: choices[0].message.tool_calls[0].function must be an object"},
		{"name a number", `{"choices": [{"message": {"tool_calls": [{"id": "c", "function": {"name": 1}}]}}]}`, "tool_calls[0].function.name must be a string, not a number"},
		{"output not a list", `{"output": "text"}`, "openai-responses response: output must be an array, not a string"},
		{"call_id a bool", `{"output": [{"type": "function_call", "call_id": true}]}`, "openai-responses response: output[0].call_id must be a string, not a boolean"},
	} {
		got, format, err := batch.ReadCalls([]byte(tt.json))
		if err == nil {
			t.Errorf("%s: ReadCalls() = %q, %q; want an error", tt.name, calls(got), format)
			continue
		}
		assertOneLine(t, err)
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: ReadCalls() = %q; want it to contain %q", tt.name, err, tt.want)
		}
		if tt.want == shape {
			for _, f := range []string{"Anthropic Messages", "OpenAI Chat Completions", "OpenAI Responses"} {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("%s: ReadCalls() = %q; want it to name %s", tt.name, err, f)
				}
			}
		}
	}
}
