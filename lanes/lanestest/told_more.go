package lanestest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// An operator's forced release leaves a tombstone "f" for its id (an hour
// on both backends), and "f does not stop an enqueue": the id may be used
// again (a run restarted with the same run id enqueues the same entry
// ids). A later lease of that id, held until its own release, whose first
// release reply was lost, must not be told "released by force" by the
// retry: Release reports nil, as testLostReleaseReplyIsSuccess gets for an
// id without that history (before, ErrNotHolder: the enqueue kept the old
// tombstone). Found by a review.
func testReusedIDReleaseIgnoresOldTombstone(t *testing.T, inst Instance) {
	old := session(t, noHints{inst.Backend}, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	first := acquire(t, old, req("r", "K", 1))
	if _, err := inst.Backend.Release(ctxT(t), "", []string{"r"}); err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctxT(t)); !errors.Is(err, lanes.ErrNotHolder) {
		t.Fatalf("Release() of the lease released by force = %v; want ErrNotHolder", err)
	}
	f := &Faulty{Backend: inst.Backend}
	s := session(t, f, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	l := acquire(t, s, req("r", "K", 1)) // the same id, a new entry, held
	if err := l.Err(); err != nil {
		t.Fatalf("the new lease of r: Err() = %v", err)
	}
	f.LoseReplies(1)
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatalf("Release() of a lease held until its release, whose first reply was lost = %v; want nil (the forced-release tombstone is the earlier entry's)", err)
	}
}

// Invariant 10 with a lost reply: the owner's release of a revoked borrower
// answers "l" and removes it; when that reply is lost, the Session's retry
// must still learn that the lease had been revoked before the release (no
// hint came, as in testRevokedBorrowerReleaseIsLost): ErrLeaseLost, from
// the "v" tombstone the first try left (before, the retry found "g" and
// reported nil). Found by a review.
func testRevokedBorrowerLostReleaseReply(t *testing.T, inst Instance) {
	f := &Faulty{Backend: noHints{inst.Backend}}
	s := session(t, f, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	parent := acquire(t, s, req("parent", "K", 1))
	child := acquire(t, s, nested(req("child", "K", 1), "parent"))
	release(t, parent) // revokes the child; the parent is kept for it
	f.LoseReplies(1)
	if err := child.Release(ctxT(t)); !errors.Is(err, lanes.ErrLeaseLost) {
		t.Fatalf("the revoked borrower's Release() whose first reply was lost = %v; want ErrLeaseLost", err)
	}
}

// Invariants 7 and 10 with Close called from an OnLost callback (allowed
// since the callbacks run outside the goroutines Close waits for): a
// borrower revoked when its lender was released is lost (hint, then
// heartbeat "g") and its callback closes its Session. The revoked entry
// stays in the backend, keeping its lender's slot of K, until its owner
// releases it; lose() untracked it, so Close does not release it: the
// release queued behind the callback must run all the same, and K pass on
// at once (before, it was dropped, and K stayed blocked until the
// borrower's TTL ran out). Found by a review.
func testOnLostCloseReleasesRevokedBorrower(t *testing.T, inst Instance) {
	s1 := session(t, inst.Backend)
	s2 := session(t, inst.Backend)
	parent := acquire(t, s1, req("parent", "K", 1))
	child := acquire(t, s2, nested(req("child", "K", 1), "parent"))
	closed := make(chan error, 1)
	child.OnLost(func() { closed <- s2.Close() })
	release(t, parent) // revokes the child; the parent is kept for it
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close() from the OnLost callback = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked borrower's OnLost callback did not run within 10s")
	}
	<-s2.Done()
	ctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second)
	defer cancel()
	l, err := session(t, inst.Backend).Acquire(ctx, req("next", "K", 1))
	if err != nil {
		t.Fatalf("Acquire(K) after the revoked borrower's Session closed = %v; want a grant at once (the borrower was lost and its Session closed, nothing holds K): K still held by %v", err, holderIDs(inspect(t, inst.Backend, "K")))
	}
	release(t, l)
	if err := child.Release(ctxT(t)); !errors.Is(err, lanes.ErrLeaseLost) {
		t.Errorf("the revoked borrower's Release() = %v; want ErrLeaseLost", err)
	}
}

// Close releases a Session's entries in one step. A lender removed before
// its borrower in that step would revoke the borrower, and Lease.Release
// after the Close would report ErrLeaseLost for a borrower held until
// Close released it: Close releases borrowers first, and both report nil
// (before, ids went in id order, the lender's "a-parent" first). Found by
// a review.
func testCloseOfLenderAndBorrowerIsNoLoss(t *testing.T, inst Instance) {
	s := session(t, inst.Backend, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	parent := acquire(t, s, req("a-parent", "K", 1))
	child := acquire(t, s, nested(req("b-child", "K", 1), "a-parent"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := parent.Release(ctxT(t)); err != nil {
		t.Errorf("the lender's Release() after Close = %v; want nil", err)
	}
	if err := child.Release(ctxT(t)); err != nil {
		t.Errorf("the borrower's Release() after Close = %v; want nil: it was held until Close released it with its lender", err)
	}
}
