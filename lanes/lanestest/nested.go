package lanestest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

func nested(r lanes.Request, lineage ...string) lanes.Request {
	r.Lineage = lineage
	return r
}

// Invariant 10: a request whose lineage holds a key is granted it at once,
// without a slot of its own, with the holder's token.
func testReentry(t *testing.T, inst Instance) {
	s := session(t, inst.Backend)
	parent := acquire(t, s, req("parent", "k", 1))
	w := enqueue(t, s, req("w", "k", 1))[0]
	ctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second)
	defer cancel()
	child, err := s.Acquire(ctx, nested(req("child", "k", 1), "parent"))
	if err != nil {
		t.Fatalf("nested Acquire of a key its parent holds = %v; want granted at once", err)
	}
	if child.Token("k") != parent.Token("k") {
		t.Fatalf("child token %d; want the parent's %d", child.Token("k"), parent.Token("k"))
	}
	if ks := inspect(t, inst.Backend, "k"); !equal(holderIDs(ks), []string{"parent"}) || !equal(waiterIDs(ks), []string{"w"}) {
		t.Fatalf("holders %v waiters %v; want [parent] [w]: the child takes no slot", holderIDs(ks), waiterIDs(ks))
	}
	release(t, child)
	if isReady(w) {
		t.Fatal("the child's release freed the parent's slot")
	}
	release(t, parent)
	release(t, wait(t, w))
}

// Invariant 10 through a chain: a grandchild spends the grandparent's slot,
// and a limit-1 key the parent holds is not exhausted by its child.
func testReentryChain(t *testing.T, inst Instance) {
	s := session(t, inst.Backend)
	gp := acquire(t, s, req("gp", "tool:agent", 1, "tenant:t", 1))
	p := acquire(t, s, nested(req("p", "tool:agent", 1, "tenant:t", 1), "gp"))
	c := acquire(t, s, nested(req("c", "tool:agent", 1, "tenant:t", 1, "file:x", 1), "gp", "p"))
	if c.Token("tool:agent") != gp.Token("tool:agent") || p.Token("tenant:t") != gp.Token("tenant:t") {
		t.Fatalf("tokens gp %v p %v c %v; want the grandparent's on both borrowed keys", gp.Tokens(), p.Tokens(), c.Tokens())
	}
	if c.Token("file:x") == 0 {
		t.Fatalf("the child's own key got no token: %v", c.Tokens())
	}
	release(t, c)
	release(t, p)
	release(t, gp)
}

// Invariant 10: re-entry ends when the ancestor's hold ends; a nested entry
// still waiting then queues for the key at its own arrival place, ahead of
// whoever came after it.
func testReentryEndsWithAncestor(t *testing.T, inst Instance) {
	s := session(t, inst.Backend)
	parent := acquire(t, s, req("parent", "k", 1))
	hj := acquire(t, s, req("hj", "j", 1))
	child := enqueue(t, s, nested(req("child", "k", 1, "j", 1), "parent"))[0]
	release(t, parent) // the parent's call returned; a task it left behind still waits
	if ks := inspect(t, inst.Backend, "k"); !equal(waiterIDs(ks), []string{"child"}) || len(ks.Holders) != 0 {
		t.Fatalf("after the lender left, k holders %v waiters %v; want none and [child]", holderIDs(ks), waiterIDs(ks))
	}
	other := enqueue(t, s, req("other", "k", 1))[0]
	if isReady(other) {
		t.Fatal("other, which came after the child, was granted k ahead of it")
	}
	release(t, hj)
	lc := wait(t, child)
	if lc.Token("k") <= parent.Token("k") {
		t.Fatalf("child's token for k %d; want a new one above the parent's %d", lc.Token("k"), parent.Token("k"))
	}
	if isReady(other) {
		t.Fatal("other was granted k while the child holds it")
	}
	release(t, lc)
	release(t, wait(t, other))
}

// Invariant 11: two processes, each holding a key, whose nested calls wait
// for the other's: the request that closes the circle fails at once with a
// lock-cycle error naming the entries and keys, and the other side goes on.
func testLockCycle(t *testing.T, inst Instance) {
	a, b := session(t, inst.Backend), session(t, inst.Backend)
	a1 := acquire(t, a, req("A1", "K1", 1))
	b1 := acquire(t, b, req("B1", "K2", 1))
	a2 := enqueue(t, a, nested(req("A2", "K2", 1), "A1"))[0]
	ctx, cancel := context.WithTimeout(ctxT(t), time.Second)
	defer cancel()
	_, err := b.Acquire(ctx, nested(req("B2", "K1", 1), "B1"))
	var ce *lanes.LockCycleError
	if !errors.Is(err, lanes.ErrLockCycle) || !errors.As(err, &ce) {
		t.Fatalf("the request closing the cycle: %v; want ErrLockCycle at once", err)
	}
	for _, s := range []string{"A1", "A2", "B1", "B2", "K1", "K2"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("cycle error %q does not name %s", err, s)
		}
	}
	if !slices.Contains(ce.Keys, "K1") || !slices.Contains(ce.Keys, "K2") || len(ce.Entries) != 4 {
		t.Errorf("cycle entries %v keys %v; want the four entries and both keys", ce.Entries, ce.Keys)
	}
	if ks := inspect(t, inst.Backend, "K1"); len(ks.Waiters) != 0 {
		t.Fatalf("the refused request was left queued: %v", waiterIDs(ks))
	}
	release(t, b1) // B's tool reports the failure and lets go
	release(t, wait(t, a2))
	release(t, a1)
}

// Invariant 11 in a batch: the one request that closes a cycle is refused,
// the batch's others are enqueued.
func testLockCycleInBatch(t *testing.T, inst Instance) {
	a, b := session(t, inst.Backend), session(t, inst.Backend)
	a1 := acquire(t, a, req("A1", "K1", 1))
	b1 := acquire(t, b, req("B1", "K2", 1))
	a2 := enqueue(t, a, nested(req("A2", "K2", 1), "A1"))[0]
	ts := enqueue(t, b, req("free", "K3", 1), nested(req("B2", "K1", 1), "B1"), req("after", "K3", 1))
	if _, err := ts[1].Wait(ctxT(t)); !errors.Is(err, lanes.ErrLockCycle) {
		t.Fatalf("B2 = %v; want ErrLockCycle", err)
	}
	release(t, wait(t, ts[0]))
	release(t, wait(t, ts[2]))
	release(t, b1)
	release(t, wait(t, a2))
	release(t, a1)
}
