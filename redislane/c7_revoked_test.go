package redislane_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// c7slowHints delays every hint of a Backend (a pub/sub message that takes
// its time), so that what a Session does before a hint comes is seen.
type c7slowHints struct {
	lanes.Backend
	delay time.Duration
}

func (h c7slowHints) Subscribe(ctx context.Context, owner string, hint func([]lanes.Hint)) (func(), error) {
	return h.Backend.Subscribe(ctx, owner, func(hs []lanes.Hint) {
		time.AfterFunc(h.delay, func() { hint(hs) })
	})
}

// checkRevokedBorrowerRelease: parent holds k, child borrows k (lineage
// parent), parent releases, which revokes the child in the backend. The
// child's Release, made before the revocation's hint arrived, must report
// the loss (ErrLeaseLost), as Lease.Release documents ("an error wrapping
// ErrLeaseLost if the lease had been lost") and DESIGN.md invariant 10
// asks (the borrower is told it lost the key); it must not report that the
// lease was held until the release.
func checkRevokedBorrowerRelease(t *testing.T, b lanes.Backend) {
	ctx := context.Background()
	s, err := lanes.NewSession(ctx, c7slowHints{b, 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	parent, err := s.Acquire(ctx, lanes.Request{ID: "parent", Lanes: one("k", 1)})
	if err != nil {
		t.Fatal(err)
	}
	child, err := s.Acquire(ctx, lanes.Request{ID: "child", Lanes: one("k", 1), Lineage: []string{"parent"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Release(ctx); err != nil {
		t.Fatal(err)
	}
	errAfter := child.Err()
	rerr := child.Release(ctx)
	if !errors.Is(rerr, lanes.ErrLeaseLost) {
		t.Errorf("child.Err() after the lender's release = %v; child.Release() = %v; want ErrLeaseLost: the borrower was revoked before its release", errAfter, rerr)
	}
}

// Real Redis (127.0.0.1:6379).
func TestRevokedBorrowerReleaseReportsLostRealRedis(t *testing.T) {
	c := c7client(t, "127.0.0.1:6379")
	ns := fmt.Sprintf("c7-revoke-%d", time.Now().UnixNano())
	c7cleanup(t, c, ns)
	b, err := redislane.New(c, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	checkRevokedBorrowerRelease(t, b)
}

// In-memory backend.
func TestRevokedBorrowerReleaseReportsLostMemory(t *testing.T) {
	checkRevokedBorrowerRelease(t, lanes.NewMemory())
}
