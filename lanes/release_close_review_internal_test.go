package lanes

// Settles, Close and stamps, on Memory: a third reviewer's cases against
// 6615bd9 (settling marks, settle on no answer, stamps), each failing
// there: Close waited up to 3 TTLs for background settles after an
// outage, and settles ran on after it; an Enqueue racing Close overran its
// context; stamps given before the Enqueue batcher could disagree with the
// step's order; a timed-out waiter's id was refused undocumented (now
// documented on Acquire and Cancel, and tested to be taken again after
// twice the TTL). Run with:
//
//	go test -race -timeout 120s -run Review3 ./lanes/
//
// Every case runs in a synctest bubble: durations are on the bubble's
// clock and cost no real time.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// downBackend is a Memory that can be cut off: while down, every step
// (Enqueue, Heartbeat, Release, Settle) fails with a transient error
// without touching the Memory. It counts the Release and Settle steps
// tried, and those tried after closedAt was set.
type downBackend struct {
	*Memory
	down       atomic.Bool
	afterClose atomic.Bool
	nRel       atomic.Int32
	nSettle    atomic.Int32
	lateRel    atomic.Int32 // Release steps tried after afterClose was set
	lateSettle atomic.Int32 // Settle steps tried after afterClose was set
}

func newDown() *downBackend { return &downBackend{Memory: NewMemory()} }

func (b *downBackend) Enqueue(ctx context.Context, o Owner, ttl time.Duration, reqs []Request) ([]Status, error) {
	if b.down.Load() {
		return nil, transient
	}
	return b.Memory.Enqueue(ctx, o, ttl, reqs)
}

func (b *downBackend) Heartbeat(ctx context.Context, owner string, ttl time.Duration, ids []string) ([]Status, error) {
	if b.down.Load() {
		return nil, transient
	}
	return b.Memory.Heartbeat(ctx, owner, ttl, ids)
}

func (b *downBackend) Release(ctx context.Context, by string, ids []string) (Released, error) {
	b.nRel.Add(1)
	if b.afterClose.Load() {
		b.lateRel.Add(1)
	}
	if b.down.Load() {
		return Released{}, transient
	}
	return b.Memory.Release(ctx, by, ids)
}

func (b *downBackend) Settle(ctx context.Context, owner string, lifetime time.Duration, ids []string) (Released, error) {
	b.nSettle.Add(1)
	if b.afterClose.Load() {
		b.lateSettle.Add(1)
	}
	if b.down.Load() {
		return Released{}, transient
	}
	return b.Memory.Settle(ctx, owner, lifetime, ids)
}

// ---------------------------------------------------------------------------
// R3-1. Close with the backend down waits for the background settles that
// 6615bd9 added. Close's doc: "every entry is released in steps bounded by
// the release timeout". Before 6615bd9, a lost lease's background release
// gave up after the release timeout and Close waited at most that long for
// it; now a release with no answer becomes a settle (settleLater) that
// retries for 2*TTL + release timeout, and Close (s.bg.Wait) waits for it
// whole. The backend being down is exactly when leases are lost (DESIGN.md
// invariant 12), so a process shutting down after an outage (lanectl lock
// exiting 79) hangs in Close for ~3 TTL.
// ---------------------------------------------------------------------------

func TestReview3CloseAfterOutageWaitsForLostLeaseSettle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := newDown()
		s, err := NewSession(ctx, m) // defaults: TTL 10s, release timeout 5s
		if err != nil {
			t.Fatal(err)
		}
		l, err := s.Acquire(ctx, Request{ID: "a", Lanes: []Lane{{Key: "K", Limit: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		m.down.Store(true) // Redis goes away
		<-l.Lost()         // invariant 12: the lease reports its loss
		synctest.Wait()    // its background release has begun (a Close before it: see R3-2)
		start := time.Now()
		_ = s.Close()
		took := time.Since(start)
		t.Logf("Close after the loss took %v (TTL %v, release timeout %v); Settle steps tried: %d", took, s.ttl, s.releaseTimeout, m.nSettle.Load())
		if took > s.releaseTimeout+time.Second {
			t.Errorf("Close() with the backend down took %v: more than the release timeout %v that bounds its release steps; it waits (s.bg.Wait) for the lost lease's background release (%v) and then for the settle it became (2*TTL + release timeout)", took, s.releaseTimeout, s.releaseTimeout)
		}
	})
}

func TestReview3CloseAfterUnansweredReleaseWaitsForSettle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := newDown()
		s, err := NewSession(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		l, err := s.Acquire(ctx, Request{ID: "a", Lanes: []Lane{{Key: "K", Limit: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		m.down.Store(true)
		if err := l.Release(ctx); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Release() with the backend down = %v; want ErrUnavailable", err)
		}
		start := time.Now()
		_ = s.Close() // no entry left to release
		took := time.Since(start)
		t.Logf("Close with no entry left took %v (TTL %v, release timeout %v)", took, s.ttl, s.releaseTimeout)
		if took > s.releaseTimeout+time.Second {
			t.Errorf("Close() of a Session with no entry left took %v: it waits for the settle of an earlier Release that got no answer (2*TTL + release timeout)", took)
		}
	})
}

// ---------------------------------------------------------------------------
// R3-2. After Close, a lost lease's release still runs, and the settle it
// becomes runs on a goroutine nobody waits for: Session steps (Release,
// Settle) are sent for ~2*TTL + 2*release timeout after Close returned
// (before 6615bd9: at most one release timeout). A goleak check in the
// user's tests, or a backend client closed after Close (lanectl's
// closeBackend), sees them.
// ---------------------------------------------------------------------------

func TestReview3LostLeaseSettleOutlivesClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := newDown()
		s, err := NewSession(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		l, err := s.Acquire(ctx, Request{ID: "a", Lanes: []Lane{{Key: "K", Limit: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		callbackIn := make(chan struct{})
		l.OnLost(func() {
			close(callbackIn)
			time.Sleep(100 * time.Millisecond) // stopping the work under the lease
		})
		m.down.Store(true)
		<-callbackIn
		if err := s.Close(); err != nil {
			t.Logf("Close = %v", err)
		}
		closedAt := time.Now()
		m.afterClose.Store(true)
		// Watch what the Session still sends after Close returned.
		var last time.Time
		for range 60 {
			before := m.lateRel.Load() + m.lateSettle.Load()
			time.Sleep(time.Second)
			if m.lateRel.Load()+m.lateSettle.Load() > before {
				last = time.Now()
			}
		}
		t.Logf("after Close returned: %d Release and %d Settle steps, the last %v after it", m.lateRel.Load(), m.lateSettle.Load(), last.Sub(closedAt))
		if m.lateSettle.Load() > 0 || last.Sub(closedAt) > s.releaseTimeout+time.Second {
			t.Errorf("the closed Session sent steps for %v after Close returned (%d Settle steps): its lost lease's release became a settle on a goroutine Close does not wait for", last.Sub(closedAt), m.lateSettle.Load())
		}
	})
}

// ---------------------------------------------------------------------------
// R3-3. An Enqueue racing Close with the backend down returns long after
// its ctx ended: its step fails, abort settles the ids, and after Close
// background() runs the settle synchronously on the caller's goroutine,
// retrying for 2*TTL + release timeout whatever ctx says. DESIGN.md
// invariant 12: "acquiring fails within its context's deadline". (The
// closed-background path predates 6615bd9; noted as still wrong.)
// ---------------------------------------------------------------------------

func TestReview3AcquireRacingCloseOutlivesItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := newDown()
		s, err := NewSession(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		m.down.Store(true)
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		start := time.Now()
		done := make(chan error, 1)
		go func() {
			_, err := s.Acquire(wctx, Request{ID: "a", Lanes: []Lane{{Key: "K", Limit: 1}}})
			done <- err
		}()
		time.Sleep(100 * time.Millisecond)
		_ = s.Close()
		err = <-done
		took := time.Since(start)
		t.Logf("Acquire(ctx 1s) = %v after %v", err, took)
		if took > time.Second+s.releaseTimeout {
			t.Errorf("Acquire with a 1s deadline returned after %v (backend down, Session closed meanwhile): the settle of its step ran on the caller's goroutine", took)
		}
	})
}

// ---------------------------------------------------------------------------
// R3-5. Two concurrent Enqueue calls merged in one batcher step: the
// lender L's and, naming L in its lineage, B's. restamp gives stamps in
// the order the calls reach restamp, the batcher orders the step by the
// order they reach it; when they differ, B borrows L's key (L first in the
// step) with an OLDER stamp than L. Then Close's step puts L first and
// L's end revokes B: B's Release after Close reports ErrLeaseLost with a
// healthy backend. The window (restamp → batcher append) is a few
// instructions; this counts how often it happens under real scheduling.
// ---------------------------------------------------------------------------

// enqGate is a Memory whose first Enqueue step waits for gate, so that the
// Enqueue calls made meanwhile are merged into the next step.
type enqGate struct {
	*Memory
	n    atomic.Int32
	in   chan struct{}
	gate chan struct{}
}

func (b *enqGate) Enqueue(ctx context.Context, o Owner, ttl time.Duration, reqs []Request) ([]Status, error) {
	if b.n.Add(1) == 1 {
		close(b.in)
		<-b.gate
	}
	return b.Memory.Enqueue(ctx, o, ttl, reqs)
}

func TestReview3StampOrderVsMergedStepOrder(t *testing.T) {
	const runs = 300
	var inverted, lost int
	for range runs {
		func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			m := &enqGate{Memory: NewMemory(), in: make(chan struct{}), gate: make(chan struct{})}
			s, err := NewSession(ctx, m, WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			first := make(chan error, 1)
			go func() {
				_, err := s.Enqueue(ctx, Request{ID: "x", Lanes: []Lane{{Key: "X", Limit: 1}}})
				first <- err
			}()
			<-m.in // the batcher is busy: the next two calls are merged
			var wg sync.WaitGroup
			var tl, tb []*Ticket
			var el, eb error
			wg.Add(2)
			start := make(chan struct{})
			go func() {
				defer wg.Done()
				<-start
				tb, eb = s.Enqueue(ctx, Request{ID: "B", Lineage: []string{"L"}, Lanes: []Lane{{Key: "K1", Limit: 1}, {Key: "K0", Limit: 1}}})
			}()
			go func() {
				defer wg.Done()
				<-start
				tl, el = s.Enqueue(ctx, Request{ID: "L", Lanes: []Lane{{Key: "K0", Limit: 1}}})
			}()
			close(start)
			until(t, ctx, "both merged", func() bool { return pendingEnq(s) == 2 })
			close(m.gate)
			wg.Wait()
			if err := <-first; err != nil || el != nil || eb != nil {
				t.Fatalf("Enqueue: %v %v %v", err, el, eb)
			}
			select {
			case <-tl[0].Ready():
			default:
				return // B was first in the step and took K0 itself: L waits
			}
			lb, errB := tb[0].Wait(ctx)
			if _, errL := tl[0].Wait(ctx); errB != nil || errL != nil {
				return
			}
			s.mu.Lock()
			borrowed := tb[0].e.stamp < tl[0].e.stamp
			s.mu.Unlock()
			if !borrowed {
				return
			}
			inverted++
			_ = s.Close()
			if err := lb.Release(ctx); errors.Is(err, ErrLeaseLost) {
				lost++
			}
		}()
	}
	t.Logf("%d runs: borrower granted with an older stamp than its lender %d, its Release after Close reported lost %d", runs, inverted, lost)
	if lost > 0 {
		t.Errorf("%d of %d runs: a borrower merged in one Enqueue step after its lender had the older stamp, and Close's step revoked it (ErrLeaseLost with a healthy backend)", lost, runs)
	}
}

// pendingEnq is the number of Enqueue calls waiting for s's next step.
func pendingEnq(s *Session) int {
	s.enq.mu.Lock()
	defer s.enq.mu.Unlock()
	return len(s.enq.pending)
}

// The same, made deterministic: B's Enqueue is held between restamp and
// the batcher (the first SpanContext() call on its wait span, in
// stepContext, blocks), while L's Enqueue restamps after it and reaches
// the batcher first. Both are merged into one step [L, B]: L is granted
// K0, B borrows K0 from it, and B's stamp is older than L's.

type stallKey struct{}

// stallTP is a TracerProvider whose "lanes.wait" spans started from a ctx
// carrying stallKey block in their first SpanContext() call: in closes,
// then it waits for gate.
type stallTP struct {
	noop.TracerProvider
	in, gate chan struct{}
}

func (p *stallTP) Tracer(string, ...trace.TracerOption) trace.Tracer { return stallTracer{p: p} }

type stallTracer struct {
	noop.Tracer
	p *stallTP
}

func (t stallTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	sp := &stallSpan{}
	if ctx.Value(stallKey{}) != nil {
		sp.p = t.p
	}
	return trace.ContextWithSpan(ctx, sp), sp
}

type stallSpan struct {
	noop.Span
	p    *stallTP
	once sync.Once
}

func (s *stallSpan) SpanContext() trace.SpanContext {
	if s.p != nil {
		s.once.Do(func() {
			close(s.p.in)
			<-s.p.gate
		})
	}
	return trace.SpanContext{}
}

func TestReview3StampOrderVsMergedStepOrderDeterministic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := &enqGate{Memory: NewMemory(), in: make(chan struct{}), gate: make(chan struct{})}
	tp := &stallTP{in: make(chan struct{}), gate: make(chan struct{})}
	s, err := NewSession(ctx, m, WithTTL(time.Minute), WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first := make(chan error, 1)
	go func() {
		_, err := s.Enqueue(ctx, Request{ID: "x", Lanes: []Lane{{Key: "X", Limit: 1}}})
		first <- err
	}()
	<-m.in // the batcher is busy with x's step
	type res struct {
		ts  []*Ticket
		err error
	}
	bDone, lDone := make(chan res, 1), make(chan res, 1)
	go func() {
		ts, err := s.Enqueue(context.WithValue(ctx, stallKey{}, true), Request{ID: "B", Lineage: []string{"L"}, Lanes: []Lane{{Key: "K1", Limit: 1}, {Key: "K0", Limit: 1}}})
		bDone <- res{ts, err}
	}()
	<-tp.in // B restamped, not yet in the batcher
	go func() {
		ts, err := s.Enqueue(ctx, Request{ID: "L", Lanes: []Lane{{Key: "K0", Limit: 1}}})
		lDone <- res{ts, err}
	}()
	until(t, ctx, "L's call in the batcher", func() bool { return pendingEnq(s) == 1 })
	close(tp.gate)
	until(t, ctx, "B's call in the batcher", func() bool { return pendingEnq(s) == 2 })
	close(m.gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	rb, rl := <-bDone, <-lDone
	if rb.err != nil || rl.err != nil {
		t.Fatalf("Enqueue B = %v, L = %v", rb.err, rl.err)
	}
	lb, err := rb.ts[0].Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ll, err := rl.ts[0].Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token("K0") != ll.Token("K0") {
		t.Fatalf("B did not borrow K0 from L (tokens %d, %d)", lb.Token("K0"), ll.Token("K0"))
	}
	s.mu.Lock()
	sb, sl := rb.ts[0].e.stamp, rl.ts[0].e.stamp
	s.mu.Unlock()
	t.Logf("stamps: borrower B %d, its lender L %d", sb, sl)
	if err := s.Close(); err != nil {
		t.Logf("Close = %v", err)
	}
	errB, errL := lb.Release(ctx), ll.Release(ctx)
	if errB != nil || errL != nil {
		t.Errorf("after Close: borrower B's Release() = %v, lender L's = %v; want nil, nil (B's stamp %d is older than its lender's %d: Close's step released L first and revoked B)", errB, errL, sb, sl)
	}
}

// ---------------------------------------------------------------------------
// R3-6. A waiter's Acquire that timed out during a short outage is settled
// (its abandon's release got no answer), so retrying the same request
// with the same id (DESIGN.md invariant 8: "retries after a network error
// ... keep their order") fails with ErrIDRetired once the backend is back,
// for 2*TTL. Acquire's doc does not list ErrIDRetired, and it wraps
// ErrCanceled although the retry's ctx is alive: a caller that treats
// ErrCanceled as "my context ended" stops retrying.
// ---------------------------------------------------------------------------

func TestReview3TimedOutWaiterRetryIsRetired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := newDown()
		s, err := NewSession(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		h, err := s.Acquire(ctx, Request{ID: "holder", Lanes: []Lane{{Key: "K", Limit: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		req := Request{ID: "run1/call2", Lanes: []Lane{{Key: "K", Limit: 1}}}
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		go func() {
			time.Sleep(500 * time.Millisecond)
			m.down.Store(true) // a blip: 500ms to 6.5s
			time.Sleep(6 * time.Second)
			m.down.Store(false)
		}()
		if _, err := s.Acquire(wctx, req); !errors.Is(err, ErrWaitTimeout) {
			t.Fatalf("first Acquire = %v; want ErrWaitTimeout", err)
		}
		time.Sleep(2 * time.Second) // the backend is back
		_ = h.Release(ctx)          // K is free now
		rctx, cancel2 := context.WithTimeout(ctx, 10*time.Second)
		defer cancel2()
		l, err := s.Acquire(rctx, req) // the retry
		if err == nil {
			_ = l.Release(ctx)
			return
		}
		// Documented (Acquire, Ticket.Cancel): the wait's release got no
		// answer, so its id was settled and is refused while the
		// tombstone lives, twice the TTL; then it is taken again.
		if !errors.Is(err, ErrIDRetired) {
			t.Fatalf("retrying a timed-out Acquire with the same id after a short outage = %v; want a lease or ErrIDRetired", err)
		}
		time.Sleep(2*s.TTL() + time.Second)
		rctx3, cancel3 := context.WithTimeout(ctx, 10*time.Second)
		defer cancel3()
		if l, err = s.Acquire(rctx3, req); err != nil {
			t.Fatalf("Acquire of the settled id once its tombstone is gone = %v; want a lease", err)
		}
		_ = l.Release(ctx)
	})
}
