package integration_test

import (
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/integration/chaos"
)

// chaosLoadScripts loads the lanes Functions library into a server, so that
// every FCALL finds its function (a reply dropped by the proxy is then
// always the reply of a step that ran), and returns the function names by
// script file name. The worker binary loads them, so the names are those of
// the library it runs.
func chaosLoadScripts(t *testing.T, worker, url string) map[string]string {
	t.Helper()
	out, err := exec.Command(worker, "-load-scripts", "-redis", url).CombinedOutput()
	if err != nil {
		t.Fatalf("loading the scripts: %v: %s", err, out)
	}
	shas := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, sha, _ := strings.Cut(line, " ")
		shas[name] = sha
	}
	return shas
}

// A reply lost after its script committed: a TCP proxy forwards the
// Enqueue (or Release) step to Redis, then cuts the connection before the
// reply. go-redis does not retry (MaxRetries -1); the Session sends the
// same step again by entry id (and the worker retries what still failed).
// The retry must find the entry where the first step put it: the
// namespace's sequence number, which protocol 2 gives each entry that
// waits, grows once per entry that waited however often its step was sent
// (no double enqueue), no slot leaks, and every checker passes.
func TestChaosDroppedReplies(t *testing.T) {
	s := chaosStart(t, "reply dropped after the script committed")
	srv := chaos.StartServer(t, chaos.ServerOptions{})
	c := srv.Client()
	ctx := chaos.Context(t, 5*time.Minute)
	fn := chaosLoadScripts(t, s.h.Worker, srv.URL())
	p := chaos.StartProxy(t, srv.Addr(), 31)
	b := s.namespace(c, "chaos-drop-")
	nEnq, nRel := chaosSize(8, 80), chaosSize(4, 40)
	p.DropReplies(fn["enqueue.lua"], nEnq)
	p.DropReplies(fn["release.lua"], nRel)
	seq0 := chaosSeq(ctx, t, c, b)
	f := s.h.RunFleet("r", chaosSize(3, 8), func(i, inc int) []string {
		if inc > 0 {
			return nil
		}
		return s.args(p.URL(), b.Namespace(), uint64(600+i), "-clients", "2", "-ops", chaosSize("20", "150"), "-redis-retries", "-1")
	})
	f.Wait(chaosSize(2*time.Minute, 10*time.Minute))
	seq1 := chaosSeq(ctx, t, c, b)
	s.fault(fmt.Sprintf("%d replies dropped after commit (%d enqueue, %d release)", p.Dropped(), nEnq, nRel))
	if p.Dropped() != nEnq+nRel {
		s.violation("scenario", "the proxy dropped %d replies; want %d", p.Dropped(), nEnq+nRel)
	}
	hist := s.h.History()
	sent, waited, unknown, retried := 0, 0, 0, 0
	for _, a := range hist.Attempts {
		if a.EnqSteps > 0 {
			sent++
		}
		switch {
		case a.EnqOK > 0 && !a.EnqReady:
			waited++
		case a.EnqOK == 0 && a.EnqSteps > 0:
			unknown++
		}
		if a.EnqSteps > 1 && a.EnqOK > 0 {
			retried++
		}
	}
	// Each entry that waited got one sequence number. A step whose reply
	// was dropped may have queued an entry that its retry then found
	// granted (answered ready): at most one more number per dropped
	// enqueue reply, and one per entry whose end is unknown.
	n := int(seq1 - seq0)
	t.Logf("sequence grew by %d: %d entries sent, %d waited, %d unknown, %d retried by the worker (the Session retries the others itself)",
		n, sent, waited, unknown, retried)
	if n < waited || n > waited+unknown+nEnq {
		s.violation("idempotency", "the sequence number grew by %d for %d entries that waited (%d unknown, %d enqueue replies dropped): an entry was enqueued twice or lost",
			n, waited, unknown, nEnq)
	}
	s.finish(chaos.Options{})
}

// Added latency and connection cuts through the proxy: every chunk from a
// client to Redis is delayed by up to a few milliseconds, and every
// connection (pub/sub included, so grant hints are lost) is cut at random
// moments. Waiters must still be granted (the heartbeat polls), and every
// checker passes.
func TestChaosFlakyNetwork(t *testing.T) {
	s := chaosStart(t, "latency and connection cuts")
	srv := chaos.StartServer(t, chaos.ServerOptions{})
	p := chaos.StartProxy(t, srv.Addr(), 41)
	p.SetLatency(2 * time.Millisecond)
	b := s.namespace(srv.Client(), "chaos-flaky-")
	f := s.h.RunFleet("r", chaosSize(4, 8), func(i, inc int) []string {
		if inc > 0 {
			return nil
		}
		return s.args(p.URL(), b.Namespace(), uint64(700+i), "-clients", "2", "-ops", "1000000", "-for", chaosSize("5s", "40s"))
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	cuts := 0
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(41, 42))
		for {
			select {
			case <-stop:
				return
			case <-time.After(400*time.Millisecond + time.Duration(rng.Int64N(int64(500*time.Millisecond)))):
			}
			s.h.Fault("cut every connection", chaos.Ok)
			p.CutAll()
			cuts++
		}
	})
	f.Wait(chaosSize(2*time.Minute, 10*time.Minute))
	close(stop)
	wg.Wait()
	s.fault(fmt.Sprintf("latency 0-2ms per chunk; %d cuts of every connection (%d connections)", cuts, p.Cuts()))
	s.finish(chaos.Options{})
}
