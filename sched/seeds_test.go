package sched_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
)

// What the seeds' runtimes have (issue 11, part 4), on the scheduler.

// Cogitator's wrapToolCall: Options.Rewrite changes a call's arguments
// before it is scheduled, and safety, lock keys and the body work from the
// new ones: a read rewritten into a write of x.md becomes a barrier that
// holds lock:x.md. In memory, on miniredis and on real Redis.
func TestRewriteDecidesSafetyAndLockKeys(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		var mode struct {
			Mode string `json:"mode"`
			Path string `json:"path"`
		}
		safeIfRead := func(args json.RawMessage) (bool, error) {
			m := mode
			err := json.Unmarshal(args, &m)
			return m.Mode == "read", err
		}
		lockPath := func(_ context.Context, args json.RawMessage) ([]string, error) {
			m := mode
			if err := json.Unmarshal(args, &m); err != nil || m.Path == "" {
				return nil, nil
			}
			return []string{m.Path}, nil
		}
		var seen sync.Map
		inner := p.body()
		body := func(ctx context.Context, inv sched.Invocation) (string, error) {
			seen.Store(inv.CallID, string(inv.Args))
			return inner(ctx, inv)
		}
		s := e.scheduler(sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{
			"file": {Safe: safeIfRead, LockKeys: lockPath, Run: body},
		}})
		rewrite := func(_ context.Context, c sched.Call) (json.RawMessage, error) {
			if c.ID == "w" {
				return json.RawMessage(`{"mode":"write","path":"x.md"}`), nil
			}
			if c.ID == "bad" {
				return nil, errors.New("no such middleware")
			}
			return c.Args, nil
		}
		res := e.run(s, calls(`r1:file:{"mode":"read"}`, `w:file:{"mode":"read"}`, `r2:file:{"mode":"read"}`, `bad:file:{}`),
			sched.Options{Rewrite: rewrite})
		wantStatus(t, res, map[string]sched.Status{"r1": sched.OK, "w": sched.OK, "r2": sched.OK, "bad": sched.Failed})
		if got, _ := seen.Load("w"); got != `{"mode":"write","path":"x.md"}` {
			t.Errorf("body of w saw %v; want the rewritten arguments", got)
		}
		if res.Outcomes[1].Tokens["lock:x.md"] == 0 {
			t.Errorf("w holds %v; want lock:x.md from its rewritten arguments", res.Outcomes[1].Tokens)
		}
		if o := res.Outcomes[3]; o.Code != sched.CodeRewriteFailed {
			t.Errorf("bad: %s %v; want %s", o.Code, o.Err, sched.CodeRewriteFailed)
		}
		before(t, p, "end r1", "start w") // w became a barrier
		before(t, p, "end w", "start r2")
	})
}

// Cogitator's lockKeys(args, context): a LockKeysFunc learns the call's
// run id, call id, tool and tenant from its context.
func TestLockKeysSeeTheCall(t *testing.T) {
	var got []sched.CallInfo
	var mu sync.Mutex
	keys := func(ctx context.Context, _ json.RawMessage) ([]string, error) {
		ci, ok := sched.CallInfoFrom(ctx)
		if !ok {
			return nil, errors.New("no CallInfo")
		}
		mu.Lock()
		got = append(got, ci)
		mu.Unlock()
		return []string{ci.Tenant + "/notes"}, nil
	}
	var bodyInfo sched.CallInfo
	body := func(ctx context.Context, inv sched.Invocation) (string, error) {
		bodyInfo, _ = sched.CallInfoFrom(ctx)
		return "", nil
	}
	res, err := sched.Run(context.Background(), sched.Config{Tools: map[string]sched.Tool{"note": {LockKeys: keys, Run: body}}},
		calls("c1:note"), sched.Options{RunID: "run-7", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	want := sched.CallInfo{RunID: "run-7", CallID: "c1", Tool: "note", Tenant: "acme", Entry: "run-7/c1"}
	if len(got) != 1 || got[0] != want || bodyInfo != want {
		t.Fatalf("lock keys saw %+v, the body %+v; want %+v", got, bodyInfo, want)
	}
	if res.Outcomes[0].Tokens["lock:acme/notes"] == 0 {
		t.Fatalf("tokens %v; want lock:acme/notes", res.Outcomes[0].Tokens)
	}
}

// Cogitator's StepGate: shared takers run together, an exclusive one
// alone; a shared taker behind a waiting exclusive one waits for it (no
// barging); a taker whose context ends leaves the queue and lets the next
// one in.
func TestStepGate(t *testing.T) {
	var g sched.StepGate
	ctx := context.Background()
	r1, err := g.Share(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := g.Share(ctx) // beside r1
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 3)
	go func() {
		rel, err := g.Exclusive(ctx)
		if err == nil {
			order <- "exclusive"
			rel()
		}
	}()
	waitQueued := func() {
		t.Helper()
		// The exclusive taker is queued once a timed-out share cannot
		// get in either.
		for deadline := time.Now().Add(10 * time.Second); ; {
			c, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			rel, err := g.Share(c)
			cancel()
			if err != nil {
				return
			}
			rel()
			if time.Now().After(deadline) {
				t.Fatal("the exclusive taker never queued")
			}
		}
	}
	waitQueued()
	go func() {
		rel, err := g.Share(ctx) // behind the exclusive one
		if err == nil {
			order <- "shared after"
			rel()
		}
	}()
	select {
	case o := <-order:
		t.Fatalf("%s got in while two shared holders held the gate", o)
	case <-time.After(50 * time.Millisecond):
	}
	r1()
	r2()
	r2() // a second call of a release changes nothing
	for _, want := range []string{"exclusive", "shared after"} {
		select {
		case got := <-order:
			if got != want {
				t.Fatalf("%s came; want %s", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never got in", want)
		}
	}
	rel, err := g.Exclusive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := g.Share(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Share(cancelled) = %v; want context.Canceled", err)
	}
	rel()
}

// Pausing a batch from outside (lanectl's SIGUSR1): running calls finish,
// none starts, the checkpoint has no question and survives a JSON round
// trip, and Resume runs the rest in written order. In memory, on miniredis
// and on real Redis.
func TestPauseCheckpointsAndResumes(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		r := parallel()
		r.MaxConcurrentTools = 1
		s := e.scheduler(config(p, r, map[string]sched.Tool{"read": {ReadOnlyHint: true}}))
		p.gate("a")
		pause := make(chan struct{})
		done := runAsync(t, context.Background(), s, calls("a:read", "b:read", "c:read"), sched.Options{RunID: "paused", Pause: pause})
		p.waitStarted(t, "a")
		close(pause)
		p.open("a")
		res := done.wait(t)
		wantStatus(t, res, map[string]sched.Status{"a": sched.OK, "b": "", "c": ""})
		if res.Checkpoint == nil || res.Checkpoint.Question != "" || res.Checkpoint.CallID != "" {
			t.Fatalf("checkpoint %+v; want one without a question", res.Checkpoint)
		}
		data, err := json.Marshal(res.Checkpoint)
		if err != nil {
			t.Fatal(err)
		}
		var cp sched.Checkpoint
		if err := json.Unmarshal(data, &cp); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err = s.Resume(ctx, &cp, "", sched.Options{})
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, res, map[string]sched.Status{"a": sched.OK, "b": sched.OK, "c": sched.OK})
		if got := p.snapshot(); !slices.Equal(got, []string{"start a", "end a", "start b", "end b", "start c", "end c"}) {
			t.Fatalf("log %v; want a, then b and c after the resume, each once", got)
		}
	})
}

// A cancellation while the batch pauses (lanectl: SIGINT after SIGUSR1,
// while the running call finishes) cancels the rest instead: the calls
// the pause held back end never dispatched, and there is no checkpoint. A
// new user's trial saw them "interrupted", with a checkpoint, beside
// "interrupted by SIGINT: the batch was cancelled". In memory, on
// miniredis and on real Redis.
func TestCancelWhilePausedCancelsTheRest(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		s := e.scheduler(config(p, parallel(), map[string]sched.Tool{"w": {Safe: safe, Concurrency: sched.Concurrency{Key: "k", Limit: 1}}}))
		p.gate("a")
		pause := make(chan struct{})
		held := make(chan string, 8)
		onEvent := func(ev sched.Event) {
			if ev.Kind == sched.EventInterrupted {
				held <- ev.CallID
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := runAsync(t, ctx, s, calls("a:w", "b:w", "c:w"), sched.Options{RunID: "paused-cancel", Pause: pause, OnEvent: onEvent})
		p.waitStarted(t, "a")
		close(pause)
		// b and c wait for a's lane, in a's phase: the pause holds them
		// back at once, before the cancellation
		for range 2 {
			recv(t, held, "an interrupted event of b or c")
		}
		cancel()
		p.open("a")
		res := done.wait(t)
		if res.Checkpoint != nil {
			t.Errorf("checkpoint %+v after a cancellation while paused; want none", res.Checkpoint)
		}
		for _, o := range res.Outcomes[1:] {
			if o.Status != sched.NeverDispatched || o.Code != sched.CodeNeverStarted {
				t.Errorf("%s after a cancellation while paused: %s %s %v; want never dispatched", o.CallID, o.Status, o.Code, o.Err)
			}
		}
		if got := p.snapshot(); slices.Contains(got, "start b") || slices.Contains(got, "start c") {
			t.Errorf("log %v; want b and c never started", got)
		}
	})
}

// Each outcome carries the code of why it is not OK. In memory, on
// miniredis and on real Redis.
func TestOutcomeCodes(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		other, err := lanes.NewSession(context.Background(), e.backend)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		held, err := other.Acquire(context.Background(), lanes.Request{Lanes: []lanes.Lane{{Key: "concurrency:shared", Limit: 3}}})
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(context.Background())
		hang := func(ctx context.Context, _ sched.Invocation) (string, error) { <-ctx.Done(); return "", ctx.Err() }
		fail := func(context.Context, sched.Invocation) (string, error) { return "", errors.New("boom") }
		noKeys := func(context.Context, json.RawMessage) ([]string, error) { return nil, errors.New("no path") }
		s := e.scheduler(config(p, parallel(), map[string]sched.Tool{
			"read":  {ReadOnlyHint: true},
			"slow":  {Safe: safe, Run: hang, Timeout: 20 * time.Millisecond},
			"fail":  {Safe: safe, Run: fail},
			"keys":  {Safe: safe, LockKeys: noKeys},
			"other": {Safe: safe, Concurrency: sched.Concurrency{Key: "shared", Limit: 1}},
			"off":   {Disabled: true},
		}))
		res := e.run(s, calls("ok:read", "u:nope", "d:off", "x:read:[1]", "n:read", "t:slow", "f:fail", "k:keys", "m:other", "ok:read"), sched.Options{
			Approve: func(_ context.Context, c sched.Call) error {
				if c.ID == "n" {
					return errors.New("no")
				}
				return nil
			},
		})
		want := []sched.Code{"", sched.CodeUnknownTool, sched.CodeDisabled, sched.CodeBadArguments, sched.CodeDeclined,
			sched.CodeTimeout, sched.CodeToolError, sched.CodeLockKeys, sched.CodeLimitMismatch, sched.CodeBadCallID}
		for i, o := range res.Outcomes {
			if o.Code != want[i] {
				t.Errorf("outcome %d (%s, %s): code %q (%v); want %q", i, o.CallID, o.Status, o.Code, o.Err, want[i])
			}
		}

		// fail_run: the queued call never dispatched, the one in flight
		// indeterminate.
		r := parallel()
		r.OnToolError = sched.FailRun
		p.gate("h")
		s2 := e.scheduler(config(p, r, map[string]sched.Tool{
			"hold": {Safe: safe},
			"fail": {Safe: safe, Run: func(ctx context.Context, inv sched.Invocation) (string, error) {
				p.waitStarted(t, "h")
				return "", errors.New("boom")
			}},
			"later": {},
		}))
		res = e.run(s2, calls("h:hold", "f:fail", "l:later"), sched.Options{})
		for i, code := range []sched.Code{sched.CodeIndeterminate, sched.CodeToolError, sched.CodeNeverStarted} {
			if o := res.Outcomes[i]; o.Code != code {
				t.Errorf("fail_run %s: %s %q (%v); want %q", o.CallID, o.Status, o.Code, o.Err, code)
			}
		}
	})
}

// RFD 129: no default on tools."*"; a Config that names a tool "*" is
// refused, saying why.
func TestNoDefaultTool(t *testing.T) {
	err := sched.Config{Tools: map[string]sched.Tool{"*": {Run: func(context.Context, sched.Invocation) (string, error) { return "", nil }}}}.Validate()
	if !errors.Is(err, sched.ErrConfig) || !strings.Contains(err.Error(), "a default for every tool is not supported") {
		t.Fatalf("Validate() = %v; want a configuration error about the default tool", err)
	}
}
