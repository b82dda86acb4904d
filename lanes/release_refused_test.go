package lanes_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// refusing fails every Release and Settle step, once down, with the error
// a Redis backend gives when nothing listens at its address (refused), or
// with one of a server that does not answer in time (slow); from back on,
// it works again. It counts the steps it failed.
type refusing struct {
	lanes.Backend
	down  atomic.Bool
	slow  bool         // fail as a timeout, not a refused connection
	back  time.Time    // when it works again (zero: never)
	tries atomic.Int64 // steps it failed
}

func (r *refusing) fail() error {
	if !r.down.Load() || (!r.back.IsZero() && !time.Now().Before(r.back)) {
		return nil
	}
	r.tries.Add(1)
	if r.slow {
		return fmt.Errorf("%w: i/o timeout", lanes.ErrUnavailable)
	}
	return fmt.Errorf("%w: dial tcp 127.0.0.1:6396: connect: %w", lanes.ErrUnavailable, syscall.ECONNREFUSED)
}

func (r *refusing) Release(ctx context.Context, by string, ids []string) (lanes.Released, error) {
	if err := r.fail(); err != nil {
		return lanes.Released{}, err
	}
	return r.Backend.Release(ctx, by, ids)
}

func (r *refusing) Settle(ctx context.Context, owner string, lifetime time.Duration, ids []string) (lanes.Released, error) {
	if err := r.fail(); err != nil {
		return lanes.Released{}, err
	}
	return r.Backend.Settle(ctx, owner, lifetime, ids)
}

// releaseWhileDown acquires a lease on b, takes b down, and returns what
// the lease's Release and the Session's Close answered and how long the
// two took, on synctest's clock.
func releaseWhileDown(t *testing.T, b *refusing) (rerr, closeErr error, took time.Duration) {
	ctx := context.Background()
	s, err := lanes.NewSession(ctx, b, lanes.WithTTL(10*time.Second), lanes.WithReleaseTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(ctx, lanes.Request{Lanes: []lanes.Lane{{Key: "k", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	b.down.Store(true)
	start := time.Now()
	rerr = l.Release(ctx)
	closeErr = s.Close()
	return rerr, closeErr, time.Since(start)
}

// A release to a backend that refuses every connection (Redis is down)
// gives up once the refusals have lasted three quarters of the release
// timeout (1.5s of 2s), with the refusal's error, and the Session's Close
// does not wait a release timeout more for its settle: `lanectl lock`
// exits when Redis is gone, not two release timeouts later. On synctest's
// clock.
func TestReleaseGivesUpWhenConnectionsAreRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &refusing{Backend: lanes.NewMemory()}
		err, _, took := releaseWhileDown(t, b)
		if !errors.Is(err, lanes.ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("Release() = %v; want ErrUnavailable, connection refused", err)
		}
		if took < 1500*time.Millisecond || took >= 2*time.Second {
			t.Errorf("Release and Close took %v; want the refusals' grace of 1.5s, less than one release timeout (2s)", took)
		}
	})
}

// A Redis restart is ridden out: a backend that refuses connections for
// less than the grace (1.2s: a restart with persistence; a review saw one
// of 1s leave the lease held for its TTL when the grace was 250ms), and
// then answers, gets the release.
func TestReleaseRidesOutABriefRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &refusing{Backend: lanes.NewMemory(), back: time.Now().Add(1200 * time.Millisecond)}
		err, _, _ := releaseWhileDown(t, b)
		if err != nil || b.tries.Load() == 0 {
			t.Errorf("Release() = %v after %d refused tries; want nil: the backend answered within the grace", err, b.tries.Load())
		}
	})
}

// A backend that is slow, not gone (timeouts, not refusals), is tried for
// the whole release timeout, as before.
func TestReleaseToASlowBackendTriesItsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &refusing{Backend: lanes.NewMemory(), slow: true}
		err, _, took := releaseWhileDown(t, b)
		if !errors.Is(err, lanes.ErrUnavailable) || took < 2*time.Second {
			t.Errorf("Release() = %v after %v; want ErrUnavailable after the release timeout (2s)", err, took)
		}
	})
}

// Close returns the background release of a lease whose own Release
// failed when that gave up too, and nothing when it went through: a
// backend slow past the release timeout that answers again within Close's
// own gets the entry, and lanectl says nothing (a review saw a warning
// printed for a lease released after all); one that never answers leaves
// it, and Close says so (lanectl batch exited 0, silent). On synctest's
// clock.
func TestCloseReportsTheBackgroundReleaseThatGaveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		for _, back := range []time.Duration{2500 * time.Millisecond, 0} {
			b := &refusing{Backend: lanes.NewMemory(), slow: true}
			if back > 0 {
				b.back = time.Now().Add(back)
			}
			rerr, closeErr, _ := releaseWhileDown(t, b)
			if !errors.Is(rerr, lanes.ErrUnavailable) {
				t.Fatalf("Release() to a backend that does not answer = %v; want ErrUnavailable", rerr)
			}
			snap, err := b.Backend.Inspect(ctx, []string{"k"})
			if err != nil {
				t.Fatal(err)
			}
			held := len(snap.Keys) == 1 && len(snap.Keys[0].Holders) == 1
			switch {
			case back > 0 && (closeErr != nil || held):
				t.Errorf("backend back after %v: Close() = %v, k held %v; want nil and k free (the background release went through)", back, closeErr, held)
			case back == 0 && (!errors.Is(closeErr, lanes.ErrUnavailable) || !held):
				t.Errorf("backend never back: Close() = %v, k held %v; want ErrUnavailable and k held until its deadline", closeErr, held)
			}
		}
	})
}
