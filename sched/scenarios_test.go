package sched_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
)

// The worked scenarios of the seeds and RFD 129's coordinator list, on
// every backend.

// Four independent lookups run at once: each waits at its gate until all
// four have started, which only happens if none waits for another.
func TestFourLookupsAtOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		s := e.scheduler(config(p, parallel(), map[string]sched.Tool{"lookup": {ReadOnlyHint: true}}))
		ids := []string{"l1", "l2", "l3", "l4"}
		p.gate(ids...)
		done := runAsync(t, context.Background(), s, calls("l1:lookup", "l2:lookup", "l3:lookup", "l4:lookup"), sched.Options{})
		for _, id := range ids {
			p.waitStarted(t, id)
		}
		for _, id := range ids {
			p.open(id)
		}
		wantStatus(t, done.wait(t), map[string]sched.Status{"l1": sched.OK, "l2": sched.OK, "l3": sched.OK, "l4": sched.OK})
	})
}

// The same four with a limit of 2 run two at a time, in written order.
func TestFourLookupsTwoAtATime(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		s := e.scheduler(config(p, parallel(), map[string]sched.Tool{"lookup": {ReadOnlyHint: true, Concurrency: sched.Concurrency{Limit: 2}}}))
		p.gate("l1", "l2", "l3", "l4")
		done := runAsync(t, context.Background(), s, calls("l1:lookup", "l2:lookup", "l3:lookup", "l4:lookup"), sched.Options{})
		p.waitStarted(t, "l1")
		p.waitStarted(t, "l2")
		if _, waiters := e.inspect("concurrency:lookup"); !slices.Equal(waiters, []string{"l3", "l4"}) {
			t.Fatalf("waiters %v; want [l3 l4]", waiters)
		}
		p.open("l1")
		p.waitStarted(t, "l3")
		p.open("l2")
		p.waitStarted(t, "l4")
		p.open("l3")
		p.open("l4")
		done.wait(t)
		p.mu.Lock()
		most := p.most
		p.mu.Unlock()
		if most != 2 {
			t.Fatalf("%d ran at once; want 2", most)
		}
	})
}

// RFD 129: the renumber chain runs in written order, one at a time, on its
// key, although each call is safe to run beside other tools' calls.
func TestRenumberChainInOrder(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		s := e.scheduler(config(p, parallel(), map[string]sched.Tool{"rfd_renumber": {Safe: safe, Concurrency: sched.Concurrency{Key: "rfd", Limit: 1}}}))
		res := e.run(s, calls("r008:rfd_renumber", "r007:rfd_renumber", "r006:rfd_renumber", "r005:rfd_renumber"), sched.Options{})
		want := []string{"start r008", "end r008", "start r007", "end r007", "start r006", "end r006", "start r005", "end r005"}
		if got := p.snapshot(); !slices.Equal(got, want) {
			t.Fatalf("log %v; want %v", got, want)
		}
		var last uint64
		for _, o := range res.Outcomes {
			if tok := o.Tokens["concurrency:rfd"]; tok <= last {
				t.Fatalf("token of %s = %d, not above %d", o.CallID, tok, last)
			} else {
				last = tok
			}
		}
	})
}

// RFD 129: calls on different keys run in parallel.
func TestDifferentKeysInParallel(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		s := e.scheduler(config(p, parallel(), map[string]sched.Tool{
			"issues": {Safe: safe, Concurrency: sched.Concurrency{Key: "github", Limit: 1}},
			"draft":  {Safe: safe, Concurrency: sched.Concurrency{Key: "rfd", Limit: 1}},
		}))
		p.gate("g", "d")
		done := runAsync(t, context.Background(), s, calls("g:issues", "d:draft"), sched.Options{})
		p.waitStarted(t, "g")
		p.waitStarted(t, "d")
		p.open("g")
		p.open("d")
		done.wait(t)
	})
}

// RFD 129: three draft calls that each pick the next free number get
// distinct numbers on their shared key.
func TestDraftRaceGetsDistinctNumbers(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		var mu sync.Mutex
		drafts := map[int]string{}
		draft := func(ctx context.Context, inv sched.Invocation) (string, error) {
			mu.Lock()
			next := len(drafts) + 1 // scan the directory
			mu.Unlock()
			time.Sleep(5 * time.Millisecond) // write the file
			mu.Lock()
			defer mu.Unlock()
			if prev, taken := drafts[next]; taken {
				return "", &toolError{inv.CallID + " collided with " + prev}
			}
			drafts[next] = inv.CallID
			return "", nil
		}
		s := e.scheduler(sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{
			"rfd_draft": {Safe: safe, Concurrency: sched.Concurrency{Key: "rfd", Limit: 1}, Run: draft},
		}})
		res := e.run(s, calls("d1:rfd_draft", "d2:rfd_draft", "d3:rfd_draft"), sched.Options{})
		wantStatus(t, res, map[string]sched.Status{"d1": sched.OK, "d2": sched.OK, "d3": sched.OK})
		if drafts[1] != "d1" || drafts[2] != "d2" || drafts[3] != "d3" {
			t.Fatalf("drafts %v; want 1..3 in call order", drafts)
		}
	})
}

// RFD 129: a restart prepares the calls again and releases them in written
// order: the restarted batch takes over the places its crashed runner held,
// ahead of a call another runner queued after them.
func TestRestartKeepsWrittenOrder(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		k := sched.Concurrency{Key: "rfd", Limit: 1}
		s := e.scheduler(config(p, parallel(), map[string]sched.Tool{"rfd_renumber": {Safe: safe, Concurrency: k}}))
		lane := []lanes.Lane{{Key: "concurrency:rfd", Limit: 1}}
		ctx := testCtx(t)
		other, err := lanes.NewSession(ctx, e.backend)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		h, err := other.Acquire(ctx, lanes.Request{ID: "holder", Lanes: lane})
		if err != nil {
			t.Fatal(err)
		}
		// The first runner enqueued its batch, then crashed.
		if _, err := e.backend.Enqueue(ctx, lanes.Owner{ID: "crashed"}, time.Minute, []lanes.Request{
			{ID: "run-1/r1", Lanes: lane}, {ID: "run-1/r2", Lanes: lane}, {ID: "run-1/r3", Lanes: lane},
		}); err != nil {
			t.Fatal(err)
		}
		late, err := other.Enqueue(ctx, lanes.Request{ID: "late", Lanes: lane})
		if err != nil {
			t.Fatal(err)
		}
		done := runAsync(t, ctx, s, calls("r1:rfd_renumber", "r2:rfd_renumber", "r3:rfd_renumber"), sched.Options{RunID: "run-1"})
		// The restarted batch holds the crashed runner's places.
		for deadline := time.Now().Add(10 * time.Second); ; {
			snap, err := e.backend.Inspect(ctx, []string{"concurrency:rfd"})
			if err == nil && len(snap.Keys) == 1 && len(snap.Keys[0].Waiters) == 4 && snap.Keys[0].Waiters[0].Owner.ID == e.session.Owner().ID {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the restarted batch did not take over its places: %+v", snap)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, done.wait(t), map[string]sched.Status{"r1": sched.OK, "r2": sched.OK, "r3": sched.OK})
		l, err := late[0].Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Release(ctx)
		if got := p.snapshot(); !slices.Equal(got, []string{"start r1", "end r1", "start r2", "end r2", "start r3", "end r3"}) {
			t.Fatalf("log %v; want r1, r2, r3 in order", got)
		}
	})
}
