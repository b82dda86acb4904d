package sched

import (
	"context"
	"sync"
)

// StepGate is the gate of one step of calls, for code that runs calls of
// its own the way a Scheduler runs a phase (DESIGN.md section 5, rule 3;
// Cogitator's StepGate): a safe call takes it shared and runs beside the
// other shared holders, an unsafe call takes it exclusive and runs alone.
// Takers are served in the order they came, with no barging: a shared taker
// that comes after a waiting exclusive one waits for it, so a barrier is
// never starved and calls keep their written order across it.
//
// It lives in one process. The zero StepGate is open; a StepGate must not
// be copied after first use. It is safe for concurrent use.
type StepGate struct {
	mu        sync.Mutex
	shared    int  // shared holders
	exclusive bool // an exclusive holder
	queue     []*gateWaiter
}

type gateWaiter struct {
	exclusive bool
	ready     chan struct{} // closed when granted
}

// Share waits until the gate can be held shared: no exclusive holder, and
// no taker queued before this one. It returns the function that lets go
// (call it once), or ctx's error after leaving the queue when ctx ends
// first; a grant that races the end of ctx is given back.
func (g *StepGate) Share(ctx context.Context) (release func(), err error) {
	return g.take(ctx, false)
}

// Exclusive waits until the gate can be held alone: no holder, and no
// taker queued before this one. It returns the function that lets go (call
// it once), or ctx's error after leaving the queue when ctx ends first; a
// grant that races the end of ctx is given back.
func (g *StepGate) Exclusive(ctx context.Context) (release func(), err error) {
	return g.take(ctx, true)
}

func (g *StepGate) take(ctx context.Context, exclusive bool) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	g.mu.Lock()
	if len(g.queue) == 0 && g.fits(exclusive) {
		g.hold(exclusive)
		g.mu.Unlock()
		return g.releaser(exclusive), nil
	}
	w := &gateWaiter{exclusive: exclusive, ready: make(chan struct{})}
	g.queue = append(g.queue, w)
	g.mu.Unlock()

	select {
	case <-w.ready:
		return g.releaser(exclusive), nil
	case <-ctx.Done():
		g.mu.Lock()
		select {
		case <-w.ready: // granted as ctx ended: give it back
			g.mu.Unlock()
			g.releaser(exclusive)()
		default:
			for i, q := range g.queue {
				if q == w {
					g.queue = append(g.queue[:i], g.queue[i+1:]...)
					break
				}
			}
			g.grant() // the head may have left: the next may fit now
			g.mu.Unlock()
		}
		return nil, ctx.Err()
	}
}

// fits reports whether a taker could hold the gate now. g.mu is held.
func (g *StepGate) fits(exclusive bool) bool {
	if exclusive {
		return !g.exclusive && g.shared == 0
	}
	return !g.exclusive
}

func (g *StepGate) hold(exclusive bool) {
	if exclusive {
		g.exclusive = true
	} else {
		g.shared++
	}
}

// grant grants the queue's head, and those after it that fit, in order.
// g.mu is held.
func (g *StepGate) grant() {
	for len(g.queue) > 0 && g.fits(g.queue[0].exclusive) {
		w := g.queue[0]
		g.queue = g.queue[1:]
		g.hold(w.exclusive)
		close(w.ready)
	}
}

func (g *StepGate) releaser(exclusive bool) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if exclusive {
				g.exclusive = false
			} else {
				g.shared--
			}
			g.grant()
		})
	}
}
