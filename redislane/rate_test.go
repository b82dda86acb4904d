package redislane_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
)

// Regression (review of rate lanes, finding 3): a rate's log counts at the
// µs of TIME, and counts a unit for the last µs of its window too (TIME
// truncates), so "at most limit units in any real window of length per"
// holds exactly. Logged at the ms, a unit left up to 1 ms early: two grants
// 1 µs apart across a ms boundary under 1/1ms. miniredis runs at fixed
// instants here.
func TestRateWindowCountsMicroseconds(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	b := newBackend(t, c)
	ctx := context.Background()
	owner := lanes.Owner{ID: "micro", Host: "test", PID: 1}
	r := lanes.Rate{Limit: 1, Per: time.Millisecond}
	req := func(id string) []lanes.Request {
		return []lanes.Request{{ID: id, Lanes: []lanes.Lane{{Key: "k", Limit: lanes.MaxLimit, Rate: r, Cost: 1}}}}
	}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 999_000, time.UTC) // the last µs of a ms
	m.SetTime(t0)
	sts, err := b.Enqueue(ctx, owner, time.Minute, req("a"))
	if err != nil || sts[0].State != lanes.Held {
		t.Fatalf("Enqueue(a) = %+v, %v; want held", sts, err)
	}
	if _, err := b.Release(ctx, owner.ID, []string{"a"}); err != nil {
		t.Fatalf("Release(a) = %v", err)
	}
	for _, at := range []time.Duration{time.Microsecond, time.Millisecond} {
		m.SetTime(t0.Add(at))
		sts, err = b.Enqueue(ctx, owner, time.Minute, req("b"))
		if err != nil || sts[0].State != lanes.Waiting {
			t.Fatalf("Enqueue(b) %v after a under %v = %+v, %v; want waiting (a real window of 1ms may hold both)", at, r, sts, err)
		}
		if sts[0].RateWait != time.Millisecond {
			t.Errorf("Enqueue(b) %v after a: RateWait %v; want 1ms (rounded up)", at, sts[0].RateWait)
		}
	}
	m.SetTime(t0.Add(time.Millisecond + time.Microsecond))
	sts, err = b.Heartbeat(ctx, owner.ID, time.Minute, []string{"b"})
	if err != nil || sts[0].State != lanes.Held {
		t.Fatalf("Heartbeat(b) 1ms and 1µs after a = %+v, %v; want held", sts, err)
	}
	if _, err := b.Release(ctx, owner.ID, []string{"b"}); err != nil {
		t.Fatalf("Release(b) = %v", err)
	}
}
