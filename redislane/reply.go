package redislane

import (
	"encoding/json"
	"fmt"
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

// parseStatuses reads {epoch, {{id, state, {key, value, ...}, seq}, ...},
// more}.
func parseStatuses(v any, n int) ([]lanes.Status, error) {
	top, ok := v.([]any)
	if !ok || len(top) != 3 {
		return nil, malformed("status", v)
	}
	more, ok := top[2].(int64)
	if !ok {
		return nil, malformed("status", v)
	}
	epoch, ok1 := top[0].(string)
	list, ok2 := top[1].([]any)
	if !ok1 || !ok2 || len(list) != n {
		return nil, malformed("status", v)
	}
	out := make([]lanes.Status, n)
	for i, item := range list {
		f, ok := item.([]any)
		if !ok || len(f) < 3 || len(f) > 4 {
			return nil, malformed("status", v)
		}
		id, _ := f[0].(string)
		state, _ := f[1].(string)
		detail, ok := f[2].([]any)
		refused := state == "e" || state == "x" || state == "t" || state == "b"
		if !ok || (refused && len(detail) != 1) || (state == "c" && len(detail) != 2) ||
			(!refused && state != "c" && len(detail)%2 != 0) {
			return nil, malformed("status", v)
		}
		st := lanes.Status{ID: id, Epoch: epoch, Backlog: more == 1}
		if len(f) == 4 {
			seq, _ := f[3].(int64)
			st.Seq = uint64(max(seq, 0))
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

// parseReleased reads {epoch, {state per id}, {granted ids}}.
func parseReleased(v any, n int) (lanes.Released, error) {
	f, ok := v.([]any)
	if !ok || len(f) != 3 {
		return lanes.Released{}, malformed("release", v)
	}
	was, ok1 := f[1].([]any)
	granted, ok2 := f[2].([]any)
	if !ok1 || !ok2 || len(was) != n {
		return lanes.Released{}, malformed("release", v)
	}
	epoch, ok := f[0].(string)
	if !ok {
		return lanes.Released{}, malformed("release", v)
	}
	r := lanes.Released{Was: make([]lanes.State, n), Forced: make([]bool, n), Epoch: epoch}
	for i, s := range was {
		if s == "f" {
			r.Forced[i] = true
			continue
		}
		st, ok := parseState(s)
		if !ok {
			return lanes.Released{}, malformed("release", v)
		}
		r.Was[i] = st
	}
	for _, g := range granted {
		id, ok := g.(string)
		if !ok {
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
	Lanes    [][2]any          `json:"k"`
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
		k, _ := kl[0].(string)
		l, _ := kl[1].(float64)
		e.Lanes = append(e.Lanes, lanes.Lane{Key: k, Limit: int(l)})
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
// next}, ...}, {expired, evicted, revoked, resets, frozen}}: n keys.
func parsePage(v any, n int) (*page, error) {
	f, ok := v.([]any)
	if !ok || len(f) != 4 {
		return nil, malformed("inspect", v)
	}
	now, ok1 := f[0].(int64)
	epoch, ok2 := f[1].(string)
	keys, ok3 := f[2].([]any)
	stats, ok4 := f[3].([]any)
	if !ok1 || !ok2 || !ok3 || !ok4 || len(stats) != 5 || (epoch != "" && len(keys) != n) {
		return nil, malformed("inspect", v)
	}
	p := &page{Snapshot: lanes.Snapshot{Time: msTime(now), Epoch: epoch}}
	var counts [5]uint64
	for i := range counts {
		c, _ := stats[i].(int64)
		counts[i] = uint64(max(c, 0))
	}
	p.Stats = lanes.Stats{ExpiredHolders: counts[0], EvictedWaiters: counts[1], Revoked: counts[2], Resets: counts[3]}
	if counts[4] > uint64(now) {
		p.Frozen = msTime(int64(counts[4]))
	}
	for _, kv := range keys {
		kf, ok := kv.([]any)
		if !ok || len(kf) != 7 {
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

// parseHints reads a hint message: a JSON list of {"id", "q", "x"} (see
// lib.lua's finish). Anything else is read as space-separated ids, hints
// without a grant, so that a malformed message costs a poll, not a grant.
func parseHints(payload string) []lanes.Hint {
	var msgs []struct {
		ID string            `json:"id"`
		Q  uint64            `json:"q"`
		X  map[string]string `json:"x"`
		G  int64             `json:"g"`
	}
	if err := json.Unmarshal([]byte(payload), &msgs); err != nil {
		var out []lanes.Hint
		for _, id := range strings.Fields(payload) {
			out = append(out, lanes.Hint{ID: id})
		}
		return out
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
