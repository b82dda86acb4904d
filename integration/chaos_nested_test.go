package integration_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/integration/chaos"
)

// Nested lineages under kill -9 and SIGSTOP (DESIGN.md invariant 10).
// Every replica, while holding, starts now and then a nested request on a
// goroutine of its own, whose lineage names the lease: on the parent's
// first key (re-entry: granted at once, with the parent's token, taking no
// slot) and sometimes on another key too. Most parents wait for their
// nested request before releasing (a tool that ran a sub-agent); some do
// not, so the borrower is revoked while it holds. Holders also publish
// their leases on a board (a directory) from which other replicas make
// nested requests across processes, as a command run under `lanectl lock`
// does. Meanwhile the harness kill -9s replicas (restarted as new
// incarnations) and SIGSTOPs others past their TTL, while parents and
// borrowers hold. Besides every usual checker, the history is checked
// with the lane models that let a borrower share its lender's slot, the
// re-entry checker (a nested request under a parent that certainly held
// its keys is granted at once with the parent's tokens) and the borrower
// checker (a borrowed slot never outlives its lender: once the key went to
// the next holder, the borrower neither finds its lease valid nor has its
// release confirmed).
func TestChaosNestedLineages(t *testing.T) {
	s := chaosStart(t, "nested lineages (re-entry in and across processes) under kill -9 and SIGSTOP")
	srv := chaos.StartServer(t, chaos.ServerOptions{})
	b := s.namespace(srv.Client(), "chaos-nested-")
	board := t.TempDir()
	n := chaosSize(4, 8)
	maxInc := chaosSize(2, 4)
	f := s.h.RunFleet("r", n, func(i, inc int) []string {
		if inc > maxInc {
			return nil
		}
		return s.args(srv.URL(), b.Namespace(), uint64(1500+10*i+inc), "-clients", "2", "-ops", "1000000",
			"-for", chaosSize("6s", "30s"), "-hold-min", "5ms", "-hold", "30ms",
			"-nested", "0.5", "-nested-other", "0.3", "-detach", "0.25", "-board", board, "-adopt", "0.25")
	})

	done := f.Done()
	var mu sync.Mutex
	kills, stops := 0, 0
	var wg sync.WaitGroup
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(15, 1))
		lent := false
		for k := 0; ; k++ {
			select {
			case <-done:
				return
			case <-time.After(300*time.Millisecond + time.Duration(rng.Int64N(int64(400*time.Millisecond)))):
			}
			// Wait (a little) for a lease lent to a borrower that holds.
			var live *chaos.Proc
			for end := time.Now().Add(500 * time.Millisecond); live == nil || !lent && time.Now().Before(end); {
				live, lent = nestedVictim(f, n, board, rng)
				if !lent {
					time.Sleep(2 * time.Millisecond)
				}
			}
			if live == nil || !lent {
				// A fault on a process that lends nothing to a holding
				// borrower tests nothing here; on a loaded machine two such
				// kills left the scenario untested (CI failed so once).
				continue
			}
			if k%2 == 0 {
				inc, _ := strconv.Atoi(live.Name[strings.IndexByte(live.Name, '.')+1:])
				if inc >= maxInc {
					continue
				}
				s.h.Kill(live)
				mu.Lock()
				kills++
				mu.Unlock()
				continue
			}
			// Past the TTL: every lease of the process (parents and
			// borrowers) expires meanwhile.
			s.h.Stop(live)
			select {
			case <-live.Done():
			case <-time.After(2*s.ttl + time.Duration(rng.Int64N(int64(s.ttl/2)))):
			}
			s.h.Cont(live)
			mu.Lock()
			stops++
			mu.Unlock()
		}
	})
	f.Wait(chaosSize(2*time.Minute, 10*time.Minute))
	wg.Wait()

	hist := s.h.History()
	st := chaos.Nesting(hist)
	ctx := chaos.Context(t, time.Minute)
	snap, err := b.Inspect(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	hitKill, hitStop := nestedHits(hist)
	t.Logf("nesting: %d nested requests, %d granted by re-entry (%d across processes), %d cycles refused, %d borrowers orphaned (notice after the next grant: max %v), %d revoked by the backend; faults that landed while a parent and its borrower held: %d kills, %d stops",
		st.Nested, st.Reentered, st.Cross, st.Cycles, st.Orphaned, chaos.Percentile(st.Notice, 100), snap.Stats.Revoked, hitKill, hitStop)
	switch {
	case st.Reentered == 0:
		s.violation("scenario", "no nested request was granted by re-entry: the scenario tested nothing")
	case st.Cross == 0:
		s.violation("scenario", "no nested request re-entered a lease of another process")
	case st.Orphaned == 0 || snap.Stats.Revoked == 0:
		s.violation("scenario", "no borrower held when its lender's lease ended (%d orphaned, %d revoked): the borrower checker checked nothing", st.Orphaned, snap.Stats.Revoked)
	case hitKill == 0:
		s.violation("scenario", "no kill -9 landed while a parent and a borrower of its lease held (%d kills)", kills)
	case hitStop == 0:
		s.violation("scenario", "no SIGSTOP landed while a parent and a borrower of its lease held (%d stops)", stops)
	}
	s.fault(fmt.Sprintf("%d kill -9 and %d SIGSTOPs past the TTL of replicas (%d and %d while a parent and a borrower of its lease held); %d nested requests, %d granted by re-entry (%d across processes), %d borrowers orphaned, %d revoked, %d refused as cycles",
		kills, stops, hitKill, hitStop, st.Nested, st.Reentered, st.Cross, st.Orphaned, snap.Stats.Revoked, st.Cycles))
	// A borrower is told that its lender's lease ended before the key
	// passes on (the lender keeps its slot until its revoked borrowers are
	// released or expire): no lag is tolerated.
	s.finish(chaos.Options{})
}

// nestedVictim picks the replica to kill or stop: one that holds a lease
// lent to a borrower that holds (board/lent), else one that holds a lease
// it published on the board, else any live one.
func nestedVictim(f *chaos.Fleet, n int, board string, rng *rand.Rand) (p *chaos.Proc, lent bool) {
	byName := map[string]*chaos.Proc{}
	var any []*chaos.Proc
	for i := range n {
		if p := f.Live(i); p != nil {
			byName[p.Name] = p
			any = append(any, p)
		}
	}
	for i, dir := range []string{filepath.Join(board, "lent"), board} {
		ents, _ := os.ReadDir(dir)
		rng.Shuffle(len(ents), func(i, j int) { ents[i], ents[j] = ents[j], ents[i] })
		for _, e := range ents {
			if name, _, ok := strings.Cut(e.Name(), "-"); ok && byName[name] != nil {
				return byName[name], i == 0
			}
		}
	}
	if len(any) == 0 {
		return nil, false
	}
	return any[rng.IntN(len(any))], false
}

// nestedHits counts the harness's kills and stops that landed while a
// lease of the process was held and lent to a borrower (of any process)
// that held too.
func nestedHits(h *chaos.History) (kills, stops int) {
	holding := func(a *chaos.Attempt, at int64) bool {
		if a.Outcome != chaos.Granted || a.Return > at {
			return false
		}
		end := h.End
		if a.RelInvoke != 0 {
			end = a.RelInvoke
		}
		if a.Lost != 0 {
			end = min(end, a.Lost)
		}
		return end > at
	}
	hit := func(proc string, at int64) bool {
		for _, a := range h.Attempts {
			if len(a.Borrowed) == 0 || !holding(a, at) {
				continue
			}
			for k := range a.Borrowed {
				if l := h.Lender(a, k); l != nil && l.Proc == proc && holding(l, at) {
					return true
				}
			}
		}
		return false
	}
	for _, e := range h.Crashes {
		if e.Op == chaos.OpKill && hit(e.ID, e.Time) {
			kills++
		}
	}
	for _, e := range h.Faults {
		if e.Op == chaos.OpPause && hit(e.ID, e.Time) {
			stops++
		}
	}
	return kills, stops
}
