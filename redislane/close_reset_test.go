package redislane_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/internal/redistest"
	"github.com/lanes-dev/lanes/lanes"
)

// A lease whose backend state was reset before its Session's Close (a state
// key was lost; no heartbeat ran between, none is due) is told so by its
// own Release without a Close: the release answers "g" in another epoch,
// ErrLeaseLost (PROTOCOL.md, What a client does, 8). After a Close, whose
// release step got that very answer, Lease.Release reports the same: Close
// checks the epoch and the local deadline as Lease.release does (before, it
// reported nil, "released by the Close"). Found by a review. Miniredis and
// real Redis.
func TestReleaseAfterCloseOfResetStateReportsLoss(t *testing.T) {
	bothServers(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		for _, withClose := range []bool{false, true} {
			b := redistest.Backend(t, c, "close-reset-") // each its own: a reset freezes K for the TTL
			s, err := lanes.NewSession(ctx, b, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			l, err := s.Acquire(ctx, lanes.Request{ID: "a", Lanes: lane("K")})
			if err != nil {
				t.Fatal(err)
			}
			c.Del(ctx, b.Keys()[0]) // entries lost: the next step resets the state
			if withClose {
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Release(ctx); !errors.Is(err, lanes.ErrLeaseLost) {
				t.Errorf("Release() (after Close: %v) of a lease whose state was reset before = %v; want ErrLeaseLost", withClose, err)
			}
			_ = s.Close()
		}
	})
}
