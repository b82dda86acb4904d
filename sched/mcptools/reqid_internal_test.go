package mcptools

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// metaID returns the lanes/requestId a tagged tools/call carries, "" for
// none.
func metaID(t *testing.T, msg []byte) string {
	t.Helper()
	var m struct {
		Params struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		} `json:"params"`
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		t.Fatalf("tagged message %q: %v", msg, err)
	}
	return string(m.Params.Meta[metaRequestID])
}

func TestTagRequestID(t *testing.T) {
	for _, tt := range []struct{ msg, want string }{
		{`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x"}}`, `3`},
		{`{"jsonrpc":"2.0","id":"a-1","method":"tools/call","params":{"name":"x","_meta":{"progressToken":1}}}`, `"a-1"`},
		{`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"x","_meta":{"lanes/requestId":"spoofed"}}}`, `4`},
		{`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"x","_meta":null}}`, `5`},
		{`{"jsonrpc":"2.0","id":6,"method":"tools/call"}`, `6`},
	} {
		if got := metaID(t, tagRequestID([]byte(tt.msg))); got != tt.want {
			t.Errorf("tagRequestID(%s): id %s; want %s", tt.msg, got, tt.want)
		}
	}
	// Untouched: other methods, notifications, what is not JSON or has a
	// _meta that is not an object (the SDK answers those).
	for _, msg := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"x"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":3}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[1]}`,
		`not json tools/call`,
		`{"jsonrpc":"2.0","id":1,"result":{"note":"tools/call"}}`,
	} {
		if got := string(tagRequestID([]byte(msg))); got != msg {
			t.Errorf("tagRequestID(%s) = %s; want it untouched", msg, got)
		}
	}
	batch := `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}},{"jsonrpc":"2.0","id":2,"method":"ping"}]`
	var msgs []json.RawMessage
	if err := json.Unmarshal(tagRequestID([]byte(batch)), &msgs); err != nil || len(msgs) != 2 {
		t.Fatalf("tagged batch: %v", err)
	}
	if got := metaID(t, msgs[0]); got != "1" {
		t.Errorf("batch's tools/call: id %s; want 1", got)
	}
}

// The stdio reader tags each line, keeps its line break, passes on a
// line longer than maxTagged untouched, and ends with the input.
func TestTaggingReader(t *testing.T) {
	long := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"x","arguments":{"s":"` + strings.Repeat("a", maxTagged) + `"}}}`
	in := `{"jsonrpc":"2.0","id":1,"method":"initialize"}` + "\n" +
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}}` + "\n" +
		long + "\n" +
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"y"}}` // no final line break
	out, err := io.ReadAll(tagReader(io.NopCloser(&slowReader{s: in}), nil, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("got %d lines; want 4", len(lines))
	}
	if lines[0] != `{"jsonrpc":"2.0","id":1,"method":"initialize"}` {
		t.Errorf("line 1 = %s; want it untouched", lines[0])
	}
	if metaID(t, []byte(lines[1])) != "2" || metaID(t, []byte(lines[3])) != "3" {
		t.Errorf("lines 2 and 4 = %s, %s; want their ids tagged", lines[1], lines[3])
	}
	if lines[2] != long {
		t.Errorf("the long line changed (%d bytes, want %d)", len(lines[2]), len(long))
	}
}

// slowReader gives s a few bytes at a time, as a pipe may.
type slowReader struct{ s string }

func (r *slowReader) Read(p []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 7777)], r.s)
	r.s = r.s[n:]
	return n, nil
}

// With a reply writer, the stdio reader answers each line it does not
// pass on to the SDK (one the SDK would end its session at, a batch, an
// id the SDK would answer under another, a line over maxTagged) with a
// JSON-RPC error, passes nothing of it on, drops blank lines and trims
// the blanks around a message (the SDK wants the line break right after
// it).
func TestTaggingReaderAnswersBadLines(t *testing.T) {
	in := `{"jsonrpc":"2.0","id":1,"method":"ping"}  ` + "\n" +
		"\n" +
		"this is not json\n" +
		`{"id":"x","method":"ping"}` + "\n" +
		"[]\n" +
		`[{"jsonrpc":"2.0","id":2,"method":"ping"},{"id":3}]` + "\n" +
		`[{"jsonrpc":"2.0","id":4,"method":"ping"}]` + "\r\n" +
		`{"a":1} {"b":2}` + "\n" +
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"y"}}` + "\n" +
		`{"jsonrpc":"2.0","id":1.5,"method":"ping"}` + "\n" +
		`{"jsonrpc":"2.0","id":-0,"method":"ping"}` + "\n" +
		`{"jsonrpc":"2.0","id":1e20,"method":"ping"}` + "\n" +
		`{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"}` + "\n" +
		`{"jsonrpc":"2.0","id":-9007199254740992,"method":"ping"}` + "\n" +
		`{"jsonrpc":"2.0","id":6,"method":"ping","params":{"pad":"` + strings.Repeat("x", maxTagged) + `"}}   ` + "\n" +
		`{"jsonrpc":"2.0","id":"7","method":"ping"}`
	var replies strings.Builder
	out, err := io.ReadAll(tagReader(io.NopCloser(&slowReader{s: in}), nil, nil, &replies))
	if err != nil {
		t.Fatal(err)
	}
	passed := strings.Split(string(out), "\n")
	if len(passed) != 4 || passed[0] != `{"jsonrpc":"2.0","id":1,"method":"ping"}` ||
		metaID(t, []byte(passed[1])) != "5" || passed[2] != `{"jsonrpc":"2.0","id":-9007199254740992,"method":"ping"}` ||
		passed[3] != `{"jsonrpc":"2.0","id":"7","method":"ping"}` {
		t.Errorf("passed on %.300q; want lines 1, 9 (tagged), 14 and 16, trimmed", out)
	}
	batch := "a batch; this server takes one message a line"
	want := []struct {
		id   string
		code int
		says string
	}{
		{"null", -32700, "parse error: input line 3 is not JSON: invalid character 'h'"},
		{`"x"`, -32600, "invalid request: input line 4 is not a JSON-RPC 2.0 message"},
		{"null", -32600, "invalid request: input line 5 is " + batch},
		{"null", -32600, "invalid request: input line 6 is " + batch},
		{"null", -32600, "invalid request: input line 7 is " + batch},
		{"null", -32700, "parse error: input line 8 is not JSON"},
		{"1.5", -32600, "invalid request: input line 10: the id 1.5 is not"},
		{"-0", -32600, "invalid request: input line 11: the id -0 is not"},
		{"1e20", -32600, "invalid request: input line 12: the id 1e20 is not"},
		{"9007199254740993", -32600, "invalid request: input line 13: the id"},
		{"6", -32600, "invalid request: input line 15 is longer than 4 MiB"},
	}
	got := strings.Split(strings.TrimSuffix(replies.String(), "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("replies %q; want %d", got, len(want))
	}
	for i, w := range want {
		var r struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Error   struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(got[i]), &r); err != nil || r.JSONRPC != "2.0" || string(r.ID) != w.id ||
			r.Error.Code != w.code || !strings.HasPrefix(r.Error.Message, w.says) {
			t.Errorf("reply %d = %s; want id %s, code %d, %q", i+1, got[i], w.id, w.code, w.says)
		}
	}
}
