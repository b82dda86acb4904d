package sched_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
)

// config gives every tool without a body the probe's body.
func config(p *probe, r sched.Runner, ts map[string]sched.Tool) sched.Config {
	for n, t := range ts {
		if t.Run == nil {
			t.Run = p.body()
		}
		ts[n] = t
	}
	return sched.Config{Runner: r, Tools: ts}
}

func parallel() sched.Runner { return sched.DefaultRunner() }

var (
	safe   = sched.Always(true)
	unsafe = sched.Always(false)
)

func statuses(res *sched.Result) map[string]sched.Status {
	out := map[string]sched.Status{}
	for _, o := range res.Outcomes {
		out[o.CallID] = o.Status
	}
	return out
}

func wantStatus(t *testing.T, res *sched.Result, want map[string]sched.Status) {
	t.Helper()
	got := statuses(res)
	for id, w := range want {
		if got[id] != w {
			var why error
			for _, o := range res.Outcomes {
				if o.CallID == id {
					why = o.Err
				}
			}
			t.Errorf("call %s: status %q (%v); want %q", id, got[id], why, w)
		}
	}
}

func before(t *testing.T, p *probe, a, b string) {
	t.Helper()
	ia, ib := p.index(a), p.index(b)
	if ia < 0 || ib < 0 || ia > ib {
		t.Fatalf("want %q before %q; log %v", a, b, p.snapshot())
	}
}

// Rule 1: calls answered without running never hold the others back. The
// declined write would be a barrier between a and c if it ran.
func TestRule1AnsweredWithoutRunningHoldNoOne(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		s := e.scheduler(config(p, parallel(), map[string]sched.Tool{"read": {Safe: safe}, "write": {Safe: unsafe}}))
		p.gate("a", "c")
		done := runAsync(t, context.Background(), s, calls("a:read", "x:nosuch", "b:read:{not json", "d:write", "c:read"),
			sched.Options{Approve: func(_ context.Context, c sched.Call) error {
				if c.ID == "d" {
					return errors.New("the user said no")
				}
				return nil
			}})
		p.waitStarted(t, "a")
		p.waitStarted(t, "c") // both run together: nothing between them held them apart
		p.open("a")
		p.open("c")
		res := done.wait(t)
		wantStatus(t, res, map[string]sched.Status{"a": sched.OK, "c": sched.OK, "x": sched.Failed, "b": sched.Failed, "d": sched.Failed})
		for _, o := range res.Outcomes {
			switch o.CallID {
			case "x":
				if !strings.Contains(o.Err.Error(), "unknown tool") {
					t.Errorf("x: %v; want unknown tool", o.Err)
				}
			case "b":
				if !strings.Contains(o.Err.Error(), "not JSON") {
					t.Errorf("b: %v; want not JSON", o.Err)
				}
			case "d":
				if !strings.Contains(o.Err.Error(), "declined: the user said no") {
					t.Errorf("d: %v; want declined", o.Err)
				}
			}
		}
	})
}

// Rule 2: approvals run one at a time, in call order, before any call runs.
func TestRule2ApprovalsSerialInCallOrder(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		s := e.scheduler(config(p, parallel(), map[string]sched.Tool{"read": {Safe: safe}}))
		var order []string
		var inside atomic.Int32
		e.run(s, calls("c1:read", "c2:read", "c3:read", "c4:read"), sched.Options{
			Approve: func(_ context.Context, c sched.Call) error {
				if inside.Add(1) != 1 {
					t.Errorf("approval of %s ran beside another", c.ID)
				}
				defer inside.Add(-1)
				if l := p.snapshot(); len(l) > 0 {
					t.Errorf("approval of %s after a call started: %v", c.ID, l)
				}
				order = append(order, c.ID)
				time.Sleep(time.Millisecond) // room for an overlap to show
				return nil
			}})
		if !slices.Equal(order, []string{"c1", "c2", "c3", "c4"}) {
			t.Fatalf("approvals in order %v; want call order", order)
		}
	})
}

// Rule 3 and the seeds' example: read a, read b, write c, read d run as
// [a b] then [c] then [d].
func TestRule3Phases(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		s := e.scheduler(config(p, parallel(), map[string]sched.Tool{"read": {Safe: safe}, "write": {ReadOnlyHint: false}}))
		p.gate("a", "b", "c")
		done := runAsync(t, context.Background(), s, calls("a:read", "b:read", "c:write", "d:read"), sched.Options{})
		p.waitStarted(t, "a")
		p.waitStarted(t, "b")
		p.open("a")
		p.open("b")
		p.waitStarted(t, "c")
		if p.index("start d") >= 0 {
			t.Fatal("d started while the unsafe c runs")
		}
		p.open("c")
		res := done.wait(t)
		wantStatus(t, res, map[string]sched.Status{"a": sched.OK, "b": sched.OK, "c": sched.OK, "d": sched.OK})
		before(t, p, "end a", "start c")
		before(t, p, "end b", "start c")
		before(t, p, "end c", "start d")
	})
}

// Rule 3: without parallel tool calls, one call at a time, in order.
func TestRule3SequentialWithoutParallelCalls(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		r := parallel()
		r.Sequential = true
		s := e.scheduler(config(p, r, map[string]sched.Tool{"read": {Safe: safe}}))
		res := e.run(s, calls("a:read", "b:read", "c:read"), sched.Options{})
		wantStatus(t, res, map[string]sched.Status{"a": sched.OK, "b": sched.OK, "c": sched.OK})
		if got := p.snapshot(); !slices.Equal(got, []string{"start a", "end a", "start b", "end b", "start c", "end c"}) {
			t.Fatalf("log %v; want one at a time in order", got)
		}
	})
}

// Rule 3: Safe as a function of the arguments; an error means unsafe.
func TestRule3SafeFromArguments(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		mode := func(args json.RawMessage) (bool, error) {
			var a struct{ Mode string }
			if err := json.Unmarshal(args, &a); err != nil || a.Mode == "" {
				return false, errors.New("no mode")
			}
			return a.Mode == "read", nil
		}
		s := e.scheduler(config(p, parallel(), map[string]sched.Tool{"fs": {Safe: mode}}))
		p.gate("a", "b")
		done := runAsync(t, context.Background(), s, calls(`a:fs:{"Mode":"read"}`, `b:fs:{"Mode":"read"}`, `c:fs:{}`, `d:fs:{"Mode":"read"}`), sched.Options{})
		p.waitStarted(t, "a")
		p.waitStarted(t, "b")
		p.open("a")
		p.open("b")
		done.wait(t)
		before(t, p, "end a", "start c")
		before(t, p, "end b", "start c")
		before(t, p, "end c", "start d")
	})
}

// Rule 4: calls are admitted to the turn lane in written order, and a call
// never holds a remote slot while it waits for a local one.
func TestRule4TurnLaneBeforeRemoteLanes(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		r := parallel()
		r.MaxConcurrentTools = 2
		s := e.scheduler(config(p, r, map[string]sched.Tool{"read": {Safe: safe, Concurrency: sched.Concurrency{Key: "k", Limit: 10}}}))
		p.gate("c1", "c2", "c3")
		var mu sync.Mutex
		var queued []string
		done := runAsync(t, context.Background(), s, calls("c1:read", "c2:read", "c3:read", "c4:read"), sched.Options{OnEvent: func(ev sched.Event) {
			if ev.Kind == sched.EventQueued {
				mu.Lock()
				queued = append(queued, ev.CallID)
				mu.Unlock()
			}
		}})
		p.waitStarted(t, "c1")
		p.waitStarted(t, "c2")
		holders, waiters := e.inspect("concurrency:k")
		if !slices.Equal(holders, []string{"c1", "c2"}) || len(waiters) != 0 {
			t.Fatalf("with the turn lane full: holders %v waiters %v; want [c1 c2] and no one queued remotely", holders, waiters)
		}
		p.open("c1")
		p.waitStarted(t, "c3")
		p.open("c2")
		p.open("c3")
		done.wait(t)
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(queued, []string{"c1", "c2", "c3", "c4"}) {
			t.Fatalf("queued in order %v; want written order", queued)
		}
	})
}

// Rule 4: lane keys are typed, so a tool's per_tool lane and a concurrency
// key of the same name are two lanes; a concurrency key named like a tool
// joins that tool's concurrency key (RFD 129).
func TestRule4TypedLaneKeys(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		r := parallel()
		r.PerTool = map[string]int{"search": 2}
		s := e.scheduler(config(p, r, map[string]sched.Tool{
			"search": {Safe: safe, Concurrency: sched.Concurrency{Limit: 1}},
			"other":  {Safe: safe, Concurrency: sched.Concurrency{Key: "search", Limit: 1}},
		}))
		p.gate("s1")
		done := runAsync(t, context.Background(), s, calls("s1:search", "o1:other"), sched.Options{})
		p.waitStarted(t, "s1")
		holders, _ := e.inspect("tool:search")
		if !slices.Equal(holders, []string{"s1"}) {
			t.Fatalf("tool:search holders %v; want [s1]", holders)
		}
		holders, waiters := e.inspect("concurrency:search")
		if !slices.Equal(holders, []string{"s1"}) || !slices.Equal(waiters, []string{"o1"}) {
			t.Fatalf("concurrency:search holders %v waiters %v; want [s1] [o1]: other joins search's key", holders, waiters)
		}
		p.open("s1")
		done.wait(t)
		before(t, p, "end s1", "start o1")
	})
}

// Rule 5: a question the tool asks mid-run keeps its lanes; review happens
// after they are freed.
func TestRule5QuestionKeepsSlotReviewAfter(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		asked := make(chan struct{})
		answer := make(chan string, 1) // the test never blocks on it
		asking := func(ctx context.Context, inv sched.Invocation) (string, error) {
			a, err := sched.Ask(ctx, "overwrite draft 02?")
			if err != nil {
				return "", err
			}
			return "asked and got " + a, nil
		}
		s := e.scheduler(config(p, parallel(), map[string]sched.Tool{
			"draft":  {Safe: safe, Concurrency: sched.Concurrency{Key: "rfd", Limit: 1}, Run: asking},
			"rename": {Safe: safe, Concurrency: sched.Concurrency{Key: "rfd", Limit: 1}},
		}))
		var reviewedFree atomic.Bool
		done := runAsync(t, context.Background(), s, calls("q:draft", "r:rename"), sched.Options{
			Ask: func(ctx context.Context, c sched.Call, question string) (string, error) {
				close(asked)
				select {
				case a := <-answer:
					return a, nil
				case <-ctx.Done(): // the test ended first
					return "", ctx.Err()
				}
			},
			Review: func(_ context.Context, c sched.Call, o sched.Outcome) sched.Outcome {
				holders, waiters := e.inspect("concurrency:rfd")
				reviewedFree.Store(len(holders)+len(waiters) == 0)
				return o
			},
		})
		recv(t, asked, "q to ask")
		holders, waiters := e.inspect("concurrency:rfd")
		if !slices.Equal(holders, []string{"q"}) || !slices.Equal(waiters, []string{"r"}) {
			t.Fatalf("while q asks: holders %v waiters %v; want [q] [r]", holders, waiters)
		}
		if p.index("start r") >= 0 {
			t.Fatal("r started while q was asking")
		}
		answer <- "yes"
		res := done.wait(t)
		wantStatus(t, res, map[string]sched.Status{"q": sched.OK, "r": sched.OK})
		if res.Outcomes[0].Output != "asked and got yes" {
			t.Fatalf("q output %q", res.Outcomes[0].Output)
		}
		if !reviewedFree.Load() {
			t.Fatal("review ran while the lane was still held")
		}
	})
}

// Rule 6: a tool's timeout counts its execution only, never its wait. The
// ceiling (2s; 300ms was too little for a process starved on a loaded
// machine) leaves a body that returns at once room to run under -race; q
// waits longer than it (2.5s) before it starts.
func TestRule6TimeoutCountsExecutionOnly(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		k := sched.Concurrency{Key: "k", Limit: 1}
		s := e.scheduler(config(p, parallel(), map[string]sched.Tool{
			"long":  {Safe: safe, Concurrency: k},
			"quick": {Safe: safe, Concurrency: k, Timeout: 2 * time.Second},
		}))
		p.gate("l")
		done := runAsync(t, context.Background(), s, calls("l:long", "q:quick"), sched.Options{})
		p.waitStarted(t, "l")
		time.Sleep(2500 * time.Millisecond) // q waits longer than its ceiling
		p.open("l")
		wantStatus(t, done.wait(t), map[string]sched.Status{"l": sched.OK, "q": sched.OK})
	})
}

// Rule 6 and the seeds: a hanging tool is cut off by its own ceiling and
// reported at once while the others finish; its lanes stay held until its
// body really returns.
func TestRule6HangingToolCutOffLanesHeld(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		release := make(chan struct{})
		var once sync.Once
		unstick := func() { once.Do(func() { close(release) }) }
		hang := func(ctx context.Context, inv sched.Invocation) (string, error) {
			<-release // ignores its context, as a stuck tool does
			return "late", nil
		}
		s := e.scheduler(config(p, parallel(), map[string]sched.Tool{
			"hang": {Safe: safe, Timeout: 50 * time.Millisecond, Concurrency: sched.Concurrency{Key: "file", Limit: 1}, Run: hang},
			"read": {Safe: safe},
		}))
		// Registered after the scheduler, so it runs before the wait for
		// its stragglers: a failed assertion below cannot leave the stuck
		// body, and the package, hanging.
		t.Cleanup(unstick)
		res := e.run(s, calls("h:hang", "a:read", "b:read"), sched.Options{})
		wantStatus(t, res, map[string]sched.Status{"h": sched.TimedOut, "a": sched.OK, "b": sched.OK})
		if o := res.Outcomes[0]; o.CallID != "h" || o.Err == nil || !strings.Contains(o.Err.Error(), "hang") || !strings.Contains(o.Err.Error(), "50ms") {
			t.Fatalf("first outcome %s: %v; want h's timeout error naming the tool and its ceiling", o.CallID, o.Err)
		}
		if holders, _ := e.inspect("concurrency:file"); !slices.Equal(holders, []string{"h"}) {
			t.Fatalf("after the timeout, holders %v; want [h] until the body returns", holders)
		}
		unstick()
		within(t, "the stuck body to return", s.Wait)
		if holders, _ := e.inspect("concurrency:file"); len(holders) != 0 {
			t.Fatalf("after the body returned, holders %v; want none", holders)
		}
	})
}

// Rule 6: a run-wide deadline ends the run. a starts well before the
// deadline (1s: room on a busy machine) and is still running, gated, when
// it passes; b waits behind it.
func TestRule6RunDeadline(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		k := sched.Concurrency{Key: "k", Limit: 1}
		s := e.scheduler(config(p, parallel(), map[string]sched.Tool{"w": {Safe: safe, Concurrency: k}}))
		p.gate("a")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		done := runAsync(t, ctx, s, calls("a:w", "b:w"), sched.Options{})
		p.waitStarted(t, "a")
		res := done.wait(t)
		wantStatus(t, res, map[string]sched.Status{"a": sched.Indeterminate, "b": sched.NeverDispatched})
	})
}

// Rule 7: outcomes come back in call order, whatever the finish order.
func TestRule7OutcomesInCallOrder(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		s := e.scheduler(config(p, parallel(), map[string]sched.Tool{"read": {Safe: safe}}))
		p.gate("c1", "c2", "c3")
		done := runAsync(t, context.Background(), s, calls("c1:read", "c2:read", "c3:read"), sched.Options{})
		for _, id := range []string{"c3", "c2", "c1"} {
			p.waitStarted(t, id)
		}
		for _, id := range []string{"c3", "c2", "c1"} {
			p.open(id)
			p.waitLogged(t, "end "+id)
		}
		res := done.wait(t)
		var ids []string
		for _, o := range res.Outcomes {
			ids = append(ids, o.CallID+"="+o.Output)
		}
		if !slices.Equal(ids, []string{"c1=done c1", "c2=done c2", "c3=done c3"}) {
			t.Fatalf("outcomes %v; want call order", ids)
		}
		before(t, p, "end c3", "end c1")
	})
}

// Rule 8, surface: one failure among three successes fails only its call,
// and releases the next call on its key.
func TestRule8FailureIsPerCall(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		k := sched.Concurrency{Key: "k", Limit: 1}
		s := e.scheduler(config(p, parallel(), map[string]sched.Tool{"t": {Safe: safe, Concurrency: k}}))
		res := e.run(s, calls("a:t", `b:t:{"fail":true}`, "c:t", "d:t"), sched.Options{})
		wantStatus(t, res, map[string]sched.Status{"a": sched.OK, "b": sched.Failed, "c": sched.OK, "d": sched.OK})
		var te *toolError
		if !errors.As(res.Outcomes[1].Err, &te) {
			t.Fatalf("b's error %v does not carry the tool's error", res.Outcomes[1].Err)
		}
	})
}

// Rule 8, fail_run and cancellation: queued calls never dispatched,
// in-flight ones safe to retry (idempotent) or indeterminate.
func TestRule8FailRunAndCancelSettle(t *testing.T) {
	for _, how := range []string{"fail_run", "cancel"} {
		t.Run(how, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, e *env) {
				p := e.probe
				r := parallel()
				if how == "fail_run" {
					r.OnToolError = sched.FailRun
				}
				k := sched.Concurrency{Key: "k", Limit: 1}
				s := e.scheduler(config(p, r, map[string]sched.Tool{
					"bad":   {Safe: safe},
					"idem":  {Safe: safe, Idempotent: true},
					"plain": {Safe: safe},
					"keyed": {Safe: safe, Concurrency: k},
				}))
				p.gate("b", "i", "p", "k1")
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := runAsync(t, ctx, s, calls(`b:bad:{"fail":true}`, "i:idem", "p:plain", "k1:keyed", "k2:keyed"), sched.Options{})
				for _, id := range []string{"b", "i", "p", "k1"} {
					p.waitStarted(t, id)
				}
				if how == "fail_run" {
					p.open("b")
				} else {
					cancel()
				}
				res := done.wait(t)
				want := map[string]sched.Status{"i": sched.SafeToRetry, "p": sched.Indeterminate, "k1": sched.Indeterminate, "k2": sched.NeverDispatched}
				if how == "fail_run" {
					want["b"] = sched.Failed
				} else {
					want["b"] = sched.Indeterminate
				}
				wantStatus(t, res, want)
				for _, o := range res.Outcomes {
					if o.CallID == "k2" && !strings.Contains(o.Err.Error(), "never dispatched") {
						t.Errorf("k2: %v; want never dispatched: <why>", o.Err)
					}
				}
			})
		})
	}
}

// Rule 9 and RFD 129: fan-out operations are entries in written order that
// count against their tool's key; on_error = "stop" starts none after a
// failure.
func TestRule9FanOut(t *testing.T) {
	for _, onErr := range []sched.OnError{sched.Stop, sched.Continue} {
		t.Run(fmt.Sprint(onErr), func(t *testing.T) {
			eachBackend(t, func(t *testing.T, e *env) {
				p := e.probe
				k := sched.Concurrency{Key: "fs", Limit: 1}
				s := e.scheduler(config(p, parallel(), map[string]sched.Tool{
					"delete": {Safe: safe, Concurrency: k, FanOut: &sched.FanOut{OnError: onErr}},
					"write":  {Safe: safe, Concurrency: k},
				}))
				res := e.run(s, calls(`f:delete:[{"op":"o1"},{"op":"o2","fail":true},{"op":"o3"}]`, "w:write"), sched.Options{})
				f := res.Outcomes[0]
				if len(f.Operations) != 3 {
					t.Fatalf("%d operation outcomes; want 3", len(f.Operations))
				}
				want := []sched.Status{sched.OK, sched.Failed, sched.NeverDispatched}
				if onErr == sched.Continue {
					want[2] = sched.OK
				}
				for i, o := range f.Operations {
					if o.Status != want[i] {
						t.Errorf("operation %d: %s (%v); want %s", i, o.Status, o.Err, want[i])
					}
				}
				if f.Status != sched.Failed {
					t.Errorf("fanned-out call status %s; want error", f.Status)
				}
				log := p.snapshot()
				wantLog := []string{"start o1", "end o1", "start o2", "end o2"}
				if onErr == sched.Continue {
					wantLog = append(wantLog, "start o3", "end o3")
				}
				wantLog = append(wantLog, "start w", "end w")
				if !slices.Equal(log, wantLog) {
					t.Fatalf("log %v; want %v: operations and calls one at a time on their key, in written order", log, wantLog)
				}
			})
		})
	}
}

// Rule 10: an interrupt lets running calls finish, starts none, and returns
// a checkpoint; resuming runs the rest in written order with the answer.
func TestRule10InterruptAndResume(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		p.gate("a")
		aStarted := p.started["a"]
		asker := func(ctx context.Context, inv sched.Invocation) (string, error) {
			if a, ok := sched.Answer(ctx); ok {
				return "answered " + a, nil
			}
			select { // a is running when q asks
			case <-aStarted:
			case <-ctx.Done():
				return "", ctx.Err()
			}
			return "", sched.Interrupt("which draft?")
		}
		r := parallel()
		r.MaxConcurrentTools = 2
		// q holds a lane so that the test sees when its interrupt took
		// effect: the scheduler halts the batch before q's lanes go back.
		s := e.scheduler(config(p, r, map[string]sched.Tool{"read": {Safe: safe}, "ask": {Safe: safe, Run: asker, Concurrency: sched.Concurrency{Key: "ask", Limit: 1}}, "write": {}}))
		interrupted := make(chan struct{})
		onEvent := func(ev sched.Event) {
			if ev.CallID == "q" && ev.Kind == sched.EventFinished && ev.Status == sched.Interrupted {
				close(interrupted)
			}
		}
		done := runAsync(t, context.Background(), s, calls("a:read", "q:ask", "b:read", "w:write"), sched.Options{RunID: "run-10", OnEvent: onEvent})
		p.waitStarted(t, "a")
		recv(t, interrupted, "q's interrupt")
		e.waitFree("concurrency:ask") // the batch is halted: a must still finish
		p.open("a")
		res := done.wait(t)
		if res.Checkpoint == nil {
			t.Fatal("no checkpoint after an interrupt")
		}
		if cp := res.Checkpoint; cp.CallID != "q" || cp.Question != "which draft?" {
			t.Fatalf("checkpoint asks %q of %s; want q: which draft?", cp.Question, cp.CallID)
		}
		wantStatus(t, res, map[string]sched.Status{"a": sched.OK, "q": "", "b": "", "w": ""})
		if p.index("start b") >= 0 || p.index("start w") >= 0 {
			t.Fatalf("a call started after the interrupt: %v", p.snapshot())
		}
		res, err := s.Resume(testCtx(t), res.Checkpoint, "02", sched.Options{})
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, res, map[string]sched.Status{"a": sched.OK, "q": sched.OK, "b": sched.OK, "w": sched.OK})
		if res.Outcomes[1].Output != "answered 02" {
			t.Fatalf("q after resume: %q", res.Outcomes[1].Output)
		}
		before(t, p, "end b", "start w")
	})
}

// Rule 12: events say what happened to each call, in order.
func TestRule12Events(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		s := e.scheduler(config(p, parallel(), map[string]sched.Tool{"read": {Safe: safe, Concurrency: sched.Concurrency{Limit: 1}}}))
		var got []string
		e.run(s, calls("a:read", "x:nope"), sched.Options{OnEvent: func(ev sched.Event) {
			got = append(got, ev.CallID+" "+string(ev.Kind))
			if ev.Kind == sched.EventGranted && ev.Tokens["concurrency:read"] == 0 {
				t.Errorf("granted event without a token: %+v", ev)
			}
		}})
		want := []string{"x settled", "a queued", "a granted", "a started", "a finished"}
		if !slices.Equal(got, want) {
			t.Fatalf("events %v; want %v", got, want)
		}
	})
}

// Rule 11 (the part of this issue): a body's context carries its lineage.
func TestRule11LineageInContext(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		var seen []string
		body := func(ctx context.Context, inv sched.Invocation) (string, error) {
			seen = lanes.LineageFrom(ctx)
			return "", nil
		}
		s := e.scheduler(sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{"t": {Run: body}}})
		ctx := lanes.WithLineage(context.Background(), []string{"parent/entry"})
		if _, err := s.Run(ctx, calls("c:t"), sched.Options{RunID: "r"}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(seen, []string{"parent/entry", "r/c"}) {
			t.Fatalf("lineage in the body %v; want [parent/entry r/c]", seen)
		}
	})
}
