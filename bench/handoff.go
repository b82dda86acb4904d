package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// handoffWarmup handoffs per contender run before the measured ones.
const handoffWarmup = 5

// pairOfProcs is the holder and the waiter of one contender's handoffs.
type pairOfProcs struct {
	k              *kind
	holder, waiter contender
	waiterRT       atomic.Int64 // round trips of the waiter's client, if counted
	s              samples
	rel            samples // the holder's release call alone: it grants the waiter
	relIdle        samples // the holder's release after the same pause, with no waiter: it grants nobody
	relFree        samples // the waiter's release at once after its grant: it grants nobody
	relUnheard     samples // lanes: the holder's release after the same pause, granting a waiter no process listens for
	rtSum          int64   // waiter round trips from the release to the grant
}

// measureHandoff times, on one key of limit 1, the handoff between two
// processes: a holder holds the key, the other process calls Acquire and
// waits; after a random hold the holder releases. The sample is from the
// holder's release call to the return of the waiter's Acquire.
//
// The hold is at least 2ms (so the waiter is queued, or has failed its
// first attempt) plus a random time up to the waiter's longest sleep
// between attempts (at least 5ms), so the release lands at a random point
// of a polling waiter's sleep, as it does in real use.
//
// It also counts the waiter's round trips from the release call to its
// grant: what a grant costs the waiter once the key is free.
//
// Each contender gets cfg.handoffs handoffs or cfg.handoffTime, whichever
// ends first, spread over rounds taken in turn.
//
// Beside the handoffs it times three releases of each contender on that
// key: the holder's, which has a waiter to grant (for lanes, the script
// grants it; the pollers' waiter takes the key on its next attempt); after
// each handoff, a release of the holder's after a pause drawn as the
// hold's, with no waiter (the control: the same call after the same idle
// time, which grants nobody); and the waiter's own release at once after
// its grant. And it times raw round trips (one EVALSHA of `return 1` on a
// client of its own): rttProbes in a row before each contender's turn in
// each round, and one after each handoff's control release, after a pause
// drawn as the hold's. On a machine whose CPUs idle during the pause (a
// VM's vCPUs sleep), the first round trip after it costs more than one in
// a row; the handoff is compared with both.
func measureHandoff(ctx context.Context, e *env, ks []*kind, res *results) error {
	var ps []*pairOfProcs
	probe := e.newClient(e.clientName("floor-rtt", "handoff", 9), nil)
	defer probe.Close()
	var rtt, rttPause samples
	pausedRoundTrip := func(pause time.Duration) error {
		time.Sleep(pause)
		t0 := time.Now()
		if err := returnOne.Run(ctx, probe, nil).Err(); err != nil {
			return fmt.Errorf("raw round trip: %w", err)
		}
		rttPause.add(time.Since(t0))
		return nil
	}
	roundTrip := func(record bool) error {
		for range rttProbes {
			t0 := time.Now()
			if err := returnOne.Run(ctx, probe, nil).Err(); err != nil {
				return fmt.Errorf("raw round trip: %w", err)
			}
			if record {
				rtt.add(time.Since(t0))
			}
		}
		return nil
	}
	if err := roundTrip(false); err != nil {
		return err
	}
	defer func() {
		for _, p := range ps {
			p.waiter.Close()
			p.holder.Close()
		}
	}()
	for _, k := range ks {
		if !k.lock {
			continue
		}
		p := &pairOfProcs{k: k}
		var err error
		if p.holder, err = openOne(ctx, e, k, "handoff", 0, nil); err != nil {
			return err
		}
		if p.waiter, err = openOne(ctx, e, k, "handoff", 1, &p.waiterRT); err != nil {
			p.holder.Close()
			return err
		}
		ps = append(ps, p)
		if err := p.run(ctx, handoffWarmup, time.Minute, false, nil); err != nil {
			return fmt.Errorf("%s: %w", k.id, err)
		}
	}
	per := max(1, e.cfg.handoffs/rounds)
	for range rounds {
		for _, i := range rand.Perm(len(ps)) {
			if err := roundTrip(true); err != nil {
				return err
			}
			if err := ps[i].run(ctx, per, e.cfg.handoffTime/rounds, true, pausedRoundTrip); err != nil {
				return fmt.Errorf("%s: %w", ps[i].k.id, err)
			}
		}
	}
	for _, p := range ps {
		id, n := p.k.id, p.s.len()
		res.set(id, "hand50", us(p.s.pct(50)))
		res.set(id, "hand99", us(p.s.pct(99)))
		rts := float64(p.rtSum) / float64(max(n, 1))
		res.set(id, "handrt", rts)
		res.set(id, "relg50", us(p.rel.pct(50)))
		res.set(id, "reln50", us(p.relIdle.pct(50)))
		res.note("handoff %s: n=%d, p90 %s, max %s; release call p50 %s with a waiter, %s with none after the same pause, %s with none at once after a grant; waiter round trips per handoff after the release %.2f",
			id, n, fmtUS(us(p.s.pct(90))), fmtUS(us(p.s.pct(100))), fmtUS(us(p.rel.pct(50))), fmtUS(us(p.relIdle.pct(50))), fmtUS(us(p.relFree.pct(50))), rts)
		if p.relUnheard.len() > 0 {
			res.note("handoff %s: release call p50 %s granting a waiter nobody listens for, after the same pause (n=%d): the script's hand-off without the waiter's wake in this process",
				id, fmtUS(us(p.relUnheard.pct(50))), p.relUnheard.len())
		}
	}
	if len(ps) > 0 {
		res.set(envRow, "rtt", us(rtt.pct(50)))
		res.set(envRow, "rttp", us(rttPause.pct(50)))
		res.note("raw round trip beside the handoffs (EVALSHA `return 1`): in a row n=%d, p50 %s, p90 %s; after a pause n=%d, p50 %s, p90 %s",
			rtt.len(), fmtUS(us(rtt.pct(50))), fmtUS(us(rtt.pct(90))), rttPause.len(), fmtUS(us(rttPause.pct(50))), fmtUS(us(rttPause.pct(90))))
	}
	return nil
}

// rttProbes is how many raw round trips are timed before each contender's
// turn of handoffs.
const rttProbes = 5

// run makes up to n handoffs within budget (at least one), recording
// their samples when record. paused, when not nil, is given a pause drawn
// as the hold's after each handoff's control release, and times a raw
// round trip after it.
func (p *pairOfProcs) run(ctx context.Context, n int, budget time.Duration, record bool, paused func(time.Duration) error) error {
	type grant struct {
		at  time.Time
		rt  int64
		rel func() error
		err error
	}
	deadline := time.Now().Add(budget)
	spread := max(5*time.Millisecond, p.k.pollMax)
	hold := func() time.Duration { return 2*time.Millisecond + rand.N(spread) }
	for i := 0; i < n && (i == 0 || time.Now().Before(deadline)); i++ {
		rel, err := p.holder.Acquire(ctx, "k")
		if err != nil {
			return fmt.Errorf("holder acquire: %w", err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		got := make(chan grant, 1)
		go func() {
			r, err := p.waiter.Acquire(wctx, "k")
			got <- grant{at: time.Now(), rt: p.waiterRT.Load(), rel: r, err: err}
		}()
		time.Sleep(hold())
		rt0 := p.waiterRT.Load()
		t0 := time.Now()
		if err := rel(); err != nil {
			cancel()
			return fmt.Errorf("holder release: %w", err)
		}
		released := time.Since(t0)
		g := <-got
		cancel()
		if g.err != nil {
			return fmt.Errorf("waiter acquire: %w", g.err)
		}
		if record {
			p.s.add(g.at.Sub(t0))
			p.rel.add(released)
			p.rtSum += g.rt - rt0
		}
		t1 := time.Now()
		if err := g.rel(); err != nil {
			return fmt.Errorf("waiter release: %w", err)
		}
		if !record {
			continue
		}
		p.relFree.add(time.Since(t1))
		if paused == nil {
			continue
		}
		// The control: the same release after the same pause, no waiter.
		rel, err = p.holder.Acquire(ctx, "k")
		if err != nil {
			return fmt.Errorf("holder acquire: %w", err)
		}
		time.Sleep(hold())
		t2 := time.Now()
		if err := rel(); err != nil {
			return fmt.Errorf("holder release: %w", err)
		}
		p.relIdle.add(time.Since(t2))
		if q, ok := p.waiter.(unheardQueuer); ok {
			if err := p.releaseUnheard(ctx, q, hold()); err != nil {
				return err
			}
		}
		if err := paused(hold()); err != nil {
			return err
		}
	}
	return nil
}

// unheardQueuer is a contender that can queue a waiter on a key that no
// process listens for: lanes queues an entry of an owner without a
// Session, so the release that grants it runs the whole hand-off in Redis
// (the hint is published to nobody) and wakes nothing in this process.
type unheardQueuer interface {
	QueueUnheard(ctx context.Context, key string) (release func() error, err error)
}

// releaseUnheard times the holder's release after a pause, granting a
// waiter queued by q that nobody is woken for: beside rel (the waiter's
// Session is woken in this process) and relIdle (no waiter), it parts a
// hand-off release's cost into the script's and the wake's.
func (p *pairOfProcs) releaseUnheard(ctx context.Context, q unheardQueuer, pause time.Duration) error {
	rel, err := p.holder.Acquire(ctx, "k")
	if err != nil {
		return fmt.Errorf("holder acquire: %w", err)
	}
	wrel, err := q.QueueUnheard(ctx, "k")
	if err != nil {
		_ = rel()
		return fmt.Errorf("unheard waiter: %w", err)
	}
	time.Sleep(pause)
	t0 := time.Now()
	if err := rel(); err != nil {
		return fmt.Errorf("holder release: %w", err)
	}
	p.relUnheard.add(time.Since(t0))
	if err := wrel(); err != nil {
		return fmt.Errorf("unheard waiter release: %w", err)
	}
	return nil
}
