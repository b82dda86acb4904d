package lanestest

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lanes-dev/lanes/lanes"
)

// Invariant 1: at most limit holders; the rest wait in order.
func testLimit(t *testing.T, inst Instance) {
	s := session(t, inst.Backend)
	ts := enqueue(t, s, req("a", "k", 2), req("b", "k", 2), req("c", "k", 2), req("d", "k", 2))
	for i, want := range []bool{true, true, false, false} {
		if got := isReady(ts[i]); got != want {
			t.Fatalf("after enqueueing 4 on limit 2, entry %s granted = %v; want %v", ts[i].ID(), got, want)
		}
	}
	ks := inspect(t, inst.Backend, "k")
	if ks.Limit != 2 || !equal(holderIDs(ks), []string{"a", "b"}) || !equal(waiterIDs(ks), []string{"c", "d"}) {
		t.Fatalf("Inspect(k) = limit %d holders %v waiters %v; want 2 [a b] [c d]", ks.Limit, holderIDs(ks), waiterIDs(ks))
	}
	a, b := wait(t, ts[0]), wait(t, ts[1])
	release(t, a)
	c := wait(t, ts[2])
	ks = inspect(t, inst.Backend, "k")
	if !equal(holderIDs(ks), []string{"b", "c"}) || !equal(waiterIDs(ks), []string{"d"}) {
		t.Fatalf("after releasing a: holders %v waiters %v; want [b c] [d]", holderIDs(ks), waiterIDs(ks))
	}
	release(t, b)
	release(t, c)
	release(t, wait(t, ts[3]))
}

// Invariant 1 under contention from several sessions (processes).
func testLimitConcurrent(t *testing.T, inst Instance) {
	const limit, workers, rounds = 3, 12, 5
	sessions := []*lanes.Session{session(t, inst.Backend), session(t, inst.Backend), session(t, inst.Backend)}
	var inFlight, most atomic.Int64
	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			s := sessions[w%len(sessions)]
			for range rounds {
				l, err := s.Acquire(ctxT(t), req("", "k", limit))
				if err != nil {
					t.Errorf("Acquire() = %v", err)
					return
				}
				n := inFlight.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				mu.Lock()
				if seen[l.Token("k")] {
					t.Errorf("token %d granted twice", l.Token("k"))
				}
				seen[l.Token("k")] = true
				mu.Unlock()
				inFlight.Add(-1)
				if err := l.Release(ctxT(t)); err != nil {
					t.Errorf("Release() = %v", err)
				}
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m > limit {
		t.Fatalf("%d holders at once on a key with limit %d", m, limit)
	}
	if len(seen) != workers*rounds {
		t.Fatalf("%d distinct tokens for %d grants", len(seen), workers*rounds)
	}
}

// Invariant 1: limit 0 is unbounded and takes no lane.
func testLimitZero(t *testing.T, inst Instance) {
	s := session(t, inst.Backend)
	held := acquire(t, s, req("h", "k", 1))
	free := acquire(t, s, req("z", "k2", 0))
	if tok := free.Token("k2"); tok != 0 {
		t.Fatalf("Token(k2) of a limit-0 lane = %d; want 0", tok)
	}
	mixed := acquire(t, s, req("m", "k3", 0, "k4", 1))
	if mixed.Token("k4") == 0 || mixed.Token("k3") != 0 {
		t.Fatalf("tokens of {k3:0, k4:1} = %v; want only k4", mixed.Tokens())
	}
	for _, k := range []string{"k2", "k3"} {
		if ks := inspect(t, inst.Backend, k); len(ks.Holders)+len(ks.Waiters) > 0 {
			t.Fatalf("a limit-0 lane on %s shows in Inspect: %v %v", k, holderIDs(ks), waiterIDs(ks))
		}
	}
	release(t, free)
	release(t, mixed)
	release(t, held)
}

// Invariant 2: grants follow enqueue order, across sessions.
func testFIFO(t *testing.T, inst Instance) {
	s1, s2 := session(t, inst.Backend), session(t, inst.Backend)
	h := acquire(t, s1, req("h", "k", 1))
	var ts []*lanes.Ticket
	for i, id := range []string{"w1", "w2", "w3", "w4", "w5"} {
		s := []*lanes.Session{s1, s2}[i%2]
		tk := enqueue(t, s, req(id, "k", 1))[0]
		if p := tk.Positions()["k"]; p != i+1 {
			t.Fatalf("entry %s enqueued at position %d; want %d", id, p, i+1)
		}
		ts = append(ts, tk)
	}
	last := h.Token("k")
	release(t, h)
	for i, tk := range ts {
		l := wait(t, tk)
		if ks := inspect(t, inst.Backend, "k"); !equal(holderIDs(ks), []string{tk.ID()}) {
			t.Fatalf("holders = %v; want [%s]", holderIDs(ks), tk.ID())
		}
		for _, later := range ts[i+1:] {
			if isReady(later) {
				t.Fatalf("%s granted while %s holds the key", later.ID(), tk.ID())
			}
		}
		if l.Token("k") <= last {
			t.Fatalf("token of %s = %d, not above the previous %d", tk.ID(), l.Token("k"), last)
		}
		last = l.Token("k")
		release(t, l)
	}
}

// Invariant 2: a later waiter never overtakes an earlier one, even when the
// earlier one waits for another key.
func testNoBarging(t *testing.T, inst Instance) {
	s := session(t, inst.Backend)
	hb := acquire(t, s, req("hb", "b", 1))
	x := enqueue(t, s, req("x", "k", 1, "b", 1))[0]
	y := enqueue(t, s, req("y", "k", 1))[0]
	if isReady(y) {
		t.Fatal("y was granted k although x is queued before it")
	}
	ks := inspect(t, inst.Backend, "k")
	if len(ks.Holders) != 0 || !equal(waiterIDs(ks), []string{"x", "y"}) {
		t.Fatalf("Inspect(k) = holders %v waiters %v; want [] [x y]", holderIDs(ks), waiterIDs(ks))
	}
	release(t, hb)
	lx := wait(t, x)
	if isReady(y) {
		t.Fatal("y granted while x holds k")
	}
	release(t, lx)
	release(t, wait(t, y))
}

// Invariant 2: an entry waiting on another key still counts once; a later
// one may be granted when the limit leaves room for both.
func testRoomBehindBlocked(t *testing.T, inst Instance) {
	s := session(t, inst.Backend)
	hb := acquire(t, s, req("hb", "b", 1))
	x := enqueue(t, s, req("x", "k", 2, "b", 1))[0]
	y := enqueue(t, s, req("y", "k", 2))[0]
	ly := wait(t, y)
	if isReady(x) {
		t.Fatal("x granted while b is held")
	}
	release(t, ly)
	release(t, hb)
	release(t, wait(t, x))
}

// Invariant 3: all keys together or none.
func testAllKeysAtOnce(t *testing.T, inst Instance) {
	s := session(t, inst.Backend)
	hb := acquire(t, s, req("hb", "b", 1))
	x := enqueue(t, s, req("x", "a", 1, "b", 1))[0]
	if ks := inspect(t, inst.Backend, "a"); len(ks.Holders) != 0 || !equal(waiterIDs(ks), []string{"x"}) {
		t.Fatalf("Inspect(a) = holders %v waiters %v; want x waiting, holding nothing", holderIDs(ks), waiterIDs(ks))
	}
	release(t, hb)
	lx := wait(t, x)
	if lx.Token("a") == 0 || lx.Token("b") <= hb.Token("b") {
		t.Fatalf("tokens of x = %v; want a > 0 and b > %d", lx.Tokens(), hb.Token("b"))
	}
	for _, k := range []string{"a", "b"} {
		if ks := inspect(t, inst.Backend, k); !equal(holderIDs(ks), []string{"x"}) {
			t.Fatalf("holders of %s = %v; want [x]", k, holderIDs(ks))
		}
	}
	release(t, lx)
}

// Invariant 4: one step enqueues a batch in the given order.
func testBatchOrder(t *testing.T, inst Instance) {
	s := session(t, inst.Backend)
	ts := enqueue(t, s, req("a", "k", 1), req("b", "k", 1, "j", 1), req("c", "j", 1), req("d", "k", 1))
	wantPos := []map[string]int{nil, {"k": 1, "j": 1}, {"j": 2}, {"k": 2}}
	for i, tk := range ts {
		got := tk.Positions()
		if len(got) != len(wantPos[i]) {
			t.Fatalf("Positions(%s) = %v; want %v", tk.ID(), got, wantPos[i])
		}
		for k, p := range wantPos[i] {
			if got[k] != p {
				t.Fatalf("Positions(%s) = %v; want %v", tk.ID(), got, wantPos[i])
			}
		}
	}
	la := wait(t, ts[0])
	if isReady(ts[2]) {
		t.Fatal("c overtook b on j")
	}
	release(t, la)
	lb := wait(t, ts[1])
	release(t, lb)
	release(t, wait(t, ts[2]))
	release(t, wait(t, ts[3]))
}

// Invariants 4 and 9: a batch with a limit disagreement enqueues none.
func testBatchAtomic(t *testing.T, inst Instance) {
	s := session(t, inst.Backend)
	h := acquire(t, s, req("h", "k", 1))
	_, err := s.Enqueue(ctxT(t), req("a", "k2", 1), req("b", "k", 2))
	var lm *lanes.LimitMismatchError
	if !errors.As(err, &lm) || !errors.Is(err, lanes.ErrLimitMismatch) || lm.Key != "k" || lm.Recorded != 1 || lm.Requested != 2 {
		t.Fatalf("Enqueue(batch with k:2 while k:1 is held) = %v; want a LimitMismatchError{k 1 2}", err)
	}
	if ks := inspect(t, inst.Backend, "k2"); len(ks.Holders)+len(ks.Waiters) > 0 {
		t.Fatalf("the rejected batch left %v %v on k2", holderIDs(ks), waiterIDs(ks))
	}
	// The same ids work once the batch is fixed: nothing of them was kept.
	ts := enqueue(t, s, req("a", "k2", 1), req("b", "k", 1))
	release(t, wait(t, ts[0]))
	release(t, h)
	release(t, wait(t, ts[1]))
}

// Invariant 5: tokens strictly increase per key, across sessions.
func testTokens(t *testing.T, inst Instance) {
	s1, s2 := session(t, inst.Backend), session(t, inst.Backend)
	a := acquire(t, s1, req("a", "k", 2, "j", 1))
	b := acquire(t, s2, req("b", "k", 2))
	if a.Token("k") < 1 || b.Token("k") <= a.Token("k") {
		t.Fatalf("tokens of k: a=%d b=%d; want 1 <= a < b", a.Token("k"), b.Token("k"))
	}
	release(t, a)
	c := acquire(t, s2, req("c", "k", 2, "j", 1))
	if c.Token("k") <= b.Token("k") || c.Token("j") <= a.Token("j") {
		t.Fatalf("tokens of c = %v; want k > %d and j > %d", c.Tokens(), b.Token("k"), a.Token("j"))
	}
	release(t, b)
	release(t, c)
}

// Invariant 5 and DESIGN.md section 4: counters outlive an empty lane.
func testTokensSurvive(t *testing.T, inst Instance) {
	s := session(t, inst.Backend)
	var last uint64
	for i, limit := range []int{1, 3, 1} {
		l := acquire(t, s, req("", "k", limit))
		if l.Token("k") <= last {
			t.Fatalf("grant %d after the lane emptied: token %d, not above %d", i, l.Token("k"), last)
		}
		last = l.Token("k")
		release(t, l)
	}
	if !slices.Equal(holderIDs(inspect(t, inst.Backend, "k")), nil) {
		t.Fatal("k still held")
	}
}
