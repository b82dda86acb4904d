package lanes_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// (Found by a review.) An Enqueue of two ids, one of which waits on
// another Enqueue's settle, passes its local deadline while it waits:
// untrack marks the other id with the entry's own mark. awaitSettles does
// not wait for its own entries' marks (it hung on them, as nobody closes
// them before it returns).
func TestMultiIDEnqueueExpiredWhileAwaitingDoesNotHang(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		a := lanes.Request{ID: "a", Lanes: []lanes.Lane{{Key: "k", Limit: 2}}}
		b := lanes.Request{ID: "b", Lanes: []lanes.Lane{{Key: "k", Limit: 2}}}
		_, g, s := settling(t, a)               // the settle of a waits at the gate
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

// The same through Close: Close while an Enqueue of two ids waits on a
// settle of one of them.
func TestCloseWhileMultiIDEnqueueAwaitsSettle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		a := lanes.Request{ID: "a", Lanes: []lanes.Lane{{Key: "k", Limit: 2}}}
		b := lanes.Request{ID: "b", Lanes: []lanes.Lane{{Key: "k", Limit: 2}}}
		_, g, s := settling(t, a)
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

// Close while an Enqueue of one id waits on that id's settle: the Enqueue
// sends nothing and reports ErrClosed, as Enqueue documents.
func TestCloseWhileEnqueueAwaitsSettleReportsClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		a := lanes.Request{ID: "a", Lanes: []lanes.Lane{{Key: "k", Limit: 2}}}
		_, g, s := settling(t, a)
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
