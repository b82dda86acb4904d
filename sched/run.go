package sched

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/lanes-dev/lanes/internal/jsonkind"
	"github.com/lanes-dev/lanes/lanes"
)

// run is one batch in progress.
type run struct {
	s        *Scheduler
	o        Options
	shared   Runner // the Scheduler's: the limits of the shared lanes
	runner   Runner // shared narrowed by the agent's: this run's own bounds
	orig     []Call // the calls as given
	calls    []Call // the same after Options.Rewrite
	timeouts map[string]time.Duration
	lineage  []string
	resumed  *Checkpoint
	answer   string

	recording bool              // the backend keeps the run's records
	recs      map[string]record // the records read at the start, by field
	digests   []string          // per call, argsDigest once worked out (under mu)

	// ctx ends when the batch fails (FailRun) or its caller's context ends:
	// in-flight bodies are cancelled. admit is ctx's child that also ends at
	// an interrupt: no call starts, running ones finish.
	ctx      context.Context
	fail     context.CancelCauseFunc
	admit    context.Context
	halt     context.CancelCauseFunc
	start    time.Time
	askMu    sync.Mutex
	evMu     sync.Mutex
	mu       sync.Mutex
	state    []*callState
	outcomes []Outcome
	asker    string // call id of the interrupting call
	question string
	paused   bool        // Options.Pause closed
	parent   *invocation // the tool body this run is nested in, if any
}

// callState tracks one call's operations.
type callState struct {
	tool    Tool
	ops     []json.RawMessage
	fanned  bool
	results []*Outcome // per operation; nil until settled
	left    int        // operations not settled
	pending []int      // operations left for a checkpoint
	stopped bool       // on_error = "stop" and an operation failed
	done    bool
}

// job is one execution: a call, or one operation of a fanned-out call.
type job struct {
	call  int
	op    int
	entry string
	req   lanes.Request // its lanes request, once worked out
}

func (r *run) run(parent context.Context) (*Result, error) {
	r.ctx, r.fail = context.WithCancelCause(parent)
	r.admit, r.halt = context.WithCancelCause(r.ctx)
	defer r.fail(nil)
	r.start = time.Now()
	if err := r.loadRecords(parent); err != nil {
		return nil, err
	}
	defer r.watchPause()()

	var live []int // calls that will run, in call order
	seen := map[string]bool{}
	for i, c := range r.calls {
		st := &callState{}
		r.state[i] = st
		if r.resumed != nil && !r.resumed.toRun(i) {
			r.outcomes[i] = r.resumed.Outcomes[i]
			st.done = true
			continue
		}
		if code, why := r.checkID(c, seen); why != "" {
			r.settle(i, Failed, code, why)
			continue
		}
		// A call of this run id settled before keeps its stored outcome
		// though its tool is no longer configured (a resume with another
		// tools file): told "unknown tool", a model would call it again.
		st.tool = r.s.cfg.Tools[c.Tool]
		if st.tool.FanOut == nil || jsonkind.Of(c.Args) != "an array" {
			if o := r.fromRecord(i, c.ID); o != nil {
				r.settleStored(i, *o)
				continue
			}
		}
		if code, why := r.checkTool(c); why != "" {
			r.settle(i, Failed, code, why)
			continue
		}
		if !r.prepare(i) {
			continue
		}
		if st.left == 0 {
			r.finishCall(i)
			continue
		}
		live = append(live, i)
	}

	// Rule 2: approvals one at a time, in call order, before anything runs.
	if r.o.Approve != nil {
		kept := live[:0]
		for _, i := range live {
			if err := r.o.Approve(r.ctx, r.calls[i]); err != nil {
				r.settle(i, Failed, CodeDeclined, "declined: "+err.Error())
				continue
			}
			kept = append(kept, i)
		}
		live = kept
	}

	for _, phase := range r.phases(live) {
		if r.pollPause(); r.admit.Err() != nil {
			r.abandon(phase)
			continue
		}
		r.runPhase(phase)
	}

	r.cancelPaused()
	res := &Result{Outcomes: r.outcomes}
	res.Checkpoint = r.checkpoint()
	if r.o.Review != nil {
		for i, o := range res.Outcomes {
			if o.Status != "" {
				res.Outcomes[i] = r.o.Review(parent, r.calls[i], o)
			}
		}
	}
	return res, nil
}

// prepare makes call i ready to run: Options.Rewrite, the check of its
// arguments, its operations, and those of them a checkpoint or the run's
// records settled already. It reports false when it settled the call.
func (r *run) prepare(i int) bool {
	st := r.state[i]
	if r.o.Rewrite != nil {
		args, err := safeRewrite(r.o.Rewrite, r.ctx, r.calls[i])
		if err != nil {
			r.settle(i, Failed, CodeRewriteFailed, fmt.Sprintf("rewriting the call failed: %v", err))
			return false
		}
		r.calls[i].Args = args
	}
	c := r.calls[i]
	if why := argsProblem(c, st.tool); why != "" {
		r.settle(i, Failed, CodeBadArguments, why)
		return false
	}
	st.ops = []json.RawMessage{c.Args}
	if st.tool.FanOut != nil {
		var ops []json.RawMessage
		if json.Unmarshal(c.Args, &ops) == nil {
			st.ops, st.fanned = ops, true
		}
	}
	st.results = make([]*Outcome, len(st.ops))
	st.left = len(st.ops)
	if r.resumed != nil && r.resumed.Outcomes[i].Status == Interrupted {
		// Part of a fanned-out call ran before the interrupt.
		for op, o := range r.resumed.Outcomes[i].Operations {
			if o.Status != "" && op < len(st.results) {
				oc := o
				st.results[op] = &oc
				st.left--
			}
		}
	}
	if st.fanned {
		for op := range st.ops {
			if st.results[op] != nil {
				continue
			}
			o := r.fromRecord(i, r.recordField(i, op))
			switch {
			case o == nil:
				continue
			case o.Code == CodeRunConflict:
				r.settle(i, Failed, CodeRunConflict, o.Err.Error())
				return false
			}
			st.results[op] = o
			st.left--
			if o.Status != OK && o.Status != Interrupted && st.tool.FanOut.OnError == Stop {
				// An operation that failed in an earlier process of the
				// run (found in flight: indeterminate) stops the call
				// again: no operation starts after it (rule 9).
				st.stopped = true
			}
			r.emit(Event{Kind: EventStored, CallID: c.ID, Tool: c.Tool, Operation: op, Status: o.Status, Why: errText(o.Err)})
		}
	}
	return true
}

// checkID returns why call c's id cannot be used, and its code, or ""
// (rule 1).
func (r *run) checkID(c Call, seen map[string]bool) (Code, string) {
	switch {
	case c.ID == "" || lanes.ValidateEntryID(r.o.RunID+"/"+c.ID+"#99999") != nil:
		return CodeBadCallID, fmt.Sprintf("call id %.60q must be printable, without spaces, at most %d bytes with the run id", c.ID, lanes.MaxIDLen-7)
	case seen[c.ID]:
		return CodeBadCallID, fmt.Sprintf("call id %s appears twice in the batch", c.ID)
	case strings.Contains(c.ID, "#"):
		return CodeBadCallID, fmt.Sprintf("call id %s has a #, which marks the operations of a fanned-out call", c.ID)
	}
	seen[c.ID] = true
	return "", ""
}

// checkTool returns why call c cannot run at all, its tool unknown or
// disabled, and its code, or "" (rule 1).
func (r *run) checkTool(c Call) (Code, string) {
	t, ok := r.s.cfg.Tools[c.Tool]
	switch {
	case !ok:
		return CodeUnknownTool, fmt.Sprintf("unknown tool %q", c.Tool)
	case t.Disabled:
		return CodeDisabled, fmt.Sprintf("tool %s is disabled", c.Tool)
	}
	return "", ""
}

// argsProblem says why a call's arguments cannot be used, or "": they must
// be a JSON object, or for a tool that fans out an array of objects (one
// per operation), that encoding/json reads (at most 10,000 levels deep).
func argsProblem(c Call, t Tool) string {
	var v json.RawMessage
	if err := json.Unmarshal(c.Args, &v); err != nil {
		if strings.Contains(err.Error(), "exceeded max depth") {
			return fmt.Sprintf("arguments of %s are nested more than 10000 levels deep", c.Tool)
		}
		return fmt.Sprintf("arguments of %s are not JSON: %.80q", c.Tool, string(c.Args))
	}
	if kind := jsonkind.Of(v); kind != "an object" {
		if t.FanOut == nil || kind != "an array" {
			return fmt.Sprintf("arguments of %s must be a JSON object, not %s", c.Tool, kind)
		}
		var ops []json.RawMessage
		_ = json.Unmarshal(v, &ops)
		for i, op := range ops {
			if k := jsonkind.Of(op); k != "an object" {
				return fmt.Sprintf("arguments of %s: operation %d must be a JSON object, not %s", c.Tool, i, k)
			}
		}
	}
	return ""
}

// phases splits the live calls into phases (rule 3): consecutive safe calls
// share one, an unsafe call is one of its own. Without parallel tool calls,
// all are one phase that admits one execution at a time.
func (r *run) phases(live []int) [][]job {
	var out [][]job
	var cur []job
	flush := func() {
		if len(cur) > 0 {
			out = append(out, cur)
			cur = nil
		}
	}
	for _, i := range live {
		jobs := r.jobs(i)
		if r.runner.Sequential {
			cur = append(cur, jobs...)
			continue
		}
		if r.safe(i) {
			cur = append(cur, jobs...)
			continue
		}
		flush()
		cur = jobs
		flush()
	}
	flush()
	return out
}

func (r *run) jobs(i int) []job {
	st := r.state[i]
	var out []job
	for op := range st.ops {
		if st.results[op] != nil {
			continue
		}
		entry := r.o.RunID + "/" + r.calls[i].ID
		if st.fanned {
			entry += fmt.Sprintf("#%d", op)
		}
		out = append(out, job{call: i, op: op, entry: entry})
	}
	return out
}

// safe reports whether call i may share its phase (DESIGN.md section 5):
// the tool's Safe when set (an error or a panic means unsafe); else its
// read-only hint; else a tool that declares what it conflicts on is
// ordered by its keys only; else the runner's Unmarked decides.
func (r *run) safe(i int) bool {
	t := r.state[i].tool
	switch {
	case t.Safe != nil:
		ok, err := safeSafe(t.Safe, r.calls[i].Args)
		return err == nil && ok
	case t.ReadOnlyHint, t.declaresKeys():
		return true
	default:
		return r.runner.Unmarked == UnmarkedParallel
	}
}

// turn is the size of the turn lane for this run.
func (r *run) turn() int {
	if r.runner.Sequential {
		return 1
	}
	return r.runner.turn()
}

// runPhase admits the phase's jobs to the turn lane in written order (rule
// 4): those admitted together are enqueued on their lanes in one step. It
// returns when every admitted job has freed its turn slot.
func (r *run) runPhase(phase []job) {
	done := make(chan struct{}, len(phase))
	next, active := 0, 0
	for {
		if r.pollPause(); r.admit.Err() == nil && next < len(phase) && active < r.turn() {
			n := min(r.turn()-active, len(phase)-next)
			active += n
			r.enqueue(phase[next:next+n], done)
			next += n
			continue
		}
		if active == 0 {
			break
		}
		<-done
		active--
	}
	r.abandon(phase[next:])
}

// emit delivers one event, one at a time.
func (r *run) emit(e Event) {
	if r.o.OnEvent == nil {
		return
	}
	e.Time = time.Now()
	r.evMu.Lock()
	defer r.evMu.Unlock()
	r.o.OnEvent(e)
}
