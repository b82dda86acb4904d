package lanes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// gatedBackend is a Memory backend whose first Release step waits for gate:
// the Release calls made meanwhile are merged into the next step. calls
// counts the Release and Record steps sent.
type gatedBackend struct {
	*Memory
	gate    chan struct{}
	entered chan struct{}
	calls   atomic.Int32
	opened  sync.Once
}

// open lets the step held at the gate go on.
func (b *gatedBackend) open() { b.opened.Do(func() { close(b.gate) }) }

func newGated() *gatedBackend {
	return &gatedBackend{Memory: NewMemory(), gate: make(chan struct{}), entered: make(chan struct{})}
}

func (b *gatedBackend) Release(ctx context.Context, owner string, ids []string) (Released, error) {
	if b.calls.Add(1) == 1 {
		close(b.entered)
		<-b.gate // a backend that does not answer meanwhile, whatever ctx says
	}
	return b.Memory.Release(ctx, owner, ids)
}

func (b *gatedBackend) Record(ctx context.Context, owner string, ids []string, run, call string, value []byte, retention time.Duration) (Released, error) {
	b.calls.Add(1)
	return b.Memory.Record(ctx, owner, ids, run, call, value, retention)
}

// gatedSession is a Session on a gatedBackend whose first Release step, of
// a lease of its own on key "other", is in flight and held at the gate.
func gatedSession(t *testing.T, ctx context.Context, opts ...Option) (*Session, *gatedBackend, <-chan error) {
	t.Helper()
	m := newGated()
	t.Cleanup(m.open)
	s, err := NewSession(ctx, m, append([]Option{WithTTL(time.Minute)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.Acquire(ctx, Request{ID: "o", Lanes: []Lane{{Key: "other", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { first <- other.Release(ctx) }()
	<-m.entered
	return s, m, first
}

// until polls cond every millisecond until it holds, failing the test with
// what when ctx ends first.
func until(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("gave up waiting: %s", what)
		case <-time.After(time.Millisecond):
		}
	}
}

// pendingReleases is the number of Release calls waiting for s's next step.
func pendingReleases(s *Session) int {
	s.rel.mu.Lock()
	defer s.rel.mu.Unlock()
	return len(s.rel.pending)
}

// chain acquires a lease for each id, each borrowing from the one before
// it with a lineage naming only its immediate lender (the chain a→m→c with
// c's lineage [m]): lease i takes key K<i> and, borrowing it, K<i-1>, both
// of limit 1.
func chain(t *testing.T, ctx context.Context, s *Session, ids ...string) []*Lease {
	t.Helper()
	var ls []*Lease
	for i, id := range ids {
		r := Request{ID: id, Lanes: []Lane{{Key: fmt.Sprintf("K%d", i), Limit: 1}}}
		if i > 0 {
			r.Lineage = []string{ids[i-1]}
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

// Concurrent Release calls of a lender and its borrower that the batcher
// merges into one step, lender first, are both told nil: the step releases
// the borrower before its lender, as Close does, so the lender's end does
// not revoke the borrower within the step and report it lost (on Memory).
func TestMergedReleaseOfLenderAndBorrowerIsNoLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, m, first := gatedSession(t, ctx)
	defer s.Close()
	lender, err := s.Acquire(ctx, Request{ID: "l", Lanes: []Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	borrower, err := s.Acquire(ctx, Request{ID: "b", Lineage: []string{"l"}, Lanes: []Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() { errs <- lender.Release(ctx) }()
	until(t, ctx, "the lender's Release queued", func() bool { return pendingReleases(s) == 1 })
	go func() { errs <- borrower.Release(ctx) }()
	until(t, ctx, "the borrower's Release queued", func() bool { return pendingReleases(s) == 2 })
	m.open()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("Release() of the lender or its borrower in one step = %v; want nil", err)
		}
	}
}

// A chain a→m→c whose lineages name only the immediate lender (c's is [m])
// released in one merged step, lender first, is no loss either: the step
// knows c borrows from a through m, though c's lineage is as long as m's
// (on Memory).
func TestMergedReleaseOfChainNamingOnlyImmediateLenders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, m, first := gatedSession(t, ctx)
	defer s.Close()
	ls := chain(t, ctx, s, "a", "m", "c")
	errs := make(chan error, len(ls))
	for i, l := range ls { // lender first
		go func() { errs <- l.Release(ctx) }()
		until(t, ctx, "the Release calls queued in order", func() bool { return pendingReleases(s) == i+1 })
	}
	m.open()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range ls {
		if err := <-errs; err != nil {
			t.Errorf("Release() in one step of a chain a→m→c = %v; want nil", err)
		}
	}
}

// Close releases the rest of a chain whose lineages name only the immediate
// lender, borrowers first: no entry reads as lost (on Memory).
func TestCloseReleasesChainNamingOnlyImmediateLenders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := NewMemory()
	s, err := NewSession(ctx, m, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ls := chain(t, ctx, s, "a", "b", "c") // b before c by name
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	for i, l := range ls {
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release() of chain entry %d after Close = %v; want nil", i, err)
		}
	}
}

// Close does not overtake a borrower's Release that is queued behind a step
// in flight: the borrower's lease is told nil, not revoked by its lender's
// release in Close (on Memory, on synctest's clock: Wait settles whether
// Close went ahead or waits).
func TestCloseWaitsForQueuedBorrowerRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s, m, first := gatedSession(t, ctx)
		ls := chain(t, ctx, s, "l", "b")
		borrowed := make(chan error, 1)
		go func() { borrowed <- ls[1].Release(ctx) }()
		synctest.Wait() // queued behind the step held at the gate
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		synctest.Wait() // Close waits for the borrower's release, or went ahead
		m.open()
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if err := <-borrowed; err != nil {
			t.Errorf("borrower's Release() queued before Close = %v; want nil", err)
		}
		if err := <-closed; err != nil {
			t.Errorf("Close() = %v", err)
		}
		if err := ls[0].Release(ctx); err != nil {
			t.Errorf("lender's Release() after Close = %v; want nil", err)
		}
	})
}

// A lender's ReleaseRecording, a step of its own, does not overtake its
// borrower's Release queued behind a step in flight (on Memory, on
// synctest's clock).
func TestReleaseRecordingWaitsForQueuedBorrowerRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s, m, first := gatedSession(t, ctx)
		defer s.Close()
		ls := chain(t, ctx, s, "l", "b")
		borrowed := make(chan error, 1)
		go func() { borrowed <- ls[1].Release(ctx) }()
		synctest.Wait()
		lent := make(chan error, 1)
		go func() { lent <- ls[0].ReleaseRecording(ctx, "run1", "call1", []byte("ok"), time.Minute) }()
		synctest.Wait() // the lender waits, or sent its step
		m.open()
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if err := <-borrowed; err != nil {
			t.Errorf("borrower's Release() queued before its lender's ReleaseRecording = %v; want nil", err)
		}
		if err := <-lent; err != nil {
			t.Errorf("lender's ReleaseRecording() = %v; want nil", err)
		}
		recs, err := s.Records(ctx, "run1")
		if err != nil || string(recs["call1"]) != "ok" {
			t.Errorf("Records(run1) = %q, %v; want call1 ok", recs, err)
		}
	})
}

// A Release still queued behind a step in flight when the release timeout
// passes fails with ErrUnavailable, like one the backend did not answer,
// not with the context's error alone (on Memory).
func TestQueuedReleasePastTimeoutIsUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, m, first := gatedSession(t, ctx, WithReleaseTimeout(20*time.Millisecond))
	defer s.Close()
	l, err := s.Acquire(ctx, Request{ID: "q", Lanes: []Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	err = l.Release(ctx)
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("Release() queued past the release timeout = %v; want ErrUnavailable", err)
	}
	m.open()
	<-first // held past its own timeout: nil or ErrUnavailable, as Memory reads ctx
}

// silentBackend is a Memory backend whose Release steps are never answered:
// each returns ctx's error once ctx ends, as a client does.
type silentBackend struct{ *Memory }

func (silentBackend) Release(ctx context.Context, _ string, _ []string) (Released, error) {
	<-ctx.Done()
	return Released{}, ctx.Err()
}

// A Release step in flight with no answer when the release timeout passes
// fails with ErrUnavailable, not with the context's error alone; so does
// Close's (on Memory).
func TestUnansweredReleasePastTimeoutIsUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := NewSession(ctx, silentBackend{NewMemory()}, WithTTL(time.Minute), WithReleaseTimeout(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var ls []*Lease
	for _, id := range []string{"r", "c"} {
		l, err := s.Acquire(ctx, Request{ID: id, Lanes: []Lane{{Key: id, Limit: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	if err := ls[0].Release(ctx); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Release() unanswered past the release timeout = %v; want ErrUnavailable", err)
	}
	if err := s.Close(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Close() unanswered past the release timeout = %v; want ErrUnavailable", err)
	}
	if err := ls[1].Release(ctx); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Release() after a Close unanswered past the release timeout = %v; want ErrUnavailable", err)
	}
}

// recordGated is a Memory backend whose Record steps wait for gate.
type recordGated struct {
	*Memory
	gate chan struct{}
}

func (b recordGated) Record(ctx context.Context, owner string, ids []string, run, call string, value []byte, retention time.Duration) (Released, error) {
	<-b.gate
	return b.Memory.Record(ctx, owner, ids, run, call, value, retention)
}

// A lender's Release does not overtake its borrower's ReleaseRecording in
// flight, a step of its own: it waits for it, so the borrower is not
// revoked within its own release (on Memory, on synctest's clock: Wait
// settles whether the lender's Release went ahead or waits).
func TestReleaseWaitsForBorrowersRecordingInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := recordGated{NewMemory(), make(chan struct{})}
		s, err := NewSession(ctx, m, WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ls := chain(t, ctx, s, "l", "b")
		borrowed := make(chan error, 1)
		go func() { borrowed <- ls[1].ReleaseRecording(ctx, "run1", "call1", []byte("ok"), time.Minute) }()
		synctest.Wait() // the borrower's step is held at the gate
		lent := make(chan error, 1)
		go func() { lent <- ls[0].Release(ctx) }()
		synctest.Wait() // the lender's Release waits, or went ahead
		close(m.gate)
		if err := <-borrowed; err != nil {
			t.Errorf("borrower's ReleaseRecording() = %v; want nil", err)
		}
		if err := <-lent; err != nil {
			t.Errorf("lender's Release() = %v; want nil", err)
		}
	})
}
