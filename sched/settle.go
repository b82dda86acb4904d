package sched

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// How a call's outcome is settled: without running (rule 1), from the
// run's records (rule 7), or once its operations ended, with the failure
// policies applied (rules 8 and 9).

// notStarted settles a job that never started: its batch stopped, its call
// stopped at an earlier operation's failure, or its lanes failed it.
func (r *run) notStarted(j job, err error) {
	r.mu.Lock()
	halted := (r.asker != "" || r.paused) && r.ctx.Err() == nil
	r.mu.Unlock()
	c := r.calls[j.call]
	o := Outcome{CallID: c.ID, Tool: c.Tool}
	switch {
	case halted:
		r.mu.Lock()
		st := r.state[j.call]
		st.pending = append(st.pending, j.op)
		r.mu.Unlock()
		r.emit(Event{Kind: EventInterrupted, CallID: c.ID, Tool: c.Tool, Operation: j.op, Entry: j.entry, Status: Interrupted, Why: errText(context.Cause(r.admit))})
		return
	case r.ctx.Err() != nil:
		o.Status, o.Code, o.Err = NeverDispatched, CodeNeverStarted, fmt.Errorf("never dispatched: %v", context.Cause(r.ctx))
	case r.stopped(j.call):
		o.Status, o.Code, o.Err = NeverDispatched, CodeNeverStarted, fmt.Errorf("never dispatched: an earlier operation of call %s failed", c.ID)
	default:
		o.Status, o.Code, o.Err = Failed, codeOf(err), err
	}
	r.settleOp(j, o)
}

// abandon settles or keeps for a checkpoint the jobs never admitted.
func (r *run) abandon(jobs []job) {
	for _, j := range jobs {
		r.notStarted(j, context.Cause(r.admit))
	}
}

func (r *run) stopped(call int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state[call].stopped
}

// settle ends call i without running it.
func (r *run) settle(i int, s Status, code Code, why string) {
	c := r.calls[i]
	r.mu.Lock()
	r.outcomes[i] = Outcome{CallID: c.ID, Tool: c.Tool, Status: s, Code: code, Err: errors.New(why)}
	r.state[i].done = true
	r.mu.Unlock()
	r.emit(Event{Kind: EventSettled, CallID: c.ID, Tool: c.Tool, Status: s, Why: why})
}

// settleStored ends call i with o, read from the run's records. A failure
// stops the batch again under fail_run, as it did the first time.
func (r *run) settleStored(i int, o Outcome) {
	c := r.calls[i]
	o.CallID, o.Tool = c.ID, c.Tool
	r.mu.Lock()
	r.outcomes[i] = o
	r.state[i].done = true
	r.mu.Unlock()
	r.emit(Event{Kind: EventStored, CallID: c.ID, Tool: c.Tool, Status: o.Status, Why: errText(o.Err)})
	r.failRun(c, o)
}

// failRun ends the batch when o is a failure and on_tool_error is
// fail_run (rule 8).
func (r *run) failRun(c Call, o Outcome) {
	if o.Status != OK && o.Status != Interrupted && o.Status != NeverDispatched && o.Status != "" && r.runner.OnToolError == FailRun {
		r.fail(fmt.Errorf("call %s (%s) failed and on_tool_error is fail_run: %v", c.ID, c.Tool, o.Err))
	}
}

// errText is err's message, or "".
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// settleOp records one operation's outcome, applies the failure policies
// and finishes the call when it was the last.
func (r *run) settleOp(j job, o Outcome) {
	c := r.calls[j.call]
	r.mu.Lock()
	st := r.state[j.call]
	st.results[j.op] = &o
	st.left--
	bad := o.Status != OK && o.Status != Interrupted
	if bad && st.tool.FanOut != nil && st.tool.FanOut.OnError == Stop {
		st.stopped = true
	}
	if o.Status == Interrupted {
		// Every interrupted operation runs again on Resume; the first one
		// asks the checkpoint's question.
		st.pending = append(st.pending, j.op)
		if r.asker == "" {
			r.asker = c.ID
			var ie *InterruptError
			if errors.As(o.Err, &ie) {
				r.question = ie.Question
			}
		}
	}
	last := st.left == 0
	r.mu.Unlock()
	r.emit(Event{Kind: EventFinished, CallID: c.ID, Tool: c.Tool, Operation: j.op, Entry: j.entry, Status: o.Status, Why: errText(o.Err)})
	if o.Status == Interrupted {
		r.halt(errInterrupted) // rule 10: running calls finish, none starts
	} else {
		r.failRun(c, o)
	}
	if last {
		r.finishCall(j.call)
	}
}

// finishCall builds a call's outcome from its operations'.
func (r *run) finishCall(i int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state[i]
	c := r.calls[i]
	if len(st.pending) > 0 {
		return // left for the checkpoint
	}
	if !st.fanned {
		if len(st.results) == 1 && st.results[0] != nil {
			r.outcomes[i] = *st.results[0]
		}
		st.done = true
		return
	}
	o := Outcome{CallID: c.ID, Tool: c.Tool, Status: OK, Tokens: map[string]uint64{}, Stored: len(st.results) > 0}
	outs := make([]string, 0, len(st.results))
	for _, res := range st.results {
		o.Operations = append(o.Operations, *res)
		outs = append(outs, res.Output)
		if o.Status == OK && res.Status != OK {
			o.Status, o.Code, o.Err = res.Status, res.Code, res.Err
		}
		o.Stored = o.Stored && res.Stored
		o.Ran += res.Ran
		if o.Queued == 0 || (res.Queued > 0 && res.Queued < o.Queued) {
			o.Queued = res.Queued
		}
		for k, v := range res.Tokens {
			o.Tokens[k] = max(o.Tokens[k], v)
		}
	}
	js, _ := json.Marshal(outs)
	o.Output = string(js)
	r.outcomes[i] = o
	st.done = true
}
