package redislane_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// TestInspectShowsNoExpiredBacklog: 2,000 holders whose leases ran out
// together (their process killed), a live waiter behind the last: each
// inspect page reaps at most 100 expired entries, and the first Inspect
// showed the dead holder holding and the waiter waiting, as lanectl status
// and keys did (a break-it review of the operator views, with 300; a
// second one, with 5,000, passed the first fix's bound of 1,100). Inspect
// reads again while an entry past its deadline shows and the reads remove
// some, for a bounded time (a third review: a look at a large backlog ran
// past watch's timeout); with no time for rereads, one read shows the
// backlog's last holder still holding. miniredis and the real Redis server.
func TestInspectShowsNoExpiredBacklog(t *testing.T) {
	bothServers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		b := newBackend(t, c)
		// No time bound while counting rereads: the count is what is
		// checked, whatever the machine's speed.
		redislane.SetInspectRereadTime(b, time.Hour)
		dead := lanes.Owner{ID: "backlog-dead", Host: "h", PID: 1}
		const n, ttl = 2000, 2 * time.Second
		for from := 1; from <= n; from += 100 {
			var reqs []lanes.Request
			for i := from; i < from+100; i++ {
				reqs = append(reqs, lanes.Request{ID: fmt.Sprintf("z%d", i), Lanes: lane(fmt.Sprintf("zk%d", i))})
			}
			if _, err := b.Enqueue(ctx, dead, ttl, reqs); err != nil {
				t.Fatal(err)
			}
		}
		last := fmt.Sprintf("zk%d", n)
		live := lanes.Owner{ID: "backlog-live", Host: "h", PID: 2}
		st, err := b.Enqueue(ctx, live, time.Minute, []lanes.Request{{ID: "zw", Lanes: lane(last)}})
		if err != nil || st[0].State != lanes.Waiting {
			t.Fatalf("Enqueue(zw) = %+v, %v; want waiting", st, err)
		}
		// Wait for the server's clock (the scripts' TIME) to pass every
		// holder's deadline.
		snap, err := b.Inspect(ctx, []string{last})
		if err != nil || len(snap.Keys) != 1 || len(snap.Keys[0].Holders) != 1 {
			t.Fatalf("Inspect(%s) = %+v, %v; want one holder", last, snap, err)
		}
		due := snap.Keys[0].Holders[0].Expires
		for {
			now, err := c.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if now.After(due.Add(time.Millisecond)) {
				break
			}
			time.Sleep(due.Sub(now) + time.Millisecond)
		}

		redislane.SetInspectRereadTime(b, 0)
		snap, err = b.Inspect(ctx, []string{last})
		if err != nil || len(snap.Keys) != 1 || len(snap.Keys[0].Holders) != 1 || snap.Keys[0].Holders[0].ID != "z2000" || snap.Overdue() == 0 {
			t.Fatalf("Inspect(%s) with no time for rereads = %+v, %v; want one read: z2000 holding, overdue", last, snap, err)
		}
		redislane.SetInspectRereadTime(b, time.Hour)
		snap, err = b.Inspect(ctx, []string{last})
		if err != nil || len(snap.Keys) != 1 {
			t.Fatalf("Inspect(%s) after the deadlines = %+v, %v", last, snap, err)
		}
		if n := snap.Overdue(); n != 0 {
			t.Errorf("Inspect(%s) after the deadlines shows %d overdue entries; want none", last, n)
		}
		k := snap.Keys[0]
		if len(k.Holders) != 1 || k.Holders[0].ID != "zw" || len(k.Waiters) != 0 {
			var hs []string
			for _, h := range k.Holders {
				hs = append(hs, h.ID)
			}
			t.Errorf("Inspect(%s) after the deadlines: holders %q, %d waiting; want zw holding, granted past the dead holder", last, hs, len(k.Waiters))
		}
		if snap, err = b.Inspect(ctx, nil); err != nil || len(snap.Keys) != 1 {
			n := 0
			if snap != nil {
				n = len(snap.Keys)
			}
			t.Errorf("Inspect(all) = %d keys, %v; want %s alone", n, err, last)
		}
		if _, err := b.Release(ctx, "", []string{"zw"}); err != nil {
			t.Fatal(err)
		}
	})
}

// failScript fails the nth script run (EVALSHA, EVAL or FCALL) counted
// from when it is armed, once.
type failScript struct {
	n     int32
	calls atomic.Int32
	armed atomic.Bool
}

func (h *failScript) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := strings.ToLower(cmd.Name())
		if h.armed.Load() && (strings.HasPrefix(name, "eval") || strings.HasPrefix(name, "fcall")) && h.calls.Add(1) == h.n {
			err := errors.New("injected: connection reset")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (h *failScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestInspectRereadFailureKeepsTheReadBefore: when a reread fails (a
// network error, a deadline), Inspect returns the read before it, which
// showed the namespace (with overdue entries), not the error: a second
// review saw watch exit "cannot reach Redis" on its first look while Redis
// answered. A failure of the first read is still an error. miniredis,
// its clock moved past the leases' deadlines.
func TestInspectRereadFailureKeepsTheReadBefore(t *testing.T) {
	for _, n := range []int32{1, 2} {
		t.Run(fmt.Sprintf("read %d fails", n), func(t *testing.T) {
			m := miniredis.RunT(t)
			clock := &fakeClock{m: m}
			c := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { c.Close() })
			c.AddHook(clock)
			hook := &failScript{n: n}
			c.AddHook(hook)
			ctx := context.Background()
			b := newBackend(t, c)
			redislane.SetInspectRereadTime(b, time.Hour)
			dead := lanes.Owner{ID: "dead", Host: "h", PID: 1}
			var reqs []lanes.Request
			for i := 1; i <= 150; i++ {
				reqs = append(reqs, lanes.Request{ID: fmt.Sprintf("z%03d", i), Lanes: lane(fmt.Sprintf("zk%03d", i))})
			}
			if _, err := b.Enqueue(ctx, dead, time.Minute, reqs); err != nil {
				t.Fatal(err)
			}
			// A look before the deadlines loads the script: then each
			// read of Inspect is one script run.
			if _, err := b.Inspect(ctx, []string{"zk150"}); err != nil {
				t.Fatal(err)
			}
			clock.advance(2 * time.Minute)
			hook.armed.Store(true)
			snap, err := b.Inspect(ctx, []string{"zk150"})
			if hook.calls.Load() < n {
				t.Fatalf("%d script runs; want the failure injected in run %d", hook.calls.Load(), n)
			}
			switch {
			case n == 1 && err == nil:
				t.Errorf("Inspect with its first read failed = %+v, nil; want the error", snap)
			case n == 2 && (err != nil || snap == nil || snap.Overdue() == 0):
				t.Errorf("Inspect with a reread failed = %+v, %v; want the first read, overdue entries shown", snap, err)
			}
		})
	}
}
