package integration_test

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/integration/chaos"
)

// Mixed TTLs across processes on the same keys (issue 10, section 1: a
// short TTL's heartbeat once set a safety-net TTL on every state key, so a
// long-TTL holder's key was granted again a minute later). Replicas with
// TTLs of 300ms, 1s, 5s and 1m share m0, m1 and s0; the harness kill -9s
// 300ms and 1s replicas while they hold (each restarts as a new
// incarnation) and SIGSTOPs others past their TTL. Besides, a 1m-TTL
// process holds l0 for a long time (4s short, 65s long: past the minute
// after which the old safety net expired the state), asking Lease.Err every
// 100ms, while a 300ms-TTL process waits for l0 behind it the whole time
// (a live waiter, however short its TTL, is never evicted). Checked: every
// checker; the 5s and 1m holders keep every lease to its release (never
// lost, every release confirmed) while short-TTL processes come and go;
// every lease of a process stopped past its TTL is lost; no state key of
// the namespace ever carries a TTL (sampled every 500ms) and the namespace
// is never reset. Recovery after a kill is reported per TTL.
func TestChaosMixedTTLs(t *testing.T) {
	s := chaosStart(t, "mixed TTLs (300ms, 1s, 5s, 1m) on the same keys, short-TTL replicas killed and stopped")
	s.lanes = "m0:1,m1:1,m2:1,s0:3"
	srv := chaos.StartServer(t, chaos.ServerOptions{})
	admin := srv.Client()
	b := s.namespace(admin, "chaos-ttl-")
	ns := b.Namespace()
	ctx := chaos.Context(t, 10*time.Minute)
	run := chaosSize(7*time.Second, 40*time.Second)
	end := time.Now().Add(run)
	longHold := chaosSize(4*time.Second, 65*time.Second)
	maxInc := chaosSize(2, 6)
	classes := []struct {
		prefix     string
		ttl        time.Duration
		n          int
		hold, poll string
	}{
		{"a", 300 * time.Millisecond, 2, "40ms", "10ms"},
		{"b", time.Second, 2, "40ms", "10ms"},
		{"c", 5 * time.Second, 1, "100ms", "20ms"},
		{"d", time.Minute, 1, "100ms", "20ms"},
	}
	ttlOf := map[string]time.Duration{"L": time.Minute, "W": 300 * time.Millisecond}
	fleets := map[string]*chaos.Fleet{}
	for ci, c := range classes {
		ttlOf[c.prefix] = c.ttl
		holdMin := "5ms"
		if c.ttl >= 5*time.Second {
			holdMin = "30ms"
		}
		fleets[c.prefix] = s.h.RunFleet(c.prefix, c.n, func(i, inc int) []string {
			left := time.Until(end)
			if inc > maxInc || left < time.Second {
				return nil
			}
			return s.args(srv.URL(), ns, uint64(1800+100*ci+10*i+inc), "-ttl", c.ttl.String(), "-clients", "2", "-ops", "1000000",
				"-for", left.Round(time.Millisecond).String(), "-hold-min", holdMin, "-hold", c.hold, "-check-every", c.poll)
		})
	}
	// The long holder of l0, and the short-TTL waiter behind it.
	long := s.h.Start("L0.0", s.args(srv.URL(), ns, 1890, "-ttl", "1m", "-lanes", "l0:1", "-multi", "0", "-cancel", "0",
		"-clients", "1", "-ops", "1", "-hold-min", longHold.String(), "-hold", longHold.String(), "-check-every", "100ms")...)
	chaosWaitEvent(s, time.Minute, "the long holder holds l0", func(e chaos.Event) bool {
		return e.Proc == "L0.0" && e.Op == chaos.OpAcquire && e.Phase == chaos.Ok
	})
	waiter := s.h.Start("W0.0", s.args(srv.URL(), ns, 1891, "-ttl", "300ms", "-lanes", "l0:1", "-multi", "0", "-cancel", "0",
		"-clients", "1", "-ops", "3", "-hold", "5ms")...)

	// kill -9 and SIGSTOP past the TTL, of 300ms and 1s replicas (and,
	// in the long run, of the 5s one).
	shortOnes := []string{"a", "b"}
	if chaosLong {
		shortOnes = append(shortOnes, "c")
	}
	done := make(chan struct{})
	go func() {
		for _, f := range fleets {
			<-f.Done()
		}
		close(done)
	}()
	var mu sync.Mutex
	kills, stops := map[string]int{}, map[string]int{}
	stopped := map[string]bool{}
	var wg sync.WaitGroup
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(18, 1))
		for k := 0; ; k++ {
			select {
			case <-done:
				return
			case <-time.After(250*time.Millisecond + time.Duration(rng.Int64N(int64(250*time.Millisecond)))):
			}
			prefix := shortOnes[rng.IntN(len(shortOnes))]
			c := classes[strings.Index("abcd", prefix)]
			live := fleets[prefix].Live(rng.IntN(c.n))
			mu.Lock()
			busy := live == nil || stopped[live.Name]
			mu.Unlock()
			if busy {
				continue
			}
			// Land while it holds (wait a little for it).
			for until := time.Now().Add(300 * time.Millisecond); !s.h.Holding(live.Name) && time.Now().Before(until); {
				time.Sleep(2 * time.Millisecond)
			}
			if k%2 == 0 {
				inc, _ := strconv.Atoi(live.Name[strings.IndexByte(live.Name, '.')+1:])
				if inc >= maxInc {
					continue
				}
				s.h.Kill(live)
				mu.Lock()
				kills[prefix]++
				mu.Unlock()
				continue
			}
			mu.Lock()
			stopped[live.Name] = true
			stops[prefix]++
			mu.Unlock()
			pause := 2*c.ttl + time.Duration(rng.Int64N(int64(c.ttl)))
			wg.Go(func() {
				s.h.Stop(live)
				select {
				case <-live.Done():
				case <-time.After(pause):
				}
				s.h.Cont(live)
				mu.Lock()
				delete(stopped, live.Name)
				mu.Unlock()
			})
		}
	})
	var ttlSeen []string
	wg.Go(func() { // no state key ever carries a TTL
		for {
			select {
			case <-done:
				return
			case <-time.After(500 * time.Millisecond):
			}
			for _, k := range b.Keys() {
				if d, err := admin.PTTL(ctx, k).Result(); err == nil && d >= 0 { // -1: no TTL, -2: no key
					mu.Lock()
					ttlSeen = append(ttlSeen, fmt.Sprintf("%s has a TTL of %v", k, d))
					mu.Unlock()
				}
			}
		}
	})
	for _, f := range fleets {
		f.Wait(chaosSize(2*time.Minute, 10*time.Minute))
	}
	wg.Wait()
	s.h.Wait(long, 3*time.Minute)
	s.h.Wait(waiter, 3*time.Minute)

	hist := s.h.History()
	for _, x := range ttlSeen {
		s.violation("state", "%s", x)
	}
	if snap, err := b.Inspect(ctx, nil); err != nil {
		t.Fatal(err)
	} else if snap.Stats.Resets != 0 {
		s.violation("state", "the namespace was reset %d times: part of its state vanished", snap.Stats.Resets)
	}
	class := func(proc string) string { return proc[:1] }
	hurt := map[string]bool{} // processes the harness stopped or killed
	for _, e := range hist.Faults {
		if e.Op == chaos.OpPause {
			hurt[e.ID] = true
		}
	}
	for _, e := range hist.Crashes {
		hurt[e.ID] = true
	}
	// Long-TTL holders keep their keys; the short-TTL waiter is never
	// evicted.
	longGrants := 0
	for _, a := range hist.Attempts {
		if hurt[a.Proc] || ttlOf[class(a.Proc)] < 5*time.Second && class(a.Proc) != "W" {
			continue
		}
		switch {
		case a.Outcome == chaos.Granted && (a.Release != chaos.Released || a.Lost != 0):
			s.violation("lease", "%s (%s, TTL %v) lost its lease while short-TTL processes came and went: %s %s", a.ID, a.Proc, ttlOf[class(a.Proc)], a.Release, a.RelClass)
		case a.Outcome == chaos.Granted:
			longGrants++
		case class(a.Proc) == "W" || a.Class == chaos.ClassLost:
			s.violation("lease", "%s (%s, TTL %v) was not granted: %s (%s)", a.ID, a.Proc, ttlOf[class(a.Proc)], a.Class, a.Err)
		}
	}
	// Every lease a stop past its TTL spanned was lost.
	stopHits := map[string]int{}
	var since = map[string]int64{}
	for _, e := range hist.Faults {
		switch e.Op {
		case chaos.OpPause:
			since[e.ID] = e.Time
		case chaos.OpResume:
			from, to := since[e.ID], e.Time
			hit := false
			for _, a := range hist.Attempts {
				if a.Proc != e.ID || a.Outcome != chaos.Granted || a.Return > from || (a.RelInvoke != 0 && a.RelInvoke < to) {
					continue
				}
				hit = true
				if a.Release == chaos.Released {
					s.violation("lease", "%s (%s, TTL %v) held across a stop of %v and its release still found it held",
						a.ID, a.Proc, ttlOf[class(a.Proc)], time.Duration(to-from).Round(time.Millisecond))
				}
			}
			if hit {
				stopHits[class(e.ID)]++
			}
		}
	}
	killHits := map[string]int{}
	for _, e := range hist.Crashes {
		for _, a := range hist.Attempts {
			if a.Proc == e.ID && a.Outcome == chaos.Granted && a.Return < e.Time && (a.RelInvoke == 0 || a.RelInvoke > e.Time) {
				killHits[class(e.ID)]++
				break
			}
		}
	}
	if killHits["a"]+killHits["b"] == 0 || stopHits["a"]+stopHits["b"] == 0 {
		s.violation("scenario", "no kill (%v) or no stop (%v) landed while a short-TTL replica held: nothing tested", killHits, stopHits)
	}
	if longGrants == 0 {
		s.violation("scenario", "no lease of a long-TTL process was granted and released")
	}
	rec := map[string][]time.Duration{}
	for _, r := range chaos.Recoveries(hist) {
		rec[class(r.Proc)] = append(rec[class(r.Proc)], r.Took)
	}
	var parts []string
	for _, c := range classes {
		if len(rec[c.prefix]) > 0 {
			parts = append(parts, fmt.Sprintf("TTL %v: %s", c.ttl, chaosP50Max(rec[c.prefix])))
		}
	}
	sort.Strings(parts)
	t.Logf("recovery after a kill, by the dead holder's TTL: %s", strings.Join(parts, "; "))
	s.fault(fmt.Sprintf("kill -9 %v and SIGSTOP past the TTL %v (by TTL class a=300ms, b=1s, c=5s; landed while holding: kills %v, stops %v); l0 held %v by a 1m-TTL process with a 300ms-TTL waiter behind it; %d leases of 5s/1m processes all kept; recovery by the dead holder's TTL: %s",
		kills, stops, killHits, stopHits, longHold, longGrants, strings.Join(parts, "; ")))
	s.finish(chaos.Options{})
}
