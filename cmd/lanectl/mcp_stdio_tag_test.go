package main

import (
	"strings"
	"testing"
	"time"
)

// A fourth reviewer's cases: stdio input the line checker (badLine)
// passed and the tagging read (tagOne) then mishandled; the comment of each
// test tells what happened before the fix.

// "params": null is JSON-RPC the SDK takes (badLine passes it: the SDK's
// DecodeMessage keeps params as raw null). tagOne unmarshals the null into
// its params map, which encoding/json does by setting the map to nil, and
// then assigns params["_meta"]: "assignment to entry in nil map", a panic
// in the SDK's reading goroutine. lanectl mcp serve dies (exit 2) with a
// Go stack trace on stderr, every request in flight unanswered, the ping
// after it never read. The SDK alone answers it -32602 and goes on.
func TestMCPServeStdioToolsCallParamsNullServingGoesOn(t *testing.T) {
	r := rv2Serve(t, rv2Tools(t), []rv2Step{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":null}`, ""},
		{rv2Ping99, "99"},
	}, 5*time.Second)
	if r.code != 0 || r.replies["1"] == nil || r.replies["99"] == nil || strings.Contains(r.stderr, "panic") {
		t.Errorf(`a tools/call with "params":null, then a ping, input closed: exit %d (-1: still running after 5s), reply to it %s, to the ping %s; want both answered (the call with an error), exit 0; stderr: %.300s`,
			r.code, r.replies["1"], r.replies["99"], r.stderr)
	}
}

// The proxy writes a tools/call's id into _meta "in place of anything the
// client put there" (reqid.go), but it finds tools/call by the bytes
// `tools/call`: a method name spelled with a JSON escape ("tools\/call",
// the same string to the SDK) is not tagged, and the client's own
// _meta["lanes/requestId"] reaches the handler as the call id: here the
// tool runs with LANES_CALL_ID=spoofed, not 1.
func TestMCPServeStdioEscapedMethodNameStillTagged(t *testing.T) {
	f := newMCPFixture(t)
	tools := f.toolsFile(t, "[tools.who]\ncommand = [\"sh\", \"-c\", \"cat >/dev/null; printf '%s' \\\"$LANES_CALL_ID\\\"\"]\n")
	for name, method := range map[string]string{"plain": `tools/call`, `\/`: `tools\/call`, `\u002f`: `tools\u002fcall`} {
		t.Run(name, func(t *testing.T) {
			r := rv2Serve(t, tools, []rv2Step{
				{`{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":{"name":"who","arguments":{},"_meta":{"lanes/requestId":"spoofed"}}}`, "1"},
			}, waitFor)
			if r.code != 0 || !strings.Contains(string(r.replies["1"]), `"text":"1"`) {
				t.Errorf(`method %q with _meta lanes/requestId "spoofed": exit %d, reply %s; want the call id 1 (the request id), as for "tools/call"`,
					method, r.code, r.replies["1"])
			}
		})
	}
}
