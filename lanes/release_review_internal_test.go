package lanes

// Release ordering under faults and races, on Memory: a borrower's release
// begun before its lender's (or before Close) is answered as released,
// never revoked by the lender's. A reviewer wrote these against the first
// fix (898344c: steps sorted, a barrier in the batcher, own steps in flight
// waited for) and found each case below failing; since then every release
// is recorded from the moment its entry stops being kept alive until it is
// answered (beginRelease), and lenders and Close wait for their borrowers'
// (afterReleases). Run with:
//
//	go test -race -timeout 120s -run Review -count=5 ./lanes/

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

// reviewBackend is a Memory backend whose Release and Record steps first
// call a hook (when set): the hook may block, or fail the step without
// touching the backend by returning an error. n counts the steps of each
// kind, from 1.
type reviewBackend struct {
	*Memory
	mu      sync.Mutex
	nRel    int
	nRec    int
	onRel   func(n int, ids []string) error
	onRec   func(n int, ids []string) error
	relLogs [][]string // the ids of every Release step, in order
}

func newReviewBackend() *reviewBackend { return &reviewBackend{Memory: NewMemory()} }

func (b *reviewBackend) Release(ctx context.Context, owner string, ids []string) (Released, error) {
	b.mu.Lock()
	b.nRel++
	n, h := b.nRel, b.onRel
	b.relLogs = append(b.relLogs, slices.Clone(ids))
	b.mu.Unlock()
	if h != nil {
		if err := h(n, ids); err != nil {
			return Released{}, err
		}
	}
	return b.Memory.Release(ctx, owner, ids)
}

func (b *reviewBackend) Record(ctx context.Context, owner string, ids []string, run, call string, value []byte, retention time.Duration) (Released, error) {
	b.mu.Lock()
	b.nRec++
	n, h := b.nRec, b.onRec
	b.mu.Unlock()
	if h != nil {
		if err := h(n, ids); err != nil {
			return Released{}, err
		}
	}
	return b.Memory.Record(ctx, owner, ids, run, call, value, retention)
}

// transient is the error of a step that did not reach the backend (a
// dropped connection): the Session tries it again.
var transient = fmt.Errorf("%w: connection reset by peer (injected)", ErrUnavailable)

// heldBy returns the ids holding key in b.
func heldBy(t *testing.T, b Backend, key string) []string {
	t.Helper()
	snap, err := b.Inspect(context.Background(), []string{key})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, k := range snap.Keys {
		for _, h := range k.Holders {
			ids = append(ids, h.ID)
		}
	}
	return ids
}

// ---------------------------------------------------------------------------
// A borrower's release between two tries (its first step failed with
// ErrUnavailable and it waits to try again) keeps its place: a lender's
// Release, ReleaseRecording or the Session's Close called meanwhile waits
// for it (898344c let them go first: ErrLeaseLost). Deterministic
// (synctest: the retry pause is on the bubble's clock).
// ---------------------------------------------------------------------------

// failFirstWith returns a Release hook that fails the first step naming id
// with a transient error, and a flag set once it did.
func failFirstWith(id string) (func(int, []string) error, *atomic.Bool) {
	var failed atomic.Bool
	return func(_ int, ids []string) error {
		if slices.Contains(ids, id) && failed.CompareAndSwap(false, true) {
			return transient
		}
		return nil
	}, &failed
}

func TestReviewRetryingBorrowerOvertakenByLenderRelease(t *testing.T) {
	reviewRetryingBorrower(t, func(ctx context.Context, s *Session, lender *Lease) error {
		return lender.Release(ctx)
	})
}

func TestReviewRetryingBorrowerOvertakenByLenderReleaseRecording(t *testing.T) {
	reviewRetryingBorrower(t, func(ctx context.Context, s *Session, lender *Lease) error {
		return lender.ReleaseRecording(ctx, "run1", "call1", []byte("ok"), time.Minute)
	})
}

func TestReviewRetryingBorrowerOvertakenByClose(t *testing.T) {
	reviewRetryingBorrower(t, func(ctx context.Context, s *Session, lender *Lease) error {
		if err := s.Close(); err != nil {
			return err
		}
		return lender.Release(ctx)
	})
}

// reviewRetryingBorrower: l lends K0 to b; b's Release is called first and
// its first step fails with a transient error; while b waits to try again,
// lend (the lender's release, or Close) runs. Want: both nil.
func reviewRetryingBorrower(t *testing.T, lend func(context.Context, *Session, *Lease) error) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := newReviewBackend()
		hook, failed := failFirstWith("b")
		m.onRel = hook
		s, err := NewSession(ctx, m, WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ls := chain(t, ctx, s, "l", "b")
		borrowed := make(chan error, 1)
		go func() { borrowed <- ls[1].Release(ctx) }()
		synctest.Wait() // b's first step failed; b waits 1ms (bubble clock) to try again
		if !failed.Load() {
			t.Fatal("the borrower's first release step was not sent")
		}
		lent := make(chan error, 1)
		go func() { lent <- lend(ctx, s, ls[0]) }()
		synctest.Wait()
		if err := <-borrowed; err != nil {
			t.Errorf("borrower's Release() (called first; its first step hit a transient error) = %v; want nil", err)
		}
		if err := <-lent; err != nil {
			t.Errorf("lender's release / Close = %v; want nil", err)
		}
	})
}

// ---------------------------------------------------------------------------
// A lender's ReleaseRecording waiting for its borrower's release, whose
// step fails once with ErrUnavailable, records and releases once the
// borrower's try again answered (898344c's barrier shared the failed step
// and returned its error untried). Deterministic.
// ---------------------------------------------------------------------------

func TestReviewBarrierInFailedStepFailsLenderRecording(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := newReviewBackend()
		gate := make(chan struct{})
		m.onRel = func(n int, ids []string) error {
			switch n {
			case 1:
				<-gate // the step of "o" in flight
			case 2:
				return transient // the next step, b's release, fails once
			}
			return nil
		}
		s, err := NewSession(ctx, m, WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		o, err := s.Acquire(ctx, Request{ID: "o", Lanes: []Lane{{Key: "other", Limit: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		ls := chain(t, ctx, s, "l", "b")
		first := make(chan error, 1)
		go func() { first <- o.Release(ctx) }()
		synctest.Wait()
		borrowed := make(chan error, 1)
		go func() { borrowed <- ls[1].Release(ctx) }()
		synctest.Wait()
		lent := make(chan error, 1)
		go func() { lent <- ls[0].ReleaseRecording(ctx, "run1", "call1", []byte("ok"), time.Minute) }()
		synctest.Wait() // l waits for b's release
		close(gate)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if err := <-borrowed; err != nil {
			t.Errorf("borrower's Release() = %v; want nil", err)
		}
		if err := <-lent; err != nil {
			t.Errorf("lender's ReleaseRecording() after a transient error of its borrower's step = %v; want nil", err)
		}
		recs, err := s.Records(ctx, "run1")
		if err != nil || string(recs["call1"]) != "ok" {
			t.Errorf("Records(run1) = %q, %v; want call1 ok", recs, err)
		}
		if h := heldBy(t, m, "K0"); len(h) > 0 {
			t.Errorf("K0 still held by %v after its lease's ReleaseRecording; want free", h)
		}
	})
}

// ---------------------------------------------------------------------------
// A borrower's release whose step fails once, with its lender's Release
// called after it: the lender's is sent once the borrower's try again
// answered (in 898344c the two were merged, then retried caller by caller,
// the lender first about half the time). Counted over many runs.
// ---------------------------------------------------------------------------

func TestReviewMergedStepFailureRetriedLenderFirst(t *testing.T) {
	const runs = 100
	var lost, other atomic.Int32
	for range runs {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			m := newReviewBackend()
			gate := make(chan struct{})
			m.onRel = func(n int, ids []string) error {
				switch n {
				case 1:
					<-gate
				case 2:
					return transient // the merged step of b and l
				}
				return nil
			}
			s, err := NewSession(ctx, m, WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			o, err := s.Acquire(ctx, Request{ID: "o", Lanes: []Lane{{Key: "other", Limit: 1}}})
			if err != nil {
				t.Fatal(err)
			}
			ls := chain(t, ctx, s, "l", "b")
			first := make(chan error, 1)
			go func() { first <- o.Release(ctx) }()
			synctest.Wait()
			borrowed := make(chan error, 1)
			go func() { borrowed <- ls[1].Release(ctx) }() // borrower first
			synctest.Wait()
			lent := make(chan error, 1)
			go func() { lent <- ls[0].Release(ctx) }()
			synctest.Wait()
			close(gate)
			<-first
			berr, lerr := <-borrowed, <-lent
			switch {
			case errors.Is(berr, ErrLeaseLost):
				lost.Add(1)
			case berr != nil || lerr != nil:
				other.Add(1)
				t.Logf("borrower %v, lender %v", berr, lerr)
			}
		})
	}
	if n := lost.Load(); n > 0 {
		t.Errorf("%d of %d runs: borrower's Release() (queued before its lender's; the merged step hit one transient error) = ErrLeaseLost; want nil", n, runs)
	}
	if n := other.Load(); n > 0 {
		t.Errorf("%d of %d runs: another error", n, runs)
	}
}

// ---------------------------------------------------------------------------
// A chain a→m→c; c's ReleaseRecording is in flight (its Record step is
// slow). m.Release is called, then a.Release (or Close): a waits for m as
// well as c (in 898344c both waited for c only and, woken together, a went
// first in about 60% of runs). Counted over many runs.
// ---------------------------------------------------------------------------

func TestReviewChainWakeRaceLenderOvertakesMiddle(t *testing.T) {
	for _, full := range []bool{false, true} {
		for _, viaClose := range []bool{false, true} {
			name := fmt.Sprintf("fullLineage=%v/close=%v", full, viaClose)
			t.Run(name, func(t *testing.T) { reviewChainWakeRace(t, full, viaClose) })
		}
	}
}

// chainLineage is chain with, when full, every lineage naming the whole
// chain before it (c's lineage is [a m]).
func chainLineage(t *testing.T, ctx context.Context, s *Session, full bool, ids ...string) []*Lease {
	t.Helper()
	if !full {
		return chain(t, ctx, s, ids...)
	}
	var ls []*Lease
	for i, id := range ids {
		r := Request{ID: id, Lanes: []Lane{{Key: fmt.Sprintf("K%d", i), Limit: 1}}}
		if i > 0 {
			r.Lineage = slices.Clone(ids[:i])
			r.Lanes = append(r.Lanes, Lane{Key: fmt.Sprintf("K%d", i-1), Limit: 1})
		}
		l, err := s.Acquire(ctx, r)
		if err != nil {
			t.Fatalf("Acquire(%s) = %v", id, err)
		}
		ls = append(ls, l)
	}
	return ls
}

func reviewChainWakeRace(t *testing.T, full, viaClose bool) {
	const runs = 100
	var lost, other atomic.Int32
	for range runs {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			m := newReviewBackend()
			gate := make(chan struct{})
			m.onRec = func(int, []string) error { <-gate; return nil }
			s, err := NewSession(ctx, m, WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ls := chainLineage(t, ctx, s, full, "a", "m", "c")
			cerr := make(chan error, 1)
			go func() { cerr <- ls[2].ReleaseRecording(ctx, "run1", "c", []byte("ok"), time.Minute) }()
			synctest.Wait() // c's Record step is in flight, held at the gate
			merr := make(chan error, 1)
			go func() { merr <- ls[1].Release(ctx) }()
			synctest.Wait() // m waits for c's release
			aerr := make(chan error, 1)
			go func() {
				if viaClose {
					if err := s.Close(); err != nil {
						aerr <- err
						return
					}
				}
				aerr <- ls[0].Release(ctx)
			}()
			synctest.Wait() // a (or Close) waits for c's and m's
			close(gate)
			c, mm, a := <-cerr, <-merr, <-aerr
			switch {
			case errors.Is(mm, ErrLeaseLost):
				lost.Add(1)
			case c != nil || mm != nil || a != nil:
				other.Add(1)
				t.Logf("c %v, m %v, a %v", c, mm, a)
			}
		})
	}
	if n := lost.Load(); n > 0 {
		t.Errorf("%d of %d runs: m's Release() (called before its lender's release / Close) = ErrLeaseLost; want nil", n, runs)
	}
	if n := other.Load(); n > 0 {
		t.Errorf("%d of %d runs: another error", n, runs)
	}
}

// ---------------------------------------------------------------------------
// The same with a ReleaseRecording in the middle: b's ReleaseRecording
// waits for its borrower d's; l.Release, called after b's, waits for b's
// too (898344c registered b only once d was done).
// ---------------------------------------------------------------------------

func TestReviewUnregisteredOwnStepOvertaken(t *testing.T) {
	const runs = 100
	var lost, other atomic.Int32
	for range runs {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			m := newReviewBackend()
			gate := make(chan struct{})
			var recs atomic.Int32
			m.onRec = func(int, []string) error {
				if recs.Add(1) == 1 {
					<-gate // d's record
				}
				return nil
			}
			s, err := NewSession(ctx, m, WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ls := chain(t, ctx, s, "l", "b", "d")
			derr := make(chan error, 1)
			go func() { derr <- ls[2].ReleaseRecording(ctx, "run1", "d", []byte("ok"), time.Minute) }()
			synctest.Wait()
			berr := make(chan error, 1)
			go func() { berr <- ls[1].ReleaseRecording(ctx, "run1", "b", []byte("ok"), time.Minute) }()
			synctest.Wait()
			lerr := make(chan error, 1)
			go func() { lerr <- ls[0].Release(ctx) }()
			synctest.Wait()
			close(gate)
			d, b, l := <-derr, <-berr, <-lerr
			switch {
			case errors.Is(b, ErrLeaseLost):
				lost.Add(1)
			case d != nil || b != nil || l != nil:
				other.Add(1)
				t.Logf("d %v, b %v, l %v", d, b, l)
			}
		})
	}
	if n := lost.Load(); n > 0 {
		t.Errorf("%d of %d runs: b's ReleaseRecording() (called before its lender's Release) = ErrLeaseLost; want nil", n, runs)
	}
	if n := other.Load(); n > 0 {
		t.Errorf("%d of %d runs: another error", n, runs)
	}
}

// ---------------------------------------------------------------------------
// Waits and Close: no hang, right answers.
// ---------------------------------------------------------------------------

// Close while a lender's ReleaseRecording waits for its borrower's queued
// release, and Close must itself wait for that lender's (a→l→b; Close
// keeps a). Want: everything nil, no hang.
func TestReviewCloseWhileBarrierWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := newReviewBackend()
		gate := make(chan struct{})
		m.onRel = func(n int, ids []string) error {
			if n == 1 {
				<-gate
			}
			return nil
		}
		s, err := NewSession(ctx, m, WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		o, err := s.Acquire(ctx, Request{ID: "o", Lanes: []Lane{{Key: "other", Limit: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		ls := chain(t, ctx, s, "a", "l", "b")
		first := make(chan error, 1)
		go func() { first <- o.Release(ctx) }()
		synctest.Wait()
		berr := make(chan error, 1)
		go func() { berr <- ls[2].Release(ctx) }()
		synctest.Wait()
		lerr := make(chan error, 1)
		go func() { lerr <- ls[1].ReleaseRecording(ctx, "run1", "l", []byte("ok"), time.Minute) }()
		synctest.Wait()
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		synctest.Wait()
		close(gate)
		for what, ch := range map[string]chan error{"o": first, "b": berr, "l (recording)": lerr, "Close": closed} {
			if err := <-ch; err != nil {
				t.Errorf("%s = %v; want nil", what, err)
			}
		}
		if err := ls[0].Release(ctx); err != nil {
			t.Errorf("a's Release() after Close = %v; want nil", err)
		}
		for _, k := range []string{"K0", "K1", "K2", "other"} {
			if h := heldBy(t, m, k); len(h) > 0 {
				t.Errorf("%s held by %v after Close", k, h)
			}
		}
	})
}

// A lender's ReleaseRecording whose wait for its borrower's release outlasts
// the release timeout reports ErrUnavailable and does not hang; the step
// ahead and a Close later still finish (the lender's entry then only
// expires).
func TestReviewBarrierTimesOutWhileQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := newReviewBackend()
		gate := make(chan struct{})
		m.onRel = func(n int, ids []string) error {
			if n == 1 {
				<-gate
			}
			return nil
		}
		s, err := NewSession(ctx, m, WithTTL(time.Minute), WithReleaseTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		o, err := s.Acquire(ctx, Request{ID: "o", Lanes: []Lane{{Key: "other", Limit: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		ls := chain(t, ctx, s, "l", "b")
		first := make(chan error, 1)
		go func() { first <- o.Release(ctx) }()
		synctest.Wait()
		berr := make(chan error, 1)
		go func() { berr <- ls[1].Release(ctx) }()
		synctest.Wait()
		lerr := ls[0].ReleaseRecording(ctx, "run1", "l", []byte("ok"), time.Minute) // the clock moves: its wait times out
		// The borrower's release and the lender's wait time out at the same
		// instant of the bubble's clock: when the borrower's gives up first,
		// the lender's wait ends and its step goes out (nil).
		if lerr != nil && !errors.Is(lerr, ErrUnavailable) {
			t.Errorf("ReleaseRecording() whose wait timed out = %v; want ErrUnavailable or nil", lerr)
		}
		if got := pendingReleases(s); got != 0 && got != 1 {
			t.Errorf("%d calls pending after the wait timed out", got)
		}
		close(gate)
		<-first
		if err := <-berr; err != nil && !errors.Is(err, ErrUnavailable) {
			t.Errorf("b's Release() = %v", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
}

// ---------------------------------------------------------------------------
// Stress, no injected fault. Many goroutines release chains of 3, each
// release called once its borrower's has begun (its entry untracked by
// Lease.release); lineages naming only the immediate lender or the whole
// chain; Release and ReleaseRecording mixed; ids reused round after round.
// Want every answer nil. (898344c failed "begun": between the untrack and
// the batcher a release was invisible to its lender's.)
// ---------------------------------------------------------------------------

func TestReviewStressChains(t *testing.T) {
	t.Run("begun", func(t *testing.T) { reviewStressChains(t, false) })
	// strict: each lender's release starts only once its borrower's is
	// recorded as begun (releaseVisible), or answered
	t.Run("queued", func(t *testing.T) { reviewStressChains(t, true) })
}

func reviewStressChains(t *testing.T, strict bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m := NewMemory()
	s, err := NewSession(ctx, m, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	tracked := func(id string) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.entries[id] != nil
	}
	const chains, rounds = 16, 30
	var mu sync.Mutex
	var fails []string
	var lostN atomic.Int32
	var wg sync.WaitGroup
	for c := range chains {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for r := range rounds {
				ids := []string{fmt.Sprintf("a%d", c), fmt.Sprintf("m%d", c), fmt.Sprintf("c%d", c)}
				var ls []*Lease
				for i, id := range ids {
					req := Request{ID: id, Lanes: []Lane{{Key: fmt.Sprintf("c%d-K%d", c, i), Limit: 1}}}
					if i > 0 {
						if rng.IntN(2) == 0 {
							req.Lineage = []string{ids[i-1]}
						} else {
							req.Lineage = slices.Clone(ids[:i])
						}
						req.Lanes = append(req.Lanes, Lane{Key: fmt.Sprintf("c%d-K%d", c, i-1), Limit: 1})
					}
					l, err := s.Acquire(ctx, req)
					if err != nil {
						mu.Lock()
						fails = append(fails, fmt.Sprintf("round %d Acquire(%s) = %v", r, id, err))
						mu.Unlock()
						return
					}
					ls = append(ls, l)
				}
				errs := make([]chan error, 3)
				for i := 2; i >= 0; i-- { // borrower first
					errs[i] = make(chan error, 1)
					l, id := ls[i], ids[i]
					rec := rng.IntN(2) == 0
					go func() {
						if rec {
							errs[i] <- l.ReleaseRecording(ctx, "run"+id, fmt.Sprint(r), []byte("ok"), time.Minute)
						} else {
							errs[i] <- l.Release(ctx)
						}
					}()
					for tracked(id) || strict && len(errs[i]) == 0 && !releaseVisible(s, id) { // its release has begun (strict: is queued)
						select {
						case <-ctx.Done():
							return
						default:
							runtime.Gosched()
						}
					}
				}
				for i := range 3 {
					if err := <-errs[i]; err != nil {
						if errors.Is(err, ErrLeaseLost) {
							lostN.Add(1)
						}
						mu.Lock()
						fails = append(fails, fmt.Sprintf("chain %d round %d: %s's release = %v", c, r, ids[i], err))
						mu.Unlock()
					}
				}
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	goleak.VerifyNone(t)
	if len(fails) > 0 {
		t.Errorf("%d wrong answers (%d ErrLeaseLost); first few:", len(fails), lostN.Load())
		for _, f := range fails[:min(len(fails), 10)] {
			t.Error(f)
		}
	}
}

// Stress with Close concurrent: chains whose borrower releases have begun
// when Close is called; whatever Close finds, no answer is ErrLeaseLost for
// an entry whose release began before Close, and nothing hangs.
func TestReviewStressCloseConcurrent(t *testing.T) {
	t.Run("begun", func(t *testing.T) { reviewStressClose(t, false) })
	// strict: Close is called only once both releases are recorded as
	// begun, or answered
	t.Run("queued", func(t *testing.T) { reviewStressClose(t, true) })
}

func reviewStressClose(t *testing.T, strict bool) {
	const runs = 200
	var lost atomic.Int32
	var other []string
	var mu sync.Mutex
	byWho := map[string]int{}
	for run := range runs {
		func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s, err := NewSession(ctx, NewMemory(), WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			ls := chainLineage(t, ctx, s, run%2 == 0, "a", "m", "c")
			errs := make([]chan error, 3)
			for i := 2; i >= 1; i-- { // c's then m's release begins; a is left to Close
				errs[i] = make(chan error, 1)
				l := ls[i]
				rec := (run/2)%2 == 0 && i == 2
				go func() {
					if rec {
						errs[i] <- l.ReleaseRecording(ctx, "run", "c", []byte("ok"), time.Minute)
					} else {
						errs[i] <- l.Release(ctx)
					}
				}()
				for {
					s.mu.Lock()
					live := s.entries[l.ID()] != nil
					s.mu.Unlock()
					if !live && (!strict || len(errs[i]) > 0 || releaseVisible(s, l.ID())) {
						break
					}
					runtime.Gosched()
				}
			}
			if err := s.Close(); err != nil {
				other = append(other, fmt.Sprintf("run %d: Close() = %v", run, err))
			}
			for i := 1; i <= 2; i++ {
				if err := <-errs[i]; err != nil {
					if errors.Is(err, ErrLeaseLost) {
						lost.Add(1)
						mu.Lock()
						byWho[fmt.Sprintf("%s (c recording: %v)", ls[i].ID(), (run/2)%2 == 0)]++
						mu.Unlock()
					} else {
						other = append(other, fmt.Sprintf("run %d: entry %d = %v", run, i, err))
					}
				}
			}
			if err := ls[0].Release(ctx); err != nil {
				other = append(other, fmt.Sprintf("run %d: a after Close = %v", run, err))
			}
		}()
	}
	goleak.VerifyNone(t)
	if n := lost.Load(); n > 0 {
		t.Errorf("%d releases (of %d runs x 2) begun before Close answered ErrLeaseLost; want nil; by entry: %v", n, runs, byWho)
	}
	for _, o := range other[:min(len(other), 10)] {
		t.Error(o)
	}
}

// releaseVisible reports whether the release of id is recorded as begun
// and not answered (beginRelease).
func releaseVisible(s *Session, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, begun := s.releases[id]
	return begun
}

// A borrower's ReleaseRecording whose first Record step hits a transient
// error keeps its place while it waits to try again: its lender's Release
// waits for it, both nil.
func TestReviewRetryingBorrowerRecordingIsWaitedFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := newReviewBackend()
		var failed atomic.Bool
		m.onRec = func(int, []string) error {
			if failed.CompareAndSwap(false, true) {
				return transient
			}
			return nil
		}
		s, err := NewSession(ctx, m, WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ls := chain(t, ctx, s, "l", "b")
		borrowed := make(chan error, 1)
		go func() { borrowed <- ls[1].ReleaseRecording(ctx, "run1", "b", []byte("ok"), time.Minute) }()
		synctest.Wait()
		if !failed.Load() {
			t.Fatal("the borrower's first Record step was not sent")
		}
		lent := make(chan error, 1)
		go func() { lent <- ls[0].Release(ctx) }()
		synctest.Wait()
		if err := <-borrowed; err != nil {
			t.Errorf("borrower's ReleaseRecording() = %v; want nil", err)
		}
		if err := <-lent; err != nil {
			t.Errorf("lender's Release() = %v; want nil", err)
		}
	})
}

// Cancel of waiting tickets mixed with releases: chains a→m→c where c
// also queues for a key someone else holds, so c waits while borrowing K1
// from m; c's ticket is cancelled (or its Wait times out) while m and a
// release, concurrently, many goroutines. Want: every answer nil, no
// race, no panic, nothing left in the backend, no goroutine left.
func TestReviewStressCancelWaitingBorrowers(t *testing.T) {
	before := goleak.IgnoreCurrent()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m := NewMemory()
	s, err := NewSession(ctx, m, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	blocker, err := s.Acquire(ctx, Request{ID: "blocker", Lanes: []Lane{{Key: "busy", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	const chains, rounds = 12, 20
	var mu sync.Mutex
	var fails []string
	fail := func(f string, a ...any) {
		mu.Lock()
		fails = append(fails, fmt.Sprintf(f, a...))
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for c := range chains {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 11))
			for r := range rounds {
				a, err := s.Acquire(ctx, Request{ID: fmt.Sprintf("a%d", c), Lanes: []Lane{{Key: fmt.Sprintf("x%d-K0", c), Limit: 1}}})
				if err != nil {
					fail("Acquire a: %v", err)
					return
				}
				mm, err := s.Acquire(ctx, Request{ID: fmt.Sprintf("m%d", c), Lineage: []string{a.ID()},
					Lanes: []Lane{{Key: fmt.Sprintf("x%d-K0", c), Limit: 1}, {Key: fmt.Sprintf("x%d-K1", c), Limit: 1}}})
				if err != nil {
					fail("Acquire m: %v", err)
					return
				}
				ts, err := s.Enqueue(ctx, Request{ID: fmt.Sprintf("c%d", c), Lineage: []string{mm.ID()},
					Lanes: []Lane{{Key: fmt.Sprintf("x%d-K1", c), Limit: 1}, {Key: "busy", Limit: 1}}})
				if err != nil {
					fail("Enqueue c: %v", err)
					return
				}
				// c's cancel (or timed-out wait) begins first, then m's
				// release, then a's: each starts once the one before is
				// recorded as begun, or answered
				done := make(chan error, 3)
				started := func(id string, ch chan error) {
					for {
						s.mu.Lock()
						live := s.entries[id] != nil
						s.mu.Unlock()
						if !live && (len(ch) > 0 || releaseVisible(s, id)) || ctx.Err() != nil {
							return
						}
						runtime.Gosched()
					}
				}
				cdone, mdone := make(chan error, 1), make(chan error, 1)
				go func() {
					if rng.IntN(2) == 0 {
						cdone <- ts[0].Cancel(ctx)
						return
					}
					wctx, wcancel := context.WithTimeout(ctx, time.Millisecond)
					defer wcancel()
					_, err := ts[0].Wait(wctx)
					if errors.Is(err, ErrWaitTimeout) || errors.Is(err, ErrCanceled) {
						err = nil
					}
					cdone <- err
				}()
				started(ts[0].ID(), cdone)
				go func() { mdone <- mm.Release(ctx) }()
				started(mm.ID(), mdone)
				go func() { done <- a.ReleaseRecording(ctx, "run", fmt.Sprint(c, r), []byte("ok"), time.Minute) }()
				done <- <-cdone
				done <- <-mdone
				for range 3 {
					if err := <-done; err != nil {
						fail("chain %d round %d: %v", c, r, err)
					}
				}
			}
		})
	}
	wg.Wait()
	if err := blocker.Release(ctx); err != nil {
		t.Error(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	goleak.VerifyNone(t, before)
	snap, err := m.Inspect(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range snap.Keys {
		if len(k.Holders)+len(k.Waiters) > 0 {
			t.Errorf("key %s left with %d holders, %d waiters", k.Key, len(k.Holders), len(k.Waiters))
		}
	}
	for _, f := range fails[:min(len(fails), 10)] {
		t.Error(f)
	}
}

// ---------------------------------------------------------------------------
// A lineage may name an id more than once; a lender whose lineage repeats
// an outer id (["x","x","x"]) still ranks below its borrower (lineage
// ["l"], ancestors [l x]) in Close's step (898344c counted the repeats and
// released the lender first). Deterministic.
// ---------------------------------------------------------------------------

func TestReviewDuplicateLineageCloseReleasesLenderFirst(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := NewSession(ctx, NewMemory(), WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(ctx, Request{ID: "l", Lineage: []string{"x", "x", "x"}, Lanes: []Lane{{Key: "K0", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(ctx, Request{ID: "b", Lineage: []string{"l"}, Lanes: []Lane{{Key: "K0", Limit: 1}, {Key: "K1", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Errorf("borrower's Release() after Close = %v; want nil (ancestors: l %v, b %v)", err, l.e.ancestors, b.e.ancestors)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("lender's Release() after Close = %v; want nil", err)
	}
}

// Chaos: slow and flaky release/record steps, a short release timeout,
// chains released in every order with Release, ReleaseRecording and
// Cancel, and a Close racing them. Checks only that everything returns
// (no hang), with no panic, race or leaked goroutine, and only error kinds
// the docs name.
func TestReviewChaosNoHang(t *testing.T) {
	before := goleak.IgnoreCurrent()
	for run := range 20 {
		func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			m := newReviewBackend()
			var rmu sync.Mutex
			rng := rand.New(rand.NewPCG(uint64(run), 3))
			chaos := func(int, []string) error {
				rmu.Lock()
				d, f := time.Duration(rng.IntN(3000))*time.Microsecond, rng.IntN(5) == 0
				rmu.Unlock()
				time.Sleep(d)
				if f {
					return transient
				}
				return nil
			}
			m.onRel, m.onRec = chaos, chaos
			s, err := NewSession(ctx, m, WithTTL(time.Minute), WithReleaseTimeout(20*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var emu sync.Mutex
			var odd []string
			check := func(what string, err error) {
				if err == nil || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrClosed) || errors.Is(err, ErrCanceled) {
					return
				}
				emu.Lock()
				odd = append(odd, fmt.Sprintf("%s: %v", what, err))
				emu.Unlock()
			}
			for c := range 8 {
				ids := []string{fmt.Sprintf("a%d", c), fmt.Sprintf("m%d", c), fmt.Sprintf("c%d", c)}
				var ls []*Lease
				for i, id := range ids {
					req := Request{ID: id, Lanes: []Lane{{Key: fmt.Sprintf("z%d-K%d", c, i), Limit: 1}}}
					if i > 0 {
						req.Lineage = slices.Clone(ids[i-1 : i])
						req.Lanes = append(req.Lanes, Lane{Key: fmt.Sprintf("z%d-K%d", c, i-1), Limit: 1})
					}
					l, err := s.Acquire(ctx, req)
					if err != nil {
						check("acquire", err)
						break
					}
					ls = append(ls, l)
				}
				tk, err := s.Enqueue(ctx, Request{Lanes: []Lane{{Key: fmt.Sprintf("z%d-K0", c), Limit: 1}}})
				if err == nil {
					wg.Go(func() { check("cancel", tk[0].Cancel(ctx)) })
				}
				for i, l := range ls {
					rec := (c+i)%2 == 0
					wg.Go(func() {
						if rec {
							check("recording", l.ReleaseRecording(ctx, "run", l.ID(), []byte("ok"), time.Minute))
						} else {
							check("release", l.Release(ctx))
						}
					})
				}
			}
			wg.Go(func() { check("close", s.Close()) })
			wg.Wait()
			for _, o := range odd {
				t.Errorf("run %d: %s", run, o)
			}
		}()
	}
	goleak.VerifyNone(t, before)
}
