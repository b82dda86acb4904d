package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A third reviewer's cases: stdio input that the line checker passed and
// the drain (inFlight) or the tagging read otherwise than the SDK does.
// The comment of each test tells what happened before the fix: now the
// proxy reads member names by exact case, refuses number ids beyond 2^53,
// passes <, > and & unescaped and counts 4 MiB without the line break.

// The SDK decodes messages with case-sensitive member names (segmentio
// json, DontMatchCaseInsensitiveStructFields); the drain's message and
// badLine's requestID use encoding/json, which matches "ID", "Id",
// "Method" to the fields id and method. The SDK answers (or not) under
// the real id, the drain waits for another forever: serve never exits
// after its input ended.
func TestMCPServeStdioCaseFoldedMemberNamesExit(t *testing.T) {
	for name, line := range map[string]string{
		"notification with ID": `{"jsonrpc":"2.0","method":"ping","ID":7}`,
		"call with id and ID":  `{"jsonrpc":"2.0","id":1,"method":"ping","ID":2}`,
		"response with Method": `{"jsonrpc":"2.0","id":5,"Method":"ping"}`,
		"notification with Id": `{"jsonrpc":"2.0","method":"notifications/initialized","Id":8}`,
	} {
		t.Run(name, func(t *testing.T) {
			r := rv2Serve(t, rv2Tools(t), []rv2Step{{line, ""}, {rv2Ping99, "99"}}, 5*time.Second)
			if r.code != 0 {
				t.Errorf("%s, then a ping, input closed: exit %d (-1: still running after 5s); want exit 0; replies %s; stderr: %s",
					line, r.code, rv2Show(r.replies), r.stderr)
			}
		})
	}
}

// A notifications/cancelled whose params name "RequestId": the SDK reads
// no requestId and cancels nothing, the drain (encoding/json) takes the
// call as given up. At the end of input the session ends at once and the
// running call's answer is lost (the SDK cancels it: indeterminate).
func TestMCPServeStdioCaseFoldedCancelKeepsAnswer(t *testing.T) {
	r := rv2Serve(t, rv2Tools(t), []rv2Step{
		{`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"slow","arguments":{}}}`, ""},
		{`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"RequestId":5}}`, ""},
	}, waitFor)
	if r.code != 0 || r.replies["5"] == nil {
		t.Errorf("a slow call, a cancel naming \"RequestId\" (which the SDK ignores), input closed: exit %d, reply %s; want the call's answer, then exit 0; stderr: %s",
			r.code, r.replies["5"], r.stderr)
	}
}

// plainInt lets through every integer within int64, but the SDK decodes
// an id as a float64 and converts it: above 2^53 it answers under another
// id, and 2^63-1 (rounded to 2^63) comes back as -2^63, which the drain
// never matches: serve never exits.
func TestMCPServeStdioLargeIntegerIDs(t *testing.T) {
	for _, id := range []string{"9223372036854775807", "9007199254740993"} {
		t.Run(id, func(t *testing.T) {
			r := rv2Serve(t, rv2Tools(t), []rv2Step{
				{fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"ping"}`, id), ""},
				{rv2Ping99, "99"},
			}, 5*time.Second)
			if r.code != 0 || r.replies[id] == nil {
				t.Errorf("ping of id %s, input closed: exit %d (-1: still running after 5s), reply %s; want exit 0 and an answer of id %s (or a -32600 of it); replies %s",
					id, r.code, r.replies[id], id, rv2Show(r.replies))
			}
		})
	}
}

// tagRequestID re-marshals a tools/call with encoding/json, which writes
// each <, > and & of a RawMessage as \u003c (6 bytes): a 3 MiB call full
// of '<' (under the 4 MiB the README lets through) reaches the SDK as 18
// MiB, over its 16 MiB frame limit, and the SDK ends the session: exit
// 70, the ping after it unanswered.
func TestMCPServeStdioCallOfHTMLCharsUnder4MiB(t *testing.T) {
	pad := strings.Repeat("<", 3<<20)
	r := rv2Serve(t, rv2Tools(t), []rv2Step{
		{fmt.Sprintf(`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"hi","arguments":{"pad":%q}}}`, pad), ""},
		{rv2Ping99, ""},
	}, waitFor)
	if r.code != 0 || r.replies["42"] == nil || r.replies["99"] == nil {
		t.Errorf("a 3 MiB tools/call of '<', then a ping: exit %d, reply to the call %.200s, to the ping %s; want both answered, exit 0; stderr: %.300s",
			r.code, r.replies["42"], r.replies["99"], r.stderr)
	}
}

// A message of exactly 4 MiB (and one of 4 MiB - 1 ended by \r\n) is
// refused as "longer than 4 MiB": the limit counts the line break.
// README: -32600 goes to "a line over 4 MiB".
func TestMCPServeStdioExactly4MiBMessageServed(t *testing.T) {
	for name, c := range map[string]struct {
		size int
		end  string
	}{"4 MiB, \\n": {4 << 20, ""}, "4 MiB - 1, \\r\\n": {4<<20 - 1, "\r"}} {
		t.Run(name, func(t *testing.T) {
			pre, post := `{"jsonrpc":"2.0","id":42,"method":"ping","params":{"pad":"`, `"}}`
			line := pre + strings.Repeat("x", c.size-len(pre)-len(post)) + post
			if len(line) != c.size {
				t.Fatal(len(line))
			}
			r := rv2Serve(t, rv2Tools(t), []rv2Step{{line + c.end, ""}, {rv2Ping99, ""}}, waitFor)
			if got := string(r.replies["42"]); !strings.Contains(got, `"result"`) {
				t.Errorf("a ping of exactly %d bytes: reply %.200s; want its result (it is not over 4 MiB)", c.size, got)
			}
		})
	}
}
