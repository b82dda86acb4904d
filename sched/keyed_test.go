package sched_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/sched"
)

// span is one execution as its body saw it: from its own clock.
type span struct {
	id         string
	key        string
	start, end time.Time
}

// timeline records the spans of the bodies of a test.
type timeline struct {
	mu    sync.Mutex
	spans []span
}

func (tl *timeline) add(s span) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.spans = append(tl.spans, s)
}

func (tl *timeline) byID() map[string]span {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	out := map[string]span{}
	for _, s := range tl.spans {
		out[s.id] = s
	}
	return out
}

// rendezvous lets n bodies wait until all n have started; a wait that
// does not see them all within 20s fails instead of hanging.
type rendezvous struct {
	mu   sync.Mutex
	left int
	all  chan struct{}
}

func newRendezvous(n int) *rendezvous { return &rendezvous{left: n, all: make(chan struct{})} }

func (r *rendezvous) arrive(ctx context.Context) error {
	r.mu.Lock()
	r.left--
	if r.left == 0 {
		close(r.all)
	}
	r.mu.Unlock()
	select {
	case <-r.all:
		return nil
	case <-time.After(20 * time.Second):
		return fmt.Errorf("the others never started beside this call")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Issue 11, part 1: the issue's own case. Seven calls on three keys, tools
// that declare only a concurrency key (RFD 129's configuration) and say
// nothing of safety, each call 0.7s long in the issue: the keys run beside
// each other, each key's calls one at a time in written order. The first
// call of each key waits until the first calls of the three keys have all
// started, so a scheduler that ran the calls one after another fails the
// test (in 20s) instead of passing it slowly; the tools' own timestamps
// then show the overlap. In memory, on miniredis and on real Redis.
func TestKeyedToolsOrderedByKeysOnly(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		var tl timeline
		meet := newRendezvous(3)
		first := map[string]bool{"a1": true, "b1": true, "c1": true}
		body := func(ctx context.Context, inv sched.Invocation) (string, error) {
			var a struct{ Key string }
			_ = json.Unmarshal(inv.Args, &a)
			s := span{id: inv.CallID, key: a.Key, start: time.Now()}
			if first[inv.CallID] {
				if err := meet.arrive(ctx); err != nil {
					return "", err
				}
			}
			time.Sleep(20 * time.Millisecond) // the 0.7s, shortened: the rendezvous proves the overlap
			s.end = time.Now()
			tl.add(s)
			return "", nil
		}
		s := e.scheduler(sched.Config{Runner: parallel(), Tools: map[string]sched.Tool{
			"edit_a": {Concurrency: sched.Concurrency{Key: "a"}, Run: body},
			"edit_b": {Concurrency: sched.Concurrency{Key: "b"}, Run: body},
			"edit_c": {Concurrency: sched.Concurrency{Key: "c"}, Run: body},
		}})
		cs := calls(`a1:edit_a:{"key":"a"}`, `b1:edit_b:{"key":"b"}`, `c1:edit_c:{"key":"c"}`, `a2:edit_a:{"key":"a"}`,
			`b2:edit_b:{"key":"b"}`, `a3:edit_a:{"key":"a"}`, `c2:edit_c:{"key":"c"}`)
		res := e.run(s, cs, sched.Options{})
		for _, o := range res.Outcomes {
			if o.Status != sched.OK {
				t.Fatalf("call %s: %s %v", o.CallID, o.Status, o.Err)
			}
		}
		sp := tl.byID()
		// Each key's calls one at a time, in written order.
		for _, chain := range [][]string{{"a1", "a2", "a3"}, {"b1", "b2"}, {"c1", "c2"}} {
			for k := 1; k < len(chain); k++ {
				prev, next := sp[chain[k-1]], sp[chain[k]]
				if next.start.Before(prev.end) {
					t.Errorf("%s started at %v, before %s on the same key ended at %v", next.id, next.start, prev.id, prev.end)
				}
			}
		}
		// Calls on other keys overlapped: each first call started before
		// the others ended.
		for _, x := range []string{"a1", "b1", "c1"} {
			for _, y := range []string{"a1", "b1", "c1"} {
				if x != y && !sp[x].start.Before(sp[y].end) {
					t.Errorf("%s started at %v, after %s ended at %v: the keys did not run beside each other", x, sp[x].start, y, sp[y].end)
				}
			}
		}
	})
}

// Issue 11, part 1: a tool that declares nothing stays a barrier; "safe =
// false" written out keeps a keyed tool a barrier; lock keys alone are not
// a barrier; the runner's Unmarked: UnmarkedParallel lets the tools that
// declare nothing run together. In memory, on miniredis and on real Redis.
func TestBarrierRuleOfUndeclaredTools(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		p := e.probe
		lockKeys := func(context.Context, json.RawMessage) ([]string, error) { return []string{"f"}, nil }
		tools := func() map[string]sched.Tool {
			return map[string]sched.Tool{
				"plain":  {},
				"keyed":  {Concurrency: sched.Concurrency{Key: "k"}},
				"locked": {LockKeys: lockKeys},
				"strict": {Concurrency: sched.Concurrency{Key: "s"}, Safe: unsafe},
			}
		}
		// Keyed and locked calls meet beside each other and beside a read.
		s := e.scheduler(config(p, parallel(), tools()))
		p.gate("k1", "l1")
		done := runAsync(t, context.Background(), s, calls("k1:keyed", "l1:locked"), sched.Options{})
		p.waitStarted(t, "k1")
		p.waitStarted(t, "l1")
		p.open("k1")
		p.open("l1")
		done.wait(t)

		// plain is a barrier: k2 starts after it ended, and strict too.
		res := e.run(s, calls("k2:keyed", "p1:plain", "k3:keyed", "s1:strict", "l2:locked"), sched.Options{})
		wantStatus(t, res, map[string]sched.Status{"k2": sched.OK, "p1": sched.OK, "k3": sched.OK, "s1": sched.OK, "l2": sched.OK})
		before(t, p, "end k2", "start p1")
		before(t, p, "end p1", "start k3")
		before(t, p, "end k3", "start s1")
		before(t, p, "end s1", "start l2")

		// unmarked = "parallel": two plain calls meet.
		r := parallel()
		r.Unmarked = sched.UnmarkedParallel
		s2 := e.scheduler(config(p, r, tools()))
		p.gate("p2", "p3")
		done = runAsync(t, context.Background(), s2, calls("p2:plain", "p3:plain"), sched.Options{})
		p.waitStarted(t, "p2")
		p.waitStarted(t, "p3")
		p.open("p2")
		p.open("p3")
		done.wait(t)
		// ... but safe = false written out stays a barrier.
		res = e.run(s2, calls("p4:plain", "s2:strict", "p5:plain"), sched.Options{})
		wantStatus(t, res, map[string]sched.Status{"p4": sched.OK, "s2": sched.OK, "p5": sched.OK})
		before(t, p, "end p4", "start s2")
		before(t, p, "end s2", "start p5")
	})
}
