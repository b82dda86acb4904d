package lanestest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// deadOwner enqueues reqs straight into the backend with ttl and never
// renews them: a process that died after its step.
func deadOwner(t *testing.T, b lanes.Backend, ttl time.Duration, reqs ...lanes.Request) []lanes.Status {
	t.Helper()
	st, err := b.Enqueue(ctxT(t), lanes.Owner{ID: "dead-owner", Host: "gone", PID: 1}, ttl, reqs)
	if err != nil {
		t.Fatalf("Enqueue(dead owner) = %v", err)
	}
	return st
}

// passTTL lets a dead owner's entries of the given TTL expire: by moving the
// backend clock when it can, else by letting real time pass (the live
// sessions' heartbeats then reap them).
func passTTL(inst Instance, ttl time.Duration) {
	if inst.Advance != nil {
		inst.Advance(2 * ttl)
	}
}

// Invariant 6: a dead holder's lease expires and its slot passes on.
func testDeadHolder(t *testing.T, inst Instance) {
	st := deadOwner(t, inst.Backend, 300*time.Millisecond, req("dead", "k", 1))
	if st[0].State != lanes.Held {
		t.Fatalf("dead holder's Enqueue state = %v; want held", st[0].State)
	}
	s := session(t, inst.Backend)
	w := enqueue(t, s, req("w", "k", 1))[0]
	passTTL(inst, 300*time.Millisecond)
	l := wait(t, w)
	if l.Token("k") <= st[0].Tokens["k"] {
		t.Fatalf("token after expiry %d, not above the dead holder's %d", l.Token("k"), st[0].Tokens["k"])
	}
	release(t, l)
}

// The backend counts expired holders and evicted waiters.
func testStats(t *testing.T, inst Instance) {
	stats := func() lanes.Stats {
		snap, err := inst.Backend.Inspect(ctxT(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		return snap.Stats
	}
	before := stats()
	deadOwner(t, inst.Backend, 300*time.Millisecond, req("dead-holder", "k", 1), req("dead-waiter", "k", 1))
	s := session(t, inst.Backend)
	w := enqueue(t, s, req("w", "k", 1))[0]
	passTTL(inst, 300*time.Millisecond)
	release(t, wait(t, w))
	after := stats()
	if after.ExpiredHolders-before.ExpiredHolders != 1 || after.EvictedWaiters-before.EvictedWaiters != 1 {
		t.Errorf("Stats from %+v to %+v; want one more expired holder and one more evicted waiter", before, after)
	}
}

// Invariant 6: a dead waiter is purged wherever it stands and blocks no one.
func testDeadWaiter(t *testing.T, inst Instance) {
	s := session(t, inst.Backend)
	h := acquire(t, s, req("h", "k", 1))
	deadOwner(t, inst.Backend, 300*time.Millisecond, req("dead", "k", 1))
	w := enqueue(t, s, req("w", "k", 1))[0]
	if p := w.Positions()["k"]; p != 2 {
		t.Fatalf("w enqueued at %d; want 2, behind the dead waiter", p)
	}
	passTTL(inst, 300*time.Millisecond)
	eventually(t, "the dead waiter is purged", func() bool {
		return equal(waiterIDs(inspect(t, inst.Backend, "k")), []string{"w"})
	})
	release(t, h)
	release(t, wait(t, w))
}

// Invariant 6: a live waiter, however long it waits, is never evicted. The
// holder works for four of the waiter's TTLs (1s, renewed every 100ms: a
// process starved for most of a second under -race still renews): on the
// backend's clock, moved a quarter TTL at a time once a heartbeat renewed
// the waiter since the last move, where Instance.Advance is set; on the
// real clock otherwise.
func testLiveWaiter(t *testing.T, inst Instance) {
	const ttl = time.Second
	holder := session(t, inst.Backend)
	waiter := session(t, inst.Backend, lanes.WithTTL(ttl), lanes.WithHeartbeat(ttl/10))
	h := acquire(t, holder, req("h", "k", 1))
	w := enqueue(t, waiter, req("w", "k", 1))[0]
	left := func() time.Duration { // the waiter's time left on the backend's clock, 0 once gone
		snap, err := inst.Backend.Inspect(ctxT(t), []string{"k"})
		if err != nil {
			t.Fatalf("Inspect(k) = %v", err)
		}
		for _, ks := range snap.Keys {
			for _, x := range ks.Waiters {
				if x.ID == "w" {
					return x.Expires.Sub(snap.Time)
				}
			}
		}
		return 0
	}
	if inst.Advance != nil {
		for range 16 {
			// After the last move at most 3/4 TTL was left: more means a
			// heartbeat came since.
			eventually(t, "a heartbeat renews the live waiter", func() bool { return left() > 3*ttl/4 })
			inst.Advance(ttl / 4)
		}
	} else {
		time.Sleep(4 * ttl)
	}
	if ks := inspect(t, inst.Backend, "k"); !equal(waiterIDs(ks), []string{"w"}) {
		t.Fatalf("after 4 TTLs the live waiter is gone: waiters %v", waiterIDs(ks))
	}
	release(t, h)
	release(t, wait(t, w))
}

// Invariant 6: a holder whose renewals stop is told before the backend can
// grant its slot to anyone else.
func testLostBeforeRegrant(t *testing.T, inst Instance) {
	f := &Faulty{Backend: inst.Backend}
	holder := session(t, f, lanes.WithTTL(400*time.Millisecond), lanes.WithHeartbeat(40*time.Millisecond))
	waiter := session(t, inst.Backend)
	h := acquire(t, holder, req("h", "k", 1))
	w := enqueue(t, waiter, req("w", "k", 1))[0]
	f.SetDown(true) // on the real clock: a clock jump would expire both sides at once
	l := wait(t, w)
	if err := h.Err(); !errors.Is(err, lanes.ErrLeaseLost) {
		t.Fatalf("w was granted k while the old holder's Err() = %v; want ErrLeaseLost", err)
	}
	select {
	case <-h.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost() did not close")
	}
	if !errors.Is(context.Cause(h.Context()), lanes.ErrLeaseLost) {
		t.Fatalf("Cause(lease context) = %v; want ErrLeaseLost", context.Cause(h.Context()))
	}
	release(t, l)
	f.SetDown(false)
	if err := h.Release(ctxT(t)); !errors.Is(err, lanes.ErrLeaseLost) {
		t.Fatalf("Release() of a lost lease = %v; want ErrLeaseLost", err)
	}
}

// Invariant 6: a lease released by force (`lanectl release --force`) is lost,
// and its holder hears of it from the backend's hint, not its next poll.
func testForceRelease(t *testing.T, inst Instance) {
	s := session(t, inst.Backend, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	h := acquire(t, s, req("h", "k", 1))
	w := enqueue(t, s, req("w", "k", 1))[0]
	r, err := inst.Backend.Release(ctxT(t), "", []string{"h"})
	if err != nil || len(r.Was) != 1 || r.Was[0] != lanes.Held || !equal(r.Granted, []string{"w"}) {
		t.Fatalf("Release(h) = %+v, %v; want Was [held], Granted [w]", r, err)
	}
	select {
	case <-h.Lost():
	case <-time.After(5 * time.Second): // its next poll is 20s away
		t.Fatal("a lease released by force did not hear of it within 5s")
	}
	if ee := (*lanes.EntryError)(nil); !errors.As(context.Cause(h.Context()), &ee) || ee.Err != lanes.ErrLeaseLost || ee.Reason != "entry h was released by force (lanectl release --force)" {
		t.Errorf("Cause(lease context) after a forced release = %v; want an *EntryError of ErrLeaseLost: entry h was released by force (lanectl release --force)", context.Cause(h.Context()))
	}
	if err := h.Release(ctxT(t)); !errors.Is(err, lanes.ErrLeaseLost) {
		t.Fatalf("Release() after a forced release = %v; want ErrLeaseLost", err)
	}
	release(t, wait(t, w))
}

// Invariant 7: a waiter whose context ends leaves every queue at once.
func testCancel(t *testing.T, inst Instance) {
	s := session(t, inst.Backend)
	h := acquire(t, s, req("h", "a", 1, "b", 1))

	ctx, cancel := context.WithCancel(ctxT(t))
	x := enqueue(t, s, req("x", "a", 1, "b", 1))[0]
	cancel()
	if _, err := x.Wait(ctx); !errors.Is(err, lanes.ErrCanceled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait(cancelled) = %v; want ErrCanceled and context.Canceled", err)
	}
	for _, k := range []string{"a", "b"} {
		if ks := inspect(t, inst.Backend, k); len(ks.Waiters) != 0 {
			t.Fatalf("after the cancel, %s still has waiters %v", k, waiterIDs(ks))
		}
	}

	ctx, cancel = context.WithTimeout(ctxT(t), 50*time.Millisecond)
	defer cancel()
	if _, err := s.Acquire(ctx, req("y", "b", 1)); !errors.Is(err, lanes.ErrWaitTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire(50ms) = %v; want ErrWaitTimeout and DeadlineExceeded", err)
	}
	if ks := inspect(t, inst.Backend, "b"); len(ks.Waiters) != 0 {
		t.Fatalf("after the timeout, b still has waiters %v", waiterIDs(ks))
	}
	release(t, h)
}

// Invariant 7: when the head waiter leaves, the next one is granted if the
// limit has room (the x/sync semaphore bug of go.dev/issue/63615, in lanes).
func testCancelledHead(t *testing.T, inst Instance) {
	s := session(t, inst.Backend)
	hk := acquire(t, s, req("hk", "k", 2))
	hb := acquire(t, s, req("hb", "b", 1))
	w1 := enqueue(t, s, req("w1", "k", 2, "b", 1))[0]
	w2 := enqueue(t, s, req("w2", "k", 2))[0]
	if isReady(w2) {
		t.Fatal("w2 granted although w1 is queued before it and only one slot is free")
	}
	if err := w1.Cancel(ctxT(t)); err != nil {
		t.Fatalf("Cancel(w1) = %v", err)
	}
	release(t, wait(t, w2))
	release(t, hk)
	release(t, hb)
}

// Invariant 7: cancelling a ticket that was granted gives the grant back.
func testCancelAfterGrant(t *testing.T, inst Instance) {
	s := session(t, inst.Backend)
	h := acquire(t, s, req("h", "k", 1))
	w := enqueue(t, s, req("w", "k", 1))[0]
	v := enqueue(t, s, req("v", "k", 1))[0]
	release(t, h)
	<-w.Ready()
	if err := w.Cancel(ctxT(t)); err != nil {
		t.Fatalf("Cancel(granted w) = %v", err)
	}
	lv := wait(t, v)
	if ks := inspect(t, inst.Backend, "k"); !equal(holderIDs(ks), []string{"v"}) {
		t.Fatalf("holders after the cancel = %v; want [v]", holderIDs(ks))
	}
	release(t, lv)
}

// Invariant 12: with the backend unreachable, acquiring fails within its
// context's deadline and says why; held leases report their loss; waiters
// do not wait forever.
func testBackendDown(t *testing.T, inst Instance) {
	f := &Faulty{Backend: inst.Backend}
	s := session(t, f, lanes.WithTTL(400*time.Millisecond), lanes.WithHeartbeat(40*time.Millisecond))
	l := acquire(t, s, req("l", "k", 1))
	w := enqueue(t, s, req("w", "k", 1))[0]
	f.SetDown(true)

	ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	defer cancel()
	if _, err := s.Acquire(ctx, req("x", "j", 1)); !errors.Is(err, lanes.ErrUnavailable) {
		t.Fatalf("Acquire() with the backend down = %v; want ErrUnavailable", err)
	}
	select {
	case <-l.Lost():
	case <-ctxT(t).Done():
		t.Fatal("the lease never reported its loss")
	}
	if _, err := w.Wait(ctxT(t)); !errors.Is(err, lanes.ErrUnavailable) {
		t.Fatalf("Wait() with the backend down = %v; want ErrUnavailable", err)
	}
	f.SetDown(false)
	passTTL(inst, 400*time.Millisecond)
	// The backend expires what the lost session left behind.
	eventually(t, "the lost entries expire", func() bool {
		snap, err := inst.Backend.Inspect(ctxT(t), []string{"k"})
		return err == nil && len(snap.Keys) == 0
	})
}

// Release results: twice, after release, after loss.
func testReleaseResults(t *testing.T, inst Instance) {
	s := session(t, inst.Backend)
	l := acquire(t, s, req("l", "k", 1))
	release(t, l)
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatalf("second Release() = %v; want nil, as the first", err)
	}
	if err := l.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err() after Release = %v; want context.Canceled", err)
	}
	select {
	case <-l.Context().Done():
	default:
		t.Fatal("the lease context is not done after Release")
	}
	select {
	case <-l.Lost():
		t.Fatal("Lost() closed by a release")
	default:
	}
}

// Session.Close releases what it holds and fails its waiters.
func testClose(t *testing.T, inst Instance) {
	s, err := lanes.NewSession(ctxT(t), inst.Backend, lanes.WithHeartbeat(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	other := session(t, inst.Backend)
	l := acquire(t, s, req("l", "k", 1))
	w := enqueue(t, s, req("w", "k", 1))[0]
	v := enqueue(t, other, req("v", "k", 1))[0]
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if _, err := w.Wait(ctxT(t)); !errors.Is(err, lanes.ErrClosed) {
		t.Fatalf("Wait() after Close = %v; want ErrClosed", err)
	}
	if !errors.Is(l.Err(), lanes.ErrClosed) {
		t.Fatalf("lease Err() after Close = %v; want ErrClosed", l.Err())
	}
	if _, err := s.Enqueue(ctxT(t), req("z", "k", 1)); !errors.Is(err, lanes.ErrClosed) {
		t.Fatalf("Enqueue() after Close = %v; want ErrClosed", err)
	}
	release(t, wait(t, v))
}
