package mcptools

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// The SDK's stdio transport ends the session at the first message it
// cannot read (a line that is not JSON, or JSON that is no JSON-RPC
// message), cancelling the requests it had not answered yet. So the
// proxy reads each line before the SDK does (see tagReader) and answers
// such a line itself with a JSON-RPC error, as a JSON-RPC server should
// (-32700 for what is not JSON, -32600 for what is no message), and
// goes on with the next line. A stdio message is one line (MCP: messages
// MUST NOT contain embedded newlines). A line longer than maxTagged is
// passed on unread: one of those the SDK cannot read still ends the
// session.

// badLine returns the error reply, with its line break, for body, the
// trimmed line lineNo of the input, if the SDK could not read it as a
// JSON-RPC message or batch; nil if it can.
func badLine(body []byte, lineNo int) []byte {
	if !json.Valid(body) {
		var v json.RawMessage
		err := json.Unmarshal(body, &v)
		return errorReply(nil, jsonrpc.CodeParseError, fmt.Sprintf("parse error: input line %d is not JSON: %v", lineNo, err))
	}
	if body[0] == '[' {
		var batch []json.RawMessage
		_ = json.Unmarshal(body, &batch) // valid JSON starting with [: an array
		if len(batch) == 0 {
			return errorReply(nil, jsonrpc.CodeInvalidRequest, fmt.Sprintf("invalid request: input line %d is an empty batch", lineNo))
		}
		for i, m := range batch {
			if _, err := jsonrpc.DecodeMessage(m); err != nil {
				return errorReply(nil, jsonrpc.CodeInvalidRequest, fmt.Sprintf("invalid request: input line %d, message %d of its batch: %v", lineNo, i+1, err))
			}
		}
		return nil
	}
	if _, err := jsonrpc.DecodeMessage(body); err != nil {
		return errorReply(requestID(body), jsonrpc.CodeInvalidRequest, fmt.Sprintf("invalid request: input line %d is not a JSON-RPC 2.0 message: %v", lineNo, err))
	}
	return nil
}

// requestID returns the id of msg, a JSON object, if it is one a reply
// can carry (a string or a number); nil, JSON null, else.
func requestID(msg []byte) json.RawMessage {
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(msg, &m) != nil {
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
