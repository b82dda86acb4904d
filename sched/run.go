package sched

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// run is one batch in progress.
type run struct {
	s       *Scheduler
	o       Options
	runner  Runner
	calls   []Call
	lineage []string
	resumed *Checkpoint
	answer  string

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
}

func (r *run) run(parent context.Context) (*Result, error) {
	r.ctx, r.fail = context.WithCancelCause(parent)
	r.admit, r.halt = context.WithCancelCause(r.ctx)
	defer r.fail(nil)
	r.start = time.Now()

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
		if why := r.check(c, seen); why != "" {
			r.settle(i, Failed, why)
			continue
		}
		st.tool = r.s.cfg.Tools[c.Tool]
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
				r.settle(i, Failed, "declined: "+err.Error())
				continue
			}
			kept = append(kept, i)
		}
		live = kept
	}

	for _, phase := range r.phases(live) {
		if r.admit.Err() != nil {
			r.abandon(phase)
			continue
		}
		r.runPhase(phase)
	}

	res := &Result{Outcomes: r.outcomes}
	if r.asker != "" {
		res.Checkpoint = r.checkpoint()
	}
	if r.o.Review != nil {
		for i, o := range res.Outcomes {
			if o.Status != "" {
				res.Outcomes[i] = r.o.Review(parent, r.calls[i], o)
			}
		}
	}
	return res, nil
}

// check returns why call c cannot run at all, or "" (rule 1).
func (r *run) check(c Call, seen map[string]bool) string {
	switch {
	case c.ID == "" || lanes.ValidateEntryID(r.o.RunID+"/"+c.ID+"#99999") != nil:
		return fmt.Sprintf("call id %.60q must be printable, without spaces, at most %d bytes with the run id", c.ID, lanes.MaxIDLen-7)
	case seen[c.ID]:
		return fmt.Sprintf("call id %s appears twice in the batch", c.ID)
	case strings.Contains(c.ID, "#"):
		return fmt.Sprintf("call id %s has a #, which marks the operations of a fanned-out call", c.ID)
	}
	seen[c.ID] = true
	t, ok := r.s.cfg.Tools[c.Tool]
	switch {
	case !ok:
		return fmt.Sprintf("unknown tool %q", c.Tool)
	case t.Disabled:
		return fmt.Sprintf("tool %s is disabled", c.Tool)
	}
	return argsProblem(c, t)
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
	if kind := jsonKind(v); kind != "an object" {
		if t.FanOut == nil || kind != "an array" {
			return fmt.Sprintf("arguments of %s must be a JSON object, not %s", c.Tool, kind)
		}
		var ops []json.RawMessage
		_ = json.Unmarshal(v, &ops)
		for i, op := range ops {
			if k := jsonKind(op); k != "an object" {
				return fmt.Sprintf("arguments of %s: operation %d must be a JSON object, not %s", c.Tool, i, k)
			}
		}
	}
	return ""
}

// jsonKind names the type of the JSON value v, with an article.
func jsonKind(v json.RawMessage) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
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

// safe reports whether call i may share its phase: the tool's Safe, else its
// read-only hint; an error from Safe means unsafe.
func (r *run) safe(i int) bool {
	t := r.state[i].tool
	if t.Safe == nil {
		return t.ReadOnlyHint
	}
	ok, err := t.Safe(r.calls[i].Args)
	return err == nil && ok
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
		if r.admit.Err() == nil && next < len(phase) && active < r.turn() {
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

// enqueue works out the lanes of the admitted jobs and enqueues them in one
// step, in written order; each then waits for its grant on a goroutine.
// Each job sends on done once it frees its turn slot.
func (r *run) enqueue(jobs []job, done chan<- struct{}) {
	var reqs []lanes.Request
	var ready []job
	for _, j := range jobs {
		lns, err := r.lanesOf(j)
		if err == nil && r.admit.Err() != nil {
			err = context.Cause(r.admit) // ended while it worked out its keys: never runs
		}
		if err != nil {
			r.notStarted(j, err)
			done <- struct{}{}
			continue
		}
		c := r.calls[j.call]
		reqs = append(reqs, lanes.Request{ID: j.entry, Lanes: lns, Lineage: r.lineage, CallID: c.ID, Tool: c.Tool, Tenant: r.o.Tenant})
		ready = append(ready, j)
	}
	// In written order, in as few steps as lanes allows per step.
	for len(reqs) > 0 {
		n := stepSize(reqs)
		r.enqueueStep(reqs[:n], ready[:n], done)
		reqs, ready = reqs[n:], ready[n:]
	}
}

// stepSize is how many of reqs, from the first, fit in one Enqueue step.
func stepSize(reqs []lanes.Request) int {
	n, lns := 0, 0
	for n < len(reqs) && n < lanes.MaxStepRequests && lns+len(reqs[n].Lanes) <= lanes.MaxStepLanes {
		lns += len(reqs[n].Lanes)
		n++
	}
	return max(n, 1)
}

// enqueueStep enqueues reqs, the requests of ready, in one step. A limit
// disagreement fails only the calls naming the key in question (rule 8:
// failure is per call); the others are enqueued again without them.
func (r *run) enqueueStep(reqs []lanes.Request, ready []job, done chan<- struct{}) {
	tickets, err := r.s.session.Enqueue(r.admit, reqs...)
	var lm *lanes.LimitMismatchError
	if errors.As(err, &lm) {
		var keepReqs []lanes.Request
		var keepJobs []job
		for k, q := range reqs {
			if slices.ContainsFunc(q.Lanes, func(l lanes.Lane) bool { return l.Key == lm.Key }) {
				r.notStarted(ready[k], err)
				done <- struct{}{}
				continue
			}
			keepReqs, keepJobs = append(keepReqs, q), append(keepJobs, ready[k])
		}
		if len(keepReqs) > 0 {
			r.enqueueStep(keepReqs, keepJobs, done)
		}
		return
	}
	if err != nil {
		for _, j := range ready {
			r.notStarted(j, err)
			done <- struct{}{}
		}
		return
	}
	for k, j := range ready {
		r.emit(Event{Kind: EventQueued, CallID: r.calls[j.call].ID, Tool: r.calls[j.call].Tool, Operation: j.op, Entry: j.entry, Positions: tickets[k].Positions()})
		go r.exec(j, tickets[k], done)
	}
}

// lanesOf returns the lanes of job j: tenant, tool, concurrency key and lock
// keys, typed by prefix, those with limit 0 left out.
func (r *run) lanesOf(j job) ([]lanes.Lane, error) {
	c, t := r.calls[j.call], r.state[j.call].tool
	var out []lanes.Lane
	if r.o.Tenant != "" && r.runner.PerTenant > 0 {
		out = append(out, lanes.Lane{Key: TenantPrefix + r.o.Tenant, Limit: r.runner.PerTenant})
	}
	if n := r.runner.PerTool[c.Tool]; n > 0 {
		out = append(out, lanes.Lane{Key: ToolPrefix + c.Tool, Limit: n})
	}
	if k, limit := t.Concurrency.key(c.Tool); k != "" {
		out = append(out, lanes.Lane{Key: ConcurrencyPrefix + k, Limit: limit})
	}
	if t.LockKeys != nil {
		keys, err := safeLockKeys(t.LockKeys, r.admit, r.state[j.call].ops[j.op])
		if err != nil {
			return nil, fmt.Errorf("could not tell what the call changes: %w", err)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 && k == keys[i-1] {
				continue
			}
			if err := lanes.ValidateKey(LockPrefix + k); err != nil {
				return nil, fmt.Errorf("could not tell what the call changes: lock key %q: %w", k, err)
			}
			out = append(out, lanes.Lane{Key: LockPrefix + k, Limit: 1})
		}
	}
	return out, nil
}

// exec waits for j's grant, runs its body and settles its outcome.
func (r *run) exec(j job, t *lanes.Ticket, done chan<- struct{}) {
	c := r.calls[j.call]
	st := r.state[j.call]
	lease, err := t.Wait(r.admit)
	if err == nil && (r.admit.Err() != nil || r.stopped(j.call)) {
		_ = lease.Release(context.Background()) // granted as the batch or call stopped: it never runs
		err = errStopped
	}
	if err != nil {
		r.notStarted(j, err)
		done <- struct{}{}
		return
	}
	r.emit(Event{Kind: EventGranted, CallID: c.ID, Tool: c.Tool, Operation: j.op, Entry: j.entry, Tokens: lease.Tokens()})

	// The lease ends before the body only when it is lost or its Session
	// closed: then the body must stop, as its lanes are no longer held.
	body, cancel := context.WithCancelCause(r.ctx)
	unhook := context.AfterFunc(lease.Context(), func() { cancel(context.Cause(lease.Context())) })
	body, span := r.s.startTool(body, lease.Context(), c, j.op)
	body = lanes.WithLineage(body, append(r.lineage, j.entry))
	self := &invocation{r: r, j: j}
	body = context.WithValue(body, invocationKey{}, self)
	// A nested run keeps its parent's lanes held until this body returns,
	// since it may be spending them by re-entry (DESIGN.md invariant 10).
	nested := r.parent != nil && r.parent.children.enter()
	limit := body
	stopTimer := func() bool { return true }
	if st.tool.Timeout > 0 {
		var c2 context.CancelFunc
		limit, c2 = context.WithTimeoutCause(body, st.tool.Timeout, errToolTimeout)
		stopTimer = func() bool { c2(); return true }
	}
	inv := Invocation{
		CallID: c.ID, Tool: c.Tool, Args: st.ops[j.op], Operation: j.op, Tenant: r.o.Tenant, Entry: j.entry, Tokens: lease.Tokens(),
		Lost: lease.Lost(), OnLost: lease.OnLost, Deadline: lease.Deadline, Margin: lease.Margin(),
	}
	started := time.Now()
	r.emit(Event{Kind: EventStarted, CallID: c.ID, Tool: c.Tool, Operation: j.op, Entry: j.entry})

	type result struct {
		out string
		err error
	}
	results := make(chan result, 1)
	go func() {
		out, err := safeRun(st.tool.Run, limit, inv)
		results <- result{out, err}
	}()
	cleanup := func() {
		stopTimer()
		self.children.wait() // its own nested runs' bodies end first
		unhook()
		cancel(nil)
		_ = lease.Release(context.Background())
		if nested {
			r.parent.children.leave()
		}
	}
	base := Outcome{CallID: c.ID, Tool: c.Tool, Queued: started.Sub(r.start), Tokens: lease.Tokens()}

	// outcome classifies how the body ended: a body stopped by its timeout,
	// by the end of its batch or by a lost lane reports that, whether it
	// returned an error or had not returned yet.
	outcome := func(res *result) Outcome {
		o := base
		o.Ran = time.Since(started)
		var ie *InterruptError
		switch {
		case res != nil && res.err == nil:
			o.Status, o.Output = OK, res.out
		case res != nil && errors.As(res.err, &ie):
			o.Status, o.Err = Interrupted, res.err
		case limit.Err() != nil && errors.Is(context.Cause(limit), errToolTimeout):
			o.Status = TimedOut
			o.Err = fmt.Errorf("tool %s timed out: it ran past its ceiling of %v", c.Tool, st.tool.Timeout)
		case limit.Err() != nil:
			o.Status, o.Err = r.inFlight(st.tool, context.Cause(limit))
		default:
			o.Status, o.Err, o.Output = Failed, res.err, res.out
		}
		return o
	}

	settle := func(o Outcome) {
		endTool(span, o)
		r.settleOp(j, o)
	}
	select {
	case res := <-results:
		// Settled before the lanes are released, so the next holder sees a
		// failure's consequences (fan-out stop, fail_run) when it starts.
		settle(outcome(&res))
		cleanup()
	case <-limit.Done():
		select {
		case res := <-results:
			settle(outcome(&res))
			cleanup()
		default:
			// Reported at once; the lanes stay held until the body returns (rule 6).
			settle(outcome(nil))
			r.s.stragglers.Add(1)
			go func() {
				defer r.s.stragglers.Done()
				<-results
				cleanup()
			}()
		}
	}
	done <- struct{}{}
}

// inFlight is the outcome of a body cut off by the end of its batch (rule 8).
func (r *run) inFlight(t Tool, cause error) (Status, error) {
	if t.Idempotent {
		return SafeToRetry, fmt.Errorf("cancelled in flight (%v): safe to call again", cause)
	}
	return Indeterminate, fmt.Errorf("cancelled in flight (%v): indeterminate: the side effect may have landed", cause)
}

// notStarted settles a job that never started: its batch stopped, its call
// stopped at an earlier operation's failure, or its lanes failed it.
func (r *run) notStarted(j job, err error) {
	r.mu.Lock()
	interrupted := r.asker != "" && r.ctx.Err() == nil
	r.mu.Unlock()
	c := r.calls[j.call]
	o := Outcome{CallID: c.ID, Tool: c.Tool}
	switch {
	case interrupted:
		r.mu.Lock()
		st := r.state[j.call]
		st.pending = append(st.pending, j.op)
		r.mu.Unlock()
		return
	case r.ctx.Err() != nil:
		o.Status, o.Err = NeverDispatched, fmt.Errorf("never dispatched: %v", context.Cause(r.ctx))
	case r.stopped(j.call):
		o.Status, o.Err = NeverDispatched, fmt.Errorf("never dispatched: an earlier operation of call %s failed", c.ID)
	default:
		o.Status, o.Err = Failed, err
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
func (r *run) settle(i int, s Status, why string) {
	c := r.calls[i]
	r.mu.Lock()
	r.outcomes[i] = Outcome{CallID: c.ID, Tool: c.Tool, Status: s, Err: errors.New(why)}
	r.state[i].done = true
	r.mu.Unlock()
	r.emit(Event{Kind: EventSettled, CallID: c.ID, Tool: c.Tool, Status: s, Why: why})
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
	ev := Event{Kind: EventFinished, CallID: c.ID, Tool: c.Tool, Operation: j.op, Entry: j.entry, Status: o.Status}
	if o.Err != nil {
		ev.Why = o.Err.Error()
	}
	r.emit(ev)
	switch {
	case o.Status == Interrupted:
		r.halt(errInterrupted) // rule 10: running calls finish, none starts
	case bad && o.Status != NeverDispatched && r.runner.OnToolError == FailRun:
		r.fail(fmt.Errorf("call %s (%s) failed and on_tool_error is fail_run: %v", c.ID, c.Tool, o.Err))
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
	o := Outcome{CallID: c.ID, Tool: c.Tool, Status: OK, Tokens: map[string]uint64{}}
	outs := make([]string, 0, len(st.results))
	for _, res := range st.results {
		o.Operations = append(o.Operations, *res)
		outs = append(outs, res.Output)
		if o.Status == OK && res.Status != OK {
			o.Status, o.Err = res.Status, res.Err
		}
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
