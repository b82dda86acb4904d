package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// scaleLevels are the sizes the scale run compares; the first is the base.
var scaleLevels = []int{10, 1000, 10000}

// scaleBatch is how many requests one prefill Enqueue step carries.
const scaleBatch = 500

// scaleTTL keeps the prefilled entries alive without heartbeats.
const scaleTTL = 10 * time.Minute

// scaleRow is the lanes cost at one size.
type scaleRow struct {
	n int
	// With n waiters queued on one key (behind one holder): one Enqueue of
	// a request at the back of the queue, one Heartbeat (the poll) of that
	// request, and the server's CPU per enqueue+heartbeat+release.
	enq, beat samples
	qCPU      float64
	// The Heartbeat of all n waiters, in steps of lanes.MaxStepRequests:
	// what a Session that owns them sends every TTL/3; and its longest
	// step, during which Redis runs nothing else.
	fullBeat, beatStep time.Duration
	// With n other keys each held by one entry: acquire+release of a fresh
	// key through a Session, and the server's CPU per pair.
	pair samples
	kCPU float64
	// Handoffs to a Session that also owns n waiting entries on another
	// key, with a 3s TTL so that it beats every second.
	hand *samples

	q     *redislane.Backend // namespace with the queue of n waiters
	k     *lanesProc         // a Session in the namespace with n held keys
	seq   int
	qSecs float64 // server CPU seconds spent in q's measured steps
	kSecs float64
}

// measureScale measures the lanes steps with scaleLevels entries already
// in the namespace. Prefilled entries belong to a fake owner with a long
// TTL, so no Session heartbeats them meanwhile; they go through the
// Backend directly, the measured acquire+release through a Session. All
// sizes are set up first and then measured in rounds, in a random order
// each round, so that noise falls on every size alike.
func measureScale(ctx context.Context, e *env) ([]*scaleRow, error) {
	c := e.newClient(e.clientName("lanes", "scale", 0), nil)
	defer c.Close()
	var rows []*scaleRow
	defer func() {
		for _, r := range rows {
			if r.k != nil {
				r.k.Close()
			}
			for _, scope := range []string{fmt.Sprintf("scale-q%d", r.n), fmt.Sprintf("scale-k%d", r.n), fmt.Sprintf("scale-h%d", r.n)} {
				deleteMatching(context.WithoutCancel(ctx), e.srv.admin, "lanes:{"+e.lanesNamespace(scope)+"}:*")
			}
		}
	}()
	for _, n := range scaleLevels {
		r := &scaleRow{n: n}
		rows = append(rows, r)
		if err := r.setup(ctx, e, c); err != nil {
			return nil, fmt.Errorf("%d entries: %w", n, err)
		}
	}
	for _, r := range rows { // warm-up: scripts, connections
		if err := r.measure(ctx, e, 20, false); err != nil {
			return nil, err
		}
	}
	per := max(1, e.cfg.scaleOps/rounds)
	for range rounds {
		for _, i := range rand.Perm(len(rows)) {
			if err := rows[i].measure(ctx, e, per, true); err != nil {
				return nil, fmt.Errorf("%d entries: %w", rows[i].n, err)
			}
		}
	}
	for _, r := range rows {
		r.qCPU = r.qSecs * 1e6 / float64(r.enq.len())
		r.kCPU = r.kSecs * 1e6 / float64(r.pair.len())
		if err := r.beatAll(ctx); err != nil {
			return nil, fmt.Errorf("%d entries: %w", r.n, err)
		}
	}
	for _, r := range rows {
		if err := r.handoffBeside(ctx, e); err != nil {
			return nil, fmt.Errorf("%d entries: handoffs: %w", r.n, err)
		}
	}
	return rows, nil
}

// scaleHandoffTime is how long handoffs run beside n owned entries: about
// three heartbeats of a Session with a 3s TTL.
const scaleHandoffTime = 3 * time.Second

// handoffBeside measures handoffs on one key (as measureHandoff does) to a
// waiter whose Session also owns n entries waiting on another key: its
// periodic heartbeat covers them all, and a grant that comes meanwhile
// waits for it.
func (r *scaleRow) handoffBeside(ctx context.Context, e *env) error {
	scope := fmt.Sprintf("scale-h%d", r.n)
	ttl := lanes.WithTTL(3 * time.Second)
	var ps []*lanesProc
	defer func() {
		for _, p := range ps {
			p.Close()
		}
	}()
	for i := range 3 {
		p, err := openLanesProc(ctx, proc{e: e, kind: "lanes", scope: scope, i: i}, ttl)
		if err != nil {
			return err
		}
		ps = append(ps, p)
	}
	holder, waiter, other := ps[0], ps[1], ps[2]
	rel, err := other.Acquire(ctx, "bulk")
	if err != nil {
		return err
	}
	defer rel()
	for i := 0; i < r.n; i += scaleBatch {
		reqs := make([]lanes.Request, min(scaleBatch, r.n-i))
		for j := range reqs {
			reqs[j] = lanes.Request{Lanes: []lanes.Lane{{Key: "bulk", Limit: 1}}}
		}
		if _, err := waiter.s.Enqueue(ctx, reqs...); err != nil {
			return err
		}
	}
	p := &pairOfProcs{k: &kind{id: "lanes"}, holder: holder, waiter: waiter}
	if err := p.run(ctx, handoffWarmup, time.Minute, false, nil); err != nil {
		return err
	}
	if err := p.run(ctx, math.MaxInt, scaleHandoffTime, true, nil); err != nil {
		return err
	}
	r.hand = &p.s
	return nil
}

func prefillOwner() lanes.Owner {
	return lanes.Owner{ID: "bench-prefill", Host: "bench", PID: os.Getpid()}
}

var scaleQueue = []lanes.Lane{{Key: "q", Limit: 1}}

func waiterID(i int) string { return fmt.Sprintf("w-%d", i) }

// setup fills the queue namespace with a holder and n waiters on key "q",
// and the keys namespace with n holders of one key each, and opens the
// Session that measures acquire+release there.
func (r *scaleRow) setup(ctx context.Context, e *env, c *redis.Client) error {
	var err error
	if r.q, err = redislane.New(c, e.lanesNamespace(fmt.Sprintf("scale-q%d", r.n))); err != nil {
		return err
	}
	if _, err := r.q.Enqueue(ctx, prefillOwner(), scaleTTL, []lanes.Request{{ID: "holder", Lanes: scaleQueue}}); err != nil {
		return err
	}
	if err := prefill(ctx, r.q, r.n, waiterID, func(int) string { return "q" }); err != nil {
		return err
	}
	scope := fmt.Sprintf("scale-k%d", r.n)
	kb, err := redislane.New(c, e.lanesNamespace(scope))
	if err != nil {
		return err
	}
	if err := prefill(ctx, kb, r.n,
		func(i int) string { return fmt.Sprintf("h-%d", i) },
		func(i int) string { return fmt.Sprintf("key-%d", i) }); err != nil {
		return err
	}
	r.k, err = openLanesProc(ctx, proc{e: e, kind: "lanes", scope: scope, i: 1})
	return err
}

// prefill enqueues n requests named id(i) for key(i) in batches.
func prefill(ctx context.Context, b *redislane.Backend, n int, id, key func(int) string) error {
	for i := 0; i < n; i += scaleBatch {
		reqs := make([]lanes.Request, min(scaleBatch, n-i))
		for j := range reqs {
			reqs[j] = lanes.Request{ID: id(i + j), Lanes: []lanes.Lane{{Key: key(i + j), Limit: 1}}}
		}
		if _, err := b.Enqueue(ctx, prefillOwner(), scaleTTL, reqs); err != nil {
			return err
		}
	}
	return nil
}

// measure runs ops enqueue+poll+release steps at the back of the queue and
// ops acquire+release pairs beside the held keys, recording them and the
// server CPU they took when record is set.
func (r *scaleRow) measure(ctx context.Context, e *env, ops int, record bool) error {
	o := prefillOwner()
	before, err := readCounters(ctx, e.srv.admin)
	if err != nil {
		return err
	}
	for range ops {
		r.seq++
		id := fmt.Sprintf("m-%d", r.seq)
		t0 := time.Now()
		sts, err := r.q.Enqueue(ctx, o, scaleTTL, []lanes.Request{{ID: id, Lanes: scaleQueue}})
		if err != nil {
			return err
		}
		t1 := time.Now()
		if sts[0].State != lanes.Waiting || sts[0].Positions["q"] != r.n+1 {
			return fmt.Errorf("enqueue %s: %v at %v, want waiting at %d", id, sts[0].State, sts[0].Positions, r.n+1)
		}
		if _, err := r.q.Heartbeat(ctx, o.ID, scaleTTL, []string{id}); err != nil {
			return err
		}
		t2 := time.Now()
		if _, err := r.q.Release(ctx, o.ID, []string{id}); err != nil {
			return err
		}
		if record {
			r.enq.add(t1.Sub(t0))
			r.beat.add(t2.Sub(t1))
		}
	}
	mid, err := readCounters(ctx, e.srv.admin)
	if err != nil {
		return err
	}
	for range ops {
		t0 := time.Now()
		rel, err := r.k.Acquire(ctx, "fresh")
		if err != nil {
			return err
		}
		if err := rel(); err != nil {
			return err
		}
		if record {
			r.pair.add(time.Since(t0))
		}
	}
	after, err := readCounters(ctx, e.srv.admin)
	if err != nil {
		return err
	}
	if record {
		_, q := mid.sub(before)
		_, k := after.sub(mid)
		r.qSecs += q
		r.kSecs += k
	}
	return nil
}

// beatAll heartbeats every waiter of the queue, three times, in steps of at
// most lanes.MaxStepRequests ids, as a Session that owned them would.
func (r *scaleRow) beatAll(ctx context.Context) error {
	ids := make([]string, r.n)
	for i := range ids {
		ids[i] = waiterID(i)
	}
	slices.Sort(ids)
	var beats, steps samples
	for range 3 {
		t0 := time.Now()
		for rest := ids; len(rest) > 0; {
			n := min(len(rest), lanes.MaxStepRequests)
			t1 := time.Now()
			sts, err := r.q.Heartbeat(ctx, prefillOwner().ID, scaleTTL, rest[:n])
			if err != nil {
				return err
			}
			steps.add(time.Since(t1))
			if len(sts) != n {
				return fmt.Errorf("heartbeat: %d statuses for %d", len(sts), n)
			}
			rest = rest[n:]
		}
		beats.add(time.Since(t0))
	}
	r.fullBeat = beats.pct(50)
	r.beatStep = steps.pct(100)
	return nil
}
