package sched_test

import (
	"context"
	"testing"

	"github.com/lanes-dev/lanes/sched"
)

// Issue 11, part 2: a run that narrowed per_tenant and per_tool wrote its
// narrower limits into the shared lanes, and another run of the tenant,
// holding them with the runner's limits, made its calls fail with a limit
// mismatch. Narrowing now bounds the narrowed run alone, with lanes of its
// own beside the shared ones, which keep the runner's limits. In memory,
// on miniredis and on real Redis.
func TestNarrowingBoundsItsRunOnly(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		r := parallel()
		r.PerTenant = 16
		r.PerTool = map[string]int{"read": 8}
		s := e.scheduler(config(p, r, map[string]sched.Tool{"read": {ReadOnlyHint: true}}))

		// A run with the runner's limits holds the shared lanes.
		p.gate("wide")
		wide := runAsync(t, context.Background(), s, calls("wide:read"), sched.Options{RunID: "wide-run", Tenant: "t"})
		p.waitStarted(t, "wide")

		// A narrowed run of the same tenant: two calls, one at a time.
		p.gate("n1", "n2")
		narrow := &sched.Runner{PerTenant: 1, PerTool: map[string]int{"read": 1}}
		done := runAsync(t, context.Background(), s, calls("n1:read", "n2:read"), sched.Options{RunID: "narrow-run", Tenant: "t", Narrow: narrow})
		p.waitStarted(t, "n1")
		snap, err := e.backend.Inspect(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		limits := map[string]int{}
		for _, ks := range snap.Keys {
			limits[ks.Key] = ks.Limit
		}
		for key, want := range map[string]int{
			"tenant:t": 16, "tool:read": 8, // shared: the runner's
			"run:narrow-run/tenant:t": 1, "run:narrow-run/tool:read": 1, // the narrowed run's own
		} {
			if limits[key] != want {
				t.Errorf("limit of %s = %d; want %d (all: %v)", key, limits[key], want, limits)
			}
		}
		if _, waiters := e.inspect("run:narrow-run/tenant:t"); len(waiters) != 1 || waiters[0] != "n2" {
			t.Errorf("waiters of the narrowed run's own tenant lane = %v; want [n2]", waiters)
		}
		p.open("n1")
		p.waitStarted(t, "n2")
		p.open("n2")
		wantStatus(t, done.wait(t), map[string]sched.Status{"n1": sched.OK, "n2": sched.OK})
		p.open("wide")
		wantStatus(t, wide.wait(t), map[string]sched.Status{"wide": sched.OK})
		before(t, p, "end n1", "start n2")
	})
}

// Narrowing never widens: an agent that asks for more than the runner
// declared gets the runner's limits, in shared lanes only.
func TestNarrowingNeverWidens(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		r := parallel()
		r.PerTenant = 1
		s := e.scheduler(config(p, r, map[string]sched.Tool{"read": {ReadOnlyHint: true}}))
		p.gate("a", "b")
		done := runAsync(t, context.Background(), s, calls("a:read", "b:read"), sched.Options{RunID: "r", Tenant: "t", Narrow: &sched.Runner{PerTenant: 5}})
		p.waitStarted(t, "a")
		if _, waiters := e.inspect("tenant:t"); len(waiters) != 1 || waiters[0] != "b" {
			t.Errorf("waiters of tenant:t = %v; want [b]: the runner's limit of 1 holds", waiters)
		}
		if holders, waiters := e.inspect("run:r/tenant:t"); len(holders)+len(waiters) != 0 {
			t.Errorf("a wider narrowing took a lane of its own: %v %v", holders, waiters)
		}
		p.open("a")
		p.open("b")
		done.wait(t)
	})
}
