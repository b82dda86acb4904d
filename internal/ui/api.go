package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// filter reads the filter of a request's query (ns, prefix, class), or
// answers 400 and returns false.
func (s *Server) filter(w http.ResponseWriter, r *http.Request) (Filter, bool) {
	q := r.URL.Query()
	f, err := ParseFilter(q.Get("ns"), q.Get("prefix"), q.Get("class"), s.names)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return f, false
	}
	return f, true
}

// state answers GET /api/state: the Frame, filtered by the query.
func (s *Server) state(w http.ResponseWriter, r *http.Request) {
	f, ok := s.filter(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, s.frame(f))
}

// refresh is how often an event stream gets the frame again when nothing
// changed: it sets the moving times (lease left, renewed by heartbeats,
// which are no change) right, and keeps proxies from closing the stream.
const refresh = 2 * time.Second

// events answers GET /api/events: a stream of server-sent events, "state"
// with the Frame (filtered by the query) at once, after each change, and
// every refresh, until the client leaves or the Server stops.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	f, ok := s.filter(w, r)
	if !ok {
		return
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(w, "retry: 2000\n\n"); err != nil {
		return
	}
	tick := time.NewTicker(refresh)
	defer tick.Stop()
	var sent uint64
	first, due := true, false
	for {
		v, changed := s.current()
		if first || due || v != sent {
			b, err := json.Marshal(s.frame(f))
			if err != nil {
				return
			}
			if _, err := fmt.Fprintf(w, "event: state\nid: %d\ndata: %s\n\n", v, b); err != nil {
				return
			}
			first, due, sent = false, false, v
		}
		if rc.Flush() != nil {
			return
		}
		select {
		case <-changed:
		case <-tick.C:
			due = true
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		}
	}
}

// Timeline is the answer of GET /api/timeline: the spans of one key from
// From to To (the last look), in order of arrival. HistoryFrom is the first
// look: nothing before it was seen.
type Timeline struct {
	Namespace   string     `json:"namespace"`
	Key         string     `json:"key"`
	From        string     `json:"from"`
	To          string     `json:"to"`
	HistoryFrom string     `json:"history_from"`
	IntervalMS  int64      `json:"interval_ms"`
	Spans       []SpanView `json:"spans"`
}

// SpanView is a Span in JSON: times on the Redis clock, "" where unknown or
// not yet. State is "waiting" or "held" while the entry is there, then
// "released" (it held the key) or "left" (it left the queue, or was granted
// and released between two looks).
type SpanView struct {
	Entry     string `json:"entry"`
	State     string `json:"state"`
	Host      string `json:"host"`
	PID       int    `json:"pid"`
	Tool      string `json:"tool"`
	CallID    string `json:"call_id"`
	Tenant    string `json:"tenant"`
	Token     uint64 `json:"token"`
	Enqueued  string `json:"enqueued"`
	Granted   string `json:"granted"`
	SeenUntil string `json:"seen_until"`
	GoneBy    string `json:"gone_by"`
	EndExact  bool   `json:"end_exact"`
	Ended     bool   `json:"ended"`
	Expired   bool   `json:"expired"`
}

// maxMinutes bounds the window of a timeline request.
const maxMinutes = 24 * 60

// timeline answers GET /api/timeline?ns=NS&key=KEY&minutes=M: the spans of
// KEY in the last M minutes (default 5) of namespace NS (default: the only
// one watched).
func (s *Server) timeline(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ns := q.Get("ns")
	if ns == "" && len(s.names) == 1 {
		ns = s.names[0]
	}
	wa := s.watcher(ns)
	key := q.Get("key")
	minutes := 5
	if m := q.Get("minutes"); m != "" {
		n, err := strconv.Atoi(m)
		if err != nil || n < 1 || n > maxMinutes {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("minutes must be a whole number from 1 to %d, got %q", maxMinutes, m))
			return
		}
		minutes = n
	}
	switch {
	case wa == nil:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("ns %q is not a namespace watched here (give ns=, one of %q)", ns, s.names))
		return
	case lanes.ValidateKey(key) != nil:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("bad key: %v", lanes.ValidateKey(key)))
		return
	}
	last := wa.hist.lastLook()
	from := last.Add(-time.Duration(minutes) * time.Minute)
	spans, first, last := wa.hist.spans(key, from)
	t := Timeline{Namespace: ns, Key: key, From: jsonTime(from), To: jsonTime(last), HistoryFrom: jsonTime(first),
		IntervalMS: s.cfg.Interval.Milliseconds(), Spans: make([]SpanView, 0, len(spans))}
	for _, sp := range spans {
		t.Spans = append(t.Spans, spanView(sp))
	}
	writeJSON(w, http.StatusOK, t)
}

func spanView(sp Span) SpanView {
	v := SpanView{Entry: sp.Entry, Host: sp.Host, PID: sp.PID, Tool: sp.Tool, CallID: sp.CallID, Tenant: sp.Tenant,
		Token: sp.Token, Enqueued: jsonTime(sp.Enqueued), Granted: jsonTime(sp.Granted), SeenUntil: jsonTime(sp.SeenUntil),
		GoneBy: jsonTime(sp.GoneBy), EndExact: sp.EndExact, Ended: sp.Ended, Expired: sp.Expired}
	switch {
	case sp.Open() && sp.Granted.IsZero():
		v.State = "waiting"
	case sp.Open():
		v.State = "held"
	case sp.Granted.IsZero():
		v.State = "left"
	default:
		v.State = "released"
	}
	return v
}

// Releaser releases entries by force for the page (`lanectl ui
// --allow-release`), as `lanectl release --force` does.
type Releaser interface {
	// Preview says what releasing entry of namespace would do, for the
	// confirmation: whose entry it is, what it holds or waits for, and
	// what the release should grant.
	Preview(ctx context.Context, namespace, entry string) (*Preview, error)
	// Release releases entry of namespace by force (an operator's
	// release: its owner is told) and says what it was and what was
	// granted next.
	Release(ctx context.Context, namespace, entry string) (*Released, error)
}

// Preview is what a force release of an entry would do.
type Preview struct {
	Namespace string `json:"namespace"`
	Entry     string `json:"entry"`
	Found     bool   `json:"found"` // the entry holds or waits now
	Held      bool   `json:"held"`
	// Question is the confirmation `lanectl release --force` asks on a
	// terminal: the entry, what it holds or waits for, its owner.
	Question string      `json:"question"`
	Next     []NextEntry `json:"next"` // what the release should grant, in order of arrival
}

// NextEntry is an entry a release should grant.
type NextEntry struct {
	Entry  string   `json:"entry"`
	Host   string   `json:"host"`
	PID    int      `json:"pid"`
	Tool   string   `json:"tool"`
	CallID string   `json:"call_id"`
	Keys   []string `json:"keys"`
}

// Released is what a force release did: what the entry was ("held",
// "waiting", or "gone" when it was not found), the keys it held or waited
// for, and the entries the release granted, in grant order.
type Released struct {
	Namespace string   `json:"namespace"`
	Entry     string   `json:"entry"`
	Was       string   `json:"was"`
	Keys      []string `json:"keys"`
	Granted   []string `json:"granted"`
}

// releaseTarget reads and checks the namespace and entry of a release
// request, or answers and returns false.
func (s *Server) releaseTarget(w http.ResponseWriter, ns, entry string) bool {
	if s.cfg.Releaser == nil {
		writeError(w, http.StatusForbidden, "force release is off: start lanectl ui with --allow-release")
		return false
	}
	if s.watcher(ns) == nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("namespace %q is not watched here", ns))
		return false
	}
	if err := lanes.ValidateEntryID(entry); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("bad entry: %v", err))
		return false
	}
	return true
}

// releasePreview answers GET /api/release?ns=NS&entry=ID with a Preview.
func (s *Server) releasePreview(w http.ResponseWriter, r *http.Request) {
	ns, entry := r.URL.Query().Get("ns"), r.URL.Query().Get("entry")
	if !s.releaseTarget(w, ns, entry) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.LookTimeout)
	defer cancel()
	p, err := s.cfg.Releaser.Preview(ctx, ns, entry)
	if err != nil {
		writeError(w, errorCode(err), s.cfg.ErrorText(err))
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// release answers POST /api/release with {"namespace", "entry"}: releases
// the entry by force and answers a Released (404 when it was not found).
func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	if !fromPage(w, r) {
		return
	}
	var body struct {
		Namespace string `json:"namespace"`
		Entry     string `json:"entry"`
	}
	if err := decodeJSON(r, &body); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !s.releaseTarget(w, body.Namespace, body.Entry) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.cfg.LookTimeout)
	defer cancel()
	rel, err := s.cfg.Releaser.Release(ctx, body.Namespace, body.Entry)
	if err != nil {
		writeError(w, errorCode(err), s.cfg.ErrorText(err))
		return
	}
	code := http.StatusOK
	if rel.Was == lanes.Gone.String() {
		code = http.StatusNotFound
	}
	writeJSON(w, code, rel)
}

// errorCode is the status of an answer that failed with err: 503 when the
// lanes cannot be reached, 500 otherwise.
func errorCode(err error) int {
	if errors.Is(err, lanes.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
