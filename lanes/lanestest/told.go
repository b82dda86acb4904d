package lanestest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// noHints wraps a Backend whose subscribers never get a hint, as when a
// pub/sub message is late: what a Session knows then comes from its own
// steps' replies.
type noHints struct{ lanes.Backend }

// Subscribe implements lanes.Backend.
func (h noHints) Subscribe(ctx context.Context, owner string, hint func([]lanes.Hint)) (func(), error) {
	return h.Backend.Subscribe(ctx, owner, func([]lanes.Hint) {})
}

// Invariant 10, told to the holder: a borrower revoked when its lender's
// hold ended learns it from its own Release, even before the revocation's
// hint (none comes here) or a heartbeat (none is due): Release reports
// ErrLeaseLost, not "held until the release". The backend answers such a
// release Revoked; before, it answered Gone, which the Session takes for
// an earlier try of the same release. Found by a review.
func testRevokedBorrowerReleaseIsLost(t *testing.T, inst Instance) {
	s := session(t, noHints{inst.Backend}, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	parent := acquire(t, s, req("parent", "K", 1))
	child := acquire(t, s, nested(req("child", "K", 1), "parent"))
	release(t, parent)
	if err := child.Release(ctxT(t)); !errors.Is(err, lanes.ErrLeaseLost) {
		t.Fatalf("the revoked borrower's Release() = %v; want ErrLeaseLost", err)
	}
}

// Wait documents ErrClosed: a grant whose lease the Session's Close ended
// (and released in the backend) before Wait first returned it is not
// handed out, while another Session may hold the key already. Before, Wait
// returned that Lease with a nil error; its Lost never closed. An Acquire
// whose grant races a Close is the same case. Found by a review.
func testWaitAfterCloseFails(t *testing.T, inst Instance) {
	s := session(t, inst.Backend)
	tk := enqueue(t, s, req("a", "K", 1))[0]
	<-tk.Ready() // granted by its Enqueue
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	other := acquire(t, session(t, inst.Backend), req("b", "K", 1))
	if l, err := tk.Wait(ctxT(t)); !errors.Is(err, lanes.ErrClosed) {
		t.Fatalf("Wait after Close = %v, %v while another Session holds K; want ErrClosed", l, err)
	}
	// A Lease handed out before the Close stays the one Wait returns.
	s2 := session(t, inst.Backend)
	tk2 := enqueue(t, s2, req("c", "L", 1))[0]
	l2 := wait(t, tk2)
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err := tk2.Wait(ctxT(t)); l != l2 || err != nil {
		t.Fatalf("Wait again after Close = %v, %v; want the Lease it returned before (%v), nil", l, err, l2)
	}
	release(t, other)
}

// A lease that its Session's Close ended, and that Close could not release
// (the backend was down), reports that from its own Release: ErrUnavailable,
// not nil (it stays in the backend until its TTL runs out). Before, it
// returned nil, "released by the Close". Found by a review.
func testReleaseAfterFailedClose(t *testing.T, inst Instance) {
	f := &Faulty{Backend: inst.Backend}
	s := session(t, f, lanes.WithReleaseTimeout(100*time.Millisecond))
	l := acquire(t, s, req("a", "K", 1))
	f.SetDown(true)
	if err := s.Close(); !errors.Is(err, lanes.ErrUnavailable) {
		t.Fatalf("Close with the backend down = %v; want ErrUnavailable", err)
	}
	if err := l.Release(ctxT(t)); !errors.Is(err, lanes.ErrUnavailable) {
		t.Fatalf("Release after a Close that could not release it = %v; want ErrUnavailable", err)
	}
	f.SetDown(false)
	if _, err := inst.Backend.Release(ctxT(t), "", []string{"a"}); err != nil {
		t.Fatal(err)
	}
	// Once Close released it, Release says so: nil.
	s2 := session(t, inst.Backend)
	l2 := acquire(t, s2, req("b", "K", 1))
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l2.Release(ctxT(t)); err != nil {
		t.Fatalf("Release after a Close that released it = %v; want nil", err)
	}
}

// Invariant 10 with an operator: a borrower revoked by its lender's release,
// whose kept lender an operator then releases by force (which takes the
// revoked borrower with it), learns from its own Release that it was not
// held until then: ErrNotHolder, as for an entry an operator released
// itself. Before, the backend answered Gone for it (the tombstone named
// the lender only), read as success. Found by a review.
func testRevokedBorrowerOfForcedLender(t *testing.T, inst Instance) {
	s := session(t, noHints{inst.Backend}, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	parent := acquire(t, s, req("parent", "K", 1))
	child := acquire(t, s, nested(req("child", "K", 1), "parent"))
	release(t, parent) // the child is revoked; the parent is kept for it
	if _, err := inst.Backend.Release(ctxT(t), "", []string{"parent"}); err != nil {
		t.Fatal(err)
	}
	if err := child.Release(ctxT(t)); !errors.Is(err, lanes.ErrNotHolder) {
		t.Fatalf("the revoked borrower's Release() after its kept lender was released by force = %v; want ErrNotHolder", err)
	}
}

// A lease lost before its Session's Close (a revoked borrower; a lease an
// operator released by force), which the Session had no hint of, reports
// the loss from its Release after the Close, as it would without the
// Close: Close's release step answered it. Found by a review.
func testReleaseAfterCloseReportsLoss(t *testing.T, inst Instance) {
	s := session(t, noHints{inst.Backend}, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	parent := acquire(t, s, req("parent", "K", 1))
	child := acquire(t, s, nested(req("child", "K", 1), "parent"))
	forced := acquire(t, s, req("forced", "F", 1))
	release(t, parent) // revokes the child
	if _, err := inst.Backend.Release(ctxT(t), "", []string{"forced"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := child.Release(ctxT(t)); !errors.Is(err, lanes.ErrLeaseLost) {
		t.Errorf("the revoked borrower's Release() after Close = %v; want ErrLeaseLost", err)
	}
	if err := forced.Release(ctxT(t)); !errors.Is(err, lanes.ErrNotHolder) {
		t.Errorf("the force-released lease's Release() after Close = %v; want ErrNotHolder", err)
	}
}
