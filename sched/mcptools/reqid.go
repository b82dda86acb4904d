package mcptools

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// The SDK does not hand a tool handler the JSON-RPC id of its request, and
// the proxy names each call by it (the call id `lanectl status` shows). So
// the proxy reads each message before the SDK does and writes the id of a
// tools/call request into its params' _meta, under metaRequestID, in
// place of anything the client put there. A message it cannot read is
// passed on untouched, for the SDK to answer (over HTTP; on standard
// input the proxy answers it, see badLine).

// metaRequestID is the _meta key the proxy puts a tools/call's request id
// under.
const metaRequestID = "lanes/requestId"

// maxTagged bounds the messages the proxy reads for their id: longer ones
// are passed on untouched (their calls get an id of the proxy's own).
const maxTagged = 4 << 20

// tagRequestID returns msg, a JSON-RPC message or batch, with the id of
// each tools/call request written into its params' _meta.
func tagRequestID(msg []byte) (out []byte) {
	defer func() {
		// It runs in the SDK's reading goroutine, where a panic ends the
		// process: a message it cannot tag goes on as it came.
		if recover() != nil {
			out = msg
		}
	}()
	if !bytes.Contains(msg, []byte(`tools/call`)) && !bytes.Contains(msg, []byte(`\`)) {
		return msg // the common case, read no further (an escape may spell it otherwise: "tools\/call")
	}
	trimmed := bytes.TrimSpace(msg)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var batch []json.RawMessage
		if json.Unmarshal(trimmed, &batch) != nil {
			return msg
		}
		for i, m := range batch {
			batch[i] = tagOne(m)
		}
		out, err := marshal(batch)
		if err != nil {
			return msg
		}
		return out
	}
	return tagOne(msg)
}

// marshal is json.Marshal without its escapes of <, > and &, which make a
// message of them six times as long (past the SDK's limit on a line): what
// the client wrote, the proxy passes on as written.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// tagOne tags one message, a JSON object.
func tagOne(msg []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(msg, &m) != nil {
		return msg
	}
	var method string
	id, hasID := m["id"]
	if !hasID || json.Unmarshal(m["method"], &method) != nil || method != "tools/call" {
		return msg
	}
	params := map[string]json.RawMessage{}
	if raw, ok := m["params"]; ok && (json.Unmarshal(raw, &params) != nil || params == nil) {
		return msg // params not an object (null leaves the map nil): the SDK answers it
	}
	meta := map[string]json.RawMessage{}
	if raw, ok := params["_meta"]; ok && string(raw) != "null" && json.Unmarshal(raw, &meta) != nil {
		return msg
	}
	meta[metaRequestID] = id
	var err error
	if params["_meta"], err = marshal(meta); err != nil {
		return msg
	}
	if m["params"], err = marshal(params); err != nil {
		return msg
	}
	out, err := marshal(m)
	if err != nil {
		return msg
	}
	return out
}

// tagReader returns r, newline-delimited JSON-RPC messages (the stdio
// transport), with each message tagged. With flight, it notes the
// requests read, and holds the end of r back until flight has none left
// unanswered or done is closed (see inFlight). With reply, a line that is
// not a JSON-RPC message the SDK takes (see badLine), or is longer than
// maxTagged, is answered there with a JSON-RPC error and not passed on.
func tagReader(r io.ReadCloser, flight *inFlight, done <-chan struct{}, reply io.Writer) io.ReadCloser {
	return &taggingReader{r: bufio.NewReaderSize(r, 64<<10), c: r, flight: flight, done: done, reply: reply}
}

type taggingReader struct {
	r      *bufio.Reader
	c      io.Closer
	flight *inFlight
	done   <-chan struct{}
	reply  io.Writer

	lineNo int             // the lines read, counting the one being read
	line   []byte          // the message being read, up to maxTagged bytes
	out    []byte          // what Read gives next
	long   bool            // the message passed maxTagged: passed on untouched (answered, with reply)
	longID json.RawMessage // the id such a message gives before maxTagged, or nil
	err    error
}

func (t *taggingReader) Read(p []byte) (int, error) {
	for len(t.out) == 0 {
		if t.err != nil {
			if t.flight != nil {
				select {
				case <-t.flight.idleCh(): // every request answered: end the session
				case <-t.done:
				}
				t.flight = nil
			}
			return 0, t.err
		}
		chunk, err := t.r.ReadSlice('\n')
		switch {
		case t.long:
			if t.reply == nil {
				t.out = append(t.out[:0], chunk...)
			}
		case len(t.line)+len(chunk) > maxTagged+len("\r\n"): // the line break may follow
			if t.reply == nil {
				t.out = append(append(t.out[:0], t.line...), chunk...)
			} else {
				t.longID = prefixID(append(t.line, chunk...))
			}
			t.line, t.long = t.line[:0], true
		default:
			t.line = append(t.line, chunk...)
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue // more of the same message
		case err != nil:
			t.err = err
		}
		if len(t.line) > 0 || t.long {
			t.lineNo++
		}
		if !t.long && t.reply != nil && len(bytes.TrimRight(t.line, "\r\n")) > maxTagged {
			t.longID, t.long = prefixID(t.line), true // over by its last byte or two
		}
		switch {
		case t.long && t.reply != nil:
			// answered, not passed on: the SDK would end the session at
			// one it cannot read, and the drain could not see its id
			_, _ = t.reply.Write(errorReply(t.longID, jsonrpc.CodeInvalidRequest, fmt.Sprintf("invalid request: input line %d is longer than %d MiB, the most this server reads in a line", t.lineNo, maxTagged>>20)))
		case !t.long && len(t.line) > 0:
			t.pass(t.line)
		}
		t.line, t.long = t.line[:0], false
	}
	n := copy(p, t.out)
	t.out = t.out[n:]
	return n, nil
}

// pass puts line, one whole line read, in t.out for the SDK: tagged, or
// with reply, nothing if it is blank or answered as a bad line.
func (t *taggingReader) pass(line []byte) {
	if t.reply == nil {
		t.out = append(t.out[:0], tagLine(line)...)
		if t.flight != nil {
			t.flight.sawInput(line)
		}
		return
	}
	// The SDK reads a JSON value and wants a line break right after it: no
	// trailing blanks. A blank line it skips.
	body := bytes.TrimSpace(line)
	if len(body) == 0 {
		return
	}
	if answer := badLine(body, t.lineNo); answer != nil {
		_, _ = t.reply.Write(answer) // a client gone: the session ends anyway
		return
	}
	if t.flight != nil && body[0] == '{' && t.flight.pendingID(body) {
		// JSON-RPC ids name one request each: the SDK dropped a second
		// request with the id of one in flight, unanswered (a break-it
		// review), and its answer would have been taken for the first's.
		id := requestID(body)
		_, _ = t.reply.Write(errorReply(id, jsonrpc.CodeInvalidRequest, fmt.Sprintf("invalid request: input line %d has the id %s of a request still in flight; give each request an id of its own", t.lineNo, id)))
		return
	}
	t.out = append(t.out[:0], tagRequestID(body)...)
	if line[len(line)-1] == '\n' {
		t.out = append(t.out, '\n')
	}
	if t.flight != nil {
		t.flight.sawInput(body)
	}
}

func (t *taggingReader) Close() error { return t.c.Close() }

// tagLine tags one line, keeping its line break.
func tagLine(line []byte) []byte {
	body := bytes.TrimRight(line, "\r\n")
	tagged := tagRequestID(body)
	if len(tagged) == len(body) && bytes.Equal(tagged, body) {
		return line
	}
	return append(tagged, line[len(body):]...)
}

// tagHTTP returns h with the body of each POST tagged.
func tagHTTP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.Body == nil {
			h.ServeHTTP(w, req)
			return
		}
		body, err := io.ReadAll(io.LimitReader(req.Body, maxTagged+1))
		if err != nil {
			http.Error(w, "cannot read the request: "+err.Error(), http.StatusBadRequest)
			return
		}
		if len(body) > maxTagged {
			req.Body = readCloser{io.MultiReader(bytes.NewReader(body), req.Body), req.Body}
			h.ServeHTTP(w, req)
			return
		}
		body = tagRequestID(body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		h.ServeHTTP(w, req)
	})
}

type readCloser struct {
	io.Reader
	io.Closer
}

// prefixID returns the id of the JSON-RPC message that msg, its first
// bytes, begins, if a member "id" of the top-level object comes whole
// within them and is a string or a plain integer; nil otherwise.
func prefixID(msg []byte) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(msg))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil // cut off within a value before the id
		}
		if key == "id" {
			if len(v) > 0 && (v[0] == '"' || plainInt(v)) {
				return v
			}
			return nil
		}
	}
	return nil
}
