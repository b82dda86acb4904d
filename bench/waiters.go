package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// waitersSettle is how long the waiters get to queue (or to fail a first
// attempt) before anything is counted.
const waitersSettle = time.Second

// measureWaiters puts cfg.waiters concurrent Acquire calls of one process
// on a key that another process holds, and counts, while they wait:
//
//   - conns: the connections the waiting process has open on the server
//     (CLIENT LIST, by the client name it set), the largest of two counts;
//   - load: the commands per second its client sends meanwhile (the
//     round-trip hook, over cfg.waitWindow).
func measureWaiters(ctx context.Context, e *env, ks []*kind, res *results) error {
	for _, k := range ks {
		if !k.redis || !k.lock {
			continue
		}
		if err := waiters(ctx, e, k, res); err != nil {
			return fmt.Errorf("%s: %w", k.id, err)
		}
	}
	return nil
}

func waiters(ctx context.Context, e *env, k *kind, res *results) error {
	holder, err := openOne(ctx, e, k, "waiters", 0, nil)
	if err != nil {
		return err
	}
	defer holder.Close()
	rel, err := holder.Acquire(ctx, "k")
	if err != nil {
		return err
	}
	defer rel()

	var rt atomic.Int64
	w, err := openOne(ctx, e, k, "waiters", 1, &rt)
	if err != nil {
		return err
	}
	defer w.Close()
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var granted, failed atomic.Int64
	for range e.cfg.waiters {
		wg.Go(func() {
			r, err := w.Acquire(wctx, "k")
			switch {
			case err == nil:
				granted.Add(1)
				_ = r()
			case wctx.Err() == nil:
				failed.Add(1)
			}
		})
	}
	defer func() { cancel(); wg.Wait() }()

	time.Sleep(waitersSettle)
	name := e.clientName(k.id, "waiters", 1)
	c1, err := countClients(ctx, e.srv.admin, name)
	if err != nil {
		return err
	}
	rt0 := rt.Load()
	time.Sleep(e.cfg.waitWindow)
	rate := float64(rt.Load()-rt0) / e.cfg.waitWindow.Seconds()
	c2, err := countClients(ctx, e.srv.admin, name)
	if err != nil {
		return err
	}
	res.set(k.id, "conns", float64(max(c1, c2)))
	res.set(k.id, "load", rate)
	res.note("waiters %s: %d waiting in one process (go-redis pool size %d): %d then %d connections open, %.1f commands/s; %d granted (should be 0), %d failed while waiting",
		k.id, e.cfg.waiters, 10*runtime.GOMAXPROCS(0), c1, c2, rate, granted.Load(), failed.Load())
	return nil
}
