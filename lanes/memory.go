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
	now   func() time.Time
	epoch string
	at    time.Time // the clock of the step running (m.mu is held)

	mu          sync.Mutex
	seq         uint64
	entries     map[string]*memEntry
	queues      map[string][]*memEntry     // per key, in sequence order
	holders     map[string][]*memEntry     // per key, in grant order
	limits      map[string]int             // recorded while a key has holders or waiters
	rates       map[string]*rateLog        // rate keys' logs: while in use or units are in the window
	tokens      map[string]uint64          // last token per key; never deleted
	nested      map[string]map[string]bool // ancestor id -> ids of entries with it in their lineage
	borrowers   map[string]map[string]bool // lender id -> ids of entries that borrow a key from it
	settled     map[string]time.Time       // id -> when its Settle tombstone lapses
	forced      map[string]time.Time       // id -> when the tombstone of its forced release lapses
	revokedGone map[string]time.Time       // id -> when the tombstone of its owner's release of it, revoked, lapses
	stats       Stats
	subs        map[string]func([]Hint)
	runs        map[string]*memRun // run id -> what its calls came to
}

type memEntry struct {
	Entry
	seq      uint64 // 0 for an entry granted when it arrived
	held     bool
	granted  time.Time
	deadline time.Time
	tokens   map[string]uint64
	// borrowed maps each key this entry takes by re-entry (DESIGN.md
	// invariant 10) to the ancestor whose hold it spends: it is neither
	// queued on nor holding such a key itself.
	borrowed map[string]*memEntry
	// revoked: a holder whose lender's hold ended; kept: a lender whose
	// hold ended while revoked borrowers hold, keeping its slots for them.
	// Either is gone to its owner (heartbeats, enqueue retries).
	revoked, kept bool
}

func (e *memEntry) ended() bool { return e.revoked || e.kept }

var _ Backend = (*Memory)(nil)

// MemoryOption configures NewMemory.
type MemoryOption func(*Memory)

// WithClock makes the backend read time from now instead of time.Now; tests
// use it to expire leases without sleeping.
func WithClock(now func() time.Time) MemoryOption { return func(m *Memory) { m.now = now } }

// NewMemory returns an empty in-process backend.
func NewMemory(opts ...MemoryOption) *Memory {
	m := &Memory{
		now:         time.Now,
		epoch:       "memory-" + NewID(),
		entries:     map[string]*memEntry{},
		queues:      map[string][]*memEntry{},
		holders:     map[string][]*memEntry{},
		limits:      map[string]int{},
		rates:       map[string]*rateLog{},
		tokens:      map[string]uint64{},
		nested:      map[string]map[string]bool{},
		borrowers:   map[string]map[string]bool{},
		settled:     map[string]time.Time{},
		forced:      map[string]time.Time{},
		revokedGone: map[string]time.Time{},
		subs:        map[string]func([]Hint){},
		runs:        map[string]*memRun{},
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
	granted []ownedHint         // grants this step made for their owners
	told    []ownedHint         // entries removed or taken over on someone else's behalf
	forcing bool                // an operator's release is removing entries
	freed   map[string]int      // holders that left each key in this step (scan)
	gone    map[string][]uint64 // per key, the waiters that left it in this step, by sequence number (scan)
	taken   map[string]int      // waiters scan granted on each key in this step
}

// ownedHint is one hint to give an owner.
type ownedHint struct {
	owner string
	Hint
}

// ValidateEnqueue checks what every Backend checks before an Enqueue step:
// the step's bounds, each request, that each names at least one lane and
// none with limit 0, the TTL and the owner. Its error is an *InvalidError.
func ValidateEnqueue(owner Owner, ttl time.Duration, reqs []Request) error {
	if err := ValidateStep(reqs); err != nil {
		return err
	}
	if err := ValidateTTL(ttl.Truncate(time.Millisecond)); err != nil {
		return err
	}
	if err := ValidateOwner(owner); err != nil {
		return err
	}
	for _, r := range reqs {
		if err := r.Validate(); err != nil {
			return err
		}
		if len(r.Lanes) == 0 {
			return invalid("lanes", "entry %s names no lane; a backend takes requests with at least one", r.ID)
		}
		for _, l := range r.Lanes {
			if l.Limit == 0 {
				return invalid("limit", "key %q: a backend takes no lane with limit 0", l.Key)
			}
		}
	}
	return nil
}

// ValidateOwner reports whether o can own entries: a valid id (as an entry
// id), a host of at most MaxFieldLen bytes of UTF-8 without control
// characters, and a pid from 0 to 2^32-1. Its error is an *InvalidError.
func ValidateOwner(o Owner) error {
	if err := validateID("owner", "owner id", o.ID); err != nil {
		return err
	}
	if err := ValidateField("host", o.Host); err != nil {
		return err
	}
	if o.PID < 0 || int64(o.PID) > 1<<32-1 {
		return invalid("pid", "pid %d is out of range 0..2^32-1", o.PID)
	}
	return nil
}

// Enqueue implements Backend.
func (m *Memory) Enqueue(ctx context.Context, owner Owner, ttl time.Duration, reqs []Request) ([]Status, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ValidateEnqueue(owner, ttl, reqs); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, nil // as the Redis backend: an empty step is no step
	}
	m.mu.Lock()
	st := m.begin()
	out, err := st.enqueue(owner, ttl.Truncate(time.Millisecond), reqs)
	m.mu.Unlock()
	st.notify()
	return out, err
}

func (st *step) enqueue(owner Owner, ttl time.Duration, reqs []Request) ([]Status, error) {
	m := st.m
	// Check every limit before changing anything: a mismatch enqueues none.
	batch := map[string]int{}
	rates := map[string]Rate{}
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
			if err := m.rateAgrees(l, rates); err != nil {
				return nil, err
			}
		}
	}
	out := make([]Status, len(reqs))
	for i, r := range reqs {
		out[i] = st.enqueueOne(owner, ttl, r)
		out[i].Epoch = m.epoch
	}
	st.holderTTLs(out)
	return out, nil
}

// holderTTLs sets Status.HolderTTL on the waiting statuses of out, from
// the holders and queues the step leaves (a later request of an enqueue
// may be granted a key an earlier one waits on), as lib.lua's finish
// does; not on those a rate holds back (RateWait says when to poll). m.mu
// is held.
func (st *step) holderTTLs(out []Status) {
	for i := range out {
		e := st.m.entries[out[i].ID]
		if out[i].State == Waiting && out[i].Err == nil && out[i].RateWait == 0 && e != nil && !e.held {
			out[i].HolderTTL = st.holderTTL(e)
		}
	}
}

// holderTTL is Status.HolderTTL of the waiting entry e (lib.lua's
// first_deadline): set only when one holder's end on each key that has no
// room for it would grant it, so that no waiter polls for nothing: on
// every key it queues on, the holders and waiters before it are at most
// Limit (and its place within the first holderTTLMax); and no rate holds
// it back (holderTTLs: its RateWait is 0). It is the time until the latest, over the keys where they
// are exactly Limit, of the earliest lease among their holders (a key of
// more than holderTTLMax holders is not looked at, as in Redis). m.mu is
// held.
func (st *step) holderTTL(e *memEntry) time.Duration {
	m := st.m
	var first time.Time
	for _, l := range e.Lanes {
		if e.borrowed[l.Key] != nil {
			continue
		}
		q := m.queues[l.Key] // its place among the first it may hold (a heartbeat of a long queue reads no more)
		p := slices.Index(q[:min(len(q), l.Limit, holderTTLMax)], e) + 1
		if p < 1 {
			return 0
		}
		hs := m.holders[l.Key]
		before := len(hs) + p - 1 // holders and waiters before it on the key
		switch {
		case before > l.Limit || (before == l.Limit && len(hs) > holderTTLMax):
			return 0
		case before < l.Limit:
			continue
		}
		var key time.Time // one holder's end makes room for it: the first to come
		for _, h := range hs {
			if h.deadline.After(st.now) && (key.IsZero() || h.deadline.Before(key)) {
				key = h.deadline
			}
		}
		if key.IsZero() {
			return 0
		}
		if key.After(first) {
			first = key
		}
	}
	if first.IsZero() {
		return 0
	}
	return first.Sub(st.now)
}

// holderTTLMax is lib.lua's PURGE_ALL: the most holders, and waiters
// ahead, a step looks at for a waiting status's HolderTTL.
const holderTTLMax = 1000

// enqueueOne places r, or answers for the entry of its id. m.mu is held.
func (st *step) enqueueOne(owner Owner, ttl time.Duration, r Request) Status {
	m := st.m
	if e := m.entries[r.ID]; e != nil {
		switch {
		case !sameRequest(e, r):
			return Status{ID: r.ID, State: Gone, Err: &IDConflictError{ID: r.ID}}
		case e.ended():
			return Status{ID: r.ID, State: Gone, Err: fmt.Errorf("%w: entry %s ended since this enqueue was sent (its lease was revoked, or released)", ErrIDRetired, r.ID)}
		case e.Owner.ID != owner.ID && e.held:
			return Status{ID: r.ID, State: Gone, Err: heldElsewhere(r.ID, e.Owner)}
		case e.Owner.ID != owner.ID:
			st.told = append(st.told, ownedHint{e.Owner.ID, Hint{ID: e.ID}}) // its old owner learns it is gone
			e.Owner = owner
		}
		e.deadline = st.now.Add(ttl)
		return m.status(e, true)
	}
	if t, ok := m.settled[r.ID]; ok && t.After(st.now) {
		return Status{ID: r.ID, State: Gone, Err: fmt.Errorf("%w: entry %s was released before this enqueue arrived", ErrIDRetired, r.ID)}
	}
	e := &memEntry{
		Entry: Entry{
			ID: r.ID, Owner: owner, CallID: r.CallID, Tool: r.Tool, Tenant: r.Tenant,
			Lineage: slices.Clone(r.Lineage), Lanes: slices.Clone(r.Lanes), Enqueued: st.now,
		},
		deadline: st.now.Add(ttl),
		borrowed: map[string]*memEntry{},
	}
	var queued []Lane
	for _, l := range r.Lanes {
		if h := m.ancestorHolding(e, l.Key); h != nil {
			if len(m.borrowers[h.ID]) >= MaxBorrowers {
				return Status{ID: r.ID, State: Gone, Err: invalid("lineage", "entry %s already lends its keys to %d nested entries", h.ID, MaxBorrowers)}
			}
			e.borrowed[l.Key] = h
		} else {
			queued = append(queued, l)
		}
	}
	now := true
	for _, l := range queued {
		if len(m.holders[l.Key])+len(m.queues[l.Key]) >= l.Limit || !m.rateRoom(l, len(m.queues[l.Key])) {
			now = false
			break
		}
	}
	if !now && len(e.Lineage) > 0 {
		if cerr := m.cycle(e, true); cerr != nil {
			return Status{ID: r.ID, State: Gone, Err: cerr}
		}
	}
	m.entries[r.ID] = e
	delete(m.forced, r.ID) // an earlier entry's: this one's release is not told of them
	delete(m.revokedGone, r.ID)
	for _, a := range e.Lineage {
		link(m.nested, a, e.ID)
	}
	for _, a := range e.borrowed {
		link(m.borrowers, a.ID, e.ID)
	}
	for _, l := range r.Lanes {
		m.limits[l.Key] = l.Limit
	}
	if now {
		st.grant(e, false)
	} else {
		m.seq++
		e.seq = m.seq
		for _, l := range queued {
			m.queues[l.Key] = append(m.queues[l.Key], e)
		}
	}
	return m.status(e, true)
}

// sameRequest reports whether the entry e was made by request r: the same
// lanes (keys and limits, in any order) and the same lineage.
func sameRequest(e *memEntry, r Request) bool {
	if len(e.Lanes) != len(r.Lanes) || !slices.Equal(e.Lineage, r.Lineage) {
		return false
	}
	lim := make(map[string]Lane, len(e.Lanes))
	for _, l := range e.Lanes {
		lim[l.Key] = l
	}
	for _, l := range r.Lanes {
		if v, ok := lim[l.Key]; !ok || v != l {
			return false
		}
	}
	return true
}

func link(set map[string]map[string]bool, from, to string) {
	if set[from] == nil {
		set[from] = map[string]bool{}
	}
	set[from][to] = true
}

func unlink(set map[string]map[string]bool, from, to string) {
	delete(set[from], to)
	if len(set[from]) == 0 {
		delete(set, from)
	}
}

// Heartbeat implements Backend.
func (m *Memory) Heartbeat(ctx context.Context, owner string, ttl time.Duration, ids []string) ([]Status, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ValidateIDs(ids); err != nil {
		return nil, err
	}
	if err := ValidateTTL(ttl.Truncate(time.Millisecond)); err != nil {
		return nil, err
	}
	if err := validateID("owner", "owner id", owner); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	m.mu.Lock()
	st := m.begin()
	out := make([]Status, len(ids))
	touched := map[string]bool{}
	for _, id := range ids {
		if e := m.entries[id]; e != nil && e.Owner.ID == owner && !e.ended() {
			e.deadline = st.now.Add(ttl.Truncate(time.Millisecond))
			if !e.held {
				// A waiter is polled, as heartbeat.lua does: a window
				// that freed since is granted now.
				for _, l := range e.Lanes {
					touched[l.Key] = e.borrowed[l.Key] == nil
				}
			}
		}
	}
	st.scan(touched)
	for i, id := range ids {
		e := m.entries[id]
		if e == nil || e.Owner.ID != owner || e.ended() {
			out[i] = Status{ID: id, State: Gone, Epoch: m.epoch, Forced: m.forcedAt(id, st.now)}
			continue
		}
		out[i] = m.status(e, false)
		out[i].Epoch = m.epoch
	}
	st.holderTTLs(out)
	m.mu.Unlock()
	st.notify()
	return out, nil
}

// ValidateIDs checks the ids of a Heartbeat, Release or Settle step: at most
// MaxStepRequests valid entry ids. Its error is an *InvalidError.
func ValidateIDs(ids []string) error {
	if len(ids) > MaxStepRequests {
		return invalid("step", "%d ids in one step, more than %d", len(ids), MaxStepRequests)
	}
	for _, id := range ids {
		if err := ValidateEntryID(id); err != nil {
			return err
		}
	}
	return nil
}

// Release implements Backend.
func (m *Memory) Release(ctx context.Context, by string, ids []string) (Released, error) {
	return m.release(ctx, by, 0, ids)
}

// Settle implements Backend.
func (m *Memory) Settle(ctx context.Context, owner string, lifetime time.Duration, ids []string) (Released, error) {
	if owner == "" {
		return Released{}, invalid("owner", "settle needs the owner's id")
	}
	if lifetime = lifetime.Truncate(time.Millisecond); lifetime < time.Millisecond || lifetime > MaxTTL {
		return Released{}, invalid("tombstone", "lifetime %v must be from 1ms to %v", lifetime, MaxTTL)
	}
	return m.release(ctx, owner, lifetime, ids)
}

// release removes the listed entries; with settle above 0, it keeps a
// tombstone of each id for that long.
func (m *Memory) release(ctx context.Context, by string, settle time.Duration, ids []string) (Released, error) {
	if err := ctx.Err(); err != nil {
		return Released{}, err
	}
	if err := ValidateIDs(ids); err != nil {
		return Released{}, err
	}
	if by != "" {
		if err := validateID("owner", "owner id", by); err != nil {
			return Released{}, err
		}
	}
	if len(ids) == 0 {
		return Released{}, nil
	}
	m.mu.Lock()
	st := m.begin()
	rel := Released{Was: make([]State, len(ids)), Forced: make([]bool, len(ids)), Revoked: make([]bool, len(ids)), Epoch: m.epoch}
	touched := map[string]bool{}
	// gone tells an owner what its ended entry e was: forced, when an
	// operator released it since; else revoked, when it was
	gone := func(i int, e *memEntry) {
		rel.Was[i] = Gone
		rel.Forced[i] = m.forcedAt(e.ID, st.now)
		rel.Revoked[i] = !rel.Forced[i] && e.revoked
		if rel.Revoked[i] && !e.kept {
			m.revokedGone[e.ID] = st.now.Add(RevokedTombstone) // a later try is told so too
		}
	}
	named := make(map[string]bool, len(ids))
	for i, id := range ids {
		if named[id] {
			// An id named twice is released once, its later places gone,
			// as release.lua does.
			rel.Was[i] = Gone
			continue
		}
		named[id] = true
		e := m.entries[id]
		switch {
		case e != nil && by != "" && e.kept && e.Owner.ID == by:
			// Ended already, kept for its revoked borrowers: gone to its
			// owner (released by force, when an operator did), left as is.
			gone(i, e)
		case e != nil && (by == "" || e.Owner.ID == by):
			rel.Was[i] = Waiting
			switch {
			case by != "" && e.ended(): // gone to its owner; held to an operator
				gone(i, e)
			case e.held:
				rel.Was[i] = Held
			}
			st.forcing = by == ""
			st.remove(e, touched)
			st.forcing = false
			if e.Owner.ID != by {
				st.told = append(st.told, ownedHint{e.Owner.ID, Hint{ID: e.ID}})
			}
			if by == "" {
				m.forced[id] = st.now.Add(MaxTTL)
			}
		case by != "":
			rel.Forced[i] = m.forcedAt(id, st.now)
			if t, ok := m.revokedGone[id]; ok && t.After(st.now) && !rel.Forced[i] {
				rel.Revoked[i] = true
			}
		}
		if settle > 0 {
			m.settled[id] = st.now.Add(settle)
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
	for _, k := range keys {
		if err := ValidateKey(k); err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	st := m.begin()
	if len(keys) == 0 {
		for k := range m.limits {
			keys = append(keys, k)
		}
		for k := range m.rates {
			keys = append(keys, k)
		}
	}
	keys = slices.Clone(keys)
	sort.Strings(keys)
	keys = slices.Compact(keys)
	snap := &Snapshot{Namespace: "memory", Time: st.now, Epoch: m.epoch, Stats: m.stats}
	for _, k := range keys {
		limit, ok := m.limits[k]
		rl := m.rateOf(k)
		if !ok && rl == nil {
			continue
		}
		ks := KeyState{Key: k, Limit: limit}
		if rl != nil {
			ks.Rate = rl.window()
		}
		for _, e := range m.holders[k] {
			ks.Holders = append(ks.Holders, Holder{Entry: e.clone(), Token: e.tokens[k], Granted: e.granted, Expires: e.deadline, Ended: e.ended()})
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

// begin starts a step: it reads the clock, expires every entry whose
// deadline passed, granting what that frees, and forgets lapsed
// tombstones. m.mu is held.
func (m *Memory) begin() *step {
	st := &step{m: m, now: m.now()}
	m.at = st.now
	touched := map[string]bool{}
	var due []*memEntry
	for _, e := range m.entries {
		if !e.deadline.After(st.now) {
			due = append(due, e)
		}
	}
	// Holders first, each by deadline then id, as the Lua scripts reap.
	slices.SortFunc(due, func(a, b *memEntry) int {
		if a.held != b.held {
			if a.held {
				return -1
			}
			return 1
		}
		return cmp.Or(a.deadline.Compare(b.deadline), cmp.Compare(a.ID, b.ID))
	})
	for _, e := range due {
		if m.entries[e.ID] != e || e.kept && e.deadline.After(st.now) {
			continue // gone with a lender removed before it, or an ended lender raised meanwhile
		}
		st.expire(e, touched)
	}
	st.scan(touched)
	for _, tombs := range []map[string]time.Time{m.settled, m.forced, m.revokedGone} {
		maps.DeleteFunc(tombs, func(_ string, t time.Time) bool { return !t.After(st.now) })
	}
	return st
}

// expire removes e, whose deadline passed, and counts it (unless it had
// ended), as lib.lua's expire does. An ended lender's holding borrowers
// whose deadlines passed go first, and one that ends kept for borrowers of
// its own raises e's deadline (extendLenders): then e stays; it is gone if
// a borrower's removal took it. m.mu is held.
func (st *step) expire(e *memEntry, touched map[string]bool) {
	m := st.m
	if e.kept {
		for _, id := range slices.Sorted(maps.Keys(m.borrowers[e.ID])) {
			if b := m.entries[id]; b != nil && b.held && !b.deadline.After(st.now) {
				st.expire(b, touched)
			}
		}
		if m.entries[e.ID] != e || e.deadline.After(st.now) {
			return
		}
	}
	switch {
	case e.ended(): // counted as revoked, or released
	case e.held:
		m.stats.ExpiredHolders++
	default:
		m.stats.EvictedWaiters++
	}
	st.remove(e, touched)
}

// remove takes e out of the backend and records its keys in touched, as
// lib.lua's remove does (DESIGN.md invariant 10). A holder that lends keys
// ends first: its waiting borrowers join those keys' queues at their own
// sequence numbers, its holding borrowers are revoked (their owners are
// told), and while any of them holds, e keeps its slots until the last one
// goes (its deadline the latest of theirs, and raised with theirs: see
// extendLenders). A borrower's removal removes a lender so kept once it
// lends to no holder.
func (st *step) remove(e *memEntry, touched map[string]bool) {
	m := st.m
	if e.held && !e.kept && len(m.borrowers[e.ID]) > 0 {
		var held []*memEntry
		for _, id := range slices.Sorted(maps.Keys(m.borrowers[e.ID])) {
			b := m.entries[id]
			switch {
			case b == nil:
				unlink(m.borrowers, e.ID, id)
			case b.held:
				held = append(held, b)
				if !b.ended() {
					b.revoked = true
					m.stats.Revoked++
					st.told = append(st.told, ownedHint{b.Owner.ID, Hint{ID: b.ID}})
				}
			default:
				for _, l := range b.Lanes {
					if b.borrowed[l.Key] == e {
						delete(b.borrowed, l.Key)
						m.enqueueAt(l.Key, b)
						touched[l.Key] = true
					}
				}
				unlink(m.borrowers, e.ID, id)
			}
		}
		if len(held) > 0 {
			e.kept, e.deadline = true, held[0].deadline
			for _, b := range held[1:] {
				if b.deadline.After(e.deadline) {
					e.deadline = b.deadline
				}
			}
			m.extendLenders(e)
			return
		}
	}
	for _, a := range e.Lineage {
		unlink(m.nested, a, e.ID)
	}
	var lenders []*memEntry
	for _, l := range e.Lanes {
		if a := e.borrowed[l.Key]; a != nil {
			unlink(m.borrowers, a.ID, e.ID)
			lenders = append(lenders, a)
			continue
		}
		if e.held {
			m.holders[l.Key] = slices.DeleteFunc(m.holders[l.Key], func(x *memEntry) bool { return x == e })
			if st.freed == nil {
				st.freed = map[string]int{}
			}
			st.freed[l.Key]++
		} else {
			m.queues[l.Key] = slices.DeleteFunc(m.queues[l.Key], func(x *memEntry) bool { return x == e })
			if st.gone == nil {
				st.gone = map[string][]uint64{}
			}
			st.gone[l.Key] = append(st.gone[l.Key], e.seq)
		}
		touched[l.Key] = true
	}
	delete(m.entries, e.ID)
	if e.held {
		// A kept lender that goes (its deadline passed, or an operator
		// released it): its revoked borrowers, told already, go with it.
		ids := slices.Sorted(maps.Keys(m.borrowers[e.ID]))
		delete(m.borrowers, e.ID)
		for _, id := range ids {
			if b := m.entries[id]; b != nil {
				if st.forcing {
					m.forced[id] = st.now.Add(MaxTTL) // its owner's release learns it
				}
				st.remove(b, touched)
			}
		}
	}
	for _, z := range lenders {
		if m.entries[z.ID] == z && z.kept && !m.lendsToHolder(z) {
			st.remove(z, touched)
		}
	}
}

// extendLenders raises the deadline of each kept lender of e (and of
// theirs, up the lineage) to e's, when e's is later: a kept lender's
// deadline is the latest of its holding borrowers', a borrower kept for
// borrowers of its own included, so that it keeps its slots as long as
// they do. m.mu is held.
func (m *Memory) extendLenders(e *memEntry) {
	for _, z := range e.borrowed {
		if m.entries[z.ID] == z && z.kept && e.deadline.After(z.deadline) {
			z.deadline = e.deadline
			m.extendLenders(z)
		}
	}
}

// forcedAt reports whether the tombstone of an operator's release of id
// lives at now.
func (m *Memory) forcedAt(id string, now time.Time) bool {
	t, ok := m.forced[id]
	return ok && t.After(now)
}

// lendsToHolder reports whether a holder borrows a key from e.
func (m *Memory) lendsToHolder(e *memEntry) bool {
	for id := range m.borrowers[e.ID] {
		if b := m.entries[id]; b != nil && b.held {
			return true
		}
	}
	return false
}

// enqueueAt puts the waiting entry e in key's queue at its sequence number.
func (m *Memory) enqueueAt(key string, e *memEntry) {
	q := m.queues[key]
	at, _ := slices.BinarySearchFunc(q, e.seq, func(x *memEntry, seq uint64) int { return cmp.Compare(x.seq, seq) })
	m.queues[key] = slices.Insert(q, at, e)
}

// scan grants the waiters that became eligible on the touched keys, in
// arrival order across all of them (DESIGN.md invariant 2), and forgets
// the limit of keys left with neither holders nor waiters, as scan in
// lib.lua does: only the first (limit - holders) waiters of a key can be
// eligible on it, and a grant frees nothing.
func (st *step) scan(touched map[string]bool) {
	m := st.m
	var cands []*memEntry
	seen := map[*memEntry]bool{}
	for k := range touched {
		room := m.limits[k] - len(m.holders[k])
		if m.rates[k] != nil {
			room = min(room, rateScan) // strict FIFO: grants go from the head
		}
		q := m.queues[k]
		for _, e := range q[:min(max(room, 0), len(q))] {
			if !seen[e] {
				seen[e] = true
				cands = append(cands, e)
			}
		}
	}
	slices.SortFunc(cands, func(a, b *memEntry) int { return cmp.Compare(a.seq, b.seq) })
	rated := map[string]bool{}
	for _, e := range cands {
		if !e.held && !m.eligible(e) && st.lookAgain(e) {
			st.told = append(st.told, ownedHint{e.Owner.ID, Hint{ID: e.ID}})
			continue
		}
		if !e.held && m.eligible(e) {
			st.grant(e, true)
			for _, l := range e.Lanes {
				if e.borrowed[l.Key] == nil {
					if st.taken == nil {
						st.taken = map[string]int{}
					}
					st.taken[l.Key]++
				}
				if !l.Rate.IsZero() && e.borrowed[l.Key] == nil {
					rated[l.Key] = true // the next in its queue is the head now
				}
			}
		}
	}
	st.tellMovedUp(touched)
	for k := range touched {
		if len(m.holders[k]) == 0 && len(m.queues[k]) == 0 {
			delete(m.limits, k)
			delete(m.holders, k)
			delete(m.queues, k)
			m.rateOf(k) // forgets an empty log
		}
	}
	if len(rated) > 0 {
		st.scan(rated)
	}
}

// tellMovedUp tells the waiter that moved up to the limit on a key of
// touched with holders (the holders plus the waiters before it exactly the
// limit), a waiter before it having left in this step or a holder whose
// slot no waiter was granted, to look again, as lib.lua's scan does: its
// HolderTTL was 0, and a holder whose runner died sends no hint. A
// hand-off (a holder's slot granted to the next) tells no one.
func (st *step) tellMovedUp(touched map[string]bool) {
	m := st.m
	for _, k := range slices.Sorted(maps.Keys(touched)) {
		gone, ok := st.gone[k]
		delete(st.gone, k)
		if !ok && st.freed[k] <= st.taken[k] {
			continue
		}
		hs, q := len(m.holders[k]), m.queues[k]
		i := m.limits[k] - hs
		if hs > 0 && hs <= holderTTLMax && i >= 0 && i < holderTTLMax && i < len(q) &&
			(st.freed[k] > st.taken[k] || (ok && q[i].seq > slices.Min(gone))) {
			st.told = append(st.told, ownedHint{q[i].Owner.ID, Hint{ID: q[i].ID}})
		}
	}
}

// lookAgain reports whether the waiting entry e, not granted by scan, is
// told to look again, as lib.lua's scan tells it: it waits on more than one
// key, and on one of them it is within the room now (its holders plus the
// waiters before e fewer than the limit) while before the step that place
// was at the limit or past it, holders or waiters before it having left in
// this step. Its HolderTTL (the latest of its keys' first deadlines) may
// have been that key's holder's, or 0, and the holder of another key sends
// no hint when its lease runs out.
func (st *step) lookAgain(e *memEntry) bool {
	m := st.m
	keys, look := 0, false
	for _, l := range e.Lanes {
		if e.borrowed[l.Key] != nil {
			continue
		}
		keys++
		f, d := st.freed[l.Key], 0
		for _, q := range st.gone[l.Key] {
			if q < e.seq {
				d++
			}
		}
		if f+d > 0 && !look {
			i := slices.Index(m.queues[l.Key], e)
			p := len(m.holders[l.Key]) + i
			look = i >= 0 && i < holderTTLMax && p < l.Limit && p+f+d >= l.Limit
		}
	}
	return look && keys > 1
}

// eligible reports whether the waiting entry e may hold every key it named:
// on each key it queues for, its holders plus the entries queued before e
// are fewer than the limit (DESIGN.md invariant 2).
func (m *Memory) eligible(e *memEntry) bool {
	for _, l := range e.Lanes {
		if e.borrowed[l.Key] != nil {
			continue
		}
		ahead := slices.Index(m.queues[l.Key], e)
		if len(m.holders[l.Key])+ahead >= l.Limit || !m.rateRoom(l, ahead) {
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
			e.tokens[l.Key] = a.tokens[l.Key] // the lender's slot and token
			continue
		}
		m.queues[l.Key] = slices.DeleteFunc(m.queues[l.Key], func(x *memEntry) bool { return x == e })
		m.holders[l.Key] = append(m.holders[l.Key], e)
		m.spendRate(l, st.now)
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
	return entryError(ErrNotHolder, "entry %s is held by another owner (%s pid %d); entry ids must be unique per call", id, o.Host, o.PID)
}

func (m *Memory) status(e *memEntry, positions bool) Status {
	s := Status{ID: e.ID, State: Waiting, Seq: e.seq}
	if e.held {
		s.State = Held
		s.Tokens = maps.Clone(e.tokens)
		return s
	}
	s.RateWait = m.rateWait(e)
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
	once := map[[2]string]bool{} // an id told once a step, and not beside its grant (lib.lua's finish)
	for _, h := range st.granted {
		byOwner[h.owner] = append(byOwner[h.owner], h.Hint)
		once[[2]string{h.owner, h.ID}] = true
	}
	for _, h := range st.told {
		if k := [2]string{h.owner, h.ID}; !once[k] {
			once[k] = true
			byOwner[h.owner] = append(byOwner[h.owner], h.Hint)
		}
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
