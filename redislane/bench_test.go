package redislane_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
)

// roundTrips counts what a client sends: one per command, one per pipeline.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

// benchSession returns a Session on the real Redis server, with a counter of
// the round trips its client makes.
func benchSession(b *testing.B) (*lanes.Session, *roundTrips) {
	c := realClient(b)
	rt := &roundTrips{}
	c.AddHook(rt)
	s, err := lanes.NewSession(context.Background(), newBackend(b, c))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, rt
}

// BenchmarkAcquireRelease is one uncontended acquire and release of one key
// on the real Redis server. Target: 2 round trips per op.
func BenchmarkAcquireRelease(b *testing.B) {
	s, rt := benchSession(b)
	ctx := context.Background()
	r := lanes.Request{Lanes: []lanes.Lane{{Key: "bench", Limit: 1}}}
	warm := func() {
		r.ID = ""
		l, err := s.Acquire(ctx, r)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	warm() // loads the scripts
	rt.n.Store(0)
	b.ResetTimer()
	for b.Loop() {
		warm()
	}
	b.ReportMetric(float64(rt.n.Load())/float64(b.N), "roundtrips/op")
}

// BenchmarkEnqueueBatch10 is one Enqueue of ten requests on the real Redis
// server; the releases that follow are not counted. Target: 1 round trip
// per batch.
func BenchmarkEnqueueBatch10(b *testing.B) {
	s, rt := benchSession(b)
	ctx := context.Background()
	reqs := make([]lanes.Request, 10)
	var counted int64
	i := 0
	for b.Loop() {
		for j := range reqs {
			reqs[j] = lanes.Request{ID: fmt.Sprintf("b%d-%d", i, j), Lanes: []lanes.Lane{{Key: "bench", Limit: 10}}}
		}
		i++
		before := rt.n.Load()
		ts, err := s.Enqueue(ctx, reqs...)
		if err != nil {
			b.Fatal(err)
		}
		if i > 1 { // the first batch loads the script
			counted += rt.n.Load() - before
		}
		b.StopTimer()
		for _, t := range ts {
			l, err := t.Wait(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	if i > 1 {
		b.ReportMetric(float64(counted)/float64(i-1), "roundtrips/op")
	}
}
