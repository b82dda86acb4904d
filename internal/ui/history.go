package ui

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// The history of a namespace is what the UI itself saw: the snapshots it
// takes every interval, nothing the scripts record. Each entry seen on a
// key becomes a span: enqueued and granted come from the backend (exact,
// even for a wait never seen), the end is bounded by two looks (last seen,
// first seen gone), except at a hand-off on a key of limit 1, where the
// successor's grant time is the release's. An entry enqueued, granted and
// released between two looks is never seen.

// Span is one entry's time on one key, as the UI saw it: waiting from
// Enqueued, holding from Granted (zero if never seen holding), gone between
// SeenUntil and GoneBy (both zero while it is still there). Times are the
// Redis clock's.
type Span struct {
	Key      string
	Entry    string
	Host     string
	PID      int
	Tool     string
	CallID   string
	Tenant   string
	Token    uint64
	Enqueued time.Time
	Granted  time.Time
	Expires  time.Time // when its lease or wait ended unless renewed, as last seen
	// SeenUntil is the last look that saw it, GoneBy the first that did
	// not (or, at a hand-off, the successor's grant): it left in between.
	SeenUntil time.Time
	GoneBy    time.Time
	// EndExact says GoneBy is when it left: a waiter of a key of limit 1
	// was granted the key by its release (a hand-off).
	EndExact bool
	Ended    bool // seen as an ended holder (lanes.Holder.Ended)
	// Expired says its lease ran out rather than being released: it left
	// after its last known deadline while the namespace's count of expired
	// leases grew.
	Expired bool
	// LeaseMax is the longest lease left seen: about its TTL.
	LeaseMax time.Duration

	heldSeen time.Time // the first look that saw it holding
}

// Open reports whether the span's entry was still there at the last look.
func (s *Span) Open() bool { return s.GoneBy.IsZero() }

type spanKey struct{ key, entry string }

// history keeps one namespace's spans: those still open, and a ring of the
// closed ones, at most max of them and none that ended more than keep
// before the last look. It is safe for concurrent use.
type history struct {
	max  int
	keep time.Duration

	mu      sync.Mutex
	from    time.Time // the first good look
	last    time.Time // the last good look
	expired uint64    // Stats.ExpiredHolders at the last look
	open    map[spanKey]*Span
	ring    []Span // closed spans, oldest at head
	head    int
}

func newHistory(max int, keep time.Duration) *history {
	return &history{max: max, keep: keep, open: map[spanKey]*Span{}}
}

// observe records what snap shows: new spans for entries first seen, the
// grant of a waiter seen holding, and the end of each open span whose
// entry snap no longer has.
func (h *history) observe(snap *lanes.Snapshot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := snap.Time
	if h.from.IsZero() {
		h.from = now
	}
	seen := make(map[spanKey]bool, len(h.open))
	var gone []*Span
	for _, k := range snap.Keys {
		for _, ho := range k.Holders {
			s := h.span(k.Key, ho.Entry, &ho, now, &gone)
			s.Token, s.Expires, s.Ended = ho.Token, ho.Expires, s.Ended || ho.Ended
			if s.heldSeen.IsZero() {
				s.Granted, s.heldSeen = ho.Granted, now
			}
			s.LeaseMax = max(s.LeaseMax, ho.Expires.Sub(now))
			seen[spanKey{k.Key, ho.ID}] = true
		}
		for _, w := range k.Waiters {
			s := h.span(k.Key, w.Entry, nil, now, &gone)
			s.Expires = w.Expires
			seen[spanKey{k.Key, w.ID}] = true
		}
	}
	for sk, s := range h.open {
		if !seen[sk] {
			delete(h.open, sk)
			gone = append(gone, s)
		}
	}
	expiredMore := snap.Stats.ExpiredHolders > h.expired && !h.last.IsZero()
	for _, s := range gone {
		s.GoneBy = now
		if !s.Granted.IsZero() {
			h.handOff(s, snap)
			s.Expired = expiredMore && !s.Expires.After(s.GoneBy)
		}
		h.push(*s)
	}
	h.last, h.expired = now, snap.Stats.ExpiredHolders
	h.prune()
}

// span returns the open span of entry e on key, made if new, and marks it
// seen at now; ho is e as a holder, nil when e waits. An open span of an
// earlier entry under e's id (it left, and an entry was enqueued again
// under the same id, between two looks) is added to gone and replaced.
func (h *history) span(key string, e lanes.Entry, ho *lanes.Holder, now time.Time, gone *[]*Span) *Span {
	sk := spanKey{key, e.ID}
	s := h.open[sk]
	if s != nil && s.again(e, ho) {
		*gone = append(*gone, s)
		s = nil
	}
	if s == nil {
		s = &Span{Key: key, Entry: e.ID, Host: e.Owner.Host, PID: e.Owner.PID, Tool: e.Tool,
			CallID: e.CallID, Tenant: e.Tenant, Enqueued: e.Enqueued}
		h.open[sk] = s
	}
	s.SeenUntil = now
	return s
}

// again reports whether e, as a look shows it (ho: as a holder, nil when
// it waits), is another entry than s's under the same id:
// enqueued at another time, or waiting, or granted at another time or
// with another fencing token, after s was seen holding. An entry never
// waits again once granted, and is granted once; times are whole
// milliseconds, and an id released and enqueued again within one is told
// by its new token.
func (s *Span) again(e lanes.Entry, ho *lanes.Holder) bool {
	switch {
	case !e.Enqueued.Equal(s.Enqueued):
		return true
	case s.heldSeen.IsZero():
		return false
	case ho == nil:
		return true
	default:
		return !ho.Granted.Equal(s.Granted) || ho.Token != s.Token
	}
}

// handOff narrows the end of s, a holder gone by snap, with what the
// holders of its key in snap tell: on a key of limit 1, the first holder
// first seen holding now, granted since s was last seen, got the slot
// after s left, so s was gone by then. When that holder had waited for
// this key alone, s's release granted it (a hand-off): the end is exact.
// Looks and grants are stamped in whole milliseconds, so "since" includes
// the millisecond of each look.
func (h *history) handOff(s *Span, snap *lanes.Snapshot) {
	i, ok := slices.BinarySearchFunc(snap.Keys, s.Key, func(k lanes.KeyState, key string) int { return cmp.Compare(k.Key, key) })
	if !ok {
		return
	}
	k := snap.Keys[i]
	for _, o := range k.Holders {
		if o.Granted.Before(s.SeenUntil) || o.Granted.After(s.GoneBy) {
			continue
		}
		if os := h.open[spanKey{k.Key, o.ID}]; os != nil && os.heldSeen.Before(snap.Time) {
			continue // held beside s at an earlier look: no successor
		}
		if k.Limit == 1 {
			s.GoneBy = o.Granted
			s.EndExact = o.Enqueued.Before(o.Granted) && len(o.Lanes) <= 1
		}
		return
	}
}

// push adds a closed span to the ring, dropping the oldest when full.
func (h *history) push(s Span) {
	if len(h.ring) < h.max {
		h.ring = append(h.ring, s)
		return
	}
	h.ring[h.head] = s
	h.head = (h.head + 1) % h.max
}

// prune drops the closed spans that ended more than keep before the last
// look, oldest first.
func (h *history) prune() {
	cut := h.last.Add(-h.keep)
	n := 0
	for n < len(h.ring) && h.ring[(h.head+n)%len(h.ring)].GoneBy.Before(cut) {
		n++
	}
	if n == 0 {
		return
	}
	kept := make([]Span, 0, len(h.ring)-n)
	for i := n; i < len(h.ring); i++ {
		kept = append(kept, h.ring[(h.head+i)%len(h.ring)])
	}
	h.ring, h.head = kept, 0
}

// start returns the time of the first good look: the history starts there.
func (h *history) start() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.from
}

// lastLook returns the time of the last good look.
func (h *history) lastLook() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

// leaseMax returns the longest lease left seen for entry on key, in ms.
func (h *history) leaseMax(key, entry string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.open[spanKey{key, entry}]; s != nil {
		return s.LeaseMax.Milliseconds()
	}
	return 0
}

// spans returns the spans of key, open or closed, that were still there
// at or after from, in order of arrival (enqueued, then granted, then
// entry id), with the first and last looks' times.
func (h *history) spans(key string, from time.Time) (out []Span, first, last time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.ring {
		s := h.ring[(h.head+i)%len(h.ring)]
		if s.Key == key && !s.GoneBy.Before(from) {
			out = append(out, s)
		}
	}
	for _, s := range h.open {
		if s.Key == key {
			out = append(out, *s)
		}
	}
	slices.SortFunc(out, func(a, b Span) int {
		return cmp.Or(a.Enqueued.Compare(b.Enqueued), a.Granted.Compare(b.Granted), cmp.Compare(a.Entry, b.Entry))
	})
	return out, h.from, h.last
}
