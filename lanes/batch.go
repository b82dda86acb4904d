package lanes

import (
	"context"
	"sync"
)

// batcher merges the steps of concurrent callers of one Session (group
// commit): while a step is in flight, the callers that come meanwhile wait,
// and their items go together in the next step, in the order they came.
// Nothing waits for a timer: a caller alone is sent at once. One step
// carries at most max items.
//
// run sends one step and returns one result per item, in order, or an
// error for the whole step. A step refused whole for a reason one caller
// may have caused alone (split reports it) is sent again caller by caller,
// so that each gets its own answer.
type batcher[T, R any] struct {
	max   int
	run   func(ctx context.Context, items []T) ([]R, error)
	split func(error) bool

	mu      sync.Mutex
	busy    bool
	pending []*batchCall[T, R]
}

// batchCall is one caller's items and, once its step answered, its results.
type batchCall[T, R any] struct {
	ctx   context.Context
	items []T
	res   []R
	err   error
	sent  bool          // taken into a step
	done  chan struct{} // closed once res and err are set
}

// do sends items in a step of their own or merged with other callers', and
// returns their results. It returns ctx's error if ctx ends first: at once
// when its items were not sent yet; when they were, the step goes on and
// abandoned reports it, so that the caller settles what they made.
func (b *batcher[T, R]) do(ctx context.Context, items []T) (res []R, abandoned bool, err error) {
	c := &batchCall[T, R]{ctx: ctx, items: items, done: make(chan struct{})}
	b.mu.Lock()
	b.pending = append(b.pending, c)
	lead := !b.busy
	b.busy = true
	b.mu.Unlock()
	if lead {
		b.lead(c)
	}
	select {
	case <-c.done:
		return c.res, false, c.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	if !c.sent {
		for i, p := range b.pending {
			if p == c {
				b.pending = append(b.pending[:i], b.pending[i+1:]...)
				break
			}
		}
		b.mu.Unlock()
		return nil, false, ctx.Err()
	}
	b.mu.Unlock()
	return nil, true, ctx.Err()
}

// lead sends steps of the pending callers until own has its answer, then
// hands the lead to a goroutine of its own if callers still wait, so that
// no caller leads for others for long. own is nil for that goroutine.
func (b *batcher[T, R]) lead(own *batchCall[T, R]) {
	for {
		b.mu.Lock()
		if len(b.pending) == 0 {
			b.busy = false
			b.mu.Unlock()
			return
		}
		if own != nil {
			select {
			case <-own.done:
				b.mu.Unlock()
				go b.lead(nil)
				return
			default:
			}
		}
		var calls []*batchCall[T, R]
		n := 0
		for len(b.pending) > 0 && (len(calls) == 0 || n+len(b.pending[0].items) <= b.max) {
			c := b.pending[0]
			b.pending = b.pending[1:]
			c.sent = true
			calls = append(calls, c)
			n += len(c.items)
		}
		b.mu.Unlock()
		b.send(calls)
	}
}

// send runs one step for calls and gives each its results. The step runs
// on a context that carries the first caller's values (its trace, so the
// step's span is a child of its wait) and ends when every caller's has
// ended.
func (b *batcher[T, R]) send(calls []*batchCall[T, R]) {
	if len(calls) == 1 { // a caller alone: its own context is the step's
		c := calls[0]
		c.res, c.err = b.run(c.ctx, c.items)
		if c.err == nil && len(c.res) != len(c.items) {
			c.res, c.err = nil, errStepShape
		}
		close(c.done)
		return
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(calls[0].ctx))
	defer cancel()
	live := len(calls)
	var mu sync.Mutex
	for _, c := range calls {
		stop := context.AfterFunc(c.ctx, func() {
			mu.Lock()
			defer mu.Unlock()
			if live--; live == 0 {
				cancel()
			}
		})
		defer stop()
	}
	var items []T
	for _, c := range calls {
		items = append(items, c.items...)
	}
	res, err := b.run(ctx, items)
	if err == nil && len(res) != len(items) {
		err = errStepShape
	}
	if err != nil && len(calls) > 1 && b.split != nil && b.split(err) {
		for _, c := range calls { // one caller may have caused it: each alone
			c.res, c.err = b.run(c.ctx, c.items)
			close(c.done)
		}
		return
	}
	at := 0
	for _, c := range calls {
		if err != nil {
			c.err = err
		} else {
			c.res = res[at : at+len(c.items)]
		}
		at += len(c.items)
		close(c.done)
	}
}
