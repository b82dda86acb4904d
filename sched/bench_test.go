package sched_test

import (
	"context"
	"fmt"
	"testing"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/lanes-dev/lanes/internal/redistest"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
)

// The scheduler's overhead per call: a batch of 100 safe no-op calls on the
// in-memory backend, against the same work done by errgroup and a
// semaphore.Weighted of the same width (the in-process floor).

const benchCalls = 100

func BenchmarkBatch100Scheduler(b *testing.B) {
	ctx := context.Background()
	s, err := lanes.NewSession(ctx, lanes.NewMemory())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	noop := func(context.Context, sched.Invocation) (string, error) { return "", nil }
	sc, err := sched.New(sched.Config{Runner: sched.DefaultRunner(), Tools: map[string]sched.Tool{"noop": {Safe: safe, Run: noop}}}, s)
	if err != nil {
		b.Fatal(err)
	}
	cs := make([]sched.Call, benchCalls)
	for i := range cs {
		cs[i] = sched.Call{ID: fmt.Sprintf("c%d", i), Tool: "noop", Args: []byte(`{}`)}
	}
	for b.Loop() {
		if _, err := sc.Run(ctx, cs, sched.Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchCalls), "ns/call")
}

func BenchmarkBatch100ErrgroupSemaphore(b *testing.B) {
	ctx := context.Background()
	noop := func(context.Context, int) (string, error) { return "", nil }
	for b.Loop() {
		sem := semaphore.NewWeighted(sched.DefaultMaxConcurrentTools)
		g, gctx := errgroup.WithContext(ctx)
		out := make([]string, benchCalls)
		for i := range benchCalls {
			if err := sem.Acquire(gctx, 1); err != nil {
				b.Fatal(err)
			}
			g.Go(func() error {
				defer sem.Release(1)
				r, err := noop(gctx, i)
				out[i] = r
				return err
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchCalls), "ns/call")
}

// BenchmarkBatch100SchedulerRedis is the same batch on the real Redis
// server (skipped when none answers), each call on a concurrency key of
// its own: what a call costs in round trips, its run records included.
func BenchmarkBatch100SchedulerRedis(b *testing.B) {
	ctx := context.Background()
	s, err := lanes.NewSession(ctx, redistest.Backend(b, redistest.Client(b), "bench-"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	noop := func(context.Context, sched.Invocation) (string, error) { return "", nil }
	sc, err := sched.New(sched.Config{Runner: sched.DefaultRunner(), Tools: map[string]sched.Tool{"noop": {Safe: safe, Concurrency: sched.Concurrency{Limit: 1000}, Run: noop}}}, s)
	if err != nil {
		b.Fatal(err)
	}
	cs := make([]sched.Call, benchCalls)
	for i := range cs {
		cs[i] = sched.Call{ID: fmt.Sprintf("c%d", i), Tool: "noop", Args: []byte(`{}`)}
	}
	for b.Loop() {
		if _, err := sc.Run(ctx, cs, sched.Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchCalls), "ns/call")
}
