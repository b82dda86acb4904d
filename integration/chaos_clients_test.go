package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/integration/chaos"
	"github.com/lanes-dev/lanes/lanes"
)

func itoa(n int) string { return strconv.Itoa(n) }

// No fault: replicas take mutexes, a semaphore of 3 and two-key requests,
// some waits cancelled at once (cancel racing grant), and update a guarded
// counter inside each lease. Every checker must pass: the baseline that
// the fault scenarios are compared with.
func TestChaosBaseline(t *testing.T) {
	s := chaosStart(t, "baseline, no fault")
	srv := chaos.StartServer(t, chaos.ServerOptions{})
	b := s.namespace(srv.Client(), "chaos-base-")
	n, clients, ops := chaosSize(4, 8), chaosSize(2, 4), chaosSize(30, 100)
	f := s.h.RunFleet("r", n, func(i, inc int) []string {
		if inc > 0 {
			return nil
		}
		return s.args(srv.URL(), b.Namespace(), uint64(100+i), "-clients", itoa(clients), "-ops", itoa(ops))
	})
	f.Wait(chaosSize(2*time.Minute, 10*time.Minute))
	s.fault("none (cancelled waits: 10% of requests)")
	// With no fault, every request but the 10% of short waits is granted:
	// half of them is a floor no healthy run comes near.
	s.finish(chaos.Options{MinGrants: n * clients * ops / 2})
}

// kill -9 of a client at each crash point: with its Enqueue step committed
// but the reply unused, while waiting, while holding (inside the critical
// section), and with its release in flight. Other replicas keep working
// on the same keys: nothing may block them past the TTL (a dead waiter is
// purged, a dead holder's slot passes on), and the harness measures how
// long each key held by a dead process stayed unusable.
func TestChaosKilledClients(t *testing.T) {
	s := chaosStart(t, "kill -9 of clients enqueuing, waiting, holding, releasing")
	srv := chaos.StartServer(t, chaos.ServerOptions{})
	b := s.namespace(srv.Client(), "chaos-kill-")
	ns := b.Namespace()
	rounds := chaosSize(1, 10)
	phases := []string{chaos.CrashEnqueue, chaos.CrashWaiting, chaos.CrashHolding, chaos.CrashReleasing}

	// The harness's own session holds m0 while a "waiting" crasher starts,
	// so that its first request certainly waits.
	sess, err := lanes.NewSession(context.Background(), b, lanes.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })

	bg := s.h.RunFleet("r", chaosSize(3, 8), func(i, inc int) []string {
		if inc > 0 {
			return nil
		}
		return s.args(srv.URL(), ns, uint64(200+i), "-clients", "2", "-ops", "1000000", "-for", chaosSize("5s", "25s"))
	})
	rng := rand.New(rand.NewPCG(20, 26))
	crashOps := make([][]int, len(phases))
	for i := range phases {
		for range rounds {
			crashOps[i] = append(crashOps[i], rng.IntN(4))
		}
	}
	var blocker *lanes.Lease
	crashers := s.h.RunFleet("k", len(phases), func(i, inc int) []string {
		if phases[i] == chaos.CrashWaiting && blocker != nil {
			_ = blocker.Release(context.Background())
			blocker = nil
		}
		switch {
		case inc < rounds:
			// Mutexes only, so that each crash while holding leaves a key
			// whose recovery can be measured.
			extra := []string{"-clients", "2", "-ops", "1000000", "-crash", phases[i], "-crash-op", itoa(crashOps[i][inc]),
				"-lanes", "m0:1,m1:1"}
			if phases[i] == chaos.CrashWaiting {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				var err error
				blocker, err = sess.Acquire(ctx, lanes.Request{Lanes: []lanes.Lane{{Key: "m0", Limit: 1}}})
				cancel()
				if err != nil {
					t.Errorf("harness blocker on m0: %v", err)
				}
				extra = append(extra, "-lanes", "m0:1", "-multi", "0", "-cancel", "0", "-crash-op", "0")
			}
			return s.args(srv.URL(), ns, uint64(300+10*i+inc), extra...)
		case inc == rounds:
			return s.args(srv.URL(), ns, uint64(400+i), "-clients", "1", "-ops", "5")
		}
		return nil
	})
	crashers.Wait(chaosSize(2*time.Minute, 10*time.Minute))
	bg.Wait(chaosSize(2*time.Minute, 10*time.Minute))

	hist := s.h.History()
	seen := map[string]int{}
	for _, c := range hist.Crashes {
		seen[c.Err]++
	}
	for _, p := range phases {
		if seen[p] != rounds {
			s.violation("scenario", "crash point %s reached %d times; want %d", p, seen[p], rounds)
		}
	}
	s.fault(fmt.Sprintf("%d self-inflicted SIGKILLs: %d each while enqueuing, waiting, holding, releasing", len(hist.Crashes), rounds))
	s.finish(chaos.Options{})
}

// SIGSTOP of a holder inside its critical section, past its TTL; the next
// holder writes; then SIGCONT, and the stopped holder writes late. Without
// a fencing guard the late write lands on top of the next holder's (the
// harness must see the lost update); with the guards (FileGuard on the
// counter, RedisGuard on a second Redis server) it is refused, and the
// stalled holder learns its lease is lost.
func TestChaosStoppedHolder(t *testing.T) {
	for _, guarded := range []bool{false, true} {
		name := map[bool]string{false: "unguarded", true: "guarded"}[guarded]
		t.Run(name, func(t *testing.T) {
			s := chaosStart(t, "SIGSTOP of a holder past its TTL, "+name)
			s.lanes = "m0:1"
			srv := chaos.StartServer(t, chaos.ServerOptions{})
			b := s.namespace(srv.Client(), "chaos-stop-")
			ns := b.Namespace()
			guard := []string{"-guard", chaos.GuardNone}
			if guarded {
				fence := chaos.StartServer(t, chaos.ServerOptions{})
				guard = []string{"-guard", chaos.GuardFile, "-fence-redis", fence.URL()}
			}
			quiet := []string{"-clients", "1", "-cancel", "0", "-multi", "0"}
			victimArgs := append(s.args(srv.URL(), ns, 500, append(quiet, "-ops", "1", "-victim", "1s", "-hold", "0")...), guard...)
			victim := s.h.Start("v0.0", victimArgs...)
			chaosWaitEvent(s, 30*time.Second, "the victim read the counter", func(e chaos.Event) bool {
				return e.Proc == "v0.0" && e.Op == chaos.OpRead && e.Phase == chaos.Ok
			})
			s.h.Stop(victim)
			next := s.h.RunFleet("w", 2, func(i, inc int) []string {
				if inc > 0 {
					return nil
				}
				return append(s.args(srv.URL(), ns, uint64(510+i), append(quiet, "-ops", chaosSize("4", "40"))...), guard...)
			})
			chaosWaitEvent(s, 30*time.Second, "the next holder wrote", func(e chaos.Event) bool {
				return strings.HasPrefix(e.Proc, "w") && e.Op == chaos.OpWrite && e.Phase == chaos.Ok
			})
			s.h.Cont(victim)
			s.h.Wait(victim, time.Minute)
			next.Wait(2 * time.Minute)
			s.fault("SIGSTOP of the holder for its TTL and more, then SIGCONT")

			hist := s.h.History()
			var late chaos.ResourceOp
			for _, r := range hist.Resources {
				if r.Proc == "v0.0" && r.Op == chaos.OpWrite {
					late = r
				}
			}
			var va *chaos.Attempt
			for _, a := range hist.Attempts {
				if a.Proc == "v0.0" {
					va = a
				}
			}
			if va == nil || va.Outcome != chaos.Granted {
				t.Fatalf("the victim was not granted: %+v", va)
			}
			if va.Lost == 0 {
				s.violation("lease", "the stalled holder %s never learned that its lease was lost", va.ID)
			}
			if va.Release == chaos.Released {
				s.violation("lease", "the stalled holder's release found its lease still held")
			}
			if !guarded {
				if late.Phase != chaos.Ok {
					t.Fatalf("unguarded: the late write did not land: %+v", late)
				}
				found := s.finish(chaos.Options{}, "resource")
				if len(found) == 0 {
					t.Fatal("unguarded: the stalled holder's late write landed, yet no lost update was reported: the harness cannot see one")
				}
				t.Logf("unguarded, as expected: %s", found[0])
				return
			}
			if late.Phase != chaos.Fail || late.Class != chaos.ClassStale {
				s.violation("resource", "guarded: the stalled holder's late write was not refused as stale: %+v", late)
			}
			refused := false
			for _, r := range hist.Resources {
				refused = refused || r.Proc == "v0.0" && r.Op == chaos.OpFence && r.Class == chaos.ClassStale
			}
			if !refused {
				s.violation("resource", "guarded: the RedisGuard did not refuse the stalled holder's token")
			}
			s.finish(chaos.Options{})
		})
	}
}

// kill -9 of a holder of several permits: each crasher incarnation asks for
// m0 (limit 1) and a permit of s0 (limit 3) in one request and dies inside
// its critical section, while the background replicas queue on both keys
// with waits (bounded at two minutes) that outlast the dead lease's TTL.
// Every permit must pass on (limit, fencing and FIFO checkers, no leak),
// the waiters behind the dead holder must be granted, and every process
// must make progress.
func TestChaosKilledHolderOfSeveralPermits(t *testing.T) {
	s := chaosStart(t, "kill -9 of a holder of several permits (m0 and a permit of s0), waits outlasting the TTL")
	s.lanes = "m0:1,s0:3"
	srv := chaos.StartServer(t, chaos.ServerOptions{})
	b := s.namespace(srv.Client(), "chaos-permits-")
	ns := b.Namespace()
	rounds := chaosSize(2, 10)
	bg := s.h.RunFleet("r", chaosSize(3, 6), func(i, inc int) []string {
		if inc > 0 {
			return nil
		}
		return s.args(srv.URL(), ns, uint64(600+i), "-clients", "2", "-ops", "1000000", "-multi", "0.5", "-for", chaosSize("6s", "30s"))
	})
	crasher := s.h.RunFleet("k", 1, func(_, inc int) []string {
		switch {
		case inc < rounds:
			return s.args(srv.URL(), ns, uint64(650+inc), "-clients", "1", "-ops", "1000000", "-multi", "1", "-cancel", "0",
				"-hold-min", "20ms", "-hold", "50ms", "-crash", chaos.CrashHolding, "-crash-op", "0")
		case inc == rounds:
			return s.args(srv.URL(), ns, uint64(690), "-clients", "1", "-ops", "5", "-multi", "1")
		}
		return nil
	})
	crasher.Wait(chaosSize(2*time.Minute, 10*time.Minute))
	bg.Wait(chaosSize(2*time.Minute, 10*time.Minute))

	hist := s.h.History()
	crashes := 0
	for _, c := range hist.Crashes {
		if c.Op != chaos.OpCrash || c.Err != chaos.CrashHolding {
			continue
		}
		crashes++
		held := map[string]bool{}
		for _, a := range hist.Attempts {
			if a.Proc == c.Proc && a.Outcome == chaos.Granted && a.Return <= c.Time && a.Release == chaos.Abandoned {
				for _, k := range a.Keys {
					held[k] = true
				}
			}
		}
		if !held["m0"] || !held["s0"] {
			s.violation("scenario", "%s crashed holding %v; want m0 and a permit of s0", c.Proc, held)
		}
	}
	if crashes != rounds {
		s.violation("scenario", "%d crashes while holding; want %d", crashes, rounds)
	}
	rec := chaos.Recoveries(hist)
	if len(rec) == 0 {
		s.violation("scenario", "no request was waiting for m0 when a holder died, and granted after: the scenario tested nothing")
	}
	for _, r := range rec {
		t.Logf("recovery of %s after %s died: %v", r.Key, r.Proc, r.Took.Round(time.Millisecond))
	}
	s.fault(fmt.Sprintf("%d kill -9 of a process holding m0 (limit 1) and a permit of s0 (limit 3) in one lease", crashes))
	s.finish(chaos.Options{})
}
