package lanestest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// hintSpy wraps a Backend and records the grant hints its subscribers get,
// by entry id, before passing them on; each one recorded is signalled on
// got (when made).
type hintSpy struct {
	lanes.Backend
	mu     sync.Mutex
	grants map[string]int
	got    chan struct{}
}

// Subscribe implements lanes.Backend.
func (h *hintSpy) Subscribe(ctx context.Context, owner string, hint func([]lanes.Hint)) (func(), error) {
	return h.Backend.Subscribe(ctx, owner, func(hs []lanes.Hint) {
		h.mu.Lock()
		for _, x := range hs {
			if x.Tokens != nil {
				if h.grants == nil {
					h.grants = map[string]int{}
				}
				h.grants[x.ID]++
				if h.got != nil {
					select {
					case h.got <- struct{}{}:
					default:
					}
				}
			}
		}
		h.mu.Unlock()
		hint(hs)
	})
}

func (h *hintSpy) granted(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.grants[id]
}

// grantedBy waits until a grant hint for id was recorded or the deadline
// passes, and returns how many were.
func (h *hintSpy) grantedBy(id string, deadline time.Time) int {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for {
		if n := h.granted(id); n > 0 {
			return n
		}
		select {
		case <-h.got:
		case <-t.C:
			return h.granted(id)
		}
	}
}

// Hand-off at the default TTL (10s, so a heartbeat and poll every 3.3s): a
// release wakes the next waiter, in another Session, from the grant hint
// the releasing step sends, well under a second, not at the waiter's next
// poll. The bound is generous (2s, against a first poll 3.3s after the
// waiter's Session started); what decides is that the wait ended before
// any poll and that the grant hint reached the waiter's Session. (The wait
// may end a moment before the hint is seen: the namespace's first step
// told every Session to look at its entries, and a look that runs after
// the release finds the grant too; CI saw it once, under load.)
func testHandoffAtDefaultTTL(t *testing.T, inst Instance) {
	newSession := func(b lanes.Backend) *lanes.Session {
		s, err := lanes.NewSession(ctxT(t), b) // the default TTL and heartbeat
		if err != nil {
			t.Fatalf("NewSession() = %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	holder := newSession(inst.Backend)
	spy := &hintSpy{Backend: inst.Backend, got: make(chan struct{}, 1)}
	waiter := newSession(spy)
	started := time.Now()
	if waiter.TTL() != lanes.DefaultTTL {
		t.Fatalf("waiter TTL %v; want the default %v", waiter.TTL(), lanes.DefaultTTL)
	}
	h := acquire(t, holder, req("h", "k", 1))
	w := enqueue(t, waiter, req("w", "k", 1))[0]
	if isReady(w) {
		t.Fatal("w granted while h holds k")
	}
	released := time.Now()
	release(t, h)
	ctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second) // past the first poll: a missing hint fails, never hangs
	defer cancel()
	l, err := w.Wait(ctx)
	took := time.Since(released)
	if err != nil {
		t.Fatalf("Wait(w) = %v %v after the release", err, took)
	}
	hinted := spy.grantedBy("w", released.Add(2*time.Second))
	release(t, l)
	if took >= 2*time.Second {
		t.Errorf("the waiter learned of its grant %v after the release (%v after its Session started, which polls every %v); a hint takes milliseconds", took.Round(time.Millisecond), time.Since(started).Round(time.Millisecond), lanes.DefaultTTL/3)
	}
	if hinted == 0 {
		t.Errorf("no grant hint for w reached its Session within 2s of the release (its wait ended %v after it)", took.Round(time.Millisecond))
	}
}
