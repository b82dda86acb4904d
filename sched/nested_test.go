package sched_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
)

// fileKeys is a LockKeysFunc: the file key of the "path" argument under root.
func fileKeys(root string) sched.LockKeysFunc {
	return func(_ context.Context, args json.RawMessage) ([]string, error) {
		var a struct{ Path string }
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, err
		}
		if a.Path == "" {
			return nil, errors.New("no path argument")
		}
		k, err := sched.FileKey(root, a.Path)
		return []string{k}, err
	}
}

// A sub-agent started inside a tool that holds a file's lock key writes the
// file without waiting, under the same fencing token (DESIGN.md invariant
// 10, issue "Nested runs").
func TestSubAgentWritesHeldFileWithSameToken(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		root := t.TempDir()
		var s *sched.Scheduler
		var mu sync.Mutex
		tokens := map[string]map[string]uint64{}
		record := func(inv sched.Invocation) {
			mu.Lock()
			defer mu.Unlock()
			tokens[inv.CallID] = inv.Tokens
		}
		write := func(ctx context.Context, inv sched.Invocation) (string, error) {
			record(inv)
			return "written", nil
		}
		edit := func(ctx context.Context, inv sched.Invocation) (string, error) {
			record(inv)
			res, err := s.Run(ctx, []sched.Call{{ID: "sub-write", Tool: "write", Args: inv.Args}}, sched.Options{})
			if err != nil {
				return "", err
			}
			if o := res.Outcomes[0]; o.Status != sched.OK {
				return "", o.Err
			}
			return "edited", nil
		}
		lock := fileKeys(root)
		s = e.scheduler(sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{
			"edit":  {LockKeys: lock, Run: edit, Concurrency: sched.Concurrency{Key: "agent", Limit: 1}},
			"write": {LockKeys: lock, Run: write},
		}})
		res := e.run(s, calls(`e:edit:{"path":"x"}`), sched.Options{})
		wantStatus(t, res, map[string]sched.Status{"e": sched.OK})
		key, _ := sched.FileKey(root, "x")
		if got, want := tokens["sub-write"][sched.LockPrefix+key], tokens["e"][sched.LockPrefix+key]; got == 0 || got != want {
			t.Fatalf("the sub-agent's token for %s = %d; want its parent's %d", key, got, want)
		}
	})
}

// A limit-1 tool key that a parent holds is not exhausted by its child.
func TestChildSpendsParentsLimitOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		var s *sched.Scheduler
		agent := func(ctx context.Context, inv sched.Invocation) (string, error) {
			var a struct{ Depth int }
			_ = json.Unmarshal(inv.Args, &a)
			if a.Depth == 0 {
				return "leaf", nil
			}
			res, err := s.Run(ctx, []sched.Call{{ID: "inner", Tool: "agent", Args: json.RawMessage(`{"Depth":0}`)}}, sched.Options{Tenant: "acme"})
			if err != nil {
				return "", err
			}
			return string(res.Outcomes[0].Status) + " " + res.Outcomes[0].Output, res.Outcomes[0].Err
		}
		r := parallel()
		r.PerTool = map[string]int{"agent": 1}
		r.PerTenant = 1
		s = e.scheduler(sched.Config{Runner: r, Tools: map[string]sched.Tool{
			"agent": {Run: agent, Concurrency: sched.Concurrency{Limit: 1}},
		}})
		res := e.run(s, calls(`outer:agent:{"Depth":1}`), sched.Options{Tenant: "acme"})
		if o := res.Outcomes[0]; o.Status != sched.OK || o.Output != "ok leaf" {
			t.Fatalf("outer = %s %q (%v); want the nested call to run inside its parent's lanes", o.Status, o.Output, o.Err)
		}
	})
}

// Two runners each hold a key and their nested calls wait for the other's:
// exactly one nested call fails with a lock-cycle error, the other side
// completes.
func TestNestedCycleBetweenTwoRunners(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		other, err := lanes.NewSession(testCtx(t), e.backend)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { other.Close() })
		var in atomic.Int32
		both := make(chan struct{})
		var codesMu sync.Mutex
		var codes []sched.Code // of the nested calls
		var sA, sB *sched.Scheduler
		holder := func(s **sched.Scheduler, want string) sched.Body {
			return func(ctx context.Context, inv sched.Invocation) (string, error) {
				if in.Add(1) == 2 {
					close(both)
				}
				select { // each holds its key before either nests
				case <-both:
				case <-ctx.Done():
					return "", ctx.Err()
				}
				res, err := (*s).Run(ctx, []sched.Call{{ID: "nested-" + inv.CallID, Tool: want, Args: json.RawMessage(`{}`)}}, sched.Options{})
				if err != nil {
					return "", err
				}
				codesMu.Lock()
				codes = append(codes, res.Outcomes[0].Code)
				codesMu.Unlock()
				return "", res.Outcomes[0].Err
			}
		}
		leaf := func(context.Context, sched.Invocation) (string, error) { return "", nil }
		cfg := func(s **sched.Scheduler) sched.Config {
			return sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{
				"hold1": {Concurrency: sched.Concurrency{Key: "K1", Limit: 1}, Run: holder(s, "use2")},
				"hold2": {Concurrency: sched.Concurrency{Key: "K2", Limit: 1}, Run: holder(s, "use1")},
				"use1":  {Concurrency: sched.Concurrency{Key: "K1", Limit: 1}, Run: leaf},
				"use2":  {Concurrency: sched.Concurrency{Key: "K2", Limit: 1}, Run: leaf},
			}}
		}
		sA = e.scheduler(cfg(&sA))
		var errB error
		sB, errB = sched.New(cfg(&sB), other)
		if errB != nil {
			t.Fatal(errB)
		}
		t.Cleanup(func() { within(t, "runner B's stragglers", sB.Wait) })
		doneA := runAsync(t, context.Background(), sA, calls("a:hold1"), sched.Options{})
		doneB := runAsync(t, context.Background(), sB, calls("b:hold2"), sched.Options{})
		ra, rb := doneA.wait(t), doneB.wait(t)
		var cycles, oks int
		for _, o := range []sched.Outcome{ra.Outcomes[0], rb.Outcomes[0]} {
			switch {
			case o.Status == sched.OK:
				oks++
			case errors.Is(o.Err, lanes.ErrLockCycle):
				cycles++
			default:
				t.Errorf("%s: %s %v", o.CallID, o.Status, o.Err)
			}
		}
		if cycles != 1 || oks != 1 {
			t.Fatalf("%d lock cycles and %d completions; want exactly one of each", cycles, oks)
		}
		if !slices.Contains(codes, sched.CodeLockCycle) {
			t.Errorf("codes of the nested calls %v; want one %s", codes, sched.CodeLockCycle)
		}
	})
}

// Six parallel edits of one file through different spellings of its path
// land one at a time, in call order, while an edit of another file runs
// beside them.
func TestSixEditsOfOneFileThroughSpellings(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		root := t.TempDir()
		real, _ := filepath.EvalSymlinks(root)
		if err := os.WriteFile(filepath.Join(root, "plan.md"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(root, "plan.md"), filepath.Join(root, "link.md")); err != nil {
			t.Fatal(err)
		}
		p := e.probe
		edit := func(ctx context.Context, inv sched.Invocation) (string, error) {
			var a struct{ Path string }
			_ = json.Unmarshal(inv.Args, &a)
			path := a.Path
			if !filepath.IsAbs(path) {
				path = filepath.Join(root, path)
			}
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return "", err
			}
			defer f.Close()
			if _, err := f.WriteString("start " + inv.CallID + "\n"); err != nil {
				return "", err
			}
			out, err := p.body()(ctx, inv)
			if err != nil {
				return "", err
			}
			_, err = f.WriteString("end " + inv.CallID + "\n")
			return out, err
		}
		s := e.scheduler(sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{"edit": {Safe: safe, LockKeys: fileKeys(root), Run: edit}}})
		if err := os.WriteFile(filepath.Join(root, "other.md"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		p.gate("e1", "o1")
		cs := calls(`e1:edit:{"Path":"plan.md"}`, `e2:edit:{"Path":"./plan.md"}`, `o1:edit:{"Path":"other.md"}`,
			`e3:edit:{"Path":"`+filepath.Join(real, "plan.md")+`"}`, `e4:edit:{"Path":"link.md"}`,
			`e5:edit:{"Path":"sub/../plan.md"}`, `e6:edit:{"Path":"plan.md"}`)
		done := runAsync(t, context.Background(), s, cs, sched.Options{})
		p.waitStarted(t, "e1")
		p.waitStarted(t, "o1") // beside the edits of plan.md
		p.open("e1")
		p.open("o1")
		res := done.wait(t)
		for _, o := range res.Outcomes {
			if o.Status != sched.OK {
				t.Fatalf("%s: %s %v", o.CallID, o.Status, o.Err)
			}
		}
		data, err := os.ReadFile(filepath.Join(root, "plan.md"))
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, id := range []string{"e1", "e2", "e3", "e4", "e5", "e6"} {
			want = append(want, "start "+id, "end "+id)
		}
		if got := strings.Fields(strings.ReplaceAll(string(data), " ", "_")); !slices.Equal(got, underscore(want)) {
			t.Fatalf("plan.md:\n%s\nwant the six edits one at a time in call order", data)
		}
	})
}

func underscore(xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = strings.ReplaceAll(x, " ", "_")
	}
	return out
}

// A call whose run ends while it works out its lock keys never runs, also
// when it turned out to need no key.
func TestCallEndedWhileWorkingOutLockKeysNeverRuns(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ran := false
		keys := func(context.Context, json.RawMessage) ([]string, error) {
			cancel() // the run ends while the keys are worked out
			return nil, nil
		}
		body := func(context.Context, sched.Invocation) (string, error) { ran = true; return "", nil }
		s := e.scheduler(sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{"w": {LockKeys: keys, Run: body}}})
		res, err := s.Run(ctx, calls("c:w"), sched.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if ran || res.Outcomes[0].Status != sched.NeverDispatched {
			t.Fatalf("ran %v, outcome %s (%v); want never dispatched, not run", ran, res.Outcomes[0].Status, res.Outcomes[0].Err)
		}
	})
}
