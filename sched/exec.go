package sched

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// enqueue works out the lanes of the admitted jobs and enqueues them in one
// step, in written order; each then waits for its grant on a goroutine.
// Each job sends on done once it frees its turn slot.
func (r *run) enqueue(jobs []job, done chan<- struct{}) {
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
		j.req = lanes.Request{ID: j.entry, Lanes: lns, Lineage: r.lineage, CallID: c.ID, Tool: c.Tool, Tenant: r.o.Tenant}
		ready = append(ready, j)
	}
	// In written order, in as few steps as lanes allows per step.
	for len(ready) > 0 {
		n := stepSize(ready)
		r.enqueueStep(ready[:n], done)
		ready = ready[n:]
	}
}

// stepSize is how many of jobs, from the first, fit in one Enqueue step.
func stepSize(jobs []job) int {
	n, lns := 0, 0
	for n < len(jobs) && n < lanes.MaxStepRequests && lns+len(jobs[n].req.Lanes) <= lanes.MaxStepLanes {
		lns += len(jobs[n].req.Lanes)
		n++
	}
	return max(n, 1)
}

// enqueueStep enqueues the requests of ready in one step. A limit
// disagreement fails only the calls naming the key in question (rule 8:
// failure is per call); the others are enqueued again without them.
func (r *run) enqueueStep(ready []job, done chan<- struct{}) {
	reqs := make([]lanes.Request, len(ready))
	for k, j := range ready {
		reqs[k] = j.req
	}
	tickets, err := r.s.session.Enqueue(r.admit, reqs...)
	var lm *lanes.LimitMismatchError
	if errors.As(err, &lm) {
		var keep []job
		for _, j := range ready {
			if slices.ContainsFunc(j.req.Lanes, func(l lanes.Lane) bool { return l.Key == lm.Key }) {
				r.notStarted(j, err)
				done <- struct{}{}
				continue
			}
			keep = append(keep, j)
		}
		if len(keep) > 0 {
			r.enqueueStep(keep, done)
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
// keys, typed by prefix, those with limit 0 left out. The tenant and tool
// lanes are the shared ones, with the Scheduler's limits; where the agent
// narrowed them, the run also takes a lane of its own (RunPrefix) with the
// narrower limit, so that narrowing never meets another run's limit.
func (r *run) lanesOf(j job) ([]lanes.Lane, error) {
	c, t := r.calls[j.call], r.state[j.call].tool
	var out []lanes.Lane
	if r.o.Tenant != "" {
		if n := r.shared.PerTenant; n > 0 {
			out = append(out, lanes.Lane{Key: TenantPrefix + r.o.Tenant, Limit: n})
		}
		if n := r.runner.PerTenant; narrower(n, r.shared.PerTenant) {
			out = append(out, lanes.Lane{Key: r.ownKey(TenantPrefix + r.o.Tenant), Limit: n})
		}
	}
	if n := r.shared.PerTool[c.Tool]; n > 0 {
		out = append(out, lanes.Lane{Key: ToolPrefix + c.Tool, Limit: n})
	}
	if n := r.runner.PerTool[c.Tool]; narrower(n, r.shared.PerTool[c.Tool]) {
		out = append(out, lanes.Lane{Key: r.ownKey(ToolPrefix + c.Tool), Limit: n})
	}
	rl, rated, err := rateLane(withCallInfo(r.admit, r.info(j)), t, c.Tool, r.state[j.call].ops[j.op])
	if err != nil {
		return nil, err
	}
	if k, limit := t.Concurrency.key(c.Tool); k != "" {
		l := lanes.Lane{Key: ConcurrencyPrefix + k, Limit: limit}
		if rated && rl.Key == l.Key { // one key, its limit and its rate
			l.Rate, l.Cost, rated = rl.Rate, rl.Cost, false
		}
		out = append(out, l)
	}
	if rated {
		out = append(out, rl)
	}
	if t.LockKeys != nil {
		ctx := withCallInfo(r.admit, r.info(j))
		keys, err := safeLockKeys(t.LockKeys, ctx, r.state[j.call].ops[j.op])
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errLockKeys, err)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 && k == keys[i-1] {
				continue
			}
			if err := lanes.ValidateKey(LockPrefix + k); err != nil {
				return nil, fmt.Errorf("%w: lock key %q: %w", errLockKeys, k, err)
			}
			out = append(out, lanes.Lane{Key: LockPrefix + k, Limit: 1})
		}
	}
	return out, nil
}

// narrower reports whether a run's limit n bounds more than the shared
// one, where 0 is unbounded.
func narrower(n, shared int) bool { return n > 0 && (shared <= 0 || n < shared) }

// ownKey is the key of this run's own lane beside the shared lane key:
// RunPrefix, the run id, "/" and key; when that is longer than a key may
// be, the run id and key are replaced by their SHA-256.
func (r *run) ownKey(key string) string {
	k := RunPrefix + r.o.RunID + "/" + key
	if len(k) <= lanes.MaxKeyLen {
		return k
	}
	sum := sha256.Sum256([]byte(r.o.RunID + "/" + key))
	return RunPrefix + hex.EncodeToString(sum[:])
}

// info is the CallInfo of job j.
func (r *run) info(j job) CallInfo {
	c := r.calls[j.call]
	return CallInfo{RunID: r.o.RunID, CallID: c.ID, Tool: c.Tool, Tenant: r.o.Tenant, Operation: j.op, Entry: j.entry}
}

// timeout is the timeout of the executions of tool t named name in this
// run: Options.Timeouts, else the tool's.
func (r *run) timeout(name string, t Tool) time.Duration {
	if d, ok := r.timeouts[name]; ok {
		return d
	}
	return t.Timeout
}

// wait waits for j's grant. When another owner holds j's entry (an earlier
// process of this run that stopped between its grant and its record of the
// start, or that still runs the call), it waits for that lease to end and
// enqueues again; once granted so, it reads the call's record again, and
// returns the outcome it holds, if any, instead of a lease.
//
// With Options.Wait, the wait ends that long after it began: the entry
// leaves every queue and the error wraps errWaitTimeout.
func (r *run) wait(j job, t *lanes.Ticket) (*lanes.Lease, *Outcome, error) {
	if r.o.Wait <= 0 {
		return r.waitUntil(r.admit, j, t)
	}
	waitCtx, cancel := context.WithTimeoutCause(r.admit, r.o.Wait, errWaitTimeout)
	defer cancel()
	lease, o, err := r.waitUntil(waitCtx, j, t)
	if err != nil && r.admit.Err() == nil && errors.Is(context.Cause(waitCtx), errWaitTimeout) {
		return nil, nil, fmt.Errorf("%w: it waited %v for its lanes (%w)", errWaitTimeout, r.o.Wait, err)
	}
	return lease, o, err
}

// waitUntil is wait, its waits for the grant bounded by waitCtx.
func (r *run) waitUntil(waitCtx context.Context, j job, t *lanes.Ticket) (*lanes.Lease, *Outcome, error) {
	retried := false
	pause := 10 * time.Millisecond // then doubling, up to a second or the Session's margin
	for {
		lease, err := t.Wait(waitCtx)
		if errors.Is(err, lanes.ErrNotHolder) && waitCtx.Err() == nil {
			timer := time.NewTimer(pause)
			pause = min(2*pause, max(min(r.s.session.Margin(), time.Second), 10*time.Millisecond))
			select {
			case <-timer.C:
			case <-waitCtx.Done():
				timer.Stop()
				return nil, nil, context.Cause(waitCtx)
			}
			ts, err := r.s.session.Enqueue(waitCtx, j.req)
			if err != nil {
				return nil, nil, err
			}
			t, retried = ts[0], true
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if r.pollPause(); r.admit.Err() != nil || r.stopped(j.call) {
			_ = lease.Release(context.Background()) // granted as the batch or call stopped: it never runs
			return nil, nil, errStopped
		}
		if retried {
			if o := r.reread(r.admit, j); o != nil {
				_ = lease.Release(context.Background())
				return nil, o, nil
			}
		}
		return lease, nil, nil
	}
}

// exec waits for j's grant, runs its body and settles its outcome.
func (r *run) exec(j job, t *lanes.Ticket, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	c := r.calls[j.call]
	st := r.state[j.call]
	lease, stored, err := r.wait(j, t)
	switch {
	case stored != nil:
		r.emit(Event{Kind: EventStored, CallID: c.ID, Tool: c.Tool, Operation: j.op, Entry: j.entry, Status: stored.Status, Why: errText(stored.Err)})
		r.settleOp(j, *stored)
		return
	case err != nil:
		r.notStarted(j, err)
		return
	}
	r.emit(Event{Kind: EventGranted, CallID: c.ID, Tool: c.Tool, Operation: j.op, Entry: j.entry, Tokens: lease.Tokens()})
	rctx, rcancel := context.WithCancel(r.ctx) // the record ends with the batch or the lease
	unhookRecord := context.AfterFunc(lease.Context(), rcancel)
	err = r.recordStart(rctx, j.call, j.op)
	unhookRecord()
	rcancel()
	if err != nil {
		_ = lease.Release(context.Background())
		r.settleOp(j, Outcome{CallID: c.ID, Tool: c.Tool, Status: Failed, Code: codeOf(err), Err: err})
		return
	}

	// The lease ends before the body only when it is lost or its Session
	// closed: then the body must stop, as its lanes are no longer held.
	body, cancel := context.WithCancelCause(r.ctx)
	unhook := context.AfterFunc(lease.Context(), func() { cancel(context.Cause(lease.Context())) })
	body, span := r.s.startTool(body, lease.Context(), c, j.op)
	body = lanes.WithLineage(body, append(r.lineage, j.entry))
	body = withCallInfo(body, r.info(j))
	self := &invocation{r: r, j: j}
	body = context.WithValue(body, invocationKey{}, self)
	// A nested run keeps its parent's lanes held until this body returns,
	// since it may be spending them by re-entry (DESIGN.md invariant 10).
	nested := r.parent != nil && r.parent.children.enter()
	limit := body
	stopTimer := func() {}
	ceiling := r.timeout(c.Tool, st.tool)
	if ceiling > 0 {
		var c2 context.CancelFunc
		limit, c2 = context.WithTimeoutCause(body, ceiling, errToolTimeout)
		stopTimer = c2
	}
	inv := Invocation{
		RunID: r.o.RunID, CallID: c.ID, Tool: c.Tool, Args: st.ops[j.op], Operation: j.op, Tenant: r.o.Tenant, Entry: j.entry, Tokens: lease.Tokens(),
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
	var settled *Outcome // what was reported, recorded with the release
	cleanup := func() {
		stopTimer()
		self.children.wait() // its own nested runs' bodies end first
		unhook()
		cancel(nil)
		r.release(lease, j, settled)
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
			o.Status, o.Code, o.Err = Interrupted, CodeInterrupted, res.err
		case limit.Err() != nil && errors.Is(context.Cause(limit), errToolTimeout):
			o.Status, o.Code = TimedOut, CodeTimeout
			o.Err = fmt.Errorf("tool %s timed out: it ran past its ceiling of %v", c.Tool, ceiling)
		case limit.Err() != nil:
			o.Status, o.Code, o.Err = r.inFlight(st.tool, context.Cause(limit))
		case res != nil && lease.Context().Err() != nil:
			// Lost while it ran: the lease's context is done before anything
			// OnLost registered runs (a command's guard kills it), so a body
			// that returned for that reason finds it done, even before the
			// body's own context hears of it.
			o.Status, o.Code, o.Err = r.inFlight(st.tool, context.Cause(lease.Context()))
		default:
			o.Status, o.Code, o.Err, o.Output = Failed, CodeToolError, res.err, res.out
		}
		return o
	}

	settle := func(o Outcome) {
		settled = &o
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
}

// inFlight is the outcome of a body cut off by the end of its batch (rule 8).
func (r *run) inFlight(t Tool, cause error) (Status, Code, error) {
	if t.Idempotent {
		return SafeToRetry, CodeSafeToRetry, fmt.Errorf("cancelled in flight (%v)", cause)
	}
	return Indeterminate, CodeIndeterminate, fmt.Errorf("cancelled in flight (%v)", cause)
}
