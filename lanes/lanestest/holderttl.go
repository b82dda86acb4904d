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

// A waiting status carries the time left on the first lease to run out
// among its keys' holders (the holder of the shorter TTL), on Enqueue and
// on Heartbeat; a held status none; a waiter whose keys have no holders
// none; and a holder granted later in the same step counts.
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
	// w waits on a, behind h1 (a minute) and h2 (3s); x waits on b behind
	// w, and b has no holder.
	sts = waiter.enqueue(req("w", "a", 2, "b", 1), req("x", "b", 1))
	wantStates(t, sts, map[string]lanes.State{"w": lanes.Waiting, "x": lanes.Waiting})
	if d := sts["w"].HolderTTL; d <= 0 || d > 3*time.Second {
		t.Errorf("Enqueue: w behind leases of 1m and 3s has HolderTTL %v; want in (0, 3s]", d)
	}
	if d := sts["x"].HolderTTL; d != 0 {
		t.Errorf("Enqueue: x, on a key with waiters and no holder, has HolderTTL %v; want 0", d)
	}
	sts = waiter.status("w", "x")
	if d := sts["w"].HolderTTL; d <= 0 || d > 3*time.Second {
		t.Errorf("Heartbeat: w has HolderTTL %v; want in (0, 3s]", d)
	}
	if d := sts["x"].HolderTTL; d != 0 {
		t.Errorf("Heartbeat: x has HolderTTL %v; want 0", d)
	}
	// One step of an owner with a 2s TTL: y waits on a (held for 1m and
	// 3s) and c; z is granted c behind it, as c's limit leaves room. y's
	// first lease to run out is z's, granted after y's status was decided.
	short2 := newDirect(t, inst.Backend, "ttl-short2", 2*time.Second)
	sts = short2.enqueue(req("y", "a", 2, "c", 2), req("z", "c", 2))
	wantStates(t, sts, map[string]lanes.State{"y": lanes.Waiting, "z": lanes.Held})
	if d := sts["y"].HolderTTL; d <= 0 || d > 2*time.Second {
		t.Errorf("Enqueue: y, behind z granted c in the same step for 2s, has HolderTTL %v; want in (0, 2s]", d)
	}
	short2.release("y", "z")
	short.release("h2")
	long.release("h1")
	wantStates(t, waiter.status("w"), map[string]lanes.State{"w": lanes.Held})
	waiter.release("w", "x")
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
