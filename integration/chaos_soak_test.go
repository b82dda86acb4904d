package integration_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/integration/chaos"
)

// Everything at once, at volume: replicas (8 in the long run, 10,000+
// requests) on four mutexes, a semaphore and two-key requests, through a
// proxy that adds latency and cuts every connection now and then, while
// the harness kill -9s random replicas (each restarts as a new incarnation)
// and pauses Redis past the TTL once. Every checker passes, and the harness
// measures how long keys held by killed replicas stayed unusable.
func TestChaosSoak(t *testing.T) {
	s := chaosStart(t, "soak: kills, latency, cuts, a Redis pause")
	s.lanes = "m0:1,m1:1,m2:1,m3:1,s0:3"
	srv := chaos.StartServer(t, chaos.ServerOptions{})
	p := chaos.StartProxy(t, srv.Addr(), 61)
	p.SetLatency(time.Millisecond)
	b := s.namespace(srv.Client(), "chaos-soak-")
	// Short: each incarnation works for 6s; long: 320 requests per client
	// and incarnation, 8 x 4 x 320 = 10,240 at least.
	n, clients := chaosSize(3, 8), chaosSize(2, 4)
	amount := chaosSize([]string{"-ops", "1000000", "-for", "6s"}, []string{"-ops", "320"})
	maxInc := chaosSize(1, 3) // incarnations after the first, per replica
	f := s.h.RunFleet("r", n, func(i, inc int) []string {
		if inc > maxInc {
			return nil
		}
		return s.args(p.URL(), b.Namespace(), uint64(1400+10*i+inc), append([]string{"-clients", itoa(clients)}, amount...)...)
	})

	done := f.Done()
	var wg sync.WaitGroup
	var mu sync.Mutex
	kills, cutRounds := 0, 0
	wg.Go(func() { // kill -9 a random replica now and then, never its last incarnation
		rng := rand.New(rand.NewPCG(61, 1))
		for {
			select {
			case <-done:
				return
			case <-time.After(chaosSize(800*time.Millisecond, 2*time.Second) + time.Duration(rng.Int64N(int64(time.Second)))):
			}
			i := rng.IntN(n)
			live := f.Live(i)
			if live == nil {
				continue
			}
			inc, _ := strconv.Atoi(live.Name[strings.IndexByte(live.Name, '.')+1:])
			if inc >= maxInc {
				continue
			}
			s.h.Kill(live)
			mu.Lock()
			kills++
			mu.Unlock()
		}
	})
	wg.Go(func() { // cut every connection now and then
		rng := rand.New(rand.NewPCG(61, 2))
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))):
			}
			s.h.Fault("cut every connection", chaos.Ok)
			p.CutAll()
			mu.Lock()
			cutRounds++
			mu.Unlock()
		}
	})
	time.Sleep(chaosSize(1500*time.Millisecond, 8*time.Second))
	paused := false
	select {
	case <-done:
	default:
		s.h.Fault("SIGSTOP redis-server", chaos.Invoke)
		srv.Pause()
		time.Sleep(2 * s.ttl)
		srv.Resume()
		s.h.Fault("SIGCONT redis-server", chaos.Ok)
		paused = true
	}
	f.Wait(chaosSize(3*time.Minute, 20*time.Minute))
	wg.Wait()
	s.fault(fmt.Sprintf("%d kill -9 of replicas; latency 0-1ms; %d cuts of every connection; Redis paused for 2 x TTL: %v",
		kills, cutRounds, paused))
	s.finish(chaos.Options{})
}
