package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// uncontendedWarmup is how many operations run before the measured ones:
// they load scripts and open connections.
const uncontendedWarmup = 50

// rounds splits the latency measurements of every contender into slices
// run in turn, in a new random order each round, so that noise from other
// work on the machine falls on every row alike.
const rounds = 10

// measureUncontended times cfg.n acquire+release pairs of one process on
// one key that nobody else wants, from the Acquire call to the return of
// release. It also records the acquire alone: for the round-trip floor,
// one EVALSHA.
func measureUncontended(ctx context.Context, e *env, ks []*kind, res *results) error {
	cs := make([]contender, len(ks))
	defer func() {
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
	}()
	pair := make([]samples, len(ks))
	acq := make([]samples, len(ks))
	for i, k := range ks {
		c, err := openOne(ctx, e, k, "unc", 0, nil)
		if err != nil {
			return err
		}
		cs[i] = c
		if err := uncontended(ctx, c, uncontendedWarmup, nil, nil); err != nil {
			return fmt.Errorf("%s: %w", k.id, err)
		}
	}
	per := max(1, e.cfg.n/rounds)
	for range rounds {
		for _, i := range rand.Perm(len(ks)) {
			if err := uncontended(ctx, cs[i], per, &pair[i], &acq[i]); err != nil {
				return fmt.Errorf("%s: %w", ks[i].id, err)
			}
		}
	}
	for i, k := range ks {
		res.set(k.id, "unc50", us(pair[i].pct(50)))
		res.set(k.id, "unc99", us(pair[i].pct(99)))
		res.set(k.id, "acq50", us(acq[i].pct(50)))
		res.note("uncontended %s: n=%d, acquire alone p50 %s p99 %s", k.id, pair[i].len(), fmtUS(us(acq[i].pct(50))), fmtUS(us(acq[i].pct(99))))
	}
	return nil
}

// uncontended runs n acquire+release pairs on key "k", recording each pair
// and each acquire when pair and acq are not nil.
func uncontended(ctx context.Context, c contender, n int, pair, acq *samples) error {
	for range n {
		t0 := time.Now()
		rel, err := c.Acquire(ctx, "k")
		if err != nil {
			return fmt.Errorf("acquire: %w", err)
		}
		t1 := time.Now()
		if err := rel(); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		t2 := time.Now()
		if pair != nil {
			pair.add(t2.Sub(t0))
			acq.add(t1.Sub(t0))
		}
	}
	return nil
}
