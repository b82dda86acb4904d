// Package sched runs the tool calls of one model response: independent calls
// together, calls that touch the same state apart and in the order the model
// wrote them. Its rules are DESIGN.md section 5 (after RFD 129); they hold
// the same whether the lanes live in memory or in Redis, since every lane is
// a lanes.Session request.
//
// A call stands in up to five lanes: the turn lane (local, bounding one
// batch), its tenant's, its tool's (Runner.PerTool), its concurrency key's
// (Tool.Concurrency) and one per lock key (Tool.LockKeys). The last four are
// taken as one lanes request, so they are granted together and in written
// order. Lane keys are typed by a prefix (TenantPrefix, ToolPrefix,
// ConcurrencyPrefix, LockPrefix), so a tool's lane never meets a
// concurrency key of the same name. A run narrowed below the runner's
// PerTenant or PerTool (Options.Narrow) also takes lanes of its own
// (RunPrefix), beside the shared ones.
//
// Which calls run together (DESIGN.md section 5, rules 3 and 4): a call is
// a barrier, alone in its phase, when its tool's Safe says no (safe =
// false written out, or a SafeFunc such as a CEL safe_if); a tool with no
// Safe is not a barrier when its ReadOnlyHint is set, or when it declares
// what it conflicts on (a concurrency key or LockKeys): such a tool is
// ordered by its keys only, and calls on other keys and keyless calls run
// beside it. A tool that declares nothing at all is a barrier unless the
// Runner says Unmarked: UnmarkedParallel.
//
// Where the lanes' backend keeps records (lanes.RunStore: the memory and
// Redis backends), each call's outcome is stored by run id and call id as
// it settles, in the same atomic step as the release of its lanes; a run
// started again with the same Options.RunID returns those outcomes
// (Outcome.Stored) without running the calls again, runs the calls that
// never started, and reports a call that was in flight when its process
// stopped as SafeToRetry (an idempotent tool) or Indeterminate, never
// running it again (rule 7). Runner.Retention bounds how long they are
// kept.
//
// For the simple case, Run runs one batch on lanes of its own in memory.
package sched

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lanes-dev/lanes/internal/otelx"
	"github.com/lanes-dev/lanes/lanes"
)

// The prefixes that type lane keys.
const (
	TenantPrefix      = "tenant:"
	ToolPrefix        = "tool:"
	ConcurrencyPrefix = "concurrency:"
	LockPrefix        = "lock:"
	// RunPrefix types the lanes of one run's own: RunPrefix, the run id,
	// "/", and the shared lane's key (run:R/tenant:t), taken where the run
	// narrowed that lane's limit.
	RunPrefix = "run:"
)

// CallInfo is what a LockKeysFunc, and a tool body, can learn of the call
// from its context (CallInfoFrom).
type CallInfo struct {
	RunID     string
	CallID    string
	Tool      string
	Tenant    string
	Operation int    // index of the operation in a fanned-out call, else 0
	Entry     string // the lanes entry id: RunID/CallID, plus #N for an operation
}

type callInfoKey struct{}

func withCallInfo(ctx context.Context, ci CallInfo) context.Context {
	return context.WithValue(ctx, callInfoKey{}, ci)
}

// CallInfoFrom returns the CallInfo that the scheduler put in ctx: the
// context of a LockKeysFunc or of a tool body. ok is false elsewhere.
func CallInfoFrom(ctx context.Context) (ci CallInfo, ok bool) {
	ci, ok = ctx.Value(callInfoKey{}).(CallInfo)
	return ci, ok
}

// Call is one tool invocation of a batch. Its JSON form is {"id", "tool",
// "args"}, with "args_text" in place of "args" for arguments that are not
// JSON (see MarshalJSON).
type Call struct {
	ID   string
	Tool string
	// Args is a JSON object, or for a tool that fans out, an array of
	// objects (one per operation). Arguments that are not JSON, that
	// encoding/json cannot read (more than 10,000 levels deep) or that are
	// of another type fail this call alone, before anything runs (rule 1).
	Args json.RawMessage
}

// Status is how a call ended.
type Status string

// The statuses of an Outcome.
const (
	OK              Status = "ok"
	Failed          Status = "error"            // the tool failed, or the call could not run
	TimedOut        Status = "timed_out"        // the tool outran its own timeout
	NeverDispatched Status = "never_dispatched" // the batch stopped before the call started
	SafeToRetry     Status = "safe_to_retry"    // cancelled in flight; the tool is idempotent
	Indeterminate   Status = "indeterminate"    // cancelled in flight; the side effect may have landed
	Interrupted     Status = "interrupted"      // the tool asked a person and paused the batch
)

// Outcome is what one call ended with. Its JSON form (MarshalJSON) keeps
// Err's message, so a Checkpoint and a run's records survive a JSON round
// trip.
type Outcome struct {
	CallID string
	Tool   string
	Status Status
	// Code says why, in a word that stays the same from release to release
	// (the Code constants); empty for OK.
	Code   Code
	Output string // the tool's result; for a fanned-out call, a JSON list of the operations' results
	// Err says why, for every status but OK. An Outcome read back from
	// JSON (a Checkpoint, a run's records) has an Err with the same message
	// but none of its chain: test Code, not errors.Is, on those.
	Err error
	// Stored reports an outcome read from the run's records, not run now:
	// the call settled in an earlier run with the same run id, or was in
	// flight when that run's process stopped (rule 7).
	Stored bool
	// Queued is how long the call waited before its body started, counted
	// from the batch's dispatch (after approvals): behind earlier phases,
	// for the turn lane and for its lanes. Ran is how long its body ran, or
	// until its outcome was reported (a timeout, a cancellation).
	Queued time.Duration
	Ran    time.Duration
	Tokens map[string]uint64 // fencing token per lane key held
	// Operations holds, for a fanned-out call, one Outcome per operation,
	// in written order.
	Operations []Outcome
}

// Result is what Run returns: one Outcome per call in call order, whatever
// the finish order (DESIGN.md section 5, rule 7). When a tool interrupted
// the batch, Checkpoint is set and the Outcomes of calls that did not run
// yet have an empty Status.
type Result struct {
	Outcomes   []Outcome
	Checkpoint *Checkpoint
}

// Options are the settings of one Run.
type Options struct {
	// RunID names the batch's entries (RunID/CallID, plus #N for an
	// operation) and its records. Running a batch again with the same
	// RunID, after a crash, keeps its calls' places in the queues, returns
	// the outcomes of the calls that settled (Outcome.Stored) without
	// running them again, and reports a call that was in flight as
	// SafeToRetry or Indeterminate (rule 7). Default: a random id.
	RunID string
	// Tenant selects the tenant lane (Runner.PerTenant); empty takes none.
	Tenant string
	// Wait bounds how long each execution waits for its lanes, counted
	// from its enqueue; 0 means as long as the run lasts. One that waits
	// longer leaves every queue and ends Failed with CodeWaitTimeout,
	// having run nothing; the other calls go on.
	Wait time.Duration
	// Narrow is the agent's settings; the run uses Runner.NarrowedTo(*Narrow).
	// Its narrower PerTenant and PerTool limits are lanes of the run's own,
	// beside the shared ones (see Runner.NarrowedTo).
	Narrow *Runner
	// Timeouts sets, per tool name, the timeout of this run's executions
	// in place of Tool.Timeout (0: none). Resume uses the checkpoint's
	// unless its own Options set them.
	Timeouts map[string]time.Duration
	// Rewrite may change a call's arguments before it is scheduled (a
	// middleware: Cogitator's wrapToolCall). It runs one call at a time, in
	// call order, before Approve (rule 2); safety, lock keys, fan-out and
	// the body then work from the arguments it returns. An error fails the
	// call (CodeRewriteFailed) without running it.
	Rewrite func(ctx context.Context, c Call) (json.RawMessage, error)
	// Pause, when it closes, pauses the batch as a tool's Interrupt does:
	// running calls finish, none starts, and the Result has a Checkpoint
	// (without a question) for Resume, when a call was left to run.
	Pause <-chan struct{}
	// Approve runs before any call starts, one call at a time in call order
	// (rule 2). An error declines the call: it ends "error" and holds no one.
	Approve func(ctx context.Context, c Call) error
	// Ask answers a question a tool asks mid-run (see Ask); the call keeps
	// its lanes meanwhile. Questions are asked one at a time.
	Ask func(ctx context.Context, c Call, question string) (string, error)
	// Review may rewrite an outcome. It runs after the call's lanes are
	// free, one call at a time in call order.
	Review func(ctx context.Context, c Call, o Outcome) Outcome
	// OnEvent receives the events of the run, one at a time (rule 12).
	OnEvent func(Event)
}

// Scheduler runs batches on a lanes.Session with one Config. It is safe for
// concurrent use: several batches may run at once and share the lanes.
type Scheduler struct {
	cfg        Config
	session    *lanes.Session
	tracer     otelx.Tracer
	stragglers sync.WaitGroup
}

// New returns a Scheduler for cfg on session. It fails with an error wrapping
// ErrConfig when cfg does not validate.
func New(cfg Config, session *lanes.Session, opts ...Option) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if session == nil {
		return nil, fmt.Errorf("%w: no lanes session", ErrConfig)
	}
	s := &Scheduler{cfg: cfg, session: session, tracer: otelx.GlobalTracer(lanes.ScopeName)}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Wait blocks until every tool body that Run stopped waiting for (cut off by
// its timeout or by the batch's end) has returned and its lanes are released.
func (s *Scheduler) Wait() { s.stragglers.Wait() }

// Run runs calls, the batch of one model response, and returns their
// outcomes in call order. ctx is the run's deadline: when it ends, queued
// calls end never dispatched and in-flight ones are cancelled (rule 8).
//
// Run returns an error only for a batch it cannot start: Options that do
// not validate (ErrConfig), or run records that cannot be read (wrapping
// the backend's error, such as lanes.ErrUnavailable). Duplicate call ids
// are reported per call, not here; every call's fate is in its Outcome.
func (s *Scheduler) Run(ctx context.Context, calls []Call, o Options) (*Result, error) {
	r, err := s.newRun(ctx, calls, o, nil, "")
	if err != nil {
		return nil, err
	}
	ctx, span := s.startBatch(ctx, calls, r.o)
	res, err := r.run(ctx)
	endBatch(span, res)
	return res, err
}

// newRun prepares a run of calls with o, or the rest of checkpoint cp.
func (s *Scheduler) newRun(ctx context.Context, calls []Call, o Options, cp *Checkpoint, answer string) (*run, error) {
	shared := s.cfg.Runner
	runner := shared
	timeouts := o.Timeouts
	if cp != nil {
		// Resume: the checkpoint's settings, unless its own Options set
		// them; never wider than the Scheduler's.
		runner = shared.NarrowedTo(cp.Runner)
		if timeouts == nil {
			timeouts = cp.Timeouts
		}
		switch {
		case o.Tenant == "":
			o.Tenant = cp.Tenant
		case o.Tenant != cp.Tenant:
			return nil, fmt.Errorf("%w: the checkpoint's run is for tenant %q, not %q", ErrConfig, cp.Tenant, o.Tenant)
		}
		o.RunID = cp.RunID
	}
	if o.Narrow != nil {
		runner = shared.NarrowedTo(*o.Narrow)
	}
	if o.Wait < 0 {
		return nil, fmt.Errorf("%w: wait is negative (%v)", ErrConfig, o.Wait)
	}
	for name, d := range timeouts {
		if d < 0 {
			return nil, fmt.Errorf("%w: timeout of %s is negative (%v)", ErrConfig, name, d)
		}
	}
	if o.RunID == "" {
		o.RunID = lanes.NewID()
	}
	if err := lanes.ValidateEntryID(o.RunID); err != nil {
		return nil, fmt.Errorf("%w: run id: %w", ErrConfig, err)
	}
	parent, _ := ctx.Value(invocationKey{}).(*invocation)
	r := &run{
		s: s, o: o, shared: shared, runner: runner, timeouts: timeouts,
		orig: calls, calls: slices.Clone(calls), parent: parent,
		outcomes: make([]Outcome, len(calls)),
		state:    make([]*callState, len(calls)),
		lineage:  lanes.LineageFrom(ctx),
		resumed:  cp,
		answer:   answer,
	}
	return r, nil
}

// Event is one step of a call through the scheduler, for a UI and for
// tracing.
type Event struct {
	Kind      EventKind
	Time      time.Time
	CallID    string
	Tool      string
	Operation int
	Entry     string
	Status    Status            // Settled and Finished
	Why       string            // Settled and Finished, when not OK
	Positions map[string]int    // Queued: place in each lane's queue, from 1
	Tokens    map[string]uint64 // Granted
}

// EventKind names an Event.
type EventKind string

// The kinds of Event, in the order a call meets them.
const (
	EventSettled  EventKind = "settled"  // answered without running: unknown tool, bad arguments, declined
	EventQueued   EventKind = "queued"   // enqueued on its lanes
	EventGranted  EventKind = "granted"  // holds every lane
	EventStarted  EventKind = "started"  // its body runs
	EventFinished EventKind = "finished" // its outcome is known
	EventStored   EventKind = "stored"   // its outcome came from the run's records (Status, Why)
	// EventInterrupted: held back before it started, for the checkpoint,
	// by a pause or another call's question (Status Interrupted, Why the
	// cause); a cancellation during a pause ends it never dispatched after
	// all (a Finished event).
	EventInterrupted EventKind = "interrupted"
)

// errInterrupted is the cause that halts admissions after an interrupt.
var errInterrupted = errors.New("a tool asked a question")

// errPaused is the cause that halts admissions when Options.Pause closes.
var errPaused = errors.New("the batch was paused")
