package lanes

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"
)

// Memory is a Backend for the lanes of one process. It keeps the same
// semantics as the Redis backend (package redislane) and runs the same
// conformance suite. The zero value is not usable; call NewMemory.
type Memory struct {
	now func() time.Time

	mu      sync.Mutex
	seq     uint64
	entries map[string]*memEntry
	queues  map[string][]*memEntry     // per key, in sequence order
	holders map[string][]*memEntry     // per key, in grant order
	limits  map[string]int             // recorded while a key has holders or waiters
	tokens  map[string]uint64          // last token per key; never deleted
	nested  map[string]map[string]bool // ancestor id -> ids of entries with it in their lineage
	stats   Stats
	subs    map[string]func([]Hint)
}

type memEntry struct {
	Entry
	seq      uint64
	held     bool
	granted  time.Time
	deadline time.Time
	tokens   map[string]uint64
	// borrowed maps each key this entry takes by re-entry (DESIGN.md
	// invariant 10) to the ancestor whose hold it spends: it is neither
	// queued on nor holding such a key itself.
	borrowed map[string]*memEntry
}

var _ Backend = (*Memory)(nil)

// MemoryOption configures NewMemory.
type MemoryOption func(*Memory)

// WithClock makes the backend read time from now instead of time.Now; tests
// use it to expire leases without sleeping.
func WithClock(now func() time.Time) MemoryOption { return func(m *Memory) { m.now = now } }

// NewMemory returns an empty in-process backend.
func NewMemory(opts ...MemoryOption) *Memory {
	m := &Memory{
		now:     time.Now,
		entries: map[string]*memEntry{},
		queues:  map[string][]*memEntry{},
		holders: map[string][]*memEntry{},
		limits:  map[string]int{},
		tokens:  map[string]uint64{},
		nested:  map[string]map[string]bool{},
		subs:    map[string]func([]Hint){},
	}
	for _, o := range opts {
		o(m)
	}
	return m
}

// step is the bookkeeping of one atomic step: what it granted or removed on
// someone else's behalf, to tell the owners.
type step struct {
	m       *Memory
	now     time.Time
	granted []ownedHint // grants this step made for their owners
	told    []ownedHint // entries removed or taken over on someone else's behalf
}

// hint is one entry id to tell its (former) owner about.
type ownedHint struct {
	owner string
	Hint
}

// Enqueue implements Backend.
func (m *Memory) Enqueue(ctx context.Context, owner Owner, ttl time.Duration, reqs []Request) ([]Status, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ValidateStep(reqs); err != nil {
		return nil, err
	}
	if ttl < time.Millisecond {
		return nil, fmt.Errorf("%w: TTL %v is under 1ms", ErrInvalid, ttl)
	}
	for _, r := range reqs {
		if err := r.Validate(); err != nil {
			return nil, err
		}
		if len(r.Lanes) == 0 {
			return nil, fmt.Errorf("%w: entry %s names no lane; a backend takes requests with at least one", ErrInvalid, r.ID)
		}
		for _, l := range r.Lanes {
			if l.Limit == 0 {
				return nil, fmt.Errorf("%w: key %q: a backend takes no lane with limit 0", ErrInvalid, l.Key)
			}
		}
	}
	m.mu.Lock()
	st := m.begin()
	out, err := st.enqueue(owner, ttl, reqs)
	m.mu.Unlock()
	st.notify()
	return out, err
}

func (st *step) enqueue(owner Owner, ttl time.Duration, reqs []Request) ([]Status, error) {
	m := st.m
	// Check every limit before changing anything: a mismatch enqueues none.
	batch := map[string]int{}
	for _, r := range reqs {
		if m.entries[r.ID] != nil {
			continue
		}
		for _, l := range r.Lanes {
			rec, ok := m.limits[l.Key]
			if !ok {
				rec, ok = batch[l.Key]
			}
			if ok && rec != l.Limit {
				return nil, &LimitMismatchError{Key: l.Key, Recorded: rec, Requested: l.Limit}
			}
			batch[l.Key] = l.Limit
		}
	}
	out := make([]Status, len(reqs))
	for i, r := range reqs {
		e := m.entries[r.ID]
		if e != nil && e.Owner.ID != owner.ID && e.held {
			out[i] = Status{ID: r.ID, State: Gone, Err: heldElsewhere(r.ID, e.Owner)}
			continue
		}
		if e != nil {
			if e.Owner.ID != owner.ID {
				st.told = append(st.told, ownedHint{e.Owner.ID, Hint{ID: e.ID}}) // its old owner learns it is gone
				e.Owner = owner
			}
			e.deadline = st.now.Add(ttl)
			out[i] = m.status(e, true)
			continue
		}
		m.seq++
		e = &memEntry{
			Entry: Entry{
				ID: r.ID, Owner: owner, CallID: r.CallID, Tool: r.Tool, Tenant: r.Tenant,
				Lineage: slices.Clone(r.Lineage), Lanes: slices.Clone(r.Lanes), Enqueued: st.now,
			},
			seq:      m.seq,
			deadline: st.now.Add(ttl),
			borrowed: map[string]*memEntry{},
		}
		m.entries[r.ID] = e
		for _, a := range e.Lineage {
			if m.nested[a] == nil {
				m.nested[a] = map[string]bool{}
			}
			m.nested[a][e.ID] = true
		}
		for _, l := range r.Lanes {
			m.limits[l.Key] = l.Limit
			if h := m.ancestorHolding(e, l.Key); h != nil {
				e.borrowed[l.Key] = h
			} else {
				m.queues[l.Key] = append(m.queues[l.Key], e)
			}
		}
		switch {
		case m.eligible(e):
			st.grant(e, false)
		case len(e.Lineage) > 0:
			if cerr := m.cycle(e); cerr != nil {
				touched := map[string]bool{}
				m.remove(e, touched)
				st.scan(touched)
				out[i] = Status{ID: r.ID, State: Gone, Err: cerr}
				continue
			}
		}
		out[i] = m.status(e, true)
	}
	return out, nil
}

// Heartbeat implements Backend.
func (m *Memory) Heartbeat(ctx context.Context, owner string, ttl time.Duration, ids []string) ([]Status, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	st := m.begin()
	out := make([]Status, len(ids))
	for i, id := range ids {
		e := m.entries[id]
		if e == nil || e.Owner.ID != owner {
			out[i] = Status{ID: id, State: Gone}
			continue
		}
		e.deadline = st.now.Add(ttl)
		out[i] = m.status(e, false)
	}
	m.mu.Unlock()
	st.notify()
	return out, nil
}

// Release implements Backend.
func (m *Memory) Release(ctx context.Context, by string, ids []string) (Released, error) {
	if err := ctx.Err(); err != nil {
		return Released{}, err
	}
	m.mu.Lock()
	st := m.begin()
	rel := Released{Was: make([]State, len(ids))}
	touched := map[string]bool{}
	for i, id := range ids {
		e := m.entries[id]
		if e == nil || (by != "" && e.Owner.ID != by) {
			continue
		}
		rel.Was[i] = Waiting
		if e.held {
			rel.Was[i] = Held
		}
		m.remove(e, touched)
		if e.Owner.ID != by {
			st.told = append(st.told, ownedHint{e.Owner.ID, Hint{ID: e.ID}})
		}
	}
	st.scan(touched)
	for _, g := range st.granted {
		rel.Granted = append(rel.Granted, g.ID)
	}
	m.mu.Unlock()
	st.notify()
	return rel, nil
}

// Inspect implements Backend.
func (m *Memory) Inspect(ctx context.Context, keys []string) (*Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	st := m.begin()
	if len(keys) == 0 {
		for k := range m.limits {
			keys = append(keys, k)
		}
	}
	keys = slices.Clone(keys)
	sort.Strings(keys)
	keys = slices.Compact(keys)
	snap := &Snapshot{Namespace: "memory", Time: st.now, Stats: m.stats}
	for _, k := range keys {
		limit, ok := m.limits[k]
		if !ok {
			continue
		}
		ks := KeyState{Key: k, Limit: limit}
		for _, e := range m.holders[k] {
			ks.Holders = append(ks.Holders, Holder{Entry: e.clone(), Token: e.tokens[k], Granted: e.granted, Expires: e.deadline})
		}
		for i, e := range m.queues[k] {
			ks.Waiters = append(ks.Waiters, Waiter{Entry: e.clone(), Position: i + 1, Expires: e.deadline})
		}
		snap.Keys = append(snap.Keys, ks)
	}
	m.mu.Unlock()
	st.notify()
	return snap, nil
}

// Subscribe implements Backend. Hints are called on a goroutine of the step
// that granted, after the backend's lock is released.
func (m *Memory) Subscribe(ctx context.Context, owner string, hint func([]Hint)) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.subs[owner] = hint
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.subs, owner)
	}, nil
}

// begin starts a step: it reads the clock and expires every entry whose
// deadline passed, granting what that frees. m.mu is held.
func (m *Memory) begin() *step {
	st := &step{m: m, now: m.now()}
	touched := map[string]bool{}
	for _, e := range m.entries {
		if !e.deadline.After(st.now) {
			if e.held {
				m.stats.ExpiredHolders++
			} else {
				m.stats.EvictedWaiters++
			}
			m.remove(e, touched)
		}
	}
	st.scan(touched)
	return st
}

// remove takes e out of the backend and records its keys in touched.
func (m *Memory) remove(e *memEntry, touched map[string]bool) {
	for _, a := range e.Lineage {
		delete(m.nested[a], e.ID)
		if len(m.nested[a]) == 0 {
			delete(m.nested, a)
		}
	}
	for _, l := range e.Lanes {
		if e.borrowed[l.Key] != nil {
			continue
		}
		if e.held {
			m.holders[l.Key] = slices.DeleteFunc(m.holders[l.Key], func(x *memEntry) bool { return x == e })
		} else {
			m.queues[l.Key] = slices.DeleteFunc(m.queues[l.Key], func(x *memEntry) bool { return x == e })
		}
		touched[l.Key] = true
	}
	delete(m.entries, e.ID)
}

// scan grants, on each touched key, the queued entries that became eligible,
// and forgets the limit of keys left with neither holders nor waiters.
func (st *step) scan(touched map[string]bool) {
	m := st.m
	keys := make([]string, 0, len(touched))
	for k := range touched {
		keys = append(keys, k)
	}
	sort.Strings(keys) // a fixed order, as the Lua scripts use
	for _, k := range keys {
		room := m.limits[k] - len(m.holders[k])
		// The first `room` waiters satisfy this key's bound whatever happens
		// to the others: a grant moves one entry from "ahead" to "holding".
		q := m.queues[k]
		for _, e := range slices.Clone(q[:min(max(room, 0), len(q))]) {
			if m.eligible(e) {
				st.grant(e, true)
			}
		}
		if len(m.holders[k]) == 0 && len(m.queues[k]) == 0 {
			delete(m.limits, k)
			delete(m.holders, k)
			delete(m.queues, k)
		}
	}
}

// eligible reports whether the waiting entry e may hold every key it named:
// on each, its holders plus the entries queued before e are fewer than the
// limit (DESIGN.md invariant 2). A key e borrows from an ancestor needs no
// room while the ancestor still holds it; once the ancestor let go, e joins
// that key's queue at its own sequence number and waits like anyone.
func (m *Memory) eligible(e *memEntry) bool {
	for _, l := range e.Lanes {
		if a := e.borrowed[l.Key]; a != nil {
			if m.entries[a.ID] == a && a.held {
				continue
			}
			delete(e.borrowed, l.Key)
			q := m.queues[l.Key]
			at, _ := slices.BinarySearchFunc(q, e.seq, func(x *memEntry, seq uint64) int { return cmp.Compare(x.seq, seq) })
			m.queues[l.Key] = slices.Insert(q, at, e)
		}
		ahead := slices.Index(m.queues[l.Key], e)
		if len(m.holders[l.Key])+ahead >= m.limits[l.Key] {
			return false
		}
	}
	return true
}

// grant moves e from every queue to the holders and mints its tokens.
func (st *step) grant(e *memEntry, notify bool) {
	m := st.m
	e.held, e.granted = true, st.now
	e.tokens = make(map[string]uint64, len(e.Lanes))
	for _, l := range e.Lanes {
		if a := e.borrowed[l.Key]; a != nil {
			e.tokens[l.Key] = a.tokens[l.Key] // the ancestor's slot and token
			continue
		}
		m.queues[l.Key] = slices.DeleteFunc(m.queues[l.Key], func(x *memEntry) bool { return x == e })
		m.holders[l.Key] = append(m.holders[l.Key], e)
		m.tokens[l.Key]++
		e.tokens[l.Key] = m.tokens[l.Key]
	}
	if notify {
		st.granted = append(st.granted, ownedHint{e.Owner.ID, Hint{ID: e.ID, Seq: e.seq, Tokens: maps.Clone(e.tokens), Granted: st.now}})
	}
}

// heldElsewhere is the error of an Enqueue that names an id another owner
// holds.
func heldElsewhere(id string, o Owner) error {
	return fmt.Errorf("%w: entry %s is held by another owner (%s pid %d); entry ids must be unique per call", ErrNotHolder, id, o.Host, o.PID)
}

func (m *Memory) status(e *memEntry, positions bool) Status {
	s := Status{ID: e.ID, State: Waiting, Seq: e.seq}
	if e.held {
		s.State = Held
		s.Tokens = make(map[string]uint64, len(e.tokens))
		for k, t := range e.tokens {
			s.Tokens[k] = t
		}
		return s
	}
	if positions {
		s.Positions = make(map[string]int, len(e.Lanes))
		for _, l := range e.Lanes {
			if e.borrowed[l.Key] == nil {
				s.Positions[l.Key] = slices.Index(m.queues[l.Key], e) + 1
			}
		}
	}
	return s
}

func (e *memEntry) clone() Entry {
	c := e.Entry
	c.Lineage = slices.Clone(e.Lineage)
	c.Lanes = slices.Clone(e.Lanes)
	return c
}

// notify tells each owner which of its entries the step granted, or removed
// on someone else's behalf. It runs after m.mu is released.
func (st *step) notify() {
	if len(st.granted)+len(st.told) == 0 {
		return
	}
	byOwner := map[string][]Hint{}
	for _, h := range append(st.granted, st.told...) {
		byOwner[h.owner] = append(byOwner[h.owner], h.Hint)
	}
	st.m.mu.Lock()
	hints := make(map[string]func([]Hint), len(byOwner))
	for o := range byOwner {
		if h := st.m.subs[o]; h != nil {
			hints[o] = h
		}
	}
	st.m.mu.Unlock()
	for o, h := range hints {
		h(byOwner[o])
	}
}
