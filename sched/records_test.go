package sched_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
)

// execLog counts the executions each call's body began: the tools' own
// record of what ran, which the tests check against "at most once".
type execLog struct {
	mu    sync.Mutex
	count map[string]int
}

func newExecLog() *execLog { return &execLog{count: map[string]int{}} }

func (l *execLog) ran(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count[id]++
}

func (l *execLog) times(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count[id]
}

// newSession starts another Session on e's backend: another process's.
func (e *env) newSession(t *testing.T) *lanes.Session {
	t.Helper()
	s, err := lanes.NewSession(context.Background(), e.backend, lanes.WithTTL(3*time.Second), lanes.WithHeartbeat(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newScheduler(t *testing.T, cfg sched.Config, s *lanes.Session) *sched.Scheduler {
	t.Helper()
	sc, err := sched.New(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sc.Wait)
	return sc
}

// Issue 11, part 3: a run whose process stopped after three of five calls
// settled, started again with the same run id and response, returns the
// three outcomes from the run's records without running them, reports the
// call in flight as indeterminate (a non-idempotent tool) or safe to retry
// (an idempotent one) without running it, and runs the call that never
// started. The first "process" is a Session closed while a call runs; the
// second a new Session on the same backend. Each call's body ran at most
// once. In memory (within one process), on miniredis and on real Redis.
func TestRestartedRunNeverRunsASettledCallTwice(t *testing.T) {
	for _, idempotent := range []bool{false, true} {
		name := map[bool]string{false: "indeterminate", true: "safe_to_retry"}[idempotent]
		t.Run(name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, e *env) {
				log := newExecLog()
				blocking := make(chan struct{})
				var once sync.Once
				started4 := make(chan struct{})
				body := func(ctx context.Context, inv sched.Invocation) (string, error) {
					log.ran(inv.CallID)
					if inv.CallID == "c4" && log.times("c4") == 1 {
						once.Do(func() { close(started4) })
						select {
						case <-blocking:
						case <-ctx.Done():
							return "", context.Cause(ctx)
						}
					}
					return "did " + inv.CallID, nil
				}
				cfg := sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{
					"step": {Concurrency: sched.Concurrency{Key: "steps"}, Idempotent: idempotent, Run: body},
				}}
				cs := calls("c1:step", "c2:step", "c3:step", "c4:step", "c5:step")
				first := e.newSession(t)
				s1 := newScheduler(t, cfg, first)
				done := runAsync(t, context.Background(), s1, cs, sched.Options{RunID: "restart-run"})
				select {
				case <-started4:
				case <-time.After(20 * time.Second):
					t.Fatal("c4 never started")
				}
				first.Close() // the process stops while c4 runs
				done.wait(t)
				s1.Wait()

				s2 := newScheduler(t, cfg, e.newSession(t))
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				res, err := s2.Run(ctx, cs, sched.Options{RunID: "restart-run"})
				if err != nil {
					t.Fatal(err)
				}
				want := sched.Indeterminate
				wantCode := sched.CodeIndeterminate
				if idempotent {
					want, wantCode = sched.SafeToRetry, sched.CodeSafeToRetry
				}
				wantStatus(t, res, map[string]sched.Status{"c1": sched.OK, "c2": sched.OK, "c3": sched.OK, "c4": want, "c5": sched.OK})
				for i, o := range res.Outcomes {
					stored := i < 4
					if o.Stored != stored {
						t.Errorf("%s: Stored = %v; want %v", o.CallID, o.Stored, stored)
					}
					if i < 3 && o.Output != "did "+o.CallID {
						t.Errorf("%s: stored output %q", o.CallID, o.Output)
					}
				}
				if o := res.Outcomes[3]; o.Code != wantCode {
					t.Errorf("c4: code %q (%v); want %q", o.Code, o.Err, wantCode)
				}
				for _, id := range []string{"c1", "c2", "c3", "c4", "c5"} {
					if n := log.times(id); n != 1 {
						t.Errorf("%s executed %d times; want once", id, n)
					}
				}
			})
		})
	}
}

// A process killed while a call ran leaves only that call's record of its
// start, never its outcome (TestRestartedRunNeverRunsASettledCallTwice's
// first process lives to record one). The run started again with the same
// id reports that call indeterminate (a non-idempotent tool) or safe to
// retry (an idempotent one), without running it, and runs the call that
// has no record. The start record is a real one, read by the call's body
// from the records of an earlier run of the same calls. In memory, on
// miniredis and on real Redis.
func TestRestartedRunReportsACallLeftInFlight(t *testing.T) {
	for _, idempotent := range []bool{false, true} {
		name := map[bool]string{false: "indeterminate", true: "safe_to_retry"}[idempotent]
		t.Run(name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, e *env) {
				log := newExecLog()
				var started []byte // c1's record while its body runs
				body := func(ctx context.Context, inv sched.Invocation) (string, error) {
					log.ran(inv.RunID + "/" + inv.CallID)
					if inv.RunID == "model-run" && inv.CallID == "c1" {
						recs, err := e.session.Records(ctx, inv.RunID)
						if err != nil {
							return "", err
						}
						started = recs["c1"]
					}
					return "did " + inv.CallID, nil
				}
				s := e.scheduler(sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{
					"step": {Concurrency: sched.Concurrency{Key: "steps"}, Idempotent: idempotent, Run: body},
				}})
				cs := calls("c1:step", "c2:step")
				wantStatus(t, e.run(s, cs, sched.Options{RunID: "model-run"}), map[string]sched.Status{"c1": sched.OK, "c2": sched.OK})
				if len(started) == 0 {
					t.Fatal("c1's body found no record of its start")
				}
				// What the killed process of run "killed-run" left behind.
				if err := e.session.Record(context.Background(), "killed-run", "c1", started, time.Minute); err != nil {
					t.Fatal(err)
				}

				res := e.run(s, cs, sched.Options{RunID: "killed-run"})
				want, wantCode := sched.Indeterminate, sched.CodeIndeterminate
				if idempotent {
					want, wantCode = sched.SafeToRetry, sched.CodeSafeToRetry
				}
				wantStatus(t, res, map[string]sched.Status{"c1": want, "c2": sched.OK})
				if o := res.Outcomes[0]; o.Code != wantCode || !o.Stored {
					t.Errorf("c1: code %q (%v), stored %v; want %q, stored", o.Code, o.Err, o.Stored, wantCode)
				}
				if o := res.Outcomes[1]; o.Stored || o.Output != "did c2" {
					t.Errorf("c2: stored %v, output %q; want run, not stored", o.Stored, o.Output)
				}
				for id, n := range map[string]int{"killed-run/c1": 0, "killed-run/c2": 1} {
					if got := log.times(id); got != n {
						t.Errorf("%s executed %d times; want %d", id, got, n)
					}
				}
			})
		})
	}
}

// A run started again with the same id after it ended returns every
// outcome from its records, fanned-out operations included, and runs
// nothing; a call whose id the records hold for other arguments is refused
// with TOOL_RUN_CONFLICT, not run. In memory, on miniredis and on real
// Redis.
func TestSameRunIDReturnsStoredOutcomes(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		log := newExecLog()
		body := func(ctx context.Context, inv sched.Invocation) (string, error) {
			log.ran(inv.CallID + "#" + string(rune('0'+inv.Operation)))
			if strings.Contains(string(inv.Args), "fail") {
				return "", errors.New("it failed")
			}
			return string(inv.Args), nil
		}
		s := e.scheduler(sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{
			"t":   {Safe: safe, Run: body},
			"fan": {Safe: safe, Run: body, FanOut: &sched.FanOut{}, Concurrency: sched.Concurrency{Limit: 1}},
		}})
		cs := calls(`a:t:{"x":1}`, `b:t:{"fail":true}`, `f:fan:[{"op":0},{"op":1}]`)
		res1 := e.run(s, cs, sched.Options{RunID: "again"})
		res2 := e.run(s, cs, sched.Options{RunID: "again"})
		for i := range cs {
			o1, o2 := res1.Outcomes[i], res2.Outcomes[i]
			if o1.Status != o2.Status || o1.Output != o2.Output || o1.Code != o2.Code || errText(o1.Err) != errText(o2.Err) || !o2.Stored || o1.Stored {
				t.Errorf("call %s: first %+v, again %+v; want the same, stored", cs[i].ID, o1, o2)
			}
		}
		if n := len(res2.Outcomes[2].Operations); n != 2 || !res2.Outcomes[2].Operations[1].Stored {
			t.Errorf("fanned-out call again: %+v; want its two operations, stored", res2.Outcomes[2])
		}
		for id, n := range map[string]int{"a#0": 1, "b#0": 1, "f#0": 1, "f#1": 1} {
			if got := log.times(id); got != n {
				t.Errorf("%s executed %d times; want %d", id, got, n)
			}
		}
		// With tool t no longer configured, or disabled (a resume with
		// another tools file), a and b keep their stored outcomes: a
		// new user's trial saw a settled ok call answered TOOL_UNKNOWN,
		// which would make the model call it again.
		for name, tools := range map[string]map[string]sched.Tool{
			"unknown":  {"fan": {Safe: safe, Run: body, FanOut: &sched.FanOut{}, Concurrency: sched.Concurrency{Limit: 1}}},
			"disabled": {"t": {Safe: safe, Run: body, Disabled: true}},
		} {
			res := e.run(e.scheduler(sched.Config{Runner: parallel(), Tools: tools}), cs[:2], sched.Options{RunID: "again"})
			for i := range 2 {
				o1, o := res1.Outcomes[i], res.Outcomes[i]
				if o.Status != o1.Status || o.Output != o1.Output || !o.Stored {
					t.Errorf("call %s again, tool t %s: %s %s %v (stored %v); want the stored %s", cs[i].ID, name, o.Status, o.Code, o.Err, o.Stored, o1.Status)
				}
			}
		}
		res3 := e.run(s, calls(`a:t:{"x":2}`), sched.Options{RunID: "again"})
		if o := res3.Outcomes[0]; o.Status != sched.Failed || o.Code != sched.CodeRunConflict || log.times("a#0") != 1 {
			t.Errorf("same call id, other arguments: %s %s %v (ran %d times); want a run conflict, not run", o.Status, o.Code, o.Err, log.times("a#0"))
		}
	})
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// A call whose entry is still held by an earlier process of its run (one
// that stopped between the grant and its record of the start) waits until
// that lease expires, then runs, once. In memory, on miniredis and on real
// Redis.
func TestRestartWaitsOutAnEarlierHolderOfItsEntry(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		log := newExecLog()
		body := func(ctx context.Context, inv sched.Invocation) (string, error) {
			log.ran(inv.CallID)
			return "ok", nil
		}
		ctx := context.Background()
		if _, err := e.backend.Enqueue(ctx, lanes.Owner{ID: "stopped-process"}, 300*time.Millisecond, []lanes.Request{
			{ID: "held-run/c1", Lanes: []lanes.Lane{{Key: "concurrency:k", Limit: 1}}, CallID: "c1", Tool: "t"},
		}); err != nil {
			t.Fatal(err)
		}
		s := e.scheduler(sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{"t": {Concurrency: sched.Concurrency{Key: "k"}, Run: body}}})
		res := e.run(s, calls("c1:t"), sched.Options{RunID: "held-run"})
		wantStatus(t, res, map[string]sched.Status{"c1": sched.OK})
		if n := log.times("c1"); n != 1 {
			t.Fatalf("c1 ran %d times; want once", n)
		}
	})
}

// Issue 11, part 3: a checkpoint with a failed outcome survives a JSON
// round trip (Outcome.Err was an error that did not decode), and resuming
// the decoded copy runs the rest. Resume honours its own options: a
// narrower turn lane and its own timeouts; without them, the checkpoint's.
// In memory, on miniredis and on real Redis.
func TestCheckpointJSONAndResumeOptions(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		var mu sync.Mutex
		running, most := 0, 0
		slow := func(ctx context.Context, inv sched.Invocation) (string, error) {
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			defer func() { mu.Lock(); running--; mu.Unlock() }()
			if strings.Contains(string(inv.Args), "hang") {
				<-ctx.Done()
				return "", context.Cause(ctx)
			}
			time.Sleep(10 * time.Millisecond)
			return "read", nil
		}
		failed := make(chan struct{})
		ask := func(ctx context.Context, inv sched.Invocation) (string, error) {
			if a, ok := sched.Answer(ctx); ok {
				return "answered " + a, nil
			}
			select { // f has failed when q asks
			case <-failed:
			case <-time.After(20 * time.Second):
			}
			return "", sched.Interrupt("go on?")
		}
		fail := func(context.Context, sched.Invocation) (string, error) {
			defer close(failed)
			return "", errors.New("no such draft")
		}
		// f fails and q asks in the first phase; the barrier b and the
		// reads after it are left for Resume.
		s := e.scheduler(sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{
			"fail":    {Safe: safe, Run: fail},
			"ask":     {Safe: safe, Run: ask},
			"read":    {ReadOnlyHint: true, Run: slow},
			"barrier": {Run: slow},
		}})
		cs := calls("f:fail", "q:ask", "w:nope", "b:barrier", "r1:read", "r2:read", "r3:read", `h:read:{"hang":true}`)
		res := e.run(s, cs, sched.Options{RunID: "cp-run", Timeouts: map[string]time.Duration{"read": time.Hour}})
		if res.Checkpoint == nil {
			t.Fatal("no checkpoint")
		}
		data, err := json.Marshal(res.Checkpoint)
		if err != nil {
			t.Fatalf("json.Marshal(checkpoint) = %v", err)
		}
		var cp sched.Checkpoint
		if err := json.Unmarshal(data, &cp); err != nil {
			t.Fatalf("json.Unmarshal(checkpoint) = %v\n%s", err, data)
		}
		if o := cp.Outcomes[0]; o.Status != sched.Failed || o.Code != sched.CodeToolError || errText(o.Err) != "no such draft" {
			t.Fatalf("failed outcome after the round trip: %+v", o)
		}
		if cp.Question != "go on?" || cp.CallID != "q" || cp.Timeouts["read"] != time.Hour {
			t.Fatalf("checkpoint after the round trip: %q of %s, timeouts %v", cp.Question, cp.CallID, cp.Timeouts)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err = s.Resume(ctx, &cp, "yes", sched.Options{
			Narrow:   &sched.Runner{MaxConcurrentTools: 1},
			Timeouts: map[string]time.Duration{"read": 50 * time.Millisecond},
		})
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, res, map[string]sched.Status{
			"f": sched.Failed, "q": sched.OK, "w": sched.Failed, "b": sched.OK,
			"r1": sched.OK, "r2": sched.OK, "r3": sched.OK, "h": sched.TimedOut,
		})
		mu.Lock()
		defer mu.Unlock()
		if most != 1 {
			t.Errorf("%d calls ran at once after Resume narrowed the turn lane to 1", most)
		}
	})
}

// An output larger than a run record holds (lanes.MaxRecordLen) is left
// out of the record: the call, run again with the same run id, is not run
// again and keeps its status, with TOOL_OUTPUT_NOT_STORED and an empty
// output. In memory, on miniredis and on real Redis.
func TestStoredOutcomeWithoutItsLargeOutput(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		log := newExecLog()
		big := strings.Repeat("x", lanes.MaxRecordLen+1)
		body := func(ctx context.Context, inv sched.Invocation) (string, error) {
			log.ran(inv.CallID)
			return big, nil
		}
		s := e.scheduler(sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{"t": {ReadOnlyHint: true, Run: body}}})
		first := e.run(s, calls("c:t"), sched.Options{RunID: "big-run"})
		again := e.run(s, calls("c:t"), sched.Options{RunID: "big-run"})
		if o := first.Outcomes[0]; o.Status != sched.OK || len(o.Output) != len(big) {
			t.Fatalf("first run: %s, %d bytes", o.Status, len(o.Output))
		}
		o := again.Outcomes[0]
		if o.Status != sched.OK || !o.Stored || o.Code != sched.CodeOutputNotStored || o.Output != "" || log.times("c") != 1 {
			t.Fatalf("again: %s stored=%v code=%q output %d bytes, ran %d times; want ok, stored, %s, no output, ran once",
				o.Status, o.Stored, o.Code, len(o.Output), log.times("c"), sched.CodeOutputNotStored)
		}
	})
}

// An entry id names one request (DESIGN.md invariant 8), and a call's entry
// id is its run id and call id: two runs started at once with the same run
// id, whose call c1 names other lock keys in each (the model wrote other
// arguments), do not share c1's entry. The second run's c1 alone fails,
// with an error outcome naming the call, and runs nothing; its other
// calls, enqueued in the same step, run; the first run's c1, waiting
// meanwhile, keeps its place and runs once its key is free. Each run has
// its own Session (two replicas). In memory, on miniredis and on real Redis.
func TestSameRunIDOtherLockKeysFailsOnlyThatCall(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		log := newExecLog()
		cfg := sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{
			"edit": {
				LockKeys: func(_ context.Context, args json.RawMessage) ([]string, error) {
					var a struct{ Path string }
					if err := json.Unmarshal(args, &a); err != nil {
						return nil, err
					}
					return []string{a.Path}, nil
				},
				Run: func(_ context.Context, inv sched.Invocation) (string, error) {
					log.ran(inv.CallID + " " + string(inv.Args))
					return "edited", nil
				},
			},
		}}
		blocker, err := e.session.Acquire(testCtx(t), lanes.Request{ID: "blocker", Lanes: []lanes.Lane{{Key: sched.LockPrefix + "a", Limit: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		defer blocker.Release(context.Background())

		first := newScheduler(t, cfg, e.newSession(t))
		firstDone := runAsync(t, context.Background(), first, calls(`c1:edit:{"path":"a"}`), sched.Options{RunID: "bound-run"})
		for deadline := time.Now().Add(bound); ; time.Sleep(time.Millisecond) {
			if _, waiters := e.inspect(sched.LockPrefix + "a"); len(waiters) == 1 && waiters[0] == "c1" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the first run's c1 never queued for lock:a")
			}
		}

		second := newScheduler(t, cfg, e.newSession(t))
		res := e.run(second, calls(`c1:edit:{"path":"b"}`, `c2:edit:{"path":"c"}`, `c3:edit:{"path":"d"}`), sched.Options{RunID: "bound-run"})
		wantStatus(t, res, map[string]sched.Status{"c1": sched.Failed, "c2": sched.OK, "c3": sched.OK})
		o := res.Outcomes[0]
		if !errors.Is(o.Err, lanes.ErrIDConflict) || o.Code != sched.CodeLanes || !strings.Contains(errText(o.Err), "bound-run/c1") {
			t.Errorf("second run's c1: %s %s %v; want an error outcome, code %s, naming bound-run/c1 and wrapping lanes.ErrIDConflict", o.Status, o.Code, o.Err, sched.CodeLanes)
		}
		if n := log.times(`c1 {"path":"b"}`); n != 0 {
			t.Errorf("second run's c1 ran %d times; want never", n)
		}
		if _, waiters := e.inspect(sched.LockPrefix + "a"); len(waiters) != 1 || waiters[0] != "c1" {
			t.Errorf("lock:a waiters after the refusal: %v; want the first run's c1, still queued", waiters)
		}
		if holders, waiters := e.inspect(sched.LockPrefix + "b"); len(holders)+len(waiters) != 0 {
			t.Errorf("lock:b holders %v, waiters %v after the refusal; want none", holders, waiters)
		}

		if err := blocker.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, firstDone.wait(t), map[string]sched.Status{"c1": sched.OK})
		if n := log.times(`c1 {"path":"a"}`); n != 1 {
			t.Errorf("first run's c1 ran %d times; want once", n)
		}
	})
}

// A call whose lease is lost while its body runs ends indeterminate with
// the loss in its error, also when the body returns at once (a command its
// guard killed: "killed by SIGKILL") before the body's context hears of
// the loss; before, such a call could end "error" with the kill's message
// (a CI run of TestBatchSuspendedByTSTPToolDoesNotOutliveLease saw it).
// The lease is lost to an operator's release. Each round repeats the
// race; every one must end indeterminate. In memory, on miniredis and on
// real Redis.
func TestLeaseLostWhileRunningEndsIndeterminate(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		for round := range 10 {
			entry := make(chan string, 1)
			body := func(ctx context.Context, inv sched.Invocation) (string, error) {
				entry <- inv.Entry
				<-inv.Lost
				return "", errors.New("killed by SIGKILL") // not ctx's error: it returns as a killed command does
			}
			cfg := sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{
				"w": {Concurrency: sched.Concurrency{Key: "k"}, Run: body},
			}}
			done := runAsync(t, context.Background(), e.scheduler(cfg), calls("c1:w"), sched.Options{})
			id := recv(t, entry, "the body's start")
			if _, err := e.backend.Release(context.Background(), "", []string{id}); err != nil {
				t.Fatal(err)
			}
			o := done.wait(t).Outcomes[0]
			if o.Status != sched.Indeterminate || o.Err == nil || !strings.Contains(o.Err.Error(), "lease lost") {
				t.Fatalf("round %d: %s %v; want indeterminate, its lease lost", round, o.Status, o.Err)
			}
		}
	})
}
