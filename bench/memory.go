package main

import (
	"context"
	"errors"
	"runtime"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
)

// memBatch is how many requests one Enqueue step carries when filling the
// memory measurement's queue.
const memBatch = 500

// measureMemory queues cfg.memWaiters requests of one lanes Session behind
// a holder on one key and reports the growth of the namespace's Redis keys
// (MEMORY USAGE ... SAMPLES 0, exact and unaffected by other clients) per
// waiter. It also notes the Go heap the Session keeps per waiter and how
// long releasing them all (Session.Close) takes. The
// peers keep nothing in Redis for a waiter: n/a.
func measureMemory(ctx context.Context, e *env, ks []*kind, res *results) error {
	var lk *kind
	for _, k := range ks {
		if k.id == "lanes" {
			lk = k
		}
	}
	if lk == nil {
		return nil
	}
	holder, err := openLanesProc(ctx, proc{e: e, kind: lk.id, scope: "mem", i: 0})
	if err != nil {
		return err
	}
	defer holder.Close()
	rel, err := holder.Acquire(ctx, "k")
	if err != nil {
		return err
	}
	defer rel()
	w, err := openLanesProc(ctx, proc{e: e, kind: lk.id, scope: "mem", i: 1})
	if err != nil {
		return err
	}
	defer w.Close()

	before, err := namespaceBytes(ctx, e, w)
	if err != nil {
		return err
	}
	heap0 := heapInUse()
	n := e.cfg.memWaiters
	var tickets []*lanes.Ticket
	t0 := time.Now()
	for i := 0; i < n; i += memBatch {
		reqs := make([]lanes.Request, min(memBatch, n-i))
		for j := range reqs {
			reqs[j] = lanes.Request{Lanes: []lanes.Lane{{Key: "k", Limit: 1}}}
		}
		ts, err := w.s.Enqueue(ctx, reqs...)
		if err != nil {
			return err
		}
		tickets = append(tickets, ts...)
	}
	fill := time.Since(t0)
	after, err := namespaceBytes(ctx, e, w)
	if err != nil {
		return err
	}
	heap1 := heapInUse()
	per := float64(after-before) / float64(n)
	res.set(lk.id, "mem", per)

	t1 := time.Now()
	cerr := w.Close()
	closing := time.Since(t1)
	if cerr == nil {
		res.set(lk.id, "close", us(closing))
	}
	res.note("memory lanes: %d waiters add %d bytes to the namespace's keys (%.0f B each) and %.0f B each to the Go heap of their Session; enqueued in %d steps of %d in %v; Session.Close released them in %v (err %v)",
		n, after-before, per, float64(heap1-heap0)/float64(n), (n+memBatch-1)/memBatch, memBatch, fill.Round(time.Millisecond),
		closing.Round(time.Millisecond), cerr)
	runtime.KeepAlive(tickets)
	return nil
}

// namespaceBytes is the MEMORY USAGE of every key of l's namespace.
func namespaceBytes(ctx context.Context, e *env, l *lanesProc) (int64, error) {
	var total int64
	for _, key := range l.b.Keys() {
		n, err := e.srv.admin.MemoryUsage(ctx, key, 0).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, err
		}
		total += n
	}
	return total, nil
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
