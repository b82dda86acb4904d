// Package redislane is the Redis backend of lanes: queues, holders, limits
// and fencing counters kept in Redis and changed only by the Lua scripts of
// package lua, so several processes on several machines share one set of
// lanes.
//
// Every state change is one script run by SHA (EVALSHA, with EVAL on
// NOSCRIPT), so an uncontended acquire and release cost one round trip
// each. Time comes from Redis TIME. Every key of a namespace shares one hash
// tag, so the scripts work on Redis Cluster; grant hints travel by pub/sub
// on one subscription per Backend. docs/PROTOCOL.md describes the keyspace
// and the scripts for runners in other languages.
package redislane

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/lanes-dev/lanes/internal/evict"
	"github.com/lanes-dev/lanes/internal/otelx"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/scripts/lua"
)

// The scripts, declared once; go-redis runs them by SHA and loads them on
// NOSCRIPT.
var (
	enqueueScript   = redis.NewScript(lua.Source("enqueue.lua"))
	heartbeatScript = redis.NewScript(lua.Source("heartbeat.lua"))
	releaseScript   = redis.NewScript(lua.Source("release.lua"))
	inspectScript   = redis.NewScript(lua.Source("inspect.lua"))
)

// DefaultPrefix is the first part of every key name: lanes:{ns}:entries.
const DefaultPrefix = "lanes"

// Protocol is the version of the scripts' protocol (docs/PROTOCOL.md) this
// package speaks; every script checks it. Protocol 3 answers in flat lists,
// and protocol 4 adds a waiting status's holder TTL (lanes.Status.HolderTTL)
// to them; both keep protocol 2's keyspace, whose version (2) the
// namespace's state records: runners of protocols 2, 3 and 4 share a
// namespace.
const Protocol = "4"

// ErrProtocol reports scripts that speak another protocol than Protocol, or
// a namespace whose state this version does not read: protocol 1's keys
// (lanectl doctor --repair deletes them once no older client holds an
// entry), or a keyspace of a later version of lanes. Runners of protocols
// 2, 3 and 4 share one keyspace, and a namespace.
var ErrProtocol = errors.New("redislane: protocol version mismatch")

// ErrEvictable reports a Redis server whose maxmemory-policy may evict the
// namespace's keys (allkeys-lru, allkeys-lfu, allkeys-random). NewSession
// refuses it unless the Backend was made WithEvictionAllowed.
var ErrEvictable = errors.New("redislane: Redis may evict the lanes' keys")

// Backend is a lanes.Backend on Redis for one namespace. It is safe for
// concurrent use. It uses the client's pool for its steps and, once a
// Session subscribes, one pub/sub connection, however many entries wait.
type Backend struct {
	c       redis.UniversalClient
	ns      string
	keys    []string // the seven KEYS of every script, in lib.lua's order
	wake    string   // prefix of the grant-hint channels; alone, the namespace's channel
	tracer  otelx.Tracer
	evictOK bool // WithEvictionAllowed
	// functions says whether FCALL works here: 0 not known yet, 1 yes,
	// -1 no (then every step runs as a script).
	functions atomic.Int32
	pageSize  int // entries per inspect.lua page
	// The most requests or ids one script run takes (see EnqueuePiece and
	// ReleasePiece); a step with more runs as several, in order.
	enqueuePiece, idPiece int
	// rereadTime bounds Inspect's rereads: inspectRereadTime.
	rereadTime time.Duration

	mu     sync.Mutex // guards ps
	ps     *redis.PubSub
	reader sync.WaitGroup

	hintsMu  sync.RWMutex
	hints    map[string]func([]lanes.Hint) // channel -> hint
	confirms map[string]chan struct{}      // channel -> closed when Redis confirms the subscription
}

var _ lanes.Backend = (*Backend)(nil)

// Option configures New.
type Option func(*Backend) error

// WithPrefix replaces DefaultPrefix at the head of every key and channel
// name; it must be 1 to 64 bytes without braces or spaces.
func WithPrefix(p string) Option {
	return func(b *Backend) error {
		if p == "" || len(p) > 64 || strings.ContainsAny(p, "{} \t\r\n") {
			return fmt.Errorf("%w: key prefix %q must be 1 to 64 bytes without braces or spaces", lanes.ErrInvalid, p)
		}
		b.keys = keyNames(p, b.ns)
		b.wake = p + ":{" + b.ns + "}:wake:"
		return nil
	}
}

// New returns the Backend of namespace ns on c. It does not contact Redis;
// the first step does. The error wraps lanes.ErrInvalid for a bad namespace
// or option. Close ends its subscription; c stays the caller's to close.
//
// Make c with ContextTimeoutEnabled set (redis.Options and the others):
// without it go-redis bounds a command's reads by its ReadTimeout (3s a
// try by default) whatever the context says, and a Session's release and
// Close run past their release timeout while Redis does not answer.
func New(c redis.UniversalClient, ns string, opts ...Option) (*Backend, error) {
	if err := lanes.ValidateNamespace(ns); err != nil {
		return nil, err
	}
	b := &Backend{c: c, ns: ns, hints: map[string]func([]lanes.Hint){}, confirms: map[string]chan struct{}{},
		tracer: otelx.GlobalTracer(lanes.ScopeName), pageSize: 500, enqueuePiece: EnqueuePiece, idPiece: IDPiece,
		rereadTime: inspectRereadTime}
	if err := WithPrefix(DefaultPrefix)(b); err != nil {
		return nil, err
	}
	for _, o := range opts {
		if err := o(b); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// WithEvictionAllowed lets a Session start on a Redis server whose
// maxmemory-policy may evict keys that carry no TTL (allkeys-lru,
// allkeys-lfu, allkeys-random). What that risks: when Redis evicts one of
// the namespace's keys, the next step sees the state incomplete and resets
// it. Every lease and waiter of the namespace then ends (their owners are
// told), and nothing is granted until the latest lease that could still be
// held has run out: a stall of up to the longest TTL in use. With no
// eviction (noeviction, or a volatile-* policy, which never picks the
// lanes' keys since they carry no TTL), a full Redis refuses new entries
// instead, and keeps those it has.
func WithEvictionAllowed() Option {
	return func(b *Backend) error {
		b.evictOK = true
		return nil
	}
}

func keyNames(prefix, ns string) []string {
	base := prefix + ":{" + ns + "}:"
	names := []string{"entries", "lanes", "queue", "deadlines", "nested", "meta", "tombs"}
	for i, n := range names {
		names[i] = base + n
	}
	return names
}

// Namespace returns the namespace.
func (b *Backend) Namespace() string { return b.ns }

// Keys returns the names of the namespace's Redis keys, in the order the
// scripts take them. The first six are its state, which lives and dies
// whole (lanes, the second, keeps every key's fencing token too); tombs,
// the seventh, indexes short-lived tombstones.
func (b *Backend) Keys() []string { return append([]string(nil), b.keys...) }

// EnqueuePiece is the most requests one enqueue script run takes, so
// that a step holds Redis for at most a few milliseconds (DESIGN.md
// invariant 14): a step of 1,000 requests takes about 16ms of script on
// a 2-core machine, on its worst path (every request queued on one busy
// key) as on its best (BenchmarkEnqueueStep1000), and up to 70µs a
// request was seen on a loaded one: 3 to 14ms for 200. A Session sends at
// most 100 requests a step, so its steps never split.
const EnqueuePiece = 200

// IDPiece is the most ids one heartbeat or release script run takes: a
// release of waiters takes about 7µs an id (BenchmarkReleaseWaiters10k:
// 69ms of script for 10,000), up to 32µs on a loaded machine: 3.5 to
// 16ms for 500. A Session's steps (at most 250 ids) never split.
const IDPiece = 500

// PartialError is the error of a step that ran as several script runs
// (more than EnqueuePiece requests, or IDPiece ids) when a run after the
// first failed: the earlier runs took effect, this one and the later ones
// did not, or may have (Err wraps lanes.ErrUnavailable: its outcome is
// unknown). Whatever the cause, the step as a whole is neither done nor
// refused, so PartialError never passes for a refusal that changed
// nothing: it wraps Err only when Err is lanes.ErrUnavailable; a later
// run's *lanes.InvalidError or *lanes.LimitMismatchError (say) is in Err
// alone. A caller that gives up on such an Enqueue step settles every id
// of it, as lanes.Session does.
type PartialError struct {
	Done int   // requests or ids, from the first, whose runs took effect
	Of   int   // requests or ids in the step
	Err  error // the error of the run that failed
}

func (e *PartialError) Error() string {
	return fmt.Sprintf("redislane: step of %d ran in pieces: the first %d took effect, then a piece failed: %v", e.Of, e.Done, e.Err)
}

// Unwrap returns Err when it wraps lanes.ErrUnavailable, else nil.
func (e *PartialError) Unwrap() error {
	if errors.Is(e.Err, lanes.ErrUnavailable) {
		return e.Err
	}
	return nil
}

// Enqueue implements lanes.Backend in one round trip when reqs has at most
// EnqueuePiece requests. A larger step runs as consecutive script runs of
// EnqueuePiece requests, in order, each one atomic: the requests keep
// their order on every key (FIFO), but another owner's step may come
// between two pieces, and a limit disagreement or a malformed request
// found by the script in a later piece no longer refuses the pieces before
// it. When the first piece fails, nothing changed and its error is
// returned as is (an *lanes.InvalidError, a *lanes.LimitMismatchError,
// ErrUnavailable...). When a later one fails, Enqueue returns the statuses
// of the pieces before it (one per request, in order, fewer than reqs) and
// a *PartialError.
func (b *Backend) Enqueue(ctx context.Context, o lanes.Owner, ttl time.Duration, reqs []lanes.Request) ([]lanes.Status, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	if err := lanes.ValidateEnqueue(o, ttl, reqs); err != nil {
		return nil, err
	}
	if len(reqs) <= b.enqueuePiece {
		return b.enqueue(ctx, o, ttl, reqs)
	}
	out := make([]lanes.Status, 0, len(reqs))
	for piece := range slices.Chunk(reqs, b.enqueuePiece) {
		sts, err := b.enqueue(ctx, o, ttl, piece)
		if err != nil {
			if len(out) == 0 {
				return nil, err
			}
			return out, &PartialError{Done: len(out), Of: len(reqs), Err: err}
		}
		out = append(out, sts...)
	}
	return out, nil
}

// enqueue runs enqueue.lua once for reqs, validated.
func (b *Backend) enqueue(ctx context.Context, o lanes.Owner, ttl time.Duration, reqs []lanes.Request) ([]lanes.Status, error) {
	js := appendRequests(make([]byte, 0, 64*len(reqs)), reqs)
	v, err := b.run(ctx, enqueueScript, "enqueue", Protocol, b.wake, ttl.Milliseconds(), o.ID, o.Host, o.PID, js)
	if err != nil {
		return nil, b.mapErr(err)
	}
	return parseStatuses(v, len(reqs))
}

// Heartbeat implements lanes.Backend in one round trip when ids has at
// most IDPiece ids; more run as consecutive script runs of IDPiece ids, in
// order. When a run after the first fails, it returns the statuses of the
// runs before it (fewer than ids) and a *PartialError.
func (b *Backend) Heartbeat(ctx context.Context, owner string, ttl time.Duration, ids []string) ([]lanes.Status, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if err := lanes.ValidateIDs(ids); err != nil {
		return nil, err
	}
	if err := lanes.ValidateTTL(ttl.Truncate(time.Millisecond)); err != nil {
		return nil, err
	}
	if len(ids) <= b.idPiece {
		return b.heartbeat(ctx, owner, ttl, ids)
	}
	out := make([]lanes.Status, 0, len(ids))
	for piece := range slices.Chunk(ids, b.idPiece) {
		sts, err := b.heartbeat(ctx, owner, ttl, piece)
		if err != nil {
			if len(out) == 0 {
				return nil, err
			}
			return out, &PartialError{Done: len(out), Of: len(ids), Err: err}
		}
		out = append(out, sts...)
	}
	return out, nil
}

// heartbeat runs heartbeat.lua once for ids, validated.
func (b *Backend) heartbeat(ctx context.Context, owner string, ttl time.Duration, ids []string) ([]lanes.Status, error) {
	args := make([]any, 0, len(ids)+4)
	args = append(args, Protocol, b.wake, ttl.Milliseconds(), owner)
	for _, id := range ids {
		args = append(args, id)
	}
	v, err := b.run(ctx, heartbeatScript, "heartbeat", args...)
	if err != nil {
		return nil, b.mapErr(err)
	}
	return parseStatuses(v, len(ids))
}

// Release implements lanes.Backend in one round trip when ids has at most
// IDPiece ids; more run as consecutive script runs of IDPiece ids, in
// order (see release for what a failed later run returns). An operator's
// release (by "") leaves a tombstone for lanes.MaxTTL, by which the
// owner's own release learns that its entry was released by force.
func (b *Backend) Release(ctx context.Context, by string, ids []string) (lanes.Released, error) {
	var tomb time.Duration
	if by == "" {
		tomb = lanes.MaxTTL
	}
	return b.release(ctx, by, tomb, ids)
}

// Settle implements lanes.Backend in one round trip when ids has at most
// IDPiece ids; more run as consecutive script runs, as Release does.
func (b *Backend) Settle(ctx context.Context, owner string, lifetime time.Duration, ids []string) (lanes.Released, error) {
	if owner == "" {
		return lanes.Released{}, &lanes.InvalidError{Field: "owner", Detail: "settle needs the owner's id"}
	}
	if lifetime < time.Millisecond || lifetime > lanes.MaxTTL {
		return lanes.Released{}, &lanes.InvalidError{Field: "tombstone", Detail: fmt.Sprintf("lifetime %v must be from 1ms to %v", lifetime, lanes.MaxTTL)}
	}
	return b.release(ctx, owner, lifetime, ids)
}

// release runs release.lua for ids in pieces of IDPiece ids, in order.
// The end state is that of one run, but a piece may grant an entry that a
// later piece then removes (a waiter of the step behind a holder of the
// step): that entry is reported Held, its owner may get a grant hint
// before the removal, and it is left out of Granted, which lists the
// entries granted and still there. When a run after the first fails, it
// returns what the runs before it released (Was, Forced and Revoked for their ids
// only, fewer than ids; Granted theirs) and a *PartialError. Epoch is the
// last run's: when the state was reset between two runs, the latest.
func (b *Backend) release(ctx context.Context, by string, tomb time.Duration, ids []string) (lanes.Released, error) {
	if len(ids) == 0 {
		return lanes.Released{}, nil
	}
	if err := lanes.ValidateIDs(ids); err != nil {
		return lanes.Released{}, err
	}
	if len(ids) <= b.idPiece {
		return b.releaseOnce(ctx, by, tomb, ids)
	}
	// An id named twice is released once, its later places gone, as
	// release.lua does within a run: across pieces, the second run would
	// remove again a lender the first kept for its borrowers (a break-it
	// review saw a key held by a borrower granted to a waiter).
	firsts := make([]string, 0, len(ids))
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			firsts = append(firsts, id)
		}
	}
	if len(firsts) < len(ids) {
		r, err := b.release(ctx, by, tomb, firsts)
		out := spreadReleased(r, ids, firsts)
		if pe := (*PartialError)(nil); errors.As(err, &pe) {
			err = &PartialError{Done: len(out.Was), Of: len(ids), Err: pe.Err}
		}
		return out, err
	}
	var out lanes.Released
	// The piece that granted an id, and the piece that removed it (a
	// later one removed a grant of the step's own).
	grantedIn, removedIn := map[string]int{}, map[string]int{}
	for p, piece := range slices.Collect(slices.Chunk(ids, b.idPiece)) {
		r, err := b.releaseOnce(ctx, by, tomb, piece)
		if err != nil {
			if len(out.Was) == 0 {
				return lanes.Released{}, err
			}
			return out, &PartialError{Done: len(out.Was), Of: len(ids), Err: err}
		}
		for i, was := range r.Was {
			if was == lanes.Held || was == lanes.Waiting {
				removedIn[piece[i]] = p
			}
		}
		for _, id := range r.Granted {
			grantedIn[id] = p
		}
		out.Was = append(out.Was, r.Was...)
		out.Forced = append(out.Forced, r.Forced...)
		out.Revoked = append(out.Revoked, r.Revoked...)
		out.Granted = append(out.Granted, r.Granted...)
		out.Epoch = r.Epoch
	}
	out.Granted = slices.DeleteFunc(out.Granted, func(id string) bool {
		p, ok := removedIn[id]
		return ok && p > grantedIn[id]
	})
	if len(out.Granted) == 0 {
		out.Granted = nil
	}
	return out, nil
}

// spreadReleased gives ids (some named twice) what r says of firsts (ids
// in order, each once): an id's first place its state, a later place
// Gone. A partial r (fewer states than firsts) spreads to the places
// before the first id it does not cover.
func spreadReleased(r lanes.Released, ids, firsts []string) lanes.Released {
	at := make(map[string]int, len(firsts))
	for i, id := range firsts {
		at[id] = i
	}
	out := lanes.Released{Granted: r.Granted, Epoch: r.Epoch}
	done := map[string]bool{}
	for _, id := range ids {
		i := at[id]
		if i >= len(r.Was) {
			break
		}
		if done[id] {
			out.Was, out.Forced, out.Revoked = append(out.Was, lanes.Gone), append(out.Forced, false), append(out.Revoked, false)
			continue
		}
		done[id] = true
		out.Was, out.Forced, out.Revoked = append(out.Was, r.Was[i]), append(out.Forced, r.Forced[i]), append(out.Revoked, r.Revoked[i])
	}
	return out
}

// releaseOnce runs release.lua once for ids, validated.
func (b *Backend) releaseOnce(ctx context.Context, by string, tomb time.Duration, ids []string) (lanes.Released, error) {
	args := make([]any, 0, len(ids)+4)
	args = append(args, Protocol, b.wake, by, tomb.Milliseconds())
	for _, id := range ids {
		args = append(args, id)
	}
	v, err := b.run(ctx, releaseScript, "release", args...)
	if err != nil {
		return lanes.Released{}, b.mapErr(err)
	}
	return parseReleased(v, len(ids))
}

// Inspect implements lanes.Backend. It reads the namespace in pages of a
// bounded number of entries, each one short script run, so that a large
// namespace never holds Redis for long; the pages are read at slightly
// different instants, and Snapshot.Time is the first one's.
//
// Each page first removes expired entries, at most a bounded number
// (REAP_MAX, 100) a run. While more were due, a snapshot would show dead
// holders as holders and their waiters as waiting: Inspect reads the
// namespace again while the snapshot shows an overdue entry
// (lanes.Snapshot.Overdue) and the read before removed some (its
// ExpiredHolders or EvictedWaiters grew), at most inspectRereads times and
// not past inspectRereadTime, nor past half of what ctx's deadline leaves,
// judged by the last read's duration; when a reread fails, Inspect returns
// the read before it. A snapshot may still show overdue entries past those
// bounds (a large backlog of expired entries); lanectl says so.
func (b *Backend) Inspect(ctx context.Context, keys []string) (*lanes.Snapshot, error) {
	for _, k := range keys {
		if err := lanes.ValidateKey(k); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	var (
		removed uint64
		last    *lanes.Snapshot
	)
	for i := 0; ; i++ {
		t := time.Now()
		snap, err := b.inspect(ctx, keys)
		if err != nil && last != nil {
			return last, nil // a reread's failure: the read before stands
		}
		if last != nil && last.Reset {
			snap.Reset = true // a reread tells the reset of the first read
		}
		if err != nil || snap.Overdue() == 0 {
			return snap, err
		}
		last = snap
		took := time.Since(t)
		n := snap.Stats.ExpiredHolders + snap.Stats.EvictedWaiters
		if i == inspectRereads || (i > 0 && n == removed) || time.Since(start)+took > b.rereadTime {
			return snap, nil
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < 2*took {
			return snap, nil
		}
		removed = n
	}
}

// inspectRereads and inspectRereadTime bound the reads of Inspect past the
// first: with the reaps of every page, a namespace of one page read 100
// times removes 10,000 expired entries, in well under a second when Redis
// is not loaded; a larger one removes more each read, and takes longer.
const (
	inspectRereads    = 100
	inspectRereadTime = time.Second
)

// inspect is one read of Inspect, of keys (valid), every key in use when
// none.
func (b *Backend) inspect(ctx context.Context, keys []string) (*lanes.Snapshot, error) {
	if len(keys) == 0 {
		var err error
		if keys, err = b.allKeys(ctx); err != nil {
			return nil, err
		}
	}
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	var snap *lanes.Snapshot
	states := map[string]*lanes.KeyState{}
	cursor := make(map[string]string, len(keys))
	for first := true; first || len(keys) > 0; first = false {
		page := keys[:min(len(keys), lanes.MaxStepRequests)]
		args := make([]any, 0, 3+2*len(page))
		args = append(args, Protocol, b.wake, b.pageSize)
		for _, k := range page {
			args = append(args, k, cursor[k])
		}
		v, err := b.run(ctx, inspectScript, "inspect", args...)
		if err != nil {
			return nil, b.mapErr(err)
		}
		p, err := parsePage(v, len(page))
		if err != nil {
			return nil, err
		}
		if snap == nil {
			snap = &p.Snapshot
			snap.Namespace = b.ns
		}
		snap.Reset = snap.Reset || p.Reset
		var left []string
		for _, ks := range p.keys {
			if st := states[ks.Key]; st != nil {
				st.Holders = append(st.Holders, ks.Holders...)
				for _, w := range ks.Waiters {
					w.Position = len(st.Waiters) + 1
					st.Waiters = append(st.Waiters, w)
				}
			} else if ks.Limit > 0 || ks.Rate != nil {
				ks := ks.KeyState
				states[ks.Key] = &ks
			}
			switch ks.next {
			case "":
			case "\x00": // not reached: the same cursor again
				left = append(left, ks.Key)
			default:
				cursor[ks.Key] = ks.next
				left = append(left, ks.Key)
			}
		}
		keys = append(left, keys[len(page):]...)
	}
	if snap == nil {
		snap = &lanes.Snapshot{Namespace: b.ns}
	}
	for _, k := range slices.Sorted(maps.Keys(states)) {
		ks := states[k]
		sort.SliceStable(ks.Holders, func(i, j int) bool { return ks.Holders[i].Token < ks.Holders[j].Token })
		snap.Keys = append(snap.Keys, *ks)
	}
	return snap, nil
}

// allKeys lists the keys that have holders or waiters, from the key
// records of the lanes hash, in bounded pieces (HSCAN): no script, no
// atomicity needed. A record of an earlier epoch, or of an idle key (it
// keeps its fencing token), is left out, and so is a field that is no
// valid key (docs/PROTOCOL.md: one that starts with a control byte is no
// lane key), which doctor.lua does not look at either.
func (b *Backend) allKeys(ctx context.Context) ([]string, error) {
	marker, err := b.c.HGet(ctx, b.keys[1], "\x00").Result()
	if err == redis.Nil {
		return nil, nil
	}
	if err != nil {
		return nil, b.mapErr(err)
	}
	f := strings.Fields(marker)
	if len(f) < 2 {
		return nil, malformed("lanes marker", marker)
	}
	epoch := f[1]
	var keys []string
	var cursor uint64
	for {
		page, next, err := b.c.HScan(ctx, b.keys[1], cursor, "", 1000).Result()
		if err != nil {
			return nil, b.mapErr(err)
		}
		for i := 0; i+1 < len(page); i += 2 {
			// A field that names no valid key (the marker, the pad "\x02",
			// or one written by hand) is skipped: inspect.lua would refuse
			// the whole page for it.
			if rateKey, ok := strings.CutPrefix(page[i], "\x01"); ok {
				if lanes.ValidateKey(rateKey) == nil {
					keys = append(keys, rateKey) // a rate key's log: inspect.lua shows its window
				}
			} else if activeRecord(page[i+1], epoch) && lanes.ValidateKey(page[i]) == nil {
				keys = append(keys, page[i])
			}
		}
		if cursor = next; cursor == 0 {
			return keys, nil
		}
	}
}

// activeRecord reports whether a key record ("epoch limit token waiters
// holder...") of epoch has holders or waiters.
func activeRecord(rec, epoch string) bool {
	f := strings.Fields(rec)
	return len(f) >= 4 && f[0] == epoch && (len(f) > 4 || f[3] != "0")
}

// Check implements lanes.Checker: it refuses, with an error wrapping
// ErrEvictable, a server whose maxmemory-policy may evict keys that carry
// no TTL, unless the Backend was made WithEvictionAllowed. A server that
// does not say (INFO refused or without the field, as miniredis) passes;
// on a cluster, every primary must pass.
func (b *Backend) Check(ctx context.Context) error {
	if b.evictOK {
		return nil
	}
	p, err := evict.Evicting(ctx, b.c)
	if err != nil {
		return fmt.Errorf("%w: redis namespace %s: %w", lanes.ErrUnavailable, b.ns, err)
	}
	if p != "" {
		return fmt.Errorf("%w: maxmemory-policy is %s, which may evict the keys of namespace %s one at a time; "+
			"set noeviction (or a volatile-* policy), or pass redislane.WithEvictionAllowed (lanectl: --allow-eviction) knowing what it risks",
			ErrEvictable, p, b.ns)
	}
	return nil
}

// Subscribe implements lanes.Backend. It returns once Redis confirmed the
// subscription, so no hint published after it returns is missed. All
// subscriptions of a Backend share one pub/sub connection, which go-redis
// re-establishes after a cut; hints published meanwhile are lost, so each
// owner gets a Hint with an empty ID (ask about every entry) once the
// connection is back, and whenever the namespace's state was reset.
func (b *Backend) Subscribe(ctx context.Context, owner string, hint func([]lanes.Hint)) (func(), error) {
	ch := b.wake + owner
	confirmed := make(chan struct{})
	b.hintsMu.Lock()
	b.hints[ch] = hint
	b.confirms[ch] = confirmed
	b.hintsMu.Unlock()
	b.mu.Lock()
	if b.ps == nil {
		b.ps = b.c.Subscribe(context.WithoutCancel(ctx), b.wake)
		msgs := b.ps.ChannelWithSubscriptions()
		b.reader.Add(1)
		go b.read(msgs)
	}
	err := b.ps.Subscribe(ctx, ch)
	b.mu.Unlock()
	if err == nil {
		select {
		case <-confirmed:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err != nil {
		b.forget(ch)
		return nil, b.mapErr(err)
	}
	return func() {
		b.forget(ch)
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.ps != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = b.ps.Unsubscribe(ctx, ch)
		}
	}, nil
}

func (b *Backend) forget(ch string) {
	b.hintsMu.Lock()
	defer b.hintsMu.Unlock()
	delete(b.hints, ch)
	delete(b.confirms, ch)
}

func (b *Backend) read(msgs <-chan any) {
	defer b.reader.Done()
	everyone := func() {
		b.hintsMu.RLock()
		all := slices.Collect(maps.Values(b.hints))
		b.hintsMu.RUnlock()
		for _, hint := range all {
			hint([]lanes.Hint{{}})
		}
	}
	for msg := range msgs {
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			b.hintsMu.Lock()
			c, first := b.confirms[m.Channel]
			if first {
				close(c)
				delete(b.confirms, m.Channel)
			}
			hint := b.hints[m.Channel]
			b.hintsMu.Unlock()
			if !first && hint != nil {
				hint([]lanes.Hint{{}}) // subscribed again after a cut: hints may be lost
			}
		case *redis.Message:
			if m.Channel == b.wake {
				everyone() // the namespace's state was reset or first made
				continue
			}
			b.hintsMu.RLock()
			hint := b.hints[m.Channel]
			b.hintsMu.RUnlock()
			if hint != nil {
				hint(parseHints(m.Payload))
			}
		}
	}
}

// Close ends the Backend's subscription. It does not close the client.
func (b *Backend) Close() error {
	b.mu.Lock()
	ps := b.ps
	b.ps = nil
	b.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	b.reader.Wait()
	return err
}

// run runs one script on the namespace's keys, in a span when anything
// receives spans. A reply that says the script did not run (BUSY: another
// script holds the server; TRYAGAIN: a cluster slot is moving; LOADING)
// is retried with a growing pause until ctx ends: every lanes step is safe
// to send again.
func (b *Backend) run(ctx context.Context, s *redis.Script, name string, args ...any) (any, error) {
	return b.runKeys(ctx, s, name, b.keys, args)
}

// runKeys is run with other KEYS than the namespace's seven.
func (b *Backend) runKeys(ctx context.Context, s *redis.Script, name string, keys []string, args []any) (any, error) {
	if !b.tracer.On() {
		return b.runRetry(ctx, s, name, keys, args)
	}
	ctx, span, cmd := b.startSpan(ctx, name, keys)
	v, err := b.runRetry(ctx, s, name, keys, args)
	b.endSpan(span, cmd, err)
	return v, err
}

// call runs the script name once: as a function of the Functions library
// (FCALL; lua.Library), loaded at each "not found" where the keys live
// (loadLibrary), where the server has Functions (Redis 7); else by
// EVALSHA, with EVAL on NOSCRIPT.
func (b *Backend) call(ctx context.Context, s *redis.Script, name string, keys []string, args []any) (any, error) {
	if b.functions.Load() >= 0 {
		fn := functionName(name)
		v, err := b.c.FCall(ctx, fn, keys, args...).Result()
		if err == nil {
			if b.functions.Load() != 1 {
				b.functions.Store(1)
			}
			return v, nil
		}
		if !noFunction(err) {
			b.functions.Store(1)
			return v, err
		}
		if !unknownCommand(err) {
			lerr := b.loadLibrary(ctx, keys[0])
			if lerr == nil {
				v, err = b.c.FCall(ctx, fn, keys, args...).Result()
				if err == nil || !noFunction(err) {
					b.functions.Store(1)
					return v, err
				}
			} else if loadPasses(lerr) {
				// Not loaded this time (a failover, a lost connection):
				// this step runs as a script, the next tries again.
				return s.Run(ctx, b.c, keys, args...).Result()
			}
		}
		// No Functions here (Redis 6, miniredis, an ACL without FCALL or
		// FUNCTION, a library the server refuses): scripts only.
		b.functions.Store(-1)
	}
	return s.Run(ctx, b.c, keys, args...).Result()
}

// functionName returns the name of the script name's function in
// lua.Library (lua.Function), looked up once.
func functionName(name string) string {
	if fn, ok := functionNames()[name]; ok {
		return fn
	}
	return lua.Function(name + ".lua")
}

// functionNames maps each script of lua.Scripts (without ".lua") to its
// function's name in lua.Library.
var functionNames = sync.OnceValue(func() map[string]string {
	m := make(map[string]string, len(lua.Scripts))
	for _, s := range lua.Scripts {
		m[strings.TrimSuffix(s, ".lua")] = lua.Function(s)
	}
	return m
})

// noFunction reports whether err says the function could not be called:
// not loaded, or no Functions at all.
func noFunction(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.Contains(msg, "Function not found") || unknownCommand(err) ||
		strings.Contains(msg, "NOPERM") || strings.Contains(msg, "no permissions")
}

func unknownCommand(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.Contains(strings.ToLower(re.Error()), "unknown command")
}

func (b *Backend) runRetry(ctx context.Context, s *redis.Script, name string, keys []string, args []any) (any, error) {
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		v, err := b.call(ctx, s, name, keys, args)
		if !notRun(err) {
			return v, err
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return nil, err
		}
	}
}

// notRun reports whether err says Redis did not run the command.
func notRun(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "BUSY ") || strings.HasPrefix(msg, "TRYAGAIN") || strings.HasPrefix(msg, "LOADING ")
}

// WithTracerProvider sets where the Backend's spans go: one client span
// per step, named after the command that runs it (FCALL, or EVALSHA where
// the server has no Functions), a child of the caller's span (an Enqueue
// step's is a child of its lanes.wait), with db.system.name,
// db.operation.name, db.namespace (the database index), server.address,
// server.port, lanes.namespace and lanes.script (enqueue, heartbeat...),
// and error.type when it fails. Default the global provider. Beside
// go-redis's redisotel, see IsCommand.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(b *Backend) error {
		b.tracer = otelx.NewTracer(tp, lanes.ScopeName)
		return nil
	}
}

// mapErr turns a script's error into the errors of package lanes: a domain
// outcome (LANES_<CODE>) into its error, anything else into
// ErrUnavailable, keeping the cause in the chain.
func (b *Backend) mapErr(err error) error {
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		switch code, rest, _ := strings.Cut(msg, " "); code {
		case "LANES_LIMIT":
			f := strings.SplitN(rest, " ", 3)
			if len(f) == 3 {
				rec, err1 := strconv.Atoi(f[0])
				req, err2 := strconv.Atoi(f[1])
				if err1 == nil && err2 == nil {
					return &lanes.LimitMismatchError{Key: f[2], Recorded: rec, Requested: req}
				}
			}
			return fmt.Errorf("%w: %s", lanes.ErrLimitMismatch, msg)
		case "LANES_RATE":
			if rm := parseRateMismatch(rest); rm != nil {
				return rm
			}
			return fmt.Errorf("%w: %s", lanes.ErrLimitMismatch, msg)
		case "LANES_BADARG":
			field, what, _ := strings.Cut(rest, " ")
			return &lanes.InvalidError{Field: field, Detail: what}
		case "LANES_VERSION":
			return fmt.Errorf("%w: namespace %s: %s", ErrProtocol, b.ns, versionWords(rest))
		case "LANES_EXHAUSTED":
			return fmt.Errorf("%w: namespace %s: %s (they start again from 1 once no entry waits)", lanes.ErrUnavailable, b.ns, rest)
		}
	}
	// Connection errors, timeouts and server errors (READONLY, NOPERM, OOM...)
	// alike: the step's outcome is unknown to the caller.
	return fmt.Errorf("%w: redis namespace %s: %w", lanes.ErrUnavailable, b.ns, err)
}

// versionWords says in words what LANES_VERSION's fields say (rest: the
// scripts' protocol, then the caller's or "data:<v>" and a hint;
// docs/PROTOCOL.md, Errors).
func versionWords(rest string) string {
	scripts, other, _ := strings.Cut(rest, " ")
	data, ok := strings.CutPrefix(other, "data:")
	switch {
	case !ok:
		return fmt.Sprintf("the server ran scripts of protocol %s for this client of protocol %s (%s)", scripts, Protocol, other)
	case strings.HasPrefix(data, "1"):
		return "it holds protocol 1's keys, which this lanes does not read: run lanectl doctor --repair once no older lanectl or runner holds an entry in it"
	default:
		v, _, _ := strings.Cut(data, " ")
		return fmt.Sprintf("its state has keyspace version %s, which this lanes (protocol %s, keyspace 2) does not read: a later version of lanes made it, or it was edited", v, Protocol)
	}
}
