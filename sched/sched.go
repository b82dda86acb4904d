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
// concurrency key of the same name.
package sched

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
)

// Call is one tool invocation of a batch.
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

// Outcome is what one call ended with.
type Outcome struct {
	CallID string
	Tool   string
	Status Status
	Output string // the tool's result; for a fanned-out call, a JSON list of the operations' results
	Err    error  // why, for every status but OK
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
	// operation). Running a batch again with the same RunID, after a crash,
	// keeps its calls' places in the queues. Default: a random id.
	RunID string
	// Tenant selects the tenant lane (Runner.PerTenant); empty takes none.
	Tenant string
	// Narrow is the agent's settings; the run uses Runner.NarrowedTo(*Narrow).
	Narrow *Runner
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
// Run returns an error only for a batch it cannot start (duplicate call ids
// are reported per call, not here); every call's fate is in its Outcome.
func (s *Scheduler) Run(ctx context.Context, calls []Call, o Options) (*Result, error) {
	r := s.newRun(ctx, calls, o, nil, "")
	ctx, span := s.startBatch(ctx, calls, r.o)
	res, err := r.run(ctx)
	endBatch(span, res)
	return res, err
}

func (s *Scheduler) newRun(ctx context.Context, calls []Call, o Options, cp *Checkpoint, answer string) *run {
	runner := s.cfg.Runner
	if o.Narrow != nil {
		runner = runner.NarrowedTo(*o.Narrow)
	}
	if cp != nil {
		runner = cp.Runner
		o.RunID = cp.RunID
	}
	if o.RunID == "" {
		o.RunID = lanes.NewID()
	}
	parent, _ := ctx.Value(invocationKey{}).(*invocation)
	r := &run{
		s: s, o: o, runner: runner, calls: calls, parent: parent,
		outcomes: make([]Outcome, len(calls)),
		state:    make([]*callState, len(calls)),
		lineage:  lanes.LineageFrom(ctx),
		resumed:  cp,
		answer:   answer,
	}
	return r
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
)

// errInterrupted is the cause that halts admissions after an interrupt.
var errInterrupted = errors.New("a tool asked a question")
