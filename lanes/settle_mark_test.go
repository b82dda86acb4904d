package lanes_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// Settle marks belong to the entry that made them (found by a review:
// abort's unpend closed whatever mark the id had). An Enqueue whose wait
// for another Enqueue's settle ends (its ctx) leaves that settle's mark, so
// a third Enqueue of the id waits for the settle too, and is not granted
// the entry the settle then removes behind its lease.
func TestCancelledWaiterKeepsAnotherSettlesMark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		req := lanes.Request{ID: "job-1", Lanes: []lanes.Lane{{Key: "k", Limit: 1}}}
		m, g, s := settling(t, req)
		// A second Enqueue of the id gives up waiting for the settle.
		short, cancel := context.WithTimeout(ctx, time.Second)
		_, err := s.Enqueue(short, req)
		cancel()
		if !errors.Is(err, lanes.ErrWaitTimeout) {
			t.Fatalf("second Enqueue = %v; want ErrWaitTimeout while the settle waits", err)
		}
		// A third must still wait for the settle.
		var again []*lanes.Ticket
		var againErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			again, againErr = s.Enqueue(ctx, req)
		}()
		synctest.Wait()
		sentEarly := false
		select {
		case <-done:
			sentEarly = true
		default:
		}
		close(g.gate)
		<-done
		if againErr != nil {
			t.Fatalf("third Enqueue = %v", againErr)
		}
		l, err := again[0].Wait(ctx)
		if sentEarly || !errors.Is(err, lanes.ErrIDRetired) {
			synctest.Wait()
			snap, _ := m.Inspect(ctx, []string{"k"})
			t.Errorf("third Enqueue returned before the settle ran: %v; Wait granted=%v, err %v (want ErrIDRetired); k now %+v", sentEarly, l != nil, err, snap.Keys)
		}
		_ = s.Close()
	})
}

// The same through a request with no lanes: it is never sent, and when
// the step of the other requests of its Enqueue is refused whole, the
// settle mark of its id stays.
func TestNoLaneRequestKeepsAnotherSettlesMark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := lanes.NewMemory()
		g := &settleGate{Memory: m, gate: make(chan struct{})}
		s, err := lanes.NewSession(ctx, g, lanes.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		l1, err := s.Acquire(ctx, lanes.Request{Lanes: []lanes.Lane{{Key: "other", Limit: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		req := lanes.Request{ID: "job-1", Lanes: []lanes.Lane{{Key: "k", Limit: 1}}}
		g.failNext.Store(true)
		if _, err := s.Enqueue(ctx, req); err == nil {
			t.Fatal("Enqueue with an unreadable reply succeeded")
		}
		// job-1 with no lane, with a request refused whole (limit mismatch).
		_, err = s.Enqueue(ctx, lanes.Request{ID: "job-1"},
			lanes.Request{Lanes: []lanes.Lane{{Key: "other", Limit: 2}}})
		if !errors.Is(err, lanes.ErrLimitMismatch) {
			t.Fatalf("Enqueue = %v; want ErrLimitMismatch", err)
		}
		var again []*lanes.Ticket
		var againErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			again, againErr = s.Enqueue(ctx, req)
		}()
		synctest.Wait()
		sentEarly := false
		select {
		case <-done:
			sentEarly = true
		default:
		}
		close(g.gate)
		<-done
		if againErr != nil {
			t.Fatalf("third Enqueue = %v", againErr)
		}
		l, err := again[0].Wait(ctx)
		if sentEarly || !errors.Is(err, lanes.ErrIDRetired) {
			synctest.Wait()
			snap, _ := m.Inspect(ctx, []string{"k"})
			t.Errorf("Enqueue returned before the settle ran: %v; Wait granted=%v, err %v (want ErrIDRetired); k now %+v", sentEarly, l != nil, err, snap.Keys)
		}
		_ = l1.Release(ctx)
		_ = s.Close()
	})
}

// The same for the mark untrack leaves on an entry whose step is in flight
// past its local deadline: a second Enqueue of its id waits on that mark
// and its ctx ends; the mark stays while the step is in flight, so a third
// Enqueue is not sent at once to renew the entry the late step's settle
// removes.
func TestCancelledWaiterKeepsALateStepsMark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := lanes.NewMemory()
		g := &lateReply{Memory: m, reply: make(chan struct{}), gate: make(chan struct{})}
		s, err := lanes.NewSession(ctx, g, lanes.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		req := lanes.Request{ID: "job-1", Lanes: []lanes.Lane{{Key: "k", Limit: 1}}}
		first := make(chan struct{})
		go func() {
			defer close(first)
			if ts, err := s.Enqueue(ctx, req); err == nil {
				_, _ = ts[0].Wait(ctx)
			}
		}()
		time.Sleep(9500 * time.Millisecond) // past the local deadline
		short, cancel := context.WithTimeout(ctx, time.Second)
		_, err = s.Enqueue(short, req)
		cancel()
		if !errors.Is(err, lanes.ErrWaitTimeout) {
			t.Fatalf("second Enqueue = %v; want ErrWaitTimeout while the first step is in flight", err)
		}
		var again []*lanes.Ticket
		var againErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			again, againErr = s.Enqueue(ctx, req)
		}()
		synctest.Wait()
		sentEarly := false
		select {
		case <-done:
			sentEarly = true
		default:
		}
		close(g.reply)
		<-first
		synctest.Wait()
		close(g.gate)
		<-done
		if againErr != nil {
			t.Fatalf("third Enqueue = %v", againErr)
		}
		_, err = again[0].Wait(ctx)
		if sentEarly || !errors.Is(err, lanes.ErrIDRetired) {
			synctest.Wait()
			snap, _ := m.Inspect(ctx, []string{"k"})
			t.Errorf("third Enqueue returned before the reply: %v (it passed awaitSettles and queued behind the first step in the batcher); Wait err = %v (want ErrIDRetired); k now %+v", sentEarly, err, snap.Keys)
		}
		_ = s.Close()
	})
}
