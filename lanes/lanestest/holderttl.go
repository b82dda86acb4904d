package lanestest

import (
	"context"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// Status.HolderTTL: a waiting status tells how long the first lease of a
// holder of its keys has left, so that a waiter behind a holder whose
// runner died is granted when that lease runs out, not at its next
// heartbeat (a new user's trial of lanectl lock saw the takeover come up
// to a third of the waiter's TTL after the dead holder's lease ran out).

// A waiting status that one holder's end would grant (on each of its keys
// with no room for it, the holders and waiters before it are exactly the
// limit) carries the time left on the first lease to run out among those
// holders (the holder of the shorter TTL), on Enqueue and on Heartbeat;
// one further back (a second waiter of a full key of limit 2 needs two
// holders' ends), or whose keys have room, none; a held status none. A
// grant earlier in the same step counts. Break-it reviews found every
// waiter of a key polling at its holder's TTL (10,000 waiters behind a
// 100ms holder took 94% of Redis's CPU and cost the holder its lease), and
// then every one of the first Limit waiters of a full semaphore.
func testHolderTTL(t *testing.T, inst Instance) {
	long := newDirect(t, inst.Backend, "ttl-long", time.Minute)
	short := newDirect(t, inst.Backend, "ttl-short", 3*time.Second)
	waiter := newDirect(t, inst.Backend, "ttl-waiter", time.Hour)
	wantStates(t, long.enqueue(req("h1", "a", 2)), map[string]lanes.State{"h1": lanes.Held})
	sts := short.enqueue(req("h2", "a", 2))
	wantStates(t, sts, map[string]lanes.State{"h2": lanes.Held})
	if d := sts["h2"].HolderTTL; d != 0 {
		t.Errorf("Enqueue: held h2 has HolderTTL %v; want 0", d)
	}
	// a (limit 2) is full: w is its first waiter, f1 the second, f2 the
	// third; w also waits on b, which has room; x waits on b behind w.
	sts = waiter.enqueue(req("w", "a", 2, "b", 1), req("x", "b", 1), req("f1", "a", 2), req("f2", "a", 2))
	wantStates(t, sts, map[string]lanes.State{"w": lanes.Waiting, "x": lanes.Waiting, "f1": lanes.Waiting, "f2": lanes.Waiting})
	check := func(step string, sts map[string]lanes.Status) {
		t.Helper()
		if d := sts["w"].HolderTTL; d <= 0 || d > 3*time.Second {
			t.Errorf("%s: w behind leases of 1m and 3s has HolderTTL %v; want in (0, 3s]", step, d)
		}
		if d := sts["f1"].HolderTTL; d != 0 {
			t.Errorf("%s: f1, second waiter of a full key of limit 2, has HolderTTL %v; want 0 (two holders must end)", step, d)
		}
		if d := sts["x"].HolderTTL; d != 0 {
			t.Errorf("%s: x, behind w on b (limit 1, no holder), has HolderTTL %v; want 0", step, d)
		}
		if d := sts["f2"].HolderTTL; d != 0 {
			t.Errorf("%s: f2, third waiter of a (limit 2), has HolderTTL %v; want 0", step, d)
		}
	}
	check("Enqueue", sts)
	check("Heartbeat", waiter.status("w", "x", "f1", "f2"))
	// One step of an owner with a 2s TTL: g is granted d, q queued behind
	// it: q's first lease to run out is g's, granted in q's own step.
	short2 := newDirect(t, inst.Backend, "ttl-short2", 2*time.Second)
	sts = short2.enqueue(req("g", "d", 1), req("q", "d", 1))
	wantStates(t, sts, map[string]lanes.State{"g": lanes.Held, "q": lanes.Waiting})
	if d := sts["q"].HolderTTL; d <= 0 || d > 2*time.Second {
		t.Errorf("Enqueue: q, behind g granted d in the same step for 2s, has HolderTTL %v; want in (0, 2s]", d)
	}
	short2.release("g", "q")
	short.release("h2")
	long.release("h1")
	wantStates(t, waiter.status("w"), map[string]lanes.State{"w": lanes.Held})
	waiter.release("w", "x", "f1", "f2")
}

// A Session's waiter behind a holder whose runner died is granted when the
// holder's lease runs out, long before its own next heartbeat (20s here):
// it polls at the HolderTTL its status gave. Real clock, as the Session's
// timer.
func testDeadHolderTakenOverAtItsDeadline(t *testing.T, inst Instance) {
	dead := deadOwner(t, inst.Backend, 400*time.Millisecond, req("dead", "k", 1))
	s := session(t, inst.Backend, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second) // half the heartbeat interval
	defer cancel()
	l, err := s.Acquire(ctx, req("w", "k", 1))
	if err != nil {
		t.Fatalf("Acquire(k) behind a dead holder of a 400ms lease = %v; want a grant when that lease runs out, before the next heartbeat", err)
	}
	if l.Token("k") <= dead[0].Tokens["k"] {
		t.Errorf("token after the takeover %d; want above the dead holder's %d", l.Token("k"), dead[0].Tokens["k"])
	}
	release(t, l)
}
