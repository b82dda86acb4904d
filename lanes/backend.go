package lanes

import (
	"context"
	"time"
)

// Backend is the shared store of lanes: queues, holders, limits and fencing
// counters. Each method is one atomic step on that store. A Session turns
// these steps into waits and leases; most code uses a Session, not a Backend.
//
// Every method is safe for concurrent use. An entry whose deadline passed
// is never renewed, granted or counted as alive: each method removes
// expired entries (holders first) before it needs them gone, and grants
// what that frees. Every method that frees capacity grants the next
// eligible entries itself, mints their tokens, and then calls the hint
// function of each owner that got a grant.
//
// Lanes with limit 0 are dropped before they reach a Backend; a Backend may
// reject them.
type Backend interface {
	// Enqueue places each request in the queue of every lane it names, in
	// the order given, in one atomic step, and grants those that are
	// eligible (DESIGN.md invariants 2 to 4). A request whose ID exists
	// already with the same lanes and lineage is not enqueued again
	// (invariant 8): for the same owner (a retry) its Status is returned as
	// it stands and its deadline renewed; a waiting entry of another owner
	// (a restarted runner taking its batch over) passes to owner, keeps its
	// place, and its old owner is told. A request is refused alone, its
	// Status carrying the error and nothing of it changed, when its ID
	// exists with other lanes or lineage (*IDConflictError), another owner
	// holds its ID (ErrNotHolder), its ID was settled since or its entry
	// ended (ErrIDRetired, which wraps ErrCanceled: a late copy of a step
	// its owner gave up on), or it would close a lock cycle
	// (*LockCycleError).
	//
	// Each entry's deadline is the backend's clock plus ttl (1ms to
	// MaxTTL). The returned slice has one Status per request, in order;
	// Waiting ones carry their positions. A step that is malformed
	// (duplicate ids, out of bounds) returns an *InvalidError, and one
	// with a limit disagreement a *LimitMismatchError: then none of reqs
	// is enqueued.
	Enqueue(ctx context.Context, owner Owner, ttl time.Duration, reqs []Request) ([]Status, error)

	// Heartbeat renews the deadline of each listed entry that owner owns to
	// the backend's clock plus ttl and returns its Status (one per id, in
	// order): Held with its tokens, Waiting, or Gone when the backend no
	// longer has it or another owner took it over. It never re-creates a
	// Gone entry.
	Heartbeat(ctx context.Context, owner string, ttl time.Duration, ids []string) ([]Status, error)

	// Release removes each listed entry whatever its state (a holder's slots
	// pass on; a waiter leaves every queue) and reports what each was. by is
	// the caller's owner id: it removes only its own entries, so a late
	// release never removes an entry another owner took over. by "" is an
	// operator (`lanectl release --force`): it removes any entry, and the
	// owners get a hint, so a lease released by force learns it at once. Ids
	// not removed are reported Gone and change nothing.
	Release(ctx context.Context, by string, ids []string) (Released, error)

	// Settle removes owner's listed entries, as Release does, and keeps a
	// tombstone of each id, present or not, for lifetime: an Enqueue of a
	// tombstoned id meanwhile is refused (its Status carries ErrIDRetired).
	// A Session settles the ids of a step whose reply it did not get, so
	// that a copy of the step still in flight cannot bring them back after
	// it gave up on them (the copy would hold its keys with nobody to
	// renew or release it).
	Settle(ctx context.Context, owner string, lifetime time.Duration, ids []string) (Released, error)

	// Inspect returns the holders and waiters of the listed keys, or of every
	// key that has any when keys is empty.
	Inspect(ctx context.Context, keys []string) (*Snapshot, error)

	// Subscribe arranges for hint to be called about owner's entries that
	// another step granted (the hint carries the grant), removed or took
	// over; ctx bounds only the setup. Hints are best effort (a Session
	// also polls) and may come on any goroutine. The returned function ends
	// the subscription.
	Subscribe(ctx context.Context, owner string, hint func([]Hint)) (unsubscribe func(), err error)
}

// State is where an entry stands in a backend.
type State int

// The states of an entry. An entry only moves forward: Waiting, Held, Gone.
const (
	Gone    State = iota // not in the backend: never enqueued, released or expired
	Waiting              // queued on at least one of its keys
	Held                 // granted every key it named
)

func (s State) String() string {
	switch s {
	case Waiting:
		return "waiting"
	case Held:
		return "held"
	default:
		return "gone"
	}
}

// Hint is a backend's word to an owner about one of its entries. With
// Tokens set it is a grant: the entry of sequence number Seq now holds
// every key it named, with these tokens. Without, the entry changed (it was
// removed or taken over): the owner should ask with a Heartbeat. A Hint
// with an empty ID is about every entry: the backend's state was reset or
// its connection to the owner was re-established, and the owner should
// ask about all of them.
type Hint struct {
	ID      string
	Seq     uint64
	Tokens  map[string]uint64
	Granted time.Time // the backend's clock at the grant, when known
}

// Status is one entry's state as a backend step saw it.
type Status struct {
	ID    string
	State State
	// Seq is the entry's sequence number: its place in the order of
	// arrival in the backend. A grant's Hint names it, so that a late hint
	// about an earlier entry of the same id is not taken for a grant.
	Seq uint64
	// Tokens holds, for a Held entry, the fencing token of each key:
	// strictly greater than every token issued before for that key in the
	// backend (DESIGN.md invariant 5). Tokens start at 1.
	Tokens map[string]uint64
	// Positions holds, for a Waiting entry returned by Enqueue, its place in
	// each key's queue counted from 1. Heartbeat leaves it nil.
	Positions map[string]int
	// Forced is set on a Gone status of Heartbeat when the entry is gone
	// because an operator released it by force (Backend.Release with by
	// ""), while the backend remembers that (lanes.MaxTTL on both
	// backends): the owner tells its holder why the lease was lost. A Gone
	// status without it was expired, released, taken over or ended
	// otherwise, or was released by force longer ago.
	Forced bool
	// Err is set when Enqueue refused this one request (its State is Gone,
	// and nothing of it changed): see Backend.Enqueue. The batch's other
	// requests are enqueued.
	Err error
	// Epoch names the lifetime of the backend's state that the step saw. It
	// changes when the state was reset (part of it vanished) or lost (a
	// Redis restart without persistence): every entry of an earlier epoch
	// is gone.
	Epoch string
	// Backlog is set, on every status of a step, when the step left
	// expired entries that it could not remove within its bounded work
	// (docs/PROTOCOL.md, REAP_MAX and DEAD_MAX) and that may stand in a
	// waiter's way: the Session polls its waiting entries again at once.
	// The memory backend removes every expired entry at each step and
	// never sets it.
	Backlog bool
	// RateWait is set on a Waiting entry that a rate holds back: how long
	// after the step the rate could have room for it (for the head of a
	// key's queue, when its own cost fits; for one behind, when the next
	// units leave the window). No hint comes when a window frees, so the
	// Session polls the entry then. 0 when no rate holds it back.
	RateWait time.Duration
	// HolderTTL is set on a Waiting entry that one holder's end on each
	// of its keys without room for it would grant: on every key it queues
	// on (not those it borrows) the holders and the waiters before it are
	// at most Limit, and on some exactly Limit; and no rate holds it back
	// (RateWait 0). It is the time left, after the step, until the latest
	// over those keys of the earliest lease among their holders (no key of
	// more than 1,000 holders, and no place past the 1,000th, is looked at,
	// for the cost); a step that removes a holder of one of its keys that
	// was to make room for it (holders and waiters before it exactly the
	// limit) without granting it sends it a Hint of its ID alone, so that
	// it looks again; so does one that removes the waiter ahead of the
	// one that is then next on a key with holders. Whole ms from the Redis backend. A holder whose runner died sends no hint when its
	// lease runs out, so the Session polls the entry then, as Redisson's
	// waiters wait out the lock's remaining TTL, instead of at its next
	// heartbeat; a live holder renews its lease first, and the poll's
	// reply gives the next one. At most one waiter a key gets it: those
	// further back, and those a rate or another key holds back, get 0 and
	// poll at no holder's deadline (DESIGN.md: no one polls blindly).
	HolderTTL time.Duration
}

// Released reports what a Release step removed.
type Released struct {
	Was     []State  // per id, in order: Held, Waiting, or Gone (nothing removed)
	Forced  []bool   // per id: Gone because an operator released it by force (owner releases only)
	Revoked []bool   // per id: Gone because it had ended revoked, its lender's hold ended first: the lease was lost (owner releases only; DESIGN.md invariant 10)
	Granted []string // entries that the step granted as a result, in grant order
	// Epoch names the lifetime of the backend's state that the step saw (see
	// Status.Epoch); "" when there is no state. An id answered Gone under
	// another epoch than the one it was granted in was lost with that
	// state, not released.
	Epoch string
}

// Snapshot is the state of some keys at one instant of the backend's clock.
type Snapshot struct {
	Namespace string
	Time      time.Time // the backend's clock when the snapshot was taken
	Epoch     string    // the lifetime of the state (see Status.Epoch); "" when there is none
	Frozen    time.Time // after a reset, no grant happens before this instant; zero when none
	// Reset is true when the read that took the snapshot found part of
	// the namespace's state lost and reset it (redislane: docs/PROTOCOL.md,
	// "Reset and freeze"), ending every lease and waiter it had; Stats.Resets
	// counts it. The memory backend never resets.
	Reset bool
	Keys  []KeyState // sorted by key
	Stats Stats
}

// Overdue returns how many entries s shows whose deadline had passed at
// s.Time: holders whose lease ran out (an Ended holder, kept for its
// borrowers, does not count) and waiters whose wait did. A backend removes
// expired entries a bounded number at a time (redislane: 100 a script), so
// after a crash of many holders a snapshot may still show some; a second
// look shows fewer. A deadline of zero is not counted.
func (s *Snapshot) Overdue() int {
	n := 0
	due := func(t time.Time) bool { return t.UnixMilli() > 0 && !t.After(s.Time) }
	for _, k := range s.Keys {
		for _, h := range k.Holders {
			if !h.Ended && due(h.Expires) {
				n++
			}
		}
		for _, w := range k.Waiters {
			if due(w.Expires) {
				n++
			}
		}
	}
	return n
}

// Stats counts what happened in a backend's namespace since it was first
// used (a Redis namespace keeps them with its fencing counters).
type Stats struct {
	ExpiredHolders uint64 // leases that expired: their holders crashed or stalled
	EvictedWaiters uint64 // waiting entries that expired: their processes died or stalled
	Revoked        uint64 // borrowed leases that ended with the lease they borrowed from
	Resets         uint64 // times the state was reset because part of it vanished
}

// Checker is a Backend that can tell whether its store keeps state the way
// the invariants need (a Redis server whose eviction policy may drop keys
// does not). NewSession calls Check and refuses to start on its error.
type Checker interface {
	Check(ctx context.Context) error
}

// KeyState is one key's limit, holders and waiters.
type KeyState struct {
	Key   string
	Limit int         // 0 for a key shown only for its rate window
	Rate  *RateWindow // the key's rate and window; nil when it has none

	Holders []Holder // in grant order
	Waiters []Waiter // in queue order
}

// Entry describes an enqueued request and its owner.
type Entry struct {
	ID       string
	Owner    Owner
	CallID   string
	Tool     string
	Tenant   string
	Lineage  []string
	Lanes    []Lane
	Enqueued time.Time // backend clock
}

// Holder is an entry that holds a key.
type Holder struct {
	Entry
	Token   uint64    // its fencing token for this key
	Granted time.Time // backend clock
	Expires time.Time // backend clock: when the lease ends unless renewed
	// Ended is set for a holder whose hold ended while it still takes its
	// slot (DESIGN.md invariant 10): a nested entry revoked because the
	// lease it borrowed a key from ended (its owner was told), or such a
	// lender, kept until its revoked borrowers are released or expire, so
	// that the key passes on only after they were told. It is never
	// renewed; Expires is final.
	Ended bool
}

// Waiter is an entry queued for a key.
type Waiter struct {
	Entry
	Position int       // from 1: the head of the queue is 1
	Expires  time.Time // backend clock: when it is evicted unless renewed
}
