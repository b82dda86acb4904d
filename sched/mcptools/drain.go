package mcptools

import (
	"bytes"
	"encoding/json"
	"io"
	"sync"
)

// A client on standard input and output may close its end once it sent
// its last request, without waiting for the answers (a script, `printf
// ... | lanectl mcp serve`). The SDK ends the session at the end of its
// input, dropping what it had not answered; so the proxy holds the end of
// the input back until every request it passed on was answered (or
// cancelled by the client), and the calls in flight run to their end and
// are answered, their lanes released in order. A signal (the context of
// ServeStdio) still ends the session at once.

// inFlight is the set of requests read and not yet answered, by id.
type inFlight struct {
	mu      sync.Mutex
	pending map[string]bool
	idle    chan struct{} // closed while pending is empty
}

func newInFlight() *inFlight {
	idle := make(chan struct{})
	close(idle)
	return &inFlight{pending: map[string]bool{}, idle: idle}
}

func (f *inFlight) add(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.pending) == 0 {
		f.idle = make(chan struct{})
	}
	f.pending[id] = true
}

func (f *inFlight) remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.pending[id] {
		return
	}
	delete(f.pending, id)
	if len(f.pending) == 0 {
		close(f.idle)
	}
}

// pendingID reports whether msg, one message (not a batch), is a request
// whose id a request read before and not yet answered has.
func (f *inFlight) pendingID(msg []byte) bool {
	m, ok := decodeMessage(bytes.TrimSpace(msg))
	if !ok || m.Method == "" {
		return false
	}
	id := canonicalID(m.ID)
	f.mu.Lock()
	defer f.mu.Unlock()
	return id != "" && f.pending[id]
}

// idleCh returns a channel that is closed once no request is pending.
func (f *inFlight) idleCh() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.idle
}

// message is what the drain reads of a JSON-RPC message.
type message struct {
	ID     json.RawMessage
	Method string
	Params struct {
		RequestID json.RawMessage
	}
}

// decodeMessage reads raw, one JSON object, as the SDK does: by member
// names of exactly this case ("id", never "ID", which encoding/json would
// take too; the SDK's decoder does not), the last of a name given twice.
func decodeMessage(raw []byte) (message, bool) {
	var m message
	members := map[string]json.RawMessage{}
	if json.Unmarshal(raw, &members) != nil {
		return m, false
	}
	m.ID = members["id"]
	if raw, ok := members["method"]; ok && json.Unmarshal(raw, &m.Method) != nil {
		m.Method = ""
	}
	params := map[string]json.RawMessage{}
	if raw, ok := members["params"]; ok && json.Unmarshal(raw, &params) == nil {
		m.Params.RequestID = params["requestId"]
	}
	return m, true
}

// canonicalID is id as one spelling: 1 and 1.0, "a" and "\u0061" alike.
func canonicalID(id json.RawMessage) string {
	var v any
	if json.Unmarshal(id, &v) != nil || v == nil {
		return ""
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// sawInput notes the requests of one message or batch read from the
// client, and the requests its notifications/cancelled gives up on.
func (f *inFlight) sawInput(msg []byte) {
	for _, m := range decodeMessages(msg) {
		switch {
		case m.Method == "notifications/cancelled":
			if id := canonicalID(m.Params.RequestID); id != "" {
				f.remove(id)
			}
		case m.Method != "":
			if id := canonicalID(m.ID); id != "" {
				f.add(id)
			}
		}
	}
}

// sawOutput notes the answers of what the proxy wrote to the client.
func (f *inFlight) sawOutput(msg []byte) {
	for _, m := range decodeMessages(msg) {
		if m.Method == "" {
			if id := canonicalID(m.ID); id != "" {
				f.remove(id)
			}
		}
	}
}

// decodeMessages reads a message or a batch; nothing for what is not
// JSON-RPC.
func decodeMessages(msg []byte) []message {
	msg = bytes.TrimSpace(msg)
	if len(msg) == 0 {
		return nil
	}
	if msg[0] == '[' {
		var raws []json.RawMessage
		if json.Unmarshal(msg, &raws) != nil {
			return nil
		}
		var batch []message
		for _, raw := range raws {
			if m, ok := decodeMessage(raw); ok {
				batch = append(batch, m)
			}
		}
		return batch
	}
	m, ok := decodeMessage(msg)
	if !ok {
		return nil
	}
	return []message{m}
}

// answerWatcher passes what the proxy writes on to w, noting the answers.
type answerWatcher struct {
	w       io.WriteCloser
	f       *inFlight
	mu      sync.Mutex
	partial []byte
}

// Write is called by the SDK, one whole message each, and by the reader
// of the input for its error replies: mu keeps their lines apart.
func (a *answerWatcher) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if q := plainParamsError(p); len(q) != len(p) || !bytes.Equal(q, p) {
		if _, err := a.w.Write(q); err != nil {
			return 0, err
		}
		a.f.sawOutput(bytes.TrimSuffix(q, []byte("\n")))
		return len(p), nil
	}
	n, err := a.w.Write(p)
	a.partial = append(a.partial, p[:n]...)
	for {
		i := bytes.IndexByte(a.partial, '\n')
		if i < 0 {
			break
		}
		a.f.sawOutput(a.partial[:i])
		a.partial = a.partial[i+1:]
	}
	if len(a.partial) > maxTagged { // not newline-delimited JSON: stop looking
		a.partial = a.partial[:0]
	}
	return n, err
}

func (a *answerWatcher) Close() error { return a.w.Close() }
