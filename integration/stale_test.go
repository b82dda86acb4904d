package integration_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// Answers that come late, and what was forgotten meanwhile: a heartbeat's
// answer about an entry whose id was released and enqueued again, and a
// forced release whose tombstone vanished. Found by a review that tried to
// break id reuse (2026-12-02); each runs on lanes.Memory and on the real
// Redis server.

// gatedBeats is a Backend whose next Heartbeat step, once armed, waits for
// run before it reaches the backend and for answer before its answer
// reaches the Session, as a slow connection or a descheduled goroutine
// would make it. began and ran say when the step got there.
type gatedBeats struct {
	lanes.Backend
	mu                       sync.Mutex
	armed                    bool
	began, ran               chan []string
	run, answer, nextStarted chan struct{}
	watchNext                bool
}

func (g *gatedBeats) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed = true
	g.began, g.ran = make(chan []string, 1), make(chan []string, 1)
	g.run, g.answer, g.nextStarted = make(chan struct{}), make(chan struct{}), make(chan struct{})
}

func (g *gatedBeats) Heartbeat(ctx context.Context, owner string, ttl time.Duration, ids []string) ([]lanes.Status, error) {
	g.mu.Lock()
	gated := g.armed
	g.armed = false
	if !gated && g.watchNext {
		// The Session's loop runs one step at a time: this one starting
		// means the gated one's answer was applied.
		g.watchNext = false
		close(g.nextStarted)
	}
	began, ran, run, answer := g.began, g.ran, g.run, g.answer
	if gated {
		g.watchNext = true
	}
	g.mu.Unlock()
	if gated {
		began <- append([]string(nil), ids...)
		<-run
	}
	sts, err := g.Backend.Heartbeat(ctx, owner, ttl, ids)
	if gated {
		ran <- append([]string(nil), ids...)
		<-answer
	}
	return sts, err
}

// await waits for ch, failing the test when ctx ends first.
func await[T any](t *testing.T, ctx context.Context, ch <-chan T, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatalf("%s: not before the test's deadline", what)
	}
}

func forEachBackend(t *testing.T, test func(t *testing.T, b lanes.Backend)) {
	t.Run("Memory", func(t *testing.T) { test(t, lanes.NewMemory()) })
	t.Run("RealRedis", func(t *testing.T) {
		_, b, _ := namespace(t)
		test(t, b)
	})
}

func keyState(t *testing.T, b lanes.Backend, key string) (holders, waiters []string) {
	t.Helper()
	ks := snapshot(t, b, key)
	for _, h := range ks.Holders {
		holders = append(holders, h.ID)
	}
	for _, w := range ks.Waiters {
		waiters = append(waiters, w.ID)
	}
	return holders, waiters
}

// A heartbeat answer about entry A (held, or gone) that arrives after A was
// released and its id enqueued again, behind B, applies to the old entry
// only: the new A is neither granted with the old tokens while B holds K
// (a double grant) nor failed as evicted. Once B releases, the new A gets
// K with a token above B's.
func TestStaleHeartbeatAnswerSkipsNewEntryOfSameID(t *testing.T) {
	for _, c := range []struct {
		name string
		// runAfterRelease: the gated step reaches the backend after A's
		// release (it answers Gone), else before it (Held).
		runAfterRelease bool
	}{{"held", false}, {"gone", true}} {
		t.Run(c.name, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, inner lanes.Backend) {
				g := &gatedBeats{Backend: inner}
				s := newSession(t, g, lanes.WithTTL(10*time.Second), lanes.WithHeartbeat(20*time.Millisecond))
				o := newSession(t, inner, lanes.WithTTL(10*time.Second))
				ctx := bounded(t, 10*time.Second)
				req := lanes.Request{ID: "A", Lanes: []lanes.Lane{{Key: "K", Limit: 1}}}
				a1, err := s.Acquire(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				tb, err := o.Enqueue(ctx, lanes.Request{ID: "B", Lanes: []lanes.Lane{{Key: "K", Limit: 1}}})
				if err != nil {
					t.Fatal(err)
				}
				g.arm()
				await(t, ctx, g.began, "a heartbeat step naming A")
				if !c.runAfterRelease {
					close(g.run)
					await(t, ctx, g.ran, "the heartbeat step finds A held")
				}
				// The release step does not wait for the heartbeat step:
				// it goes through the Session's release batcher.
				if err := a1.Release(ctx); err != nil {
					t.Fatalf("A.Release() = %v", err)
				}
				if c.runAfterRelease {
					close(g.run)
					await(t, ctx, g.ran, "the heartbeat step finds A gone")
				}
				lb, err := tb[0].Wait(ctx)
				if err != nil {
					t.Fatalf("B.Wait() = %v", err)
				}
				ta, err := s.Enqueue(ctx, req) // the id again: it waits behind B
				if err != nil {
					t.Fatal(err)
				}
				close(g.answer)
				// Then the Session's next step starts (it answered: the late
				// answer was applied), unless that answer ended the new A.
				select {
				case <-g.nextStarted:
				case <-ctx.Done():
					t.Fatal("no heartbeat step after the late answer before the test's deadline")
				case <-ta[0].Ready():
				}
				select {
				case <-ta[0].Ready():
					a2, err := ta[0].Wait(ctx)
					holders, waiters := keyState(t, inner, "K")
					t.Fatalf("the new A ended by the late answer: Wait() = lease %v, %v, while the backend's holders of K are %v, waiters %v", a2 != nil, err, holders, waiters)
				default:
				}
				if holders, waiters := keyState(t, inner, "K"); len(holders) != 1 || holders[0] != "B" || len(waiters) != 1 || waiters[0] != "A" {
					t.Fatalf("K: holders %v, waiters %v; want B holding, A waiting", holders, waiters)
				}
				if err := lb.Release(ctx); err != nil {
					t.Fatalf("B.Release() = %v", err)
				}
				a2, err := ta[0].Wait(ctx)
				if err != nil {
					t.Fatalf("the new A after B's release: %v", err)
				}
				if a2.Token("K") <= lb.Token("K") {
					t.Errorf("the new A's token %d is not above B's %d", a2.Token("K"), lb.Token("K"))
				}
				if err := a2.Release(ctx); err != nil {
					t.Errorf("the new A's Release() = %v", err)
				}
			})
		})
	}
}

// slowSteps is a Backend whose Enqueue answers only once answer closes
// or its ctx ends (the step has run: its answer is lost), and whose Settle waits a moment before it runs, so
// that a settle in the background would still be on its way when the
// caller looks.
type slowSteps struct {
	lanes.Backend
	answer chan struct{}
}

func (b *slowSteps) Enqueue(ctx context.Context, owner lanes.Owner, ttl time.Duration, reqs []lanes.Request) ([]lanes.Status, error) {
	sts, err := b.Backend.Enqueue(ctx, owner, ttl, reqs)
	select {
	case <-b.answer:
		return sts, err
	case <-ctx.Done(): // as a client whose command's context ended
		return nil, fmt.Errorf("%w: %w", lanes.ErrUnavailable, ctx.Err())
	}
}

func (b *slowSteps) Settle(ctx context.Context, owner string, lifetime time.Duration, ids []string) (lanes.Released, error) {
	time.Sleep(200 * time.Millisecond)
	return b.Backend.Settle(ctx, owner, lifetime, ids)
}

// An Acquire whose ctx ends while its Enqueue step has no answer yet
// returns only once its entry has left every queue (Session.Enqueue and
// Ticket.Wait: a request given up on holds no place), not while a settle
// is still on its way: the conformance test CancelLeavesEveryQueue saw a
// waiter left behind on a loaded machine.
func TestAcquireGivenUpDuringEnqueueLeavesQueues(t *testing.T) {
	forEachBackend(t, func(t *testing.T, inner lanes.Backend) {
		slow := &slowSteps{Backend: inner, answer: make(chan struct{})}
		defer close(slow.answer)
		o := newSession(t, inner)
		ctx := bounded(t, 10*time.Second)
		h, err := o.Acquire(ctx, lanes.Request{ID: "H", Lanes: []lanes.Lane{{Key: "K", Limit: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		s := newSession(t, slow)
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := s.Acquire(wctx, lanes.Request{ID: "Y", Lanes: []lanes.Lane{{Key: "K", Limit: 1}}}); !errors.Is(err, lanes.ErrWaitTimeout) {
			t.Fatalf("Acquire(50ms) = %v; want ErrWaitTimeout", err)
		}
		if holders, waiters := keyState(t, inner, "K"); len(waiters) != 0 || len(holders) != 1 {
			t.Fatalf("after the Acquire gave up: K's holders %v, waiters %v; want H alone", holders, waiters)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
