package mcptools

import (
	"encoding/json"
	"strings"
	"testing"
)

// A line that is JSON but no JSON-RPC message, or a request whose params
// are no object, is answered in words that name the field and the kind of
// value it takes, not Go types (a new user's trial saw "cannot unmarshal
// \"5\" into Go value of type string" and "Go struct field
// jsonrpc2.wireDecode.jsonrpc"); so is the SDK's own reply to params whose
// fields do not decode, which also had code 0.
func TestBadLinesSayWhatIsWrongInWords(t *testing.T) {
	for _, c := range []struct {
		line string
		code int
		says string
	}{
		{`5`, -32600, "it is a number, not an object"},
		{`{"id":3,"method":"ping"}`, -32600, `it has no "jsonrpc": "2.0"`},
		{`{"jsonrpc":1,"id":3,"method":"ping"}`, -32600, `"jsonrpc" is 1, not "2.0"`},
		{`{"jsonrpc":"2.0","id":1,"method":5}`, -32600, `"method" is a number, not a string`},
		{`{"jsonrpc":"2.0","id":true,"method":"ping"}`, -32600, `"id" is a boolean, not a string or a number`},
		{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":"x"}`, -32602, `"params" is a string; MCP takes an object`},
		{`{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}`, -32602, `"params" is an array; MCP takes an object`},
	} {
		reply := badLine([]byte(c.line), 1)
		var r struct {
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if reply == nil || json.Unmarshal(reply, &r) != nil || r.Error.Code != c.code || !strings.Contains(r.Error.Message, c.says) || strings.Contains(r.Error.Message, "Go ") {
			t.Errorf("badLine(%s) = %s; want code %d saying %q, no Go type", c.line, reply, c.code, c.says)
		}
	}
	for _, ok := range []string{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, `{"jsonrpc":"2.0","id":1,"method":"ping","params":null}`, `{"jsonrpc":"2.0","id":"a","method":"tools/list","params":{}}`} {
		if reply := badLine([]byte(ok), 1); reply != nil {
			t.Errorf("badLine(%s) = %s; want it passed on", ok, reply)
		}
	}
	sdk := `{"jsonrpc":"2.0","id":2,"error":{"code":0,"message":"handling 'initialize': unmarshaling \"{\\\"protocolVersion\\\":5}\" into a *mcp.initializeParamsV2: json: cannot unmarshal \"5}\" into Go struct field mcp.initializeParamsV2.protocolVersion of type string"}}` + "\n"
	got := string(plainParamsError([]byte(sdk)))
	if want := `{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"invalid params of initialize: \"protocolVersion\" must be a string"}}` + "\n"; got != want {
		t.Errorf("plainParamsError(the SDK's reply) = %s; want %s", got, want)
	}
	for _, other := range []string{`{"jsonrpc":"2.0","id":2,"result":{}}` + "\n", `{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"method not found"}}` + "\n"} {
		if got := string(plainParamsError([]byte(other))); got != other {
			t.Errorf("plainParamsError(%s) = %s; want it as it is", other, got)
		}
	}
}
