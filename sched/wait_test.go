package sched_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
)

// Options.Wait bounds the wait for lanes, not the run: a call whose key
// another holder keeps ends TOOL_WAIT_TIMEOUT without running and leaves
// the queue, while a call of the same batch on a free key runs. In memory,
// on miniredis and on real Redis.
func TestWaitBoundsTheWaitForLanes(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		cfg := sched.Config{Tools: map[string]sched.Tool{
			"w": {Concurrency: sched.Concurrency{Key: "k"}, Run: e.probe.body()},
			"r": {ReadOnlyHint: true, Run: e.probe.body()},
		}}
		s := e.scheduler(cfg)
		other, err := lanes.NewSession(testCtx(t), e.backend)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		held, err := other.Acquire(testCtx(t), lanes.Request{Lanes: []lanes.Lane{{Key: sched.ConcurrencyPrefix + "k", Limit: 1}}})
		if err != nil {
			t.Fatalf("Acquire() = %v", err)
		}
		defer held.Release(context.Background())

		res := e.run(s, calls("a:w", "b:r"), sched.Options{Wait: 100 * time.Millisecond})
		a, b := res.Outcomes[0], res.Outcomes[1]
		if a.Status != sched.Failed || a.Code != sched.CodeWaitTimeout || a.Err == nil || !strings.Contains(a.Err.Error(), "waited 100ms for its lanes") {
			t.Errorf("outcome of a = %s %s %v; want error %s naming the wait", a.Status, a.Code, a.Err, sched.CodeWaitTimeout)
		}
		if b.Status != sched.OK {
			t.Errorf("outcome of b = %s %v; want ok", b.Status, b.Err)
		}
		if e.probe.index("start a") >= 0 {
			t.Errorf("log = %v; a ran although it never got its lanes", e.probe.snapshot())
		}
		if _, waiters := e.inspect(sched.ConcurrencyPrefix + "k"); len(waiters) != 0 {
			t.Errorf("waiters of concurrency:k after the timeout = %v; want none", waiters)
		}
	})
}

// A negative Options.Wait is a configuration error, not a wait that
// never ends.
func TestNegativeWaitIsRefused(t *testing.T) {
	s, err := sched.New(sched.Config{Tools: map[string]sched.Tool{"t": {Run: func(context.Context, sched.Invocation) (string, error) { return "", nil }}}}, newMemorySession(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(testCtx(t), calls("a:t"), sched.Options{Wait: -time.Second}); err == nil || !strings.Contains(err.Error(), "wait is negative") {
		t.Errorf("Run(Wait: -1s) = %v; want an error saying the wait is negative", err)
	}
}

func newMemorySession(t *testing.T) *lanes.Session {
	t.Helper()
	s, err := lanes.NewSession(testCtx(t), lanes.NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
