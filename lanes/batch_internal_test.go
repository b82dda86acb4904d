package lanes

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The batcher gives each caller its own results, in its own order, whatever
// the steps it was merged into; merges the callers that come while a step
// is in flight; answers a caller whose context ends before its items were
// sent at once; and sends again caller by caller a step one of them may
// have made fail.
func TestBatcherMergesAndAttributes(t *testing.T) {
	var steps, items atomic.Int64
	gate := make(chan struct{})
	b := &batcher[int, int]{
		max: 50,
		run: func(ctx context.Context, xs []int) ([]int, error) {
			if steps.Add(1) == 1 {
				<-gate // the first step is in flight while the others come
			}
			items.Add(int64(len(xs)))
			for _, x := range xs {
				if x < 0 {
					return nil, ErrInvalid
				}
			}
			out := make([]int, len(xs))
			for i, x := range xs {
				out[i] = 2 * x
			}
			return out, nil
		},
		split: func(err error) bool { return errors.Is(err, ErrInvalid) },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first := make(chan []int)
	go func() {
		r, _, _ := b.do(ctx, []int{1})
		first <- r
	}()
	for steps.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for g := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			xs := []int{g * 10, g*10 + 1}
			if g == 7 {
				xs = []int{-1} // fails alone
			}
			r, _, err := b.do(ctx, xs)
			switch {
			case g == 7 && !errors.Is(err, ErrInvalid):
				errs <- errors.New("the bad caller did not get its error")
			case g != 7 && (err != nil || len(r) != 2 || r[0] != 2*xs[0] || r[1] != 2*xs[1]):
				errs <- errors.New("a caller got another's results or an error")
			}
		}()
	}
	// A caller whose context is cancelled while it waits to be sent.
	cctx, ccancel := context.WithCancel(ctx)
	waiting := make(chan error)
	go func() {
		_, abandoned, err := b.do(cctx, []int{99})
		if abandoned {
			err = errors.New("abandoned although never sent")
		}
		waiting <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		b.mu.Lock()
		queued := len(b.pending)
		b.mu.Unlock()
		if queued == 41 { // every caller waits behind the first step
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d callers queued behind the first step; want 41", queued)
		}
	}
	ccancel()
	if err := <-waiting; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled caller waiting to be sent = %v; want context.Canceled at once", err)
	}
	close(gate)
	if r := <-first; len(r) != 1 || r[0] != 2 {
		t.Fatalf("first caller = %v; want [2]", r)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := steps.Load(); n >= 40 {
		t.Fatalf("%d steps for 41 callers: the callers that came during the first step were not merged", n)
	}
}
