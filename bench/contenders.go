package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/semaphore"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// contender is one simulated process taking a mutex (limit 1) on keys.
// Acquire blocks until the key is held or ctx ends; release gives it back
// and reports an error if the key was no longer held.
type contender interface {
	Acquire(ctx context.Context, key string) (release func() error, err error)
	Close() error
}

// kind is one row of the table: how to start a simulated process of it, and
// which columns apply.
type kind struct {
	id    string // -only name
	name  string // row label
	redis bool   // talks to Redis: the Redis columns apply
	lock  bool   // excludes: handoff, throughput and fairness apply
	// pollMax is the longest a waiter sleeps between attempts (0: it spins
	// or is woken); handoff holds the lock for a random time up to it so
	// that a release lands at a random point of the waiter's sleep.
	pollMax time.Duration
	open    func(ctx context.Context, p proc) (contender, error)
}

// proc is what opening one simulated process needs.
type proc struct {
	e     *env
	kind  string
	scope string        // measurement: every key lives under it
	i     int           // the process's number in its measurement
	rt    *atomic.Int64 // round trips of its client, or nil
	log   *cmdLog       // the commands its client sends, by name, or nil
}

func (p proc) client() *redis.Client {
	if p.log != nil {
		return p.e.newClient(p.e.clientName(p.kind, p.scope, p.i), p.rt, p.log)
	}
	return p.e.newClient(p.e.clientName(p.kind, p.scope, p.i), p.rt)
}

func (p proc) key(key string) string { return p.e.keyPrefix(p.kind, p.scope) + key }

// kinds lists every contender, in table order.
func kinds(cfg config) []*kind {
	return []*kind{
		{id: "floor-rtt", name: "floor: 2× EVALSHA `return 1`", redis: true, open: openRTT},
		{id: "floor-spin", name: "floor: Lua spin mutex", redis: true, lock: true, open: openSpin},
		{id: "lanes", name: "lanes (redislane)", redis: true, lock: true, open: openLanes},
		{id: "redsync", name: "redsync default", redis: true, lock: true, pollMax: 250 * time.Millisecond,
			open: openRedsync()},
		{id: "redsync-tuned", name: fmt.Sprintf("redsync %v retry", cfg.syncDelay), redis: true, lock: true, pollMax: cfg.syncDelay,
			open: openRedsync(redsync.WithRetryDelay(cfg.syncDelay), redsync.WithTries(math.MaxInt32))},
		{id: "redislock", name: fmt.Sprintf("redislock linear %v", cfg.lockBackoff), redis: true, lock: true, pollMax: cfg.lockBackoff,
			open: openRedislock(cfg.lockBackoff)},
		{id: "semaphore", name: "x/sync semaphore (in-process)", lock: true, open: openSemaphore},
	}
}

func kindIDs() []string {
	var ids []string
	for _, k := range kinds(config{}) {
		ids = append(ids, k.id)
	}
	return ids
}

// selectedKinds returns the contenders -only names, or all.
func selectedKinds(cfg config) []*kind {
	var out []*kind
	for _, k := range kinds(cfg) {
		if len(cfg.only) == 0 || slices.Contains(cfg.only, k.id) {
			out = append(out, k)
		}
	}
	return out
}

func randomToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// --- floor: round trips --------------------------------------------------

var returnOne = redis.NewScript(`return 1`)

// rttProc is the round-trip floor of an acquire and a release: one EVALSHA
// of `return 1` each. It excludes nothing.
type rttProc struct{ c *redis.Client }

func openRTT(_ context.Context, p proc) (contender, error) { return &rttProc{c: p.client()}, nil }

func (r *rttProc) Acquire(ctx context.Context, _ string) (func() error, error) {
	if err := returnOne.Run(ctx, r.c, nil).Err(); err != nil {
		return nil, err
	}
	return func() error { return returnOne.Run(context.Background(), r.c, nil).Err() }, nil
}

func (r *rttProc) Close() error { return r.c.Close() }

// --- floor: spin mutex ---------------------------------------------------

var (
	spinLock   = redis.NewScript(`if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return 0`)
	spinUnlock = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
)

// spinProc is the floor of a Redis lock: SET NX PX in a script, retried
// with no sleep until it succeeds, and DEL if still the owner.
type spinProc struct {
	p     proc
	c     *redis.Client
	token string
	n     atomic.Int64
}

func openSpin(_ context.Context, p proc) (contender, error) {
	return &spinProc{p: p, c: p.client(), token: randomToken()}, nil
}

func (s *spinProc) Acquire(ctx context.Context, key string) (func() error, error) {
	k := s.p.key(key)
	v := fmt.Sprintf("%s-%d", s.token, s.n.Add(1))
	for {
		ok, err := spinLock.Run(ctx, s.c, []string{k}, v, 10000).Int()
		if err != nil {
			return nil, err
		}
		if ok == 1 {
			return func() error {
				n, err := spinUnlock.Run(context.Background(), s.c, []string{k}, v).Int()
				if err == nil && n == 0 {
					err = errNotHeld
				}
				return err
			}, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

func (s *spinProc) Close() error { return s.c.Close() }

var errNotHeld = errors.New("released a lock that was no longer held")

// --- lanes ----------------------------------------------------------------

// lanesProc is one process of lanes: its own client, Backend and Session.
type lanesProc struct {
	c *redis.Client
	b *redislane.Backend
	s *lanes.Session
}

func openLanes(ctx context.Context, p proc) (contender, error) {
	return openLanesProc(ctx, p)
}

func openLanesProc(ctx context.Context, p proc, opts ...lanes.Option) (*lanesProc, error) {
	c := p.client()
	b, err := redislane.New(c, p.e.lanesNamespace(p.scope))
	if err != nil {
		c.Close()
		return nil, err
	}
	s, err := lanes.NewSession(ctx, b, opts...)
	if err != nil {
		b.Close()
		c.Close()
		return nil, err
	}
	return &lanesProc{c: c, b: b, s: s}, nil
}

func (l *lanesProc) Acquire(ctx context.Context, key string) (func() error, error) {
	lease, err := l.s.Acquire(ctx, lanes.Request{Lanes: []lanes.Lane{{Key: key, Limit: 1}}})
	if err != nil {
		return nil, err
	}
	return func() error { return lease.Release(context.Background()) }, nil
}

// queuedAcquirer is a contender whose Acquire has a moment by which the
// request is surely in the key's queue: fairness takes it as the latest
// the request can have arrived.
type queuedAcquirer interface {
	AcquireQueued(ctx context.Context, key string) (release func() error, queued time.Time, err error)
}

// AcquireQueued is Acquire as Session.Acquire does it (Enqueue, then Wait),
// with the moment Enqueue returned: the entry is in the queue by then.
func (l *lanesProc) AcquireQueued(ctx context.Context, key string) (func() error, time.Time, error) {
	ts, err := l.s.Enqueue(ctx, lanes.Request{Lanes: []lanes.Lane{{Key: key, Limit: 1}}})
	if err != nil {
		return nil, time.Time{}, err
	}
	queued := time.Now()
	lease, err := ts[0].Wait(ctx)
	if err != nil {
		return nil, queued, err
	}
	return func() error { return lease.Release(context.Background()) }, queued, nil
}

// QueueUnheard queues on key an entry of an owner that has no Session
// (Backend.Enqueue), so the release that grants it wakes no one: its hint
// goes to a channel nobody subscribed to. It fails unless the entry was
// queued (the key must have a holder). The release it returns removes the
// entry, granted by then.
func (l *lanesProc) QueueUnheard(ctx context.Context, key string) (func() error, error) {
	owner := lanes.Owner{ID: "unheard-" + lanes.NewID(), Host: "bench"}
	id := lanes.NewID()
	st, err := l.b.Enqueue(ctx, owner, time.Minute, []lanes.Request{{ID: id, Lanes: []lanes.Lane{{Key: key, Limit: 1}}}})
	if err != nil {
		return nil, err
	}
	if len(st) != 1 || st[0].State != lanes.Waiting {
		return nil, fmt.Errorf("entry %s: %+v, want it waiting", id, st)
	}
	return func() error {
		r, err := l.b.Release(ctx, owner.ID, []string{id})
		if err != nil {
			return err
		}
		if len(r.Was) != 1 || r.Was[0] != lanes.Held {
			return fmt.Errorf("entry %s was %v at its release, want held", id, r.Was)
		}
		return nil
	}, nil
}

func (l *lanesProc) Close() error {
	err := l.s.Close()
	l.b.Close()
	l.c.Close()
	return err
}

// --- redsync --------------------------------------------------------------

type redsyncProc struct {
	p    proc
	c    *redis.Client
	rs   *redsync.Redsync
	opts []redsync.Option
}

func openRedsync(opts ...redsync.Option) func(context.Context, proc) (contender, error) {
	return func(_ context.Context, p proc) (contender, error) {
		c := p.client()
		return &redsyncProc{p: p, c: c, rs: redsync.New(goredis.NewPool(c)), opts: opts}, nil
	}
}

func (r *redsyncProc) Acquire(ctx context.Context, key string) (func() error, error) {
	m := r.rs.NewMutex(r.p.key(key), r.opts...)
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func() error {
		ok, err := m.UnlockContext(context.Background())
		if err == nil && !ok {
			err = errNotHeld
		}
		return err
	}, nil
}

func (r *redsyncProc) Close() error { return r.c.Close() }

// --- redislock ------------------------------------------------------------

type redislockProc struct {
	p   proc
	c   *redis.Client
	lc  *redislock.Client
	opt *redislock.Options
}

// lockTTL is the TTL of a redislock lock, like lanes' default lease TTL.
const lockTTL = 10 * time.Second

func openRedislock(backoff time.Duration) func(context.Context, proc) (contender, error) {
	return func(_ context.Context, p proc) (contender, error) {
		c := p.client()
		return &redislockProc{p: p, c: c, lc: redislock.New(c),
			opt: &redislock.Options{RetryStrategy: redislock.LinearBackoff(backoff)}}, nil
	}
}

func (r *redislockProc) Acquire(ctx context.Context, key string) (func() error, error) {
	// Without a deadline, Obtain gives up after the TTL; the benchmarks
	// wait as long as ctx allows.
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Hour)
		defer cancel()
	}
	l, err := r.lc.Obtain(ctx, r.p.key(key), lockTTL, r.opt)
	if err != nil {
		return nil, err
	}
	return func() error { return l.Release(context.Background()) }, nil
}

func (r *redislockProc) Close() error { return r.c.Close() }

// --- in-process semaphore -------------------------------------------------

type semEntry struct{ w *semaphore.Weighted }

// semProc shares one semaphore.Weighted(1) per key with every other
// process of its scope: the in-process floor.
type semProc struct{ p proc }

func openSemaphore(_ context.Context, p proc) (contender, error) { return &semProc{p: p}, nil }

func (s *semProc) Acquire(ctx context.Context, key string) (func() error, error) {
	w := s.p.e.semaphore(s.p.scope + "\x00" + key)
	if err := w.Acquire(ctx, 1); err != nil {
		return nil, err
	}
	return func() error { w.Release(1); return nil }, nil
}

func (s *semProc) Close() error { return nil }

func (e *env) semaphore(name string) *semaphore.Weighted {
	e.mu.Lock()
	defer e.mu.Unlock()
	se := e.sems[name]
	if se == nil {
		se = &semEntry{w: semaphore.NewWeighted(1)}
		e.sems[name] = se
	}
	return se.w
}

// openOne opens process number i of k in scope, counting its round trips
// in rt (when not nil).
func openOne(ctx context.Context, e *env, k *kind, scope string, i int, rt *atomic.Int64) (contender, error) {
	c, err := k.open(ctx, proc{e: e, kind: k.id, scope: scope, i: i, rt: rt})
	if err != nil {
		return nil, fmt.Errorf("%s: open process %d: %w", k.id, i, err)
	}
	return c, nil
}

// openProcs opens n processes of k in scope, each counting its round trips
// in rt, and returns them with a function that closes them all.
func openProcs(ctx context.Context, e *env, k *kind, scope string, n int, rt *atomic.Int64) ([]contender, func(), error) {
	cs := make([]contender, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			cs[i], errs[i] = k.open(ctx, proc{e: e, kind: k.id, scope: scope, i: i, rt: rt})
		})
	}
	wg.Wait()
	closeAll := func() {
		var wg sync.WaitGroup
		for _, c := range cs {
			if c != nil {
				wg.Go(func() { _ = c.Close() })
			}
		}
		wg.Wait()
	}
	if err := errors.Join(errs...); err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("%s: open %d processes: %w", k.id, n, err)
	}
	return cs, closeAll, nil
}
