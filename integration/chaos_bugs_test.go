package integration_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/integration/chaos"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// Bugs the chaos suite found, each kept as a regression test.

// Invariant 12: when Redis cannot be reached, acquiring fails with an error
// that says so. A Redis that hangs (SIGSTOP, CLIENT PAUSE, a partition that
// drops packets) answers nothing: the heartbeat in flight only fails at its
// own timeout, after the waiter's local deadline has passed. The Session
// reported the waiter lost with ErrLeaseLost and "this process did not
// renew in time: stopped or starved?", blaming the process, instead of
// ErrUnavailable: lastErr is set only when a heartbeat returns, so a beat
// still in flight at the deadline counted as no error at all. Seen in
// TestChaosRedisPaused's history: 15 waiters failed that way against 12
// with ErrUnavailable. Session.expire now counts a heartbeat in flight.
func TestChaosWaiterBlamesRedisWhenItHangs(t *testing.T) {
	srv := chaos.StartServer(t, chaos.ServerOptions{})
	admin := srv.Client()
	b, err := redislane.New(srv.Client(), "chaos-bug-hang")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := chaos.Context(t, time.Minute)
	s, err := lanes.NewSession(ctx, b, lanes.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	holder, err := s.Acquire(ctx, lanes.Request{Lanes: []lanes.Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	ts, err := s.Enqueue(ctx, lanes.Request{Lanes: []lanes.Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	// Redis hangs for three TTLs: it answers nothing, closes nothing.
	if err := admin.Do(ctx, "CLIENT", "PAUSE", 3000, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = ts[0].Wait(wctx)
	t.Logf("the waiter's error: %v", err)
	if !errors.Is(err, lanes.ErrUnavailable) {
		t.Errorf("the waiter's error does not wrap ErrUnavailable although Redis was unreachable: %v", err)
	}
	select {
	case <-holder.Lost():
		t.Logf("the holder's loss: %v", holder.Err())
	case <-ctx.Done():
		t.Fatal("the holder never learned it lost its lease")
	}
}
