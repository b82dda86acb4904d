package batch_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lanes-dev/lanes/sched"
	"github.com/lanes-dev/lanes/sched/batch"
)

// FuzzReadResponse checks that no input panics, that every rejection is a
// line of UTF-8, and that an accepted response's reply is a JSON array
// answering every call: one result per call at least (custom tools' calls
// are answered too).
func FuzzReadResponse(f *testing.F) {
	for _, name := range []string{"anthropic.json", "openai-chat.json", "openai-responses.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", "reply", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"choices":[{"message":{"tool_calls":[{"type":"custom","id":"c","custom":{"name":"sql"}},{"id":"f","function":{"name":"x"}}]}}]}`))
	f.Add([]byte(`{"output":[{"type":"computer_call","call_id":"c"},{"type":"custom_tool_call","call_id":"d","name":"n"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		resp, err := batch.ReadResponse(data)
		if err != nil {
			if msg := err.Error(); msg == "" || strings.ContainsAny(msg, "\r\n") || !utf8.ValidString(msg) {
				t.Fatalf("ReadResponse(%q) = %q; want a non-empty line of UTF-8", data, msg)
			}
			return
		}
		outcomes := make([]sched.Outcome, len(resp.Calls))
		reply, err := resp.Reply(outcomes, batch.DefaultWording())
		if err != nil {
			t.Fatalf("Reply() = %v", err)
		}
		var items []struct {
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(reply, &items); err != nil {
			t.Fatalf("Reply() = %s: %v", reply, err)
		}
		n := len(items)
		if resp.Format == batch.Anthropic && len(items) == 1 {
			var blocks []json.RawMessage
			if err := json.Unmarshal(items[0].Content, &blocks); err != nil {
				t.Fatalf("Reply() = %s: %v", reply, err)
			}
			n = len(blocks)
		}
		if n < len(resp.Calls) {
			t.Fatalf("Reply() of %q answers %d of %d calls", data, n, len(resp.Calls))
		}
	})
}
