package redislane_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/internal/redistest"
	"github.com/lanes-dev/lanes/lanes"
)

// c8deaf drops every hint, as a late or cut pub/sub connection would: what
// a Session knows then comes from its own steps' replies.
type c8deaf struct{ lanes.Backend }

func (c8deaf) Subscribe(context.Context, string, func([]lanes.Hint)) (func(), error) {
	return func() {}, nil
}

// c8backends runs f on memory, miniredis and real Redis (namespace c8-...).
func c8backends(t *testing.T, f func(t *testing.T, b lanes.Backend)) {
	t.Run("Memory", func(t *testing.T) { f(t, lanes.NewMemory()) })
	t.Run("Miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		f(t, redistest.Backend(t, c, "c8-"))
	})
	t.Run("RealRedis", func(t *testing.T) {
		f(t, redistest.Backend(t, realClient(t), "c8-"))
	})
}

// A borrower revoked by its lender's release (DESIGN.md invariant 10) whose
// kept lender an operator then releases by force (which removes the
// revoked borrower with it) reports Release() = nil, "held until the
// release", although its lease was lost before its release: the backend
// answers "g" for it, not "l" (nor "f": the tombstone names the lender
// only). 6318b66 made Release report ErrLeaseLost for a revoked borrower
// whose hint has not come; this path of the same loss still reads as a
// successful release. Memory, miniredis and real Redis.
func TestRevokedBorrowerReleaseAfterKeptLenderForcedIsLost(t *testing.T) {
	c8backends(t, func(t *testing.T, b lanes.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := lanes.NewSession(ctx, c8deaf{b}, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
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
			t.Fatal(err) // the child is revoked; the parent is kept for it
		}
		if _, err := b.Release(ctx, "", []string{"parent"}); err != nil {
			t.Fatal(err) // the operator removes the kept parent, and the child with it
		}
		if err := child.Release(ctx); !errors.Is(err, lanes.ErrLeaseLost) {
			t.Fatalf("the revoked borrower's Release() after its kept lender was released by force = %v; want ErrLeaseLost (it was revoked before its release)", err)
		}
	})
}

// A lease lost before its Session's Close (a borrower revoked by its
// lender's release, or a lease an operator released by force), whose
// Session had no hint of it yet, reports Release() = nil once Close ended
// it: Close's release step answers "l" (or "f") for it, and 2f502da hands
// Release only whether that step failed. Without the Close the same
// Release reports ErrLeaseLost (6318b66) or ErrNotHolder; Release's
// contract says nil means "held until the release". Memory, miniredis and
// real Redis.
func TestReleaseAfterCloseReportsLossBeforeClose(t *testing.T) {
	c8backends(t, func(t *testing.T, b lanes.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := lanes.NewSession(ctx, c8deaf{b}, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		parent, err := s.Acquire(ctx, lanes.Request{ID: "parent", Lanes: one("k", 1)})
		if err != nil {
			t.Fatal(err)
		}
		child, err := s.Acquire(ctx, lanes.Request{ID: "child", Lanes: one("k", 1), Lineage: []string{"parent"}})
		if err != nil {
			t.Fatal(err)
		}
		forced, err := s.Acquire(ctx, lanes.Request{ID: "forced", Lanes: one("f", 1)})
		if err != nil {
			t.Fatal(err)
		}
		if err := parent.Release(ctx); err != nil {
			t.Fatal(err) // revokes the child
		}
		if _, err := b.Release(ctx, "", []string{"forced"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := child.Release(ctx); !errors.Is(err, lanes.ErrLeaseLost) {
			t.Errorf("revoked borrower's Release() after Close = %v; want ErrLeaseLost (revoked before the Close, as without the Close)", err)
		}
		if err := forced.Release(ctx); !errors.Is(err, lanes.ErrNotHolder) {
			t.Errorf("force-released lease's Release() after Close = %v; want ErrNotHolder (released by force before the Close, as without the Close)", err)
		}
	})
}
