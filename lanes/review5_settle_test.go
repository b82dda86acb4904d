package lanes_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// review5: an Enqueue of two ids, one of which waits on another Enqueue's
// settle, passes its local deadline while it waits. untrack marks the id
// that had no mark with the entry's own mark; when the settle ends,
// awaitSettles finds that mark and waits on it. Nobody closes it (only
// abort/apply do, after awaitSettles), so the Enqueue hangs although
// nothing is settling.
func TestReview5MultiIDEnqueueExpiredWhileAwaitingDoesNotHang(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := lanes.NewMemory()
		g := &settleGate{Memory: m, gate: make(chan struct{})}
		s, err := lanes.NewSession(ctx, g, lanes.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		a := lanes.Request{ID: "a", Lanes: []lanes.Lane{{Key: "k", Limit: 2}}}
		b := lanes.Request{ID: "b", Lanes: []lanes.Lane{{Key: "k", Limit: 2}}}
		g.failNext.Store(true)
		if _, err := s.Enqueue(ctx, a); err == nil { // settle of a waits at the gate
			t.Fatal("Enqueue with an unreadable reply succeeded")
		}
		ectx, cancel := context.WithCancel(ctx) // only to end the hang after the check
		defer cancel()
		done := make(chan error, 1)
		go func() { _, err := s.Enqueue(ectx, a, b); done <- err }()
		time.Sleep(10 * time.Second) // its entries pass their local deadline
		close(g.gate)                // the settle of a ends: nothing settles any more
		synctest.Wait()
		select {
		case err := <-done:
			t.Logf("Enqueue(a, b) = %v", err)
		default:
			t.Errorf("Enqueue(a, b) still blocked although no settle is running (waits on its own entry's mark)")
			cancel()
			<-done
		}
		_ = s.Close()
	})
}

// review5: the same through Close: Close while an Enqueue of two ids waits
// on a settle of one of them.
func TestReview5CloseWhileMultiIDEnqueueAwaitsSettle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := lanes.NewMemory()
		g := &settleGate{Memory: m, gate: make(chan struct{})}
		s, err := lanes.NewSession(ctx, g, lanes.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		a := lanes.Request{ID: "a", Lanes: []lanes.Lane{{Key: "k", Limit: 2}}}
		b := lanes.Request{ID: "b", Lanes: []lanes.Lane{{Key: "k", Limit: 2}}}
		g.failNext.Store(true)
		if _, err := s.Enqueue(ctx, a); err == nil {
			t.Fatal("Enqueue with an unreadable reply succeeded")
		}
		ectx, cancel := context.WithCancel(ctx) // only to end the hang after the check
		defer cancel()
		done := make(chan error, 1)
		go func() { _, err := s.Enqueue(ectx, a, b); done <- err }()
		synctest.Wait()
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		synctest.Wait()
		close(g.gate)
		synctest.Wait()
		<-closed
		select {
		case err := <-done:
			t.Logf("Enqueue(a, b) = %v", err)
		default:
			t.Errorf("Enqueue(a, b) still blocked after Close returned (waits on its own entry's mark)")
			cancel()
			<-done
		}
	})
}

// review5: Close while an Enqueue of one id waits on that id's settle: the
// Enqueue sends nothing (good) but reports ErrWaitTimeout, though its ctx
// has no deadline and the Session closed; Enqueue documents ErrClosed.
func TestReview5CloseWhileEnqueueAwaitsSettleReportsClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := lanes.NewMemory()
		g := &settleGate{Memory: m, gate: make(chan struct{})}
		s, err := lanes.NewSession(ctx, g, lanes.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		a := lanes.Request{ID: "a", Lanes: []lanes.Lane{{Key: "k", Limit: 2}}}
		g.failNext.Store(true)
		if _, err := s.Enqueue(ctx, a); err == nil {
			t.Fatal("Enqueue with an unreadable reply succeeded")
		}
		done := make(chan error, 1)
		go func() { _, err := s.Enqueue(ctx, a); done <- err }()
		synctest.Wait()
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		synctest.Wait()
		close(g.gate)
		<-closed
		if err := <-done; !errors.Is(err, lanes.ErrClosed) {
			t.Errorf("Enqueue after Close = %v; want ErrClosed", err)
		}
	})
}
