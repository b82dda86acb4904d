package lanes

import (
	"context"
	"testing"
	"time"
)

// gatedBackend is a Memory backend whose first Release step waits for gate:
// the Release calls made meanwhile are merged into the next step.
type gatedBackend struct {
	*Memory
	gate    chan struct{}
	entered chan struct{}
	once    bool
}

func (b *gatedBackend) Release(ctx context.Context, owner string, ids []string) (Released, error) {
	if !b.once {
		b.once = true // only the batcher's one step in flight calls Release
		close(b.entered)
		<-b.gate
	}
	return b.Memory.Release(ctx, owner, ids)
}

// Concurrent Release calls of a lender and its borrower that the batcher
// merges into one step, lender first, are both told nil: the step releases
// the borrower before its lender, as Close does, so the lender's end does
// not revoke the borrower within the step and report it lost (on Memory).
func TestMergedReleaseOfLenderAndBorrowerIsNoLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := &gatedBackend{Memory: NewMemory(), gate: make(chan struct{}), entered: make(chan struct{})}
	s, err := NewSession(ctx, m, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other, err := s.Acquire(ctx, Request{ID: "o", Lanes: []Lane{{Key: "other", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	lender, err := s.Acquire(ctx, Request{ID: "l", Lanes: []Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	borrower, err := s.Acquire(ctx, Request{ID: "b", Lineage: []string{"l"}, Lanes: []Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { first <- other.Release(ctx) }()
	<-m.entered // the step of "o" is in flight
	errs := make(chan error, 2)
	pending := func(n int) {
		for {
			s.rel.mu.Lock()
			got := len(s.rel.pending)
			s.rel.mu.Unlock()
			if got == n {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%d Release calls pending; want %d", got, n)
			case <-time.After(time.Millisecond):
			}
		}
	}
	go func() { errs <- lender.Release(ctx) }()
	pending(1)
	go func() { errs <- borrower.Release(ctx) }()
	pending(2) // the lender's call came first
	close(m.gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("Release() of the lender or its borrower in one step = %v; want nil", err)
		}
	}
}
