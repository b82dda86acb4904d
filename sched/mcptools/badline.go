package mcptools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/lanes-dev/lanes/internal/jsonkind"
)

// The SDK's stdio transport ends the session at the first message it
// cannot read (a line that is not JSON, or JSON that is no JSON-RPC
// message), cancelling the requests it had not answered yet. So the
// proxy reads each line before the SDK does (see tagReader) and answers
// such a line itself with a JSON-RPC error, as a JSON-RPC server should
// (-32700 for what is not JSON, -32600 for what is no message), and
// goes on with the next line. A stdio message is one line (MCP: messages
// MUST NOT contain embedded newlines); a line longer than maxTagged is
// answered too (taggingReader).
//
// A batch is refused whatever it holds: the SDK ends the session at one
// sent once protocol 2025-06-18 (which dropped JSON-RPC batching) or later
// is agreed, which the input alone does not show, and at batches its
// checks of a message alone do not catch (an id twice, nesting one level
// deeper than a message's). A request's id must be a string or an
// integer in plain form of at most 2^53 either way: the SDK answers 1.5,
// -0, 1e20 or 2^53+1 under another id, which the drain (inFlight) would
// wait for forever.

// badLine returns the error reply, with its line break, for body, the
// trimmed line lineNo of the input, if the proxy does not pass it on to
// the SDK; nil if it does.
func badLine(body []byte, lineNo int) []byte {
	if !json.Valid(body) {
		var v json.RawMessage
		err := json.Unmarshal(body, &v)
		return errorReply(nil, jsonrpc.CodeParseError, fmt.Sprintf("parse error: input line %d is not JSON: %v", lineNo, err))
	}
	if body[0] == '[' {
		return errorReply(nil, jsonrpc.CodeInvalidRequest, fmt.Sprintf("invalid request: input line %d is a batch; this server takes one message a line (MCP 2025-06-18 dropped JSON-RPC batching)", lineNo))
	}
	if why := envelopeProblem(body); why != "" {
		return errorReply(requestID(body), jsonrpc.CodeInvalidRequest, fmt.Sprintf("invalid request: input line %d is not a JSON-RPC 2.0 message: %s", lineNo, why))
	}
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		return errorReply(requestID(body), jsonrpc.CodeInvalidRequest, fmt.Sprintf("invalid request: input line %d is not a JSON-RPC 2.0 message: %v", lineNo, err))
	}
	if _, ok := msg.(*jsonrpc.Request); ok {
		if v, ok := jsonFields(body)["params"]; ok && jsonkind.Of(v) != "an object" && jsonkind.Of(v) != "null" {
			return errorReply(requestID(body), jsonrpc.CodeInvalidParams, fmt.Sprintf(`invalid params: input line %d: "params" is %s; MCP takes an object`, lineNo, jsonkind.Of(v)))
		}
	}
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
		if id := requestID(body); id != nil && id[0] != '"' && !plainInt(id) {
			return errorReply(id, jsonrpc.CodeInvalidRequest, fmt.Sprintf("invalid request: input line %d: the id %s is not a string or a whole number of at most 2^53 either way", lineNo, id))
		}
	}
	return nil
}

// plainInt reports whether id, a JSON number, is one the SDK answers
// under the same text: an integer without fraction, exponent or -0, of at
// most 2^53 either way (the SDK holds a number id as a float64).
// id is JSON, so it has no "+" or leading zero: ParseInt refuses a fraction
// or an exponent, and only -0 is left to refuse by hand.
func plainInt(id []byte) bool {
	n, err := strconv.ParseInt(string(id), 10, 64)
	return err == nil && string(id) != "-0" && n >= -1<<53 && n <= 1<<53
}

// requestID returns the id of msg, a JSON object, if it is one a reply
// can carry (a string or a number); nil, JSON null, else.
func requestID(msg []byte) json.RawMessage {
	m, ok := decodeMessage(msg) // "id" exactly, as the SDK reads it
	if !ok {
		return nil
	}
	var v any
	if json.Unmarshal(m.ID, &v) != nil {
		return nil
	}
	switch v.(type) {
	case string, float64:
		return bytes.TrimSpace(m.ID)
	}
	return nil
}

// errorReply is a JSON-RPC error response, one line.
func errorReply(id json.RawMessage, code int, message string) []byte {
	if id == nil {
		id = json.RawMessage("null")
	}
	reply := struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: id}
	reply.Error.Code, reply.Error.Message = code, message
	b, _ := json.Marshal(reply)
	return append(b, '\n')
}

// envelopeProblem says in words what keeps body, valid JSON, from being a
// JSON-RPC 2.0 message by its envelope ("jsonrpc", "method", "id"), or ""
// when the envelope is right: the SDK's own error names Go types.
func envelopeProblem(body []byte) string {
	f := jsonFields(body)
	if f == nil {
		return "it is " + jsonkind.Of(body) + ", not an object"
	}
	v, ok := f["jsonrpc"]
	switch {
	case !ok:
		return `it has no "jsonrpc": "2.0"`
	case string(bytes.TrimSpace(v)) != `"2.0"`:
		return fmt.Sprintf(`"jsonrpc" is %s, not "2.0"`, bytes.TrimSpace(v))
	}
	if v, ok := f["method"]; ok && jsonkind.Of(v) != "a string" {
		return fmt.Sprintf(`"method" is %s, not a string`, jsonkind.Of(v))
	}
	if v, ok := f["id"]; ok {
		if k := jsonkind.Of(v); k != "a string" && k != "a number" && k != "null" {
			return fmt.Sprintf(`"id" is %s, not a string or a number`, k)
		}
	}
	return ""
}

// jsonFields returns the members of body when it is a JSON object, else nil.
func jsonFields(body []byte) map[string]json.RawMessage {
	var f map[string]json.RawMessage
	if json.Unmarshal(body, &f) != nil {
		return nil
	}
	return f
}

// goField finds, in an error of encoding/json, the field that did not
// decode and the Go type it wanted.
var goField = regexp.MustCompile(`Go struct field \S+?\.(\w+) of type (\S+)`)

// plainParamsError returns msg, one whole message the SDK writes, with an
// error reply to params that did not decode (the SDK answers code 0 with
// encoding/json's words, which name Go types) replaced by a -32602 reply
// naming the field and the kind of value it takes; any other msg as it is.
func plainParamsError(msg []byte) []byte {
	if !bytes.Contains(msg, []byte(`"code":0`)) || !bytes.Contains(msg, []byte("unmarshaling")) {
		return msg
	}
	var r struct {
		ID    json.RawMessage `json:"id"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(msg, &r) != nil || r.Error == nil || r.Error.Code != 0 {
		return msg
	}
	method, ok := strings.CutPrefix(r.Error.Message, "handling '")
	if !ok {
		return msg
	}
	method, _, _ = strings.Cut(method, "'")
	what := "they do not fit the method"
	if m := goField.FindStringSubmatch(r.Error.Message); m != nil {
		what = fmt.Sprintf("%q must be %s", m[1], goKind(m[2]))
	}
	return errorReply(r.ID, jsonrpc.CodeInvalidParams, fmt.Sprintf("invalid params of %s: %s", method, what))
}

// goKind names the JSON kind of value a Go type of encoding/json's words
// takes.
func goKind(t string) string {
	switch {
	case t == "string":
		return "a string"
	case t == "bool":
		return "a boolean"
	case strings.HasPrefix(t, "[]"):
		return "an array"
	case strings.HasPrefix(t, "map["), strings.Contains(t, "."):
		return "an object"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"), strings.HasPrefix(t, "float"):
		return "a number"
	}
	return "another kind of value"
}
