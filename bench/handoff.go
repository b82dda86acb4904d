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
	rel            samples // the holder's release call alone
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
func measureHandoff(ctx context.Context, e *env, ks []*kind, res *results) error {
	var ps []*pairOfProcs
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
		if err := p.run(ctx, handoffWarmup, time.Minute, false); err != nil {
			return fmt.Errorf("%s: %w", k.id, err)
		}
	}
	per := max(1, e.cfg.handoffs/rounds)
	for range rounds {
		for _, i := range rand.Perm(len(ps)) {
			if err := ps[i].run(ctx, per, e.cfg.handoffTime/rounds, true); err != nil {
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
		res.note("handoff %s: n=%d, p90 %s, max %s; the release call alone p50 %s; waiter round trips per handoff after the release %.2f",
			id, n, fmtUS(us(p.s.pct(90))), fmtUS(us(p.s.pct(100))), fmtUS(us(p.rel.pct(50))), rts)
	}
	return nil
}

// run makes up to n handoffs within budget (at least one).
func (p *pairOfProcs) run(ctx context.Context, n int, budget time.Duration, record bool) error {
	type grant struct {
		at  time.Time
		rt  int64
		rel func() error
		err error
	}
	deadline := time.Now().Add(budget)
	spread := max(5*time.Millisecond, p.k.pollMax)
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
		time.Sleep(2*time.Millisecond + rand.N(spread))
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
		if err := g.rel(); err != nil {
			return fmt.Errorf("waiter release: %w", err)
		}
	}
	return nil
}
