package lanestest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// hintSpy wraps a Backend and records the grant hints its subscribers get,
// by entry id, before passing them on.
type hintSpy struct {
	lanes.Backend
	mu     sync.Mutex
	grants map[string]int
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

// Hand-off at the default TTL (10s, so a heartbeat and poll every 3.3s): a
// release wakes the next waiter, in another Session, from the grant hint
// the releasing step sends, well under a second, not at the waiter's next
// poll. The bound is generous (2s, against a first poll 3.3s after the
// waiter's Session started); what decides is that the grant reached the
// waiter as a hint before its wait ended.
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
	spy := &hintSpy{Backend: inst.Backend}
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
	hinted := spy.granted("w")
	release(t, l)
	if took >= 2*time.Second {
		t.Errorf("the waiter learned of its grant %v after the release (%v after its Session started, which polls every %v); a hint takes milliseconds", took.Round(time.Millisecond), time.Since(started).Round(time.Millisecond), lanes.DefaultTTL/3)
	}
	if hinted == 0 {
		t.Errorf("no grant hint for w reached its Session before its wait ended (%v after the release): the grant was found by polling", took.Round(time.Millisecond))
	}
}
