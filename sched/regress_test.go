package sched_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
)

// Regressions of the second break-in round, each named after the failure.

// A nested call that outlives its parent's timeout kept running on the
// parent's borrowed slot after the parent released it, beside the next
// holder of a limit-1 key. The parent's lanes now stay held until the
// bodies of the runs nested in it return.
func TestNestedStragglerKeepsParentsSlot(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		var running, most atomic.Int32
		enter := func() {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
		}
		leaf := func(ctx context.Context, inv sched.Invocation) (string, error) {
			enter()
			defer running.Add(-1)
			time.Sleep(300 * time.Millisecond) // ignores its context
			return "leaf", nil
		}
		var s *sched.Scheduler
		parent := func(ctx context.Context, inv sched.Invocation) (string, error) {
			res, err := s.Run(ctx, calls("nested:leaf"), sched.Options{})
			if err != nil {
				return "", err
			}
			return res.Outcomes[0].Output, res.Outcomes[0].Err
		}
		k := sched.Concurrency{Key: "K", Limit: 1}
		s = e.scheduler(sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{
			"parent": {Concurrency: k, Timeout: 50 * time.Millisecond, Run: parent},
			"leaf":   {Concurrency: k, Run: leaf},
		}})
		res := e.run(s, calls("p:parent", "other:leaf"), sched.Options{})
		within(t, "the nested straggler", s.Wait)
		if st := statuses(res); st["p"] != sched.TimedOut || st["other"] != sched.OK {
			t.Fatalf("outcomes %v; want p timed out, other ok", st)
		}
		if m := most.Load(); m != 1 {
			t.Fatalf("%d bodies ran at once on a limit-1 key: the nested straggler's slot passed on", m)
		}
	})
}

// Session.Close released a running body's lanes without stopping the body.
func TestSessionCloseStopsRunningBodies(t *testing.T) {
	b := lanes.NewMemory()
	s, err := lanes.NewSession(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var cause atomic.Value
	body := func(ctx context.Context, inv sched.Invocation) (string, error) {
		close(started)
		<-ctx.Done()
		cause.Store(context.Cause(ctx))
		return "", ctx.Err()
	}
	sc, err := sched.New(sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{"t": {Run: body, Concurrency: sched.Concurrency{Limit: 1}}}}, s)
	if err != nil {
		t.Fatal(err)
	}
	done := runAsync(t, context.Background(), sc, calls("c:t"), sched.Options{})
	recv(t, started, "the body to start")
	_ = s.Close()
	res := done.wait(t)
	within(t, "the stopped body", sc.Wait)
	if c, _ := cause.Load().(error); !errors.Is(c, lanes.ErrClosed) {
		t.Fatalf("the body's context ended with %v; want ErrClosed", c)
	}
	if res.Outcomes[0].Status == sched.OK {
		t.Fatalf("outcome %s after its lanes went with the closed session; want not ok", res.Outcomes[0].Status)
	}
}

// A turn lane above lanes.MaxStepRequests, or admissions naming more than
// lanes.MaxStepLanes lanes, failed every call: admissions are now enqueued
// in bounded steps, in written order.
func TestLargeAdmissionsInBoundedSteps(t *testing.T) {
	// Leases of 3 minutes: on miniredis under -race and a busy machine the
	// 1,200 calls take tens of seconds, and a heartbeat of 1,200 entries
	// queued behind them could miss a 30s TTL's deadline (a lost lease
	// cancels its call's start record); what this test checks is the
	// admission, not the renewal.
	eachBackendWith(t, []lanes.Option{lanes.WithTTL(3 * time.Minute)}, func(t *testing.T, e *env) {
		r := parallel()
		r.MaxConcurrentTools = 1500
		keys := func(_ context.Context, args json.RawMessage) ([]string, error) {
			var a struct{ N int }
			_ = json.Unmarshal(args, &a)
			return []string{fmt.Sprint("a", a.N), fmt.Sprint("b", a.N), fmt.Sprint("c", a.N), fmt.Sprint("d", a.N), fmt.Sprint("e", a.N)}, nil
		}
		noop := func(context.Context, sched.Invocation) (string, error) { return "", nil }
		s := e.scheduler(sched.Config{Runner: r, Tools: map[string]sched.Tool{"t": {Safe: safe, LockKeys: keys, Run: noop}}})
		var cs []sched.Call
		for i := range 1200 {
			cs = append(cs, sched.Call{ID: fmt.Sprint("c", i), Tool: "t", Args: json.RawMessage(fmt.Sprintf(`{"N":%d}`, i))})
		}
		res := e.runWithin(3*time.Minute, s, cs, sched.Options{}) // 1200 calls (miniredis runs Lua slowly: 20-40 s alone under -race)
		for _, o := range res.Outcomes {
			if o.Status != sched.OK {
				t.Fatalf("%s: %s %v", o.CallID, o.Status, o.Err)
			}
		}
	})
}

// Two calls interrupted in one run: the second one's question was lost.
// Every interrupted call now runs again on Resume.
func TestTwoInterruptsBothResumed(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		var mu sync.Mutex
		asked := map[string]int{}
		ask := func(ctx context.Context, inv sched.Invocation) (string, error) {
			mu.Lock()
			asked[inv.CallID]++
			n := asked[inv.CallID]
			mu.Unlock()
			if n == 1 {
				return "", sched.Interrupt("question of " + inv.CallID)
			}
			return "answered", nil
		}
		s := e.scheduler(sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{"ask": {Safe: safe, Run: ask}}})
		res := e.run(s, calls("a:ask", "b:ask"), sched.Options{})
		if res.Checkpoint == nil {
			t.Fatal("no checkpoint")
		}
		for res.Checkpoint != nil {
			var err error
			res, err = s.Resume(testCtx(t), res.Checkpoint, "yes", sched.Options{})
			if err != nil {
				t.Fatal(err)
			}
		}
		wantStatus(t, res, map[string]sched.Status{"a": sched.OK, "b": sched.OK})
	})
}

// Resuming one checkpoint twice ran its calls twice; a mutated checkpoint
// panicked. The second Resume is now refused, and a checkpoint naming more
// operations than its call has is read as far as it fits.
func TestResumeOnceAndMutatedCheckpoint(t *testing.T) {
	b := lanes.NewMemory()
	ses, err := lanes.NewSession(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	defer ses.Close()
	ask := func(ctx context.Context, inv sched.Invocation) (string, error) {
		if _, resumed := sched.Answer(ctx); !resumed && inv.Operation == 0 {
			return "", sched.Interrupt("?")
		}
		return "ok", nil
	}
	s, err := sched.New(sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{"f": {Run: ask, FanOut: &sched.FanOut{}}}}, ses)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(testCtx(t), calls(`x:f:[{},{}]`), sched.Options{})
	if err != nil || res.Checkpoint == nil {
		t.Fatalf("Run = %v, %v; want a checkpoint", res, err)
	}
	cp := res.Checkpoint
	cp.Outcomes[0].Operations = append(cp.Outcomes[0].Operations, sched.Outcome{Status: sched.OK}, sched.Outcome{Status: sched.OK})
	if _, err := s.Resume(testCtx(t), cp, "", sched.Options{}); err != nil {
		t.Fatalf("Resume of a mutated checkpoint = %v", err)
	}
	if _, err := s.Resume(testCtx(t), cp, "", sched.Options{}); !errors.Is(err, sched.ErrConfig) {
		t.Fatalf("second Resume = %v; want refused", err)
	}
}

// A limit disagreement, or an entry id that collides with a fanned call's
// operations, failed every call of the step; failure is now per call.
func TestOneBadRequestFailsOnlyItsCall(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		other, err := lanes.NewSession(context.Background(), e.backend)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		held, err := other.Acquire(testCtx(t), lanes.Request{Lanes: []lanes.Lane{{Key: "concurrency:shared", Limit: 2}}})
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(context.Background())
		noop := func(context.Context, sched.Invocation) (string, error) { return "", nil }
		s := e.scheduler(sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{
			"w": {Safe: safe, Concurrency: sched.Concurrency{Key: "shared", Limit: 1}, Run: noop},
			"z": {Safe: safe, Concurrency: sched.Concurrency{Key: "free", Limit: 1}, Run: noop},
			"f": {Safe: safe, FanOut: &sched.FanOut{}, Run: noop},
		}})
		res := e.run(s, calls("a:z", "b:w", "c:z", `d:f:[{}]`, "d#0:z"), sched.Options{})
		wantStatus(t, res, map[string]sched.Status{"a": sched.OK, "b": sched.Failed, "c": sched.OK, "d": sched.OK, "d#0": sched.Failed})
		if !errors.Is(res.Outcomes[1].Err, lanes.ErrLimitMismatch) {
			t.Fatalf("b: %v; want the limit mismatch", res.Outcomes[1].Err)
		}
	})
}

// A panicking tool body or LockKeys function crashed the process; it now
// fails its call.
func TestPanickingToolFailsItsCall(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		boom := func(context.Context, sched.Invocation) (string, error) { panic("boom") }
		badKeys := func(context.Context, json.RawMessage) ([]string, error) { panic("keys boom") }
		noop := func(context.Context, sched.Invocation) (string, error) { return "", nil }
		s := e.scheduler(sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{
			"boom": {Safe: safe, Run: boom, Concurrency: sched.Concurrency{Limit: 1}},
			"keys": {Safe: safe, Run: noop, LockKeys: badKeys},
			"ok":   {Safe: safe, Run: noop},
		}})
		res := e.run(s, calls("a:boom", "b:keys", "c:ok"), sched.Options{})
		wantStatus(t, res, map[string]sched.Status{"a": sched.Failed, "b": sched.Failed, "c": sched.OK})
	})
}

// In Go, Concurrency{Key: k} means limit 1, as TOML's { key = "k" } does;
// Unbounded names the key and limits nothing.
func TestConcurrencyKeyAloneMeansOne(t *testing.T) {
	b := lanes.NewMemory()
	ses, err := lanes.NewSession(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	defer ses.Close()
	for _, tc := range []struct {
		c    sched.Concurrency
		want int32
	}{{sched.Concurrency{Key: "x"}, 1}, {sched.Concurrency{Key: "x", Unbounded: true}, 3}} {
		var running, most atomic.Int32
		three := make(chan struct{}) // closed when three bodies run at once
		body := func(ctx context.Context, inv sched.Invocation) (string, error) {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			if n == 3 {
				close(three)
			}
			if tc.want == 3 {
				select { // a limit of 1 would never let the third in
				case <-three:
				case <-ctx.Done():
					return "", ctx.Err()
				}
			}
			return "", nil
		}
		s, err := sched.New(sched.Config{Tools: map[string]sched.Tool{"t": {Safe: safe, Concurrency: tc.c, Run: body}}}, ses)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Run(testCtx(t), calls("a:t", "b:t", "c:t"), sched.Options{}); err != nil {
			t.Fatal(err)
		}
		if most.Load() != tc.want {
			t.Errorf("%+v: %d at once; want %d", tc.c, most.Load(), tc.want)
		}
	}
}

// Issue 17, part 5: arguments that cannot be used (too deep for
// encoding/json, not an object, a fan-out array holding something else than
// objects) fail their own call, before anything runs, and the others run.
// In memory, on miniredis and on real Redis.
func TestUnusableArgumentsFailTheirCallAlone(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		noop := func(context.Context, sched.Invocation) (string, error) { return "", nil }
		s := e.scheduler(sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{
			"t": {Safe: safe, Run: noop, Concurrency: sched.Concurrency{Key: "k"}},
			"f": {Safe: safe, Run: noop, FanOut: &sched.FanOut{}},
		}})
		deep := strings.Repeat("[", 10001) + strings.Repeat("]", 10001)
		cs := []sched.Call{
			{ID: "a", Tool: "t", Args: json.RawMessage(`{}`)},
			{ID: "b", Tool: "t", Args: json.RawMessage(`{"x": ` + deep + `}`)},
			{ID: "c", Tool: "t", Args: json.RawMessage(`"s"`)},
			{ID: "d", Tool: "t", Args: json.RawMessage(`[{}]`)},
			{ID: "e", Tool: "f", Args: json.RawMessage(`[{}, 1]`)},
			{ID: "f", Tool: "f", Args: json.RawMessage(`[{}, {}]`)},
			{ID: "g", Tool: "t", Args: json.RawMessage(`null`)},
		}
		res := e.run(s, cs, sched.Options{})
		wantStatus(t, res, map[string]sched.Status{"a": sched.OK, "b": sched.Failed, "c": sched.Failed, "d": sched.Failed, "e": sched.Failed, "f": sched.OK, "g": sched.Failed})
		for i, want := range map[int]string{
			1: "arguments of t are nested more than 10000 levels deep",
			2: "arguments of t must be a JSON object, not a string",
			3: "arguments of t must be a JSON object, not an array",
			4: "arguments of f: operation 1 must be a JSON object, not a number",
			6: "arguments of t must be a JSON object, not null",
		} {
			if err := res.Outcomes[i].Err; err == nil || err.Error() != want {
				t.Errorf("%s: %v; want %q", cs[i].ID, err, want)
			}
		}
	})
}
