package sched

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// errStopped ends the wait of a call whose batch or call stopped as it was
// granted.
var errStopped = errors.New("stopped before it started")

// errToolTimeout is the cause of a body's context when its tool's timeout
// passes.
var errToolTimeout = errors.New("tool timeout")

// errWaitTimeout is the cause that ends a wait for lanes longer than
// Options.Wait.
var errWaitTimeout = errors.New("waited too long for its lanes")

// ErrNoAsker is returned by Ask when the run has no Options.Ask.
var ErrNoAsker = errors.New("sched: no one to ask: the run has no Ask option")

// InterruptError is what a tool body returns to ask a person and pause the
// batch (DESIGN.md section 5, rule 10). Make one with Interrupt.
type InterruptError struct{ Question string }

func (e *InterruptError) Error() string { return "interrupted to ask: " + e.Question }

// Interrupt returns the error a tool body returns to pause its batch with a
// question: running calls finish, no other call starts, and Run returns a
// Checkpoint. Resume runs this call again, where Answer returns the reply,
// then the rest in written order.
func Interrupt(question string) error { return &InterruptError{Question: question} }

type invocationKey struct{}

type invocation struct {
	r        *run
	j        job
	children children // bodies of runs nested in this one
}

// children counts the bodies of the runs nested in a tool body that are
// still running; the body's lanes are released only after they end.
type children struct {
	mu    sync.Mutex
	n     int
	ended bool          // the body's lanes are being released: no more enter
	zero  chan struct{} // closed when n falls to 0 while wait waits
}

// enter counts one more nested body; false once the lanes are released.
func (c *children) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return false
	}
	c.n++
	return true
}

func (c *children) leave() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n--
	if c.n == 0 && c.zero != nil {
		close(c.zero)
		c.zero = nil
	}
}

// wait blocks until no nested body runs, and refuses later ones.
func (c *children) wait() {
	c.mu.Lock()
	c.ended = true
	if c.n == 0 {
		c.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	c.zero = ch
	c.mu.Unlock()
	<-ch
}

// Ask puts a question to a person from inside a tool body and waits for the
// answer. The call keeps its lanes meanwhile: it may have done part of its
// work, and another call slipping in would see half of it (rule 5). It
// returns ErrNoAsker when the run has no Ask option, and an error outside a
// tool body.
func Ask(ctx context.Context, question string) (string, error) {
	inv, ok := ctx.Value(invocationKey{}).(*invocation)
	if !ok {
		return "", errors.New("sched: Ask outside a tool body")
	}
	if inv.r.o.Ask == nil {
		return "", ErrNoAsker
	}
	inv.r.askMu.Lock()
	defer inv.r.askMu.Unlock()
	return inv.r.o.Ask(ctx, inv.r.calls[inv.j.call], question)
}

// Answer returns, inside the body of the call that interrupted its batch and
// is now resumed, the answer given to Resume.
func Answer(ctx context.Context) (string, bool) {
	inv, ok := ctx.Value(invocationKey{}).(*invocation)
	if !ok || inv.r.resumed == nil || inv.r.resumed.CallID != inv.r.calls[inv.j.call].ID {
		return "", false
	}
	return inv.r.answer, true
}

// Checkpoint is a paused batch: the calls, the outcomes of those that ran,
// the question, and the settings to resume with (rule 10). It survives a
// JSON round trip (encoding/json, with the names of its tags): a process
// may write it to a file and another resume it.
type Checkpoint struct {
	RunID  string `json:"run_id"`
	Tenant string `json:"tenant,omitempty"`
	// Runner is the run's settings, narrowed as the run narrowed them.
	Runner Runner `json:"runner"`
	// Timeouts are the run's Options.Timeouts.
	Timeouts map[string]time.Duration `json:"timeouts,omitempty"`
	Calls    []Call                   `json:"calls"`
	Outcomes []Outcome                `json:"outcomes"` // per call; an empty Status for a call still to run
	// CallID is the call that asked Question; both are empty when the
	// batch was paused from outside (Options.Pause).
	CallID   string `json:"call_id,omitempty"`
	Question string `json:"question,omitempty"`

	resumed atomic.Bool // Resume runs a checkpoint once
}

// toRun reports whether call i of the checkpoint still has to run: its
// Status is empty, or Interrupted for a fanned-out call whose Operations
// with an empty Status are still to run.
func (cp *Checkpoint) toRun(i int) bool {
	s := cp.Outcomes[i].Status
	return s == "" || s == Interrupted
}

// cancelPaused settles as never dispatched the jobs a pause kept for the
// checkpoint when the run was cancelled while it paused (lanectl: a
// SIGINT after SIGUSR1, while the running calls finish): the cancellation
// ends the rest instead, and no checkpoint is made of them. A tool's
// question (Interrupt) keeps its checkpoint. A new user's trial saw a
// checkpoint written, and the calls printed "interrupted", beside
// "interrupted by SIGINT: the batch was cancelled".
func (r *run) cancelPaused() {
	if r.ctx.Err() == nil {
		return
	}
	r.mu.Lock()
	var jobs []job
	if r.paused && r.asker == "" {
		for i, st := range r.state {
			if st == nil {
				continue
			}
			kept := st.pending[:0]
			for _, op := range st.pending {
				if st.results[op] == nil { // never started (notStarted)
					jobs = append(jobs, job{call: i, op: op})
				} else {
					kept = append(kept, op)
				}
			}
			st.pending = kept
		}
	}
	r.mu.Unlock()
	for _, j := range jobs {
		r.notStarted(j, context.Cause(r.ctx))
	}
}

// checkpoint returns the checkpoint of a halted run, or nil when no call
// was left to run.
func (r *run) checkpoint() *Checkpoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.ContainsFunc(r.state, func(st *callState) bool { return st != nil && len(st.pending) > 0 }) {
		return nil
	}
	cp := &Checkpoint{
		RunID: r.o.RunID, Tenant: r.o.Tenant, Runner: r.runner, Timeouts: r.timeouts, Calls: slices.Clone(r.orig),
		Outcomes: slices.Clone(r.outcomes), CallID: r.asker, Question: r.question,
	}
	for i, st := range r.state {
		if len(st.pending) == 0 {
			continue
		}
		if st.fanned {
			o := Outcome{CallID: r.calls[i].ID, Tool: r.calls[i].Tool, Status: Interrupted, Code: CodeInterrupted}
			for _, res := range st.results {
				if res != nil && res.Status != Interrupted {
					o.Operations = append(o.Operations, *res)
				} else {
					o.Operations = append(o.Operations, Outcome{})
				}
			}
			cp.Outcomes[i] = o
		} else {
			cp.Outcomes[i] = Outcome{}
		}
	}
	return cp
}

// watchPause halts the run when Options.Pause closes, and returns the
// function that stops watching. Admissions also look at Pause themselves
// (pollPause), so a call never starts after Pause closed, however late the
// watcher runs.
func (r *run) watchPause() (stop func()) {
	if r.o.Pause == nil || r.pollPause() {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-r.o.Pause:
			r.pollPause()
		case <-quit:
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// pollPause halts the run if Options.Pause has closed (running calls
// finish, none starts) and reports whether it has.
func (r *run) pollPause() bool {
	if r.o.Pause == nil {
		return false
	}
	select {
	case <-r.o.Pause:
	default:
		return false
	}
	r.mu.Lock()
	r.paused = true
	r.mu.Unlock()
	r.halt(errPaused)
	return true
}

// Resume runs the rest of a paused batch in written order, the interrupting
// call first in line with answer (see Answer). The Result has every call's
// outcome, those of the first run included.
//
// It runs with the checkpoint's settings (its run id, tenant, narrowed
// Runner and Timeouts), unless o sets them: o.Narrow narrows the
// Scheduler's Runner in place of the checkpoint's narrowing, o.Timeouts
// replace the checkpoint's; a checkpoint's Runner never widens the
// Scheduler's. o.RunID is ignored; an o.Tenant other than the checkpoint's
// is refused. The run's records (rule 7) keep a call that settled, or was
// in flight, from running twice, even when the same checkpoint is resumed
// by two processes; within one process a Checkpoint value is resumed once.
// Errors wrap ErrConfig for a checkpoint that does not fit the Scheduler.
func (s *Scheduler) Resume(ctx context.Context, cp *Checkpoint, answer string, o Options) (*Result, error) {
	if cp == nil || len(cp.Outcomes) != len(cp.Calls) {
		return nil, fmt.Errorf("%w: not a checkpoint of this scheduler", ErrConfig)
	}
	if !cp.resumed.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("%w: this checkpoint was resumed already; resuming it again would run its calls twice", ErrConfig)
	}
	r, err := s.newRun(ctx, cp.Calls, o, cp, answer)
	if err != nil {
		return nil, err
	}
	ctx, span := s.startBatch(ctx, cp.Calls, r.o)
	res, err := r.run(ctx)
	endBatch(span, res)
	return res, err
}
