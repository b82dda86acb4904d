package redislane

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// The parsers of script replies. A reply that does not have the documented
// shape means a script and this package disagree (a half-upgraded fleet);
// it is reported as ErrUnavailable, never as a panic.

func malformed(what string, v any) error {
	return fmt.Errorf("%w: malformed %s reply from Redis: %.200v", lanes.ErrUnavailable, what, v)
}

// parseStatuses reads the flat reply of enqueue.lua and heartbeat.lua
// (docs/PROTOCOL.md, protocol 4): {epoch, more, then per status: id,
// state, seq, wait ms, holder TTL ms, n, and n values}, n statuses. A
// heartbeat's "f" (gone: released by force, while its tombstone lives) is
// Gone with Forced set; the scripts before it sent "g" there, which reads
// as Gone as before.
func parseStatuses(v any, n int) ([]lanes.Status, error) {
	f, ok := v.([]any)
	if !ok || len(f) < 2 {
		return nil, malformed("status", v)
	}
	epoch, ok1 := f[0].(string)
	more, ok2 := f[1].(int64)
	if !ok1 || !ok2 || (more != 0 && more != 1) {
		return nil, malformed("status", v)
	}
	out := make([]lanes.Status, n)
	at := 2
	for i := range out {
		if at+6 > len(f) {
			return nil, malformed("status", v)
		}
		id, ok1 := f[at].(string)
		state, ok2 := f[at+1].(string)
		seq, ok3 := f[at+2].(int64)
		wait, ok4 := f[at+3].(int64)
		ttl, ok5 := f[at+4].(int64)
		m, ok6 := f[at+5].(int64)
		if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || seq < 0 || wait < 0 || ttl < 0 || m < 0 || int64(len(f)-at-6) < m {
			return nil, malformed("status", v)
		}
		detail := f[at+6 : at+6+int(m)]
		at += 6 + int(m)
		refused := state == "e" || state == "x" || state == "t" || state == "b"
		if (refused && len(detail) != 1) || (state == "c" && len(detail) != 2) || ((state == "g" || state == "f") && len(detail) != 0) ||
			(!refused && state != "c" && len(detail)%2 != 0) {
			return nil, malformed("status", v)
		}
		// every key, token, message and cycle is a string; a position an
		// integer
		for j, d := range detail {
			if state == "w" && j%2 == 1 {
				if p, ok := d.(int64); !ok || p < 1 {
					return nil, malformed("status", v)
				}
			} else if _, ok := d.(string); !ok {
				return nil, malformed("status", v)
			}
		}
		st := lanes.Status{ID: id, Epoch: epoch, Backlog: more == 1, Seq: uint64(seq)}
		if wait > 0 { // rate lanes: ms until a rate could have room
			st.RateWait = time.Duration(wait) * time.Millisecond
		}
		if ttl > 0 && state == "w" { // ms until the first lease of a holder before it runs out
			st.HolderTTL = time.Duration(ttl) * time.Millisecond
		}
		switch state {
		case "h":
			st.State = lanes.Held
			st.Tokens = make(map[string]uint64, len(detail)/2)
			for j := 0; j < len(detail); j += 2 {
				k, _ := detail[j].(string)
				s, _ := detail[j+1].(string)
				tok, err := strconv.ParseUint(s, 10, 64)
				if err != nil {
					return nil, malformed("token", v)
				}
				st.Tokens[k] = tok
			}
		case "w":
			st.State = lanes.Waiting
			if len(detail) > 0 {
				st.Positions = make(map[string]int, len(detail)/2)
				for j := 0; j < len(detail); j += 2 {
					k, _ := detail[j].(string)
					p, _ := detail[j+1].(int64)
					st.Positions[k] = int(p)
				}
			}
		case "g":
			st.State = lanes.Gone
		case "f":
			st.State, st.Forced = lanes.Gone, true
		case "e":
			msg, _ := detail[0].(string)
			st.State, st.Err = lanes.Gone, &lanes.EntryError{Err: lanes.ErrNotHolder, Reason: msg}
		case "x":
			st.State, st.Err = lanes.Gone, &lanes.IDConflictError{ID: id}
		case "t":
			msg, _ := detail[0].(string)
			st.State, st.Err = lanes.Gone, fmt.Errorf("%w: %s", lanes.ErrIDRetired, msg)
		case "b":
			msg, _ := detail[0].(string)
			st.State, st.Err = lanes.Gone, &lanes.InvalidError{Field: "lineage", Detail: msg}
		case "c":
			path, _ := detail[0].(string)
			ce := &lanes.LockCycleError{Path: path}
			if raw, ok := detail[1].(string); ok {
				var who struct {
					Entries []string `json:"entries"`
					Keys    []string `json:"keys"`
				}
				if json.Unmarshal([]byte(raw), &who) == nil {
					ce.Entries, ce.Keys = who.Entries, who.Keys
				}
			}
			st.State, st.Err = lanes.Gone, ce
		default:
			return nil, malformed("status", v)
		}
		out[i] = st
	}
	if at != len(f) {
		return nil, malformed("status", v)
	}
	return out, nil
}

func parseState(s any) (lanes.State, bool) {
	switch s {
	case "h":
		return lanes.Held, true
	case "w":
		return lanes.Waiting, true
	case "g":
		return lanes.Gone, true
	}
	return lanes.Gone, false
}

// parseReleased reads the flat reply of release.lua and record.lua
// (docs/PROTOCOL.md, protocol 3): {epoch, the state of each of the n ids,
// then the ids the step granted}.
func parseReleased(v any, n int) (lanes.Released, error) {
	f, ok := v.([]any)
	if !ok || len(f) < 1+n {
		return lanes.Released{}, malformed("release", v)
	}
	epoch, ok := f[0].(string)
	if !ok {
		return lanes.Released{}, malformed("release", v)
	}
	r := lanes.Released{Was: make([]lanes.State, n), Forced: make([]bool, n), Revoked: make([]bool, n), Epoch: epoch}
	for i, s := range f[1 : 1+n] {
		switch s {
		case "f":
			r.Forced[i] = true
			continue
		case "l":
			r.Revoked[i] = true
			continue
		}
		st, ok := parseState(s)
		if !ok {
			return lanes.Released{}, malformed("release", v)
		}
		r.Was[i] = st
	}
	for _, g := range f[1+n:] {
		id, ok := g.(string)
		if !ok || id == "" {
			return lanes.Released{}, malformed("release", v)
		}
		r.Granted = append(r.Granted, id)
	}
	return r, nil
}

// record is an entry as lib.lua stores it.
type record struct {
	ID       string            `json:"id"`
	Owner    string            `json:"o"`
	Host     string            `json:"h"`
	PID      int               `json:"p"`
	CallID   string            `json:"c"`
	Tool     string            `json:"t"`
	Tenant   string            `json:"n"`
	Lineage  []string          `json:"l"`
	Lanes    [][]any           `json:"k"`
	Enqueued int64             `json:"e"`
	Granted  int64             `json:"g"`
	Tokens   map[string]string `json:"x"`
	Revoked  int               `json:"v"`
	Kept     int               `json:"z"`
}

func msTime(ms int64) time.Time { return time.UnixMilli(ms) }

func (r *record) entry() lanes.Entry {
	e := lanes.Entry{
		ID: r.ID, Owner: lanes.Owner{ID: r.Owner, Host: r.Host, PID: r.PID},
		CallID: r.CallID, Tool: r.Tool, Tenant: r.Tenant, Lineage: r.Lineage,
		Enqueued: msTime(r.Enqueued),
	}
	for _, kl := range r.Lanes {
		if len(kl) < 2 {
			continue
		}
		k, _ := kl[0].(string)
		l, _ := kl[1].(float64)
		lane := lanes.Lane{Key: k, Limit: int(l)}
		if len(kl) == 5 { // rate lanes
			rl, _ := kl[2].(float64)
			per, _ := kl[3].(float64)
			cost, _ := kl[4].(float64)
			lane.Rate, lane.Cost = lanes.Rate{Limit: int(rl), Per: time.Duration(per) * time.Millisecond}, int(cost)
		}
		e.Lanes = append(e.Lanes, lane)
	}
	return e
}

// page is one inspect.lua page.
type page struct {
	lanes.Snapshot
	keys []pageKey
}

// pageKey is one key of a page, with the cursor to go on with.
type pageKey struct {
	lanes.KeyState
	next string
}

// parsePage reads {now, epoch, {{key, limit, nh, nw, holders, waiters,
// next}, ...}, {expired, evicted, revoked, resets, frozen, reset}}: n keys.
func parsePage(v any, n int) (*page, error) {
	f, ok := v.([]any)
	if !ok || len(f) != 4 {
		return nil, malformed("inspect", v)
	}
	now, ok1 := f[0].(int64)
	epoch, ok2 := f[1].(string)
	keys, ok3 := f[2].([]any)
	stats, ok4 := f[3].([]any)
	if !ok1 || !ok2 || !ok3 || !ok4 || len(stats) != 6 || (epoch != "" && len(keys) != n) {
		return nil, malformed("inspect", v)
	}
	p := &page{Snapshot: lanes.Snapshot{Time: msTime(now), Epoch: epoch}}
	var counts [6]uint64
	for i := range counts {
		c, _ := stats[i].(int64)
		counts[i] = uint64(max(c, 0))
	}
	p.Stats = lanes.Stats{ExpiredHolders: counts[0], EvictedWaiters: counts[1], Revoked: counts[2], Resets: counts[3]}
	p.Reset = counts[5] == 1
	if counts[4] > uint64(now) {
		p.Frozen = msTime(int64(counts[4]))
	}
	for _, kv := range keys {
		kf, ok := kv.([]any)
		if !ok || len(kf) < 7 || len(kf) > 8 {
			return nil, malformed("inspect", v)
		}
		key, _ := kf[0].(string)
		limit, _ := kf[1].(int64)
		hs, ok1 := kf[4].([]any)
		ws, ok2 := kf[5].([]any)
		next, ok3 := kf[6].(string)
		if !ok1 || !ok2 || !ok3 {
			return nil, malformed("inspect", v)
		}
		ks := pageKey{KeyState: lanes.KeyState{Key: key, Limit: int(limit)}, next: next}
		if len(kf) == 8 {
			ks.Rate = parseRateView(kf[7])
		}
		for _, h := range hs {
			rec, deadline, err := parsePair(h)
			if err != nil {
				return nil, err
			}
			tok, _ := strconv.ParseUint(rec.Tokens[key], 10, 64)
			ks.Holders = append(ks.Holders, lanes.Holder{Entry: rec.entry(), Token: tok, Granted: msTime(rec.Granted), Expires: deadline,
				Ended: rec.Revoked+rec.Kept > 0})
		}
		for i, w := range ws {
			rec, deadline, err := parsePair(w)
			if err != nil {
				return nil, err
			}
			ks.Waiters = append(ks.Waiters, lanes.Waiter{Entry: rec.entry(), Position: i + 1, Expires: deadline})
		}
		p.keys = append(p.keys, ks)
	}
	return p, nil
}

// parsePair reads {entry JSON, deadline, id}. A record that does not
// decode (written by another version, or damaged) is shown with its id
// alone: inspecting a namespace never fails because of what it holds.
func parsePair(v any) (*record, time.Time, error) {
	f, ok := v.([]any)
	if !ok || len(f) != 3 {
		return nil, time.Time{}, malformed("inspect entry", v)
	}
	raw, _ := f[0].(string)
	var rec record
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		rec = record{}
	}
	rec.ID, _ = f[2].(string)
	dl, _ := f[1].(string)
	d, _ := strconv.ParseFloat(dl, 64)
	return &rec, msTime(int64(d)), nil
}

// parseHints reads a hint message: a JSON list of {"id", "q", "x", "g"}
// (see lib.lua's finish). Anything else is read as one hint with no id,
// about every entry (lanes.Hint), so that a malformed message costs a poll
// of the owner's entries, never a grant nor a lost wake-up. The messages as lib.lua writes them are read by readHints, without
// reflection; any other goes through encoding/json (parseHintsJSON), and
// both read a message readHints takes alike (a test holds them equal).
func parseHints(payload string) []lanes.Hint {
	if out, ok := readHints(payload); ok {
		return out
	}
	return parseHintsJSON(payload)
}

// parseHintsJSON is parseHints by encoding/json.
func parseHintsJSON(payload string) []lanes.Hint {
	var msgs []struct {
		ID string            `json:"id"`
		Q  uint64            `json:"q"`
		X  map[string]string `json:"x"`
		G  int64             `json:"g"`
	}
	if err := json.Unmarshal([]byte(payload), &msgs); err != nil || msgs == nil {
		return []lanes.Hint{{}} // not a list of hints: ask about every entry
	}
	out := make([]lanes.Hint, 0, len(msgs))
	for _, m := range msgs {
		h := lanes.Hint{ID: m.ID, Seq: m.Q}
		if m.G > 0 {
			h.Granted = msTime(m.G)
		}
		if len(m.X) > 0 {
			h.Tokens = make(map[string]uint64, len(m.X))
			for k, v := range m.X {
				tok, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					h.Tokens = nil // not a grant it can trust: poll
					break
				}
				h.Tokens[k] = tok
			}
		}
		out = append(out, h)
	}
	return out
}

// readHints reads a hint message written as cjson writes lib.lua's: a
// list of objects with the keys id (a string), q and g (whole numbers) and
// x (an object of strings), each at most once, in any order, with no
// space, no escape and no byte outside printable ASCII in a string, and
// numbers as plain digits. It reports false for any other message, which
// it leaves to parseHintsJSON.
func readHints(p string) ([]lanes.Hint, bool) {
	r := hintReader{p: p}
	if !r.byte('[') {
		return nil, false
	}
	out := make([]lanes.Hint, 0, 1)
	if r.byte(']') {
		return out, r.i == len(p)
	}
	for {
		h, ok := r.hint()
		if !ok {
			return nil, false
		}
		out = append(out, h)
		if r.byte(']') {
			return out, r.i == len(p)
		}
		if !r.byte(',') {
			return nil, false
		}
	}
}

// hintReader reads a hint message from p, at i.
type hintReader struct {
	p string
	i int
}

// byte takes c if it comes next.
func (r *hintReader) byte(c byte) bool {
	if r.i < len(r.p) && r.p[r.i] == c {
		r.i++
		return true
	}
	return false
}

// str reads a string of printable ASCII without escapes.
func (r *hintReader) str() (string, bool) {
	if !r.byte('"') {
		return "", false
	}
	for j := r.i; j < len(r.p); j++ {
		switch c := r.p[j]; {
		case c == '"':
			s := r.p[r.i:j]
			r.i = j + 1
			return s, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return "", false
		}
	}
	return "", false
}

// num reads a whole number of plain digits (no sign, no leading zero, no
// fraction or exponent) up to max.
func (r *hintReader) num(max uint64) (uint64, bool) {
	j := r.i
	for j < len(r.p) && r.p[j] >= '0' && r.p[j] <= '9' {
		j++
	}
	if j == r.i || (r.p[r.i] == '0' && j > r.i+1) {
		return 0, false
	}
	n, err := strconv.ParseUint(r.p[r.i:j], 10, 64)
	if err != nil || n > max {
		return 0, false
	}
	r.i = j
	return n, true
}

// hint reads one {"id", "q", "x", "g"} object as parseHintsJSON makes it a
// Hint.
func (r *hintReader) hint() (lanes.Hint, bool) {
	var h lanes.Hint
	if !r.byte('{') {
		return h, false
	}
	if r.byte('}') {
		return h, true
	}
	var seen [len(hintKeys)]bool
	for {
		k, ok := r.str()
		if !ok || !r.byte(':') {
			return h, false
		}
		f := slices.Index(hintKeys[:], k)
		if f < 0 || seen[f] {
			return h, false
		}
		seen[f] = true
		switch k {
		case "id":
			if h.ID, ok = r.str(); !ok {
				return h, false
			}
		case "q":
			if h.Seq, ok = r.num(math.MaxUint64); !ok {
				return h, false
			}
		case "g":
			g, ok := r.num(math.MaxInt64)
			if !ok {
				return h, false
			}
			if g > 0 {
				h.Granted = msTime(int64(g))
			}
		case "x":
			if h.Tokens, ok = r.tokens(); !ok {
				return h, false
			}
		}
		if r.byte('}') {
			return h, true
		}
		if !r.byte(',') {
			return h, false
		}
	}
}

// hintKeys are the keys of a hint object that readHints knows.
var hintKeys = [...]string{"id", "q", "x", "g"}

// tokens reads the object of a grant's tokens, key to token as a string:
// nil when it is empty or a token is not a whole number (not a grant the
// Session can trust: it polls), as parseHintsJSON reads it. A key named
// twice is left to parseHintsJSON.
func (r *hintReader) tokens() (map[string]uint64, bool) {
	if !r.byte('{') {
		return nil, false
	}
	if r.byte('}') {
		return nil, true
	}
	var tokens map[string]uint64
	bad := false
	for {
		k, ok := r.str()
		if !ok || !r.byte(':') {
			return nil, false
		}
		v, ok := r.str()
		if !ok {
			return nil, false
		}
		if tokens == nil {
			tokens = make(map[string]uint64, 1)
		}
		if _, dup := tokens[k]; dup {
			return nil, false
		}
		tok, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			bad = true
		}
		tokens[k] = tok
		if r.byte('}') {
			break
		}
		if !r.byte(',') {
			return nil, false
		}
	}
	if bad {
		return nil, true
	}
	return tokens, true
}

// parseRateView reads a key's window from inspect.lua (rate lanes): {} or
// {rate limit, window ms, units spent, ms the oldest units leave (0:
// none)}. nil when the key has no rate.
func parseRateView(v any) *lanes.RateWindow {
	f, ok := v.([]any)
	if !ok || len(f) != 4 {
		return nil
	}
	var n [4]int64
	for i := range n {
		n[i], _ = f[i].(int64)
	}
	w := &lanes.RateWindow{Rate: lanes.Rate{Limit: int(n[0]), Per: time.Duration(n[1]) * time.Millisecond}, Spent: int(n[2])}
	if n[3] > 0 {
		w.NextFree = msTime(n[3])
	}
	return w
}

// parseRateMismatch reads LANES_RATE's "<recorded limit> <recorded ms>
// <requested limit> <requested ms> <key>"; nil when it does not parse.
func parseRateMismatch(rest string) *lanes.RateMismatchError {
	f := strings.SplitN(rest, " ", 5)
	if len(f) != 5 {
		return nil
	}
	var n [4]int
	for i := range n {
		var err error
		if n[i], err = strconv.Atoi(f[i]); err != nil {
			return nil
		}
	}
	rate := func(l, ms int) lanes.Rate {
		if l == 0 {
			return lanes.Rate{}
		}
		return lanes.Rate{Limit: l, Per: time.Duration(ms) * time.Millisecond}
	}
	return &lanes.RateMismatchError{Key: f[4], Recorded: rate(n[0], n[1]), Requested: rate(n[2], n[3])}
}
