package redislane_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
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

// Regression (break-it review of 2026-12-04, finding 1): past RATE_LOG_MAX
// (1,000) pairs, every grant merged the two oldest pairs of a rate's log,
// even pairs past the window, so that with more than 1,000 grants a window
// units were carried forward for as long as grants kept coming: a rate of
// 5,000 a window granted 1,000 a window once the first was spent, and one
// used at 30% stalled. Now a grant in the same slice of the window (its
// 1,000th part) joins the last pair, and the window counts what it holds.
// Here grants come, each released at once, more than 1,000 a window and
// well below the rate: every one must be granted at once. On miniredis at
// fixed instants, one at a time (1,501 a window of 1s under 2,000/s for
// 2,500 grants; the old merge had one wait at the 2,001st), and on the
// real Redis server in steps of 50 as fast as they go (below; the old
// merge counted 31,550 units in a window that held about 10,000).
func TestRateLogPastItsPairsRealRedis(t *testing.T) {
	ctx := context.Background()
	owner := lanes.Owner{ID: "steady", Host: "test", PID: 1}
	grant := func(t *testing.T, b *redislane.Backend, r lanes.Rate, i int) {
		t.Helper()
		id := fmt.Sprintf("g%05d", i)
		sts, err := b.Enqueue(ctx, owner, time.Minute, []lanes.Request{{ID: id, Lanes: []lanes.Lane{{Key: "k", Limit: lanes.MaxLimit, Rate: r, Cost: 1}}}})
		if err != nil || sts[0].State != lanes.Held {
			snap, _ := b.Inspect(ctx, []string{"k"})
			var w *lanes.RateWindow
			if snap != nil && len(snap.Keys) == 1 {
				w = snap.Keys[0].Rate
			}
			t.Fatalf("grant %d under %v: %+v, %v (window %+v); want held at once", i, r, sts, err, w)
		}
		if _, err := b.Release(ctx, owner.ID, []string{id}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		b := newBackend(t, c)
		t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
		for i := range 2500 {
			m.SetTime(t0.Add(time.Duration(i) * 666 * time.Microsecond))
			grant(t, b, lanes.Rate{Limit: 2000, Per: time.Second}, i)
		}
	})
	t.Run("real", func(t *testing.T) {
		// Steps of 50 as fast as they go for 3 windows, under a rate they
		// cannot reach;
		// then the window must count no more than the grants that ended
		// within it and a slice before (the old merge counted every grant
		// since the log first passed 1,000 pairs).
		const per, step = time.Second, 50
		b := newBackend(t, realClient(t))
		r := lanes.Rate{Limit: lanes.MaxLimit, Per: per}
		var done []time.Time // when each grant's call returned, by the clock Redis shares on this host
		for i, end := 0, time.Now().Add(3*per); time.Now().Before(end); i++ {
			reqs, ids := make([]lanes.Request, step), make([]string, step)
			for j := range reqs {
				ids[j] = fmt.Sprintf("s%05d-%02d", i, j)
				reqs[j] = lanes.Request{ID: ids[j], Lanes: []lanes.Lane{{Key: "k", Limit: lanes.MaxLimit, Rate: r, Cost: 1}}}
			}
			sts, err := b.Enqueue(ctx, owner, time.Minute, reqs)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			for _, st := range sts {
				if st.State != lanes.Held {
					t.Fatalf("step %d under %v: %+v; want every request held at once", i, r, st)
				}
				done = append(done, now)
			}
			if _, err := b.Release(ctx, owner.ID, ids); err != nil {
				t.Fatal(err)
			}
		}
		snap, err := b.Inspect(ctx, []string{"k"})
		if err != nil || len(snap.Keys) != 1 || snap.Keys[0].Rate == nil {
			t.Fatalf("Inspect(k) = %+v, %v; want k's window", snap, err)
		}
		from := snap.Time.Add(-per - per/1000)
		in := len(done) - sort.Search(len(done), func(i int) bool { return !done[i].Before(from) })
		if got := snap.Keys[0].Rate.Spent; got > in || in == len(done) {
			t.Errorf("after %d grants in %v, the window of %v counts %d units; want at most the %d that ended within it and a slice before (and fewer than all)", len(done), 3*per, per, got, in)
		}
	})
}
