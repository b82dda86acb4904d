package lanestest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// Invariant 8: enqueueing an existing id returns its state and keeps its place.
func testIdempotent(t *testing.T, inst Instance) {
	b := inst.Backend
	o := lanes.Owner{ID: "retrying-owner", Host: "h", PID: 2}
	first, err := b.Enqueue(ctxT(t), o, time.Minute, []lanes.Request{req("h", "k", 1), req("w", "k", 1)})
	if err != nil {
		t.Fatal(err)
	}
	again, err := b.Enqueue(ctxT(t), o, time.Minute, []lanes.Request{req("h", "k", 1), req("w", "k", 1)})
	if err != nil {
		t.Fatalf("Enqueue(same ids) = %v", err)
	}
	if again[0].State != lanes.Held || again[0].Tokens["k"] != first[0].Tokens["k"] {
		t.Fatalf("re-enqueued holder = %+v; want held with token %d", again[0], first[0].Tokens["k"])
	}
	if again[1].State != lanes.Waiting || again[1].Positions["k"] != 1 {
		t.Fatalf("re-enqueued waiter = %+v; want waiting at 1", again[1])
	}
	ks := inspect(t, b, "k")
	if !equal(holderIDs(ks), []string{"h"}) || !equal(waiterIDs(ks), []string{"w"}) {
		t.Fatalf("after the retry: holders %v waiters %v; want [h] [w]", holderIDs(ks), waiterIDs(ks))
	}
	// One step removes every listed entry first, then grants: w leaves as a waiter.
	if r, err := b.Release(ctxT(t), o.ID, []string{"h", "w", "h"}); err != nil || r.Was[0] != lanes.Held || r.Was[1] != lanes.Waiting || r.Was[2] != lanes.Gone || len(r.Granted) != 0 {
		t.Fatalf("Release(h, w, h) = %+v, %v; want Was [held waiting gone], nothing granted", r, err)
	}
}

// Invariant 8: a restarted batch keeps its place in the queue.
func testRestartKeepsOrder(t *testing.T, inst Instance) {
	s := session(t, inst.Backend)
	h := acquire(t, s, req("h", "k", 1))
	// A runner enqueued its batch, then crashed before waiting.
	deadOwner(t, inst.Backend, time.Minute, req("a", "k", 1), req("b", "k", 1), req("c", "k", 1))
	other := session(t, inst.Backend)
	n := enqueue(t, other, req("n", "k", 1))[0]
	// Restarted, it enqueues the same batch again and takes it over.
	restarted := session(t, inst.Backend)
	ts := enqueue(t, restarted, req("a", "k", 1), req("b", "k", 1), req("c", "k", 1))
	for i, tk := range ts {
		if p := tk.Positions()["k"]; p != i+1 {
			t.Fatalf("restarted %s at position %d; want %d", tk.ID(), p, i+1)
		}
	}
	if p := n.Positions()["k"]; p != 4 {
		t.Fatalf("n at position %d; want 4", p)
	}
	release(t, h)
	for _, tk := range ts {
		l := wait(t, tk)
		if isReady(n) {
			t.Fatalf("n granted before restarted %s", tk.ID())
		}
		release(t, l)
	}
	release(t, wait(t, n))
}

// Invariant 9: a key's limit is recorded while it has holders or waiters.
func testLimitsAgree(t *testing.T, inst Instance) {
	s := session(t, inst.Backend)
	h := acquire(t, s, req("h", "k", 2))
	_, err := s.Acquire(ctxT(t), req("x", "k", 3))
	var lm *lanes.LimitMismatchError
	if !errors.As(err, &lm) || lm.Key != "k" || lm.Recorded != 2 || lm.Requested != 3 {
		t.Fatalf("Acquire(k:3 while k:2 is held) = %v; want LimitMismatchError{k 2 3}", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `"k"`) || !strings.Contains(msg, "2") || !strings.Contains(msg, "3") {
		t.Fatalf("error %q does not name the key and both limits", msg)
	}
	// A key with only waiters records its limit too.
	hb := acquire(t, s, req("hb", "b", 1))
	w := enqueue(t, s, req("w", "j", 1, "b", 1))[0]
	if _, err := s.Acquire(ctxT(t), req("y", "j", 5)); !errors.Is(err, lanes.ErrLimitMismatch) {
		t.Fatalf("Acquire(j:5 while j:1 is awaited) = %v; want ErrLimitMismatch", err)
	}
	release(t, h)
	release(t, hb)
	release(t, wait(t, w))
	// Once a key is idle, any limit may be named.
	release(t, acquire(t, s, req("z", "k", 3)))
}

// Bad input is refused before it reaches the backend, naming what is wrong.
func testInvalid(t *testing.T, inst Instance) {
	s := session(t, inst.Backend)
	for _, r := range []lanes.Request{
		req("a", "", 1),
		req("a", "k", -1),
		req("a", "k", 1, "k", 1),
		req("bad id", "k", 1),
		req("a", "bad\x00key", 1),
	} {
		if _, err := s.Enqueue(ctxT(t), r); !errors.Is(err, lanes.ErrInvalid) {
			t.Errorf("Enqueue(%+v) = %v; want ErrInvalid", r, err)
		}
	}
}

// Invariant 8, made safe: an id held by a live owner is not taken over by
// another (two processes that reuse an id must not both hold the lane).
func testTakeoverOfHeldRefused(t *testing.T, inst Instance) {
	a, b := session(t, inst.Backend), session(t, inst.Backend)
	l := acquire(t, a, req("x", "k", 1))
	ts := enqueue(t, b, req("x", "k", 1))
	_, err := ts[0].Wait(ctxT(t))
	if !errors.Is(err, lanes.ErrNotHolder) {
		t.Fatalf("Wait() on an id another owner holds = %v; want ErrNotHolder", err)
	}
	if ee := (*lanes.EntryError)(nil); !errors.As(err, &ee) || !strings.HasPrefix(ee.Reason, "entry x is held by another owner") {
		t.Errorf("Wait() on an id another owner holds = %v; want an *EntryError whose Reason says entry x is held by another owner", err)
	}
	ks := inspect(t, inst.Backend, "k")
	if len(ks.Holders) != 1 || ks.Holders[0].Owner.ID != a.Owner().ID {
		t.Fatalf("holders after the refused takeover: %+v; want x of the first owner", ks.Holders)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("the first holder's lease: %v; want held", err)
	}
	release(t, l)
}

// Invariant 8: a waiting entry taken over by a restarted runner keeps its
// place, and its old owner, if alive, hears at once that it lost it.
func testTakeoverOfWaiterTellsOldOwner(t *testing.T, inst Instance) {
	holder := session(t, inst.Backend)
	old := session(t, inst.Backend, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	restarted := session(t, inst.Backend)
	h := acquire(t, holder, req("h", "k", 1))
	w := enqueue(t, old, req("w", "k", 1))[0]
	taken := enqueue(t, restarted, req("w", "k", 1))[0]
	if p := taken.Positions()["k"]; p != 1 {
		t.Fatalf("taken-over entry at position %d; want 1", p)
	}
	ctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second) // the old owner's poll is 20s away
	defer cancel()
	if _, err := w.Wait(ctx); !errors.Is(err, lanes.ErrLeaseLost) {
		t.Fatalf("the old owner's Wait() = %v; want ErrLeaseLost at once", err)
	}
	release(t, h)
	release(t, wait(t, taken))
}
