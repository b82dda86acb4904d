package redislane_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/internal/redisproc"
	"github.com/lanes-dev/lanes/internal/redistest"
	"github.com/lanes-dev/lanes/lanes"
)

// A reviewer's attack (real Redis, private server): Close racing Releases, Acquires in
// flight during Close, leases force-released before Close. Every Release
// must say nil for a lease held until its release (by itself or the
// Close), ErrNotHolder for one forced before, and Close leaves no entry.
func TestCloseRacingReleaseRealRedis(t *testing.T) {
	srv := redisproc.StartServer(t, redisproc.ServerOptions{})
	c := srv.Client()
	ctx := context.Background()
	for round := 0; round < 20; round++ {
		b := redistest.Backend(t, c, "rv2close-")
		s, err := lanes.NewSession(ctx, b, lanes.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		other, err := lanes.NewSession(ctx, b, lanes.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		const n = 60
		ls := make([]*lanes.Lease, n)
		for i := range ls {
			if ls[i], err = s.Acquire(ctx, lanes.Request{ID: fmt.Sprintf("e%d", i), Lanes: lane(fmt.Sprintf("K%d", i%7))}); err != nil {
				// same key: the second waits; use distinct keys
				t.Fatal(err)
			}
			if i%7 == 6 {
				// keys K0..K6 each have one holder; later ones queue
				break
			}
		}
		ls = ls[:7]
		// force one before Close
		if _, err := b.Release(ctx, "", []string{"e3"}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		res := make([]error, len(ls))
		for i := range ls {
			if i == 3 {
				continue
			}
			wg.Add(1)
			go func() { defer wg.Done(); res[i] = ls[i].Release(ctx) }()
		}
		acq := make([]*lanes.Lease, 10)
		acqErr := make([]error, 10)
		for i := range acq {
			wg.Add(1)
			go func() {
				defer wg.Done()
				acq[i], acqErr[i] = s.Acquire(ctx, lanes.Request{ID: fmt.Sprintf("a%d", i), Lanes: lane(fmt.Sprintf("A%d", i))})
			}()
		}
		cerr := s.Close()
		wg.Wait()
		if cerr != nil {
			t.Errorf("round %d: Close = %v", round, cerr)
		}
		for i, err := range res {
			if i != 3 && err != nil {
				t.Errorf("round %d: Release(e%d) racing Close = %v; want nil", round, i, err)
			}
		}
		if err := ls[3].Release(ctx); !errors.Is(err, lanes.ErrNotHolder) && !errors.Is(err, lanes.ErrLeaseLost) {
			t.Errorf("round %d: Release(e3) forced before Close = %v; want ErrNotHolder", round, err)
		}
		for i, l := range acq {
			if acqErr[i] != nil {
				if !errors.Is(acqErr[i], lanes.ErrClosed) {
					t.Errorf("round %d: Acquire a%d racing Close = %v; want ErrClosed or a lease", round, i, acqErr[i])
				}
				continue
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("round %d: Release(a%d) after Close = %v; want nil", round, i, err)
			}
		}
		if ents, _ := c.HKeys(ctx, b.Keys()[0]).Result(); len(ents) > 1 || len(ents) == 1 && ents[0] != "\x00" {
			t.Errorf("round %d: after Close entries left: %q", round, ents)
		}
		other.Close()
	}
}

// A reviewer's attack (real Redis, private server killed): Close with Redis cut reports
// ErrUnavailable, and a Release after it says ErrUnavailable too, for a
// lease held to the Close; a lease lost (forced) before the Close says
// ErrNotHolder, or ErrUnavailable: never nil.
func TestCloseRedisCutRealRedis(t *testing.T) {
	srv := redisproc.StartServer(t, redisproc.ServerOptions{})
	c := srv.Client()
	ctx := context.Background()
	b := redistest.Backend(t, c, "rv2cut-")
	s, err := lanes.NewSession(ctx, b, lanes.WithTTL(time.Minute), lanes.WithReleaseTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l1, err := s.Acquire(ctx, lanes.Request{ID: "h1", Lanes: lane("K1")})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := s.Acquire(ctx, lanes.Request{ID: "h2", Lanes: lane("K2")})
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	start := time.Now()
	cerr := s.Close()
	if !errors.Is(cerr, lanes.ErrUnavailable) {
		t.Errorf("Close with Redis cut = %v; want ErrUnavailable", cerr)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close with Redis cut took %v", d)
	}
	for _, l := range []*lanes.Lease{l1, l2} {
		if err := l.Release(ctx); !errors.Is(err, lanes.ErrUnavailable) {
			t.Errorf("Release(%s) after a Close with Redis cut = %v; want ErrUnavailable", l.ID(), err)
		}
	}
}
