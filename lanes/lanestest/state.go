package lanestest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// The cases of issues 10 and 19 that a backend alone shows: a lease is
// never granted twice because another process uses other TTLs, reuses an
// id, nests calls or lost a reply; and no key is left wedged.

// Invariant 13: a holder with a long TTL keeps its key however long ago
// another session with a short TTL last ran (issue 10: a safety-net TTL set
// by the short session's heartbeat used to expire every state key).
func testMixedTTLs(t *testing.T, inst Instance) {
	short := session(t, inst.Backend, lanes.WithTTL(time.Second), lanes.WithHeartbeat(300*time.Millisecond))
	release(t, acquire(t, short, req("p1", "a", 1)))
	long := session(t, inst.Backend, lanes.WithTTL(4*time.Minute), lanes.WithHeartbeat(80*time.Second))
	p2 := acquire(t, long, req("p2", "K", 1))
	if inst.Advance != nil {
		inst.Advance(61 * time.Second) // past any minute-long safety net, well within P2's TTL
	} else {
		time.Sleep(1500 * time.Millisecond) // past the short session's TTL
	}
	other := session(t, inst.Backend)
	ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	defer cancel()
	if l, err := other.Acquire(ctx, req("p3", "K", 1)); !errors.Is(err, lanes.ErrWaitTimeout) {
		if l != nil {
			release(t, l)
		}
		t.Fatalf("Acquire(K) while a long-TTL lease holds it = %v; want ErrWaitTimeout", err)
	}
	if err := p2.Err(); err != nil {
		t.Fatalf("the long-TTL lease: Err() = %v; want held", err)
	}
	release(t, p2)
}

// Invariant 8: an entry id names one request. The same id with other lanes
// (keys or limits) or another lineage is refused, for any owner, and
// changes nothing; the same lanes in another order is a retry.
func testIDBoundToRequest(t *testing.T, inst Instance) {
	b := inst.Backend
	a := lanes.Owner{ID: "owner-a", Host: "h", PID: 1}
	o := lanes.Owner{ID: "owner-b", Host: "h", PID: 2}
	enqueueAs(t, b, lanes.Owner{ID: "holder", Host: "h", PID: 3}, req("h", "a", 1))
	first := enqueueAs(t, b, a, req("X", "a", 1, "z", 1))
	if first[0].State != lanes.Waiting {
		t.Fatalf("X = %+v; want waiting behind h", first[0])
	}
	for _, c := range []struct {
		owner lanes.Owner
		r     lanes.Request
	}{
		{o, req("X", "b", 1)},                      // another owner, other keys
		{a, req("X", "zz", 1)},                     // the same owner, other keys
		{a, req("X", "a", 1, "z", 2)},              // another limit
		{a, req("X", "a", 1)},                      // fewer keys
		{a, nested(req("X", "a", 1, "z", 1), "h")}, // another lineage
	} {
		st := enqueueAs(t, b, c.owner, c.r)
		var ce *lanes.IDConflictError
		if !errors.Is(st[0].Err, lanes.ErrIDConflict) || !errors.As(st[0].Err, &ce) || ce.ID != "X" || st[0].State != lanes.Gone {
			t.Fatalf("Enqueue(%+v by %s) = %+v; want refused with ErrIDConflict", c.r, c.owner.ID, st[0])
		}
	}
	for _, k := range []string{"b", "zz"} {
		if ks := inspect(t, b, k); len(ks.Holders)+len(ks.Waiters) != 0 {
			t.Fatalf("a refused id changed key %s: %+v", k, ks)
		}
	}
	if again := enqueueAs(t, b, a, req("X", "z", 1, "a", 1)); again[0].Err != nil || again[0].State != lanes.Waiting || again[0].Positions["a"] != 1 {
		t.Fatalf("the same lanes in another order = %+v; want the retry's answer, waiting at 1", again[0])
	}
	// Through a Session: the conflict is the Acquire's error.
	s := session(t, b)
	if _, err := s.Acquire(ctxT(t), req("X", "q", 1)); !errors.Is(err, lanes.ErrIDConflict) {
		t.Fatalf("Acquire(X on q) = %v; want ErrIDConflict", err)
	}
	releaseAll(t, b, "h", "X")
}

// Invariant 8: the same id twice in one step is refused whole, before any
// change, on every backend.
func testDuplicateIDsInOneStep(t *testing.T, inst Instance) {
	b := inst.Backend
	o := lanes.Owner{ID: "dup-owner", Host: "h", PID: 1}
	_, err := b.Enqueue(ctxT(t), o, time.Minute, []lanes.Request{req("x", "K", 1), req("y", "K", 1), req("x", "K", 1)})
	var ie *lanes.InvalidError
	if !errors.Is(err, lanes.ErrInvalid) || !errors.As(err, &ie) {
		t.Fatalf("Enqueue(x, y, x) = %v; want an *InvalidError", err)
	}
	if ks := inspect(t, b, "K"); len(ks.Holders)+len(ks.Waiters) != 0 {
		t.Fatalf("a refused step changed K: holders %v waiters %v", holderIDs(ks), waiterIDs(ks))
	}
}

// Invariant 10: a borrowed slot lives no longer than the lease it borrows
// from: when the lender's lease ends (released by force here), the
// borrower is told it lost the key, and the next waiter is granted.
func testBorrowerEndsWithLender(t *testing.T, inst Instance) {
	s := session(t, inst.Backend, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	a := acquire(t, s, req("A", "K", 1))
	c := acquire(t, s, nested(req("C", "K", 1), "A"))
	w := enqueue(t, s, req("B", "K", 1))[0]
	if _, err := inst.Backend.Release(ctxT(t), "", []string{"A"}); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*lanes.Lease{a, c} {
		select {
		case <-l.Lost():
		case <-time.After(5 * time.Second): // the next poll is 20s away: only a hint explains it
			t.Fatalf("%s did not learn within 5s that its lease ended with its lender's", l.ID())
		}
	}
	if err := c.Err(); !errors.Is(err, lanes.ErrLeaseLost) {
		t.Fatalf("the borrower's Err() = %v; want ErrLeaseLost", err)
	}
	b := wait(t, w)
	if b.Token("K") <= a.Token("K") {
		t.Fatalf("B's token %d; want above the lender's %d", b.Token("K"), a.Token("K"))
	}
	release(t, b)
	// A lender released by its holder ends its held borrowers too, and keeps
	// its slot until they are gone (invariants 6 and 10): the key passes to
	// the next waiter only once the borrower's owner, told, released it.
	// The borrower here is driven by hand, as another process would be.
	ctx := ctxT(t)
	a2 := acquire(t, s, req("A2", "K", 1))
	o := lanes.Owner{ID: "borrower-owner", Host: "h", PID: 3}
	if st := enqueueAs(t, inst.Backend, o, nested(req("C2", "K", 1), "A2")); st[0].State != lanes.Held || st[0].Tokens["K"] != a2.Token("K") {
		t.Fatalf("C2 = %+v; want held with its lender's token %d", st[0], a2.Token("K"))
	}
	w3 := enqueue(t, s, req("W3", "K", 1))[0]
	release(t, a2)
	if ks := inspect(t, inst.Backend, "K"); !equal(holderIDs(ks), []string{"A2"}) || !ks.Holders[0].Ended || len(ks.Waiters) != 1 {
		t.Fatalf("after the lender's release, K = %+v; want A2 kept (Ended) for its revoked borrower, W3 waiting", ks)
	}
	if st, err := inst.Backend.Heartbeat(ctx, o.ID, time.Minute, []string{"C2"}); err != nil || len(st) != 1 || st[0].State != lanes.Gone {
		t.Fatalf("heartbeat of the revoked borrower = %+v, %v; want Gone", st, err)
	}
	rel, err := inst.Backend.Release(ctx, o.ID, []string{"C2"})
	if err != nil || !equal(rel.Granted, []string{"W3"}) || rel.Was[0] != lanes.Gone || !rel.Revoked[0] || rel.Forced[0] {
		t.Fatalf("release of the revoked borrower = %+v, %v; want gone, revoked (its lease was lost), W3 granted", rel, err)
	}
	// A later try of that release (its reply lost) is told "revoked" too
	// (lanes.RevokedTombstone); one of the lender's, which ended by its own
	// release, finds nothing revoked.
	for _, who := range []struct {
		owner, id string
		revoked   bool
	}{{o.ID, "C2", true}, {s.Owner().ID, "A2", false}} {
		if rel, err := inst.Backend.Release(ctx, who.owner, []string{who.id}); err != nil || rel.Was[0] != lanes.Gone || rel.Revoked[0] != who.revoked {
			t.Fatalf("release of %s again = %+v, %v; want gone, revoked %v", who.id, rel, err, who.revoked)
		}
	}
	b3 := wait(t, w3)
	if b3.Token("K") <= a2.Token("K") {
		t.Fatalf("W3's token %d; want above the lender's %d", b3.Token("K"), a2.Token("K"))
	}
	release(t, b3)
}

// Invariant 10 down a chain: a lender A and its borrower B that expire
// together, B lending in turn to C with a longer lease, keep their slots
// for C: the keys pass on when C's owner releases it, not at A's deadline,
// however many steps come between (the step that reaps A and B leaves A's
// deadline at C's, not at B's old one). Waits out a short TTL where the
// instance has no Advance.
func testChainKeptForLastBorrower(t *testing.T, inst Instance) {
	b := inst.Backend
	ttl := expiryTTL(inst)
	short := newDirect(t, b, "short-owner", ttl)
	long := newDirect(t, b, "long-owner", time.Minute)
	queued := newDirect(t, b, "queued-owner", time.Minute)
	sts := short.enqueue(req("A", "K2", 1), nested(req("B", "K0", 1, "K2", 1), "A"))
	wantStates(t, sts, map[string]lanes.State{"A": lanes.Held, "B": lanes.Held})
	wantStates(t, long.enqueue(nested(req("C", "K0", 1), "B")), map[string]lanes.State{"C": lanes.Held})
	sts = queued.enqueue(req("W0", "K0", 1), req("W2", "K2", 1))
	wantStates(t, sts, map[string]lanes.State{"W0": lanes.Waiting, "W2": lanes.Waiting})
	pass(inst, 2*ttl)
	for i := range 3 { // the first step reaps A and B; none may free their keys
		for key, want := range map[string]string{"K0": "B", "K2": "A"} {
			ks := inspect(t, b, key)
			if !equal(holderIDs(ks), []string{want}) || !ks.Holders[0].Ended || len(ks.Waiters) != 1 {
				t.Fatalf("step %d after A and B expired, %s = %+v; want %s kept (Ended) for C, whose lease runs, and one waiter", i+1, key, ks, want)
			}
		}
	}
	rel := long.release("C")
	if got := slices.Sorted(slices.Values(rel.Granted)); !equal(got, []string{"W0", "W2"}) {
		t.Fatalf("C's release granted %v; want [W0 W2]: the last borrower's release frees the chain", rel.Granted)
	}
	queued.release("W0", "W2")
	assertEmpty(t, b)
}

// Invariant 13: a request refused as a lock cycle changes nothing of the
// others': a later request of the same step on a key the refused one first
// made busy is held with its limit recorded, so a third is not let in.
func testRefusedCycleKeepsLimits(t *testing.T, inst Instance) {
	b := inst.Backend
	x := session(t, b)
	hj := acquire(t, x, req("X", "J", 1))
	as := session(t, b)
	aw := enqueue(t, as, req("A", "J", 1))[0]
	o := lanes.Owner{ID: "stepper", Host: "h", PID: 1}
	st := enqueueAs(t, b, o, nested(req("R1", "K", 1, "J", 1), "A"), req("R2", "K", 1))
	if !errors.Is(st[0].Err, lanes.ErrLockCycle) {
		t.Fatalf("R1 = %+v; want refused as a lock cycle (it waits for J behind A, its own ancestor)", st[0])
	}
	if st[1].Err != nil || st[1].State != lanes.Held {
		t.Fatalf("R2 = %+v; want held", st[1])
	}
	if ks := inspect(t, b, "K"); ks.Limit != 1 || !equal(holderIDs(ks), []string{"R2"}) {
		t.Fatalf("K: limit %d holders %v; want limit 1 held by R2", ks.Limit, holderIDs(ks))
	}
	r3 := enqueueAs(t, b, lanes.Owner{ID: "third", Host: "h", PID: 2}, req("R3", "K", 1))
	if r3[0].State != lanes.Waiting {
		t.Fatalf("R3 on K (limit 1, held by R2) = %+v; want waiting", r3[0])
	}
	releaseAll(t, b, "R2", "R3")
	release(t, hj)
	release(t, wait(t, aw))
}

// Invariant 10: a borrower waiting for its other keys keeps its arrival
// place on the borrowed key once the lender lets go: a later request on
// that key is not granted ahead of it.
func testBorrowerKeepsArrivalPlace(t *testing.T, inst Instance) {
	s := session(t, inst.Backend)
	a := acquire(t, s, req("A", "K", 1))
	x := acquire(t, s, req("X", "J", 1))
	e := enqueue(t, s, nested(req("E", "K", 1, "J", 1), "A"))[0]
	l := enqueue(t, s, req("L", "K", 1))[0]
	release(t, a)
	if isReady(l) || isReady(e) {
		t.Fatalf("after the lender left: E ready %v, L ready %v; want both waiting (E first on K, blocked on J)", isReady(e), isReady(l))
	}
	if ks := inspect(t, inst.Backend, "K"); !equal(waiterIDs(ks), []string{"E", "L"}) {
		t.Fatalf("K's queue %v; want [E L]: E arrived first", waiterIDs(ks))
	}
	release(t, x)
	le := wait(t, e)
	if isReady(l) {
		t.Fatal("L was granted K while E holds it")
	}
	release(t, le)
	release(t, wait(t, l))
}

// Invariant 8 and issue 19: an id settled by its owner (a step whose reply
// was lost, given up) cannot be brought back by a late copy of the step.
func testSettledIDRefused(t *testing.T, inst Instance) {
	b := inst.Backend
	o := lanes.Owner{ID: "settler", Host: "h", PID: 1}
	enqueueAs(t, b, o, req("present", "K", 1))
	r, err := b.Settle(ctxT(t), o.ID, time.Minute, []string{"present", "absent"})
	if err != nil || r.Was[0] != lanes.Held || r.Was[1] != lanes.Gone {
		t.Fatalf("Settle(present, absent) = %+v, %v; want Was [held gone]", r, err)
	}
	st := enqueueAs(t, b, o, req("absent", "K", 1), req("present", "K", 1))
	for _, s := range st {
		if !errors.Is(s.Err, lanes.ErrCanceled) || s.State != lanes.Gone {
			t.Fatalf("Enqueue of a settled id = %+v; want refused (ErrCanceled)", s)
		}
	}
	if ks := inspect(t, b, "K"); len(ks.Holders)+len(ks.Waiters) != 0 {
		t.Fatalf("a late copy of a settled step changed K: %+v", ks)
	}
}

// Issue 19: an operator's forced release is what the owner's own release
// learns; a release that finds its entry gone for another reason (its own
// earlier try) is not told "forced".
func testForcedReleaseIsTold(t *testing.T, inst Instance) {
	b := inst.Backend
	o := lanes.Owner{ID: "forced-owner", Host: "h", PID: 1}
	enqueueAs(t, b, o, req("f", "K", 1), req("g", "L", 1))
	if _, err := b.Release(ctxT(t), "", []string{"f"}); err != nil {
		t.Fatal(err)
	}
	if r, err := b.Release(ctxT(t), o.ID, []string{"g"}); err != nil || r.Was[0] != lanes.Held || r.Forced[0] {
		t.Fatalf("Release(g) = %+v, %v; want held, not forced", r, err)
	}
	r, err := b.Release(ctxT(t), o.ID, []string{"f", "g"})
	if err != nil || r.Was[0] != lanes.Gone || !r.Forced[0] || r.Was[1] != lanes.Gone || r.Forced[1] {
		t.Fatalf("Release(f, g) again = %+v, %v; want both gone, f forced and g not", r, err)
	}
}

// A heartbeat tells an owner which of its gone entries an operator
// released by force (Status.Forced, heartbeat.lua's "f"), holder or
// waiter, while the backend remembers it; an entry its owner released, one
// that expired, one never there and a new entry of a forced id are gone
// without it.
func testHeartbeatTellsForcedRelease(t *testing.T, inst Instance) {
	b := inst.Backend
	o := lanes.Owner{ID: "forced-beat", Host: "h", PID: 1}
	dead := lanes.Owner{ID: "forced-beat-dead", Host: "h", PID: 2}
	enqueueAs(t, b, o, req("hf", "K", 1), req("wf", "K", 1), req("hr", "L", 1), req("again", "N", 1))
	if _, err := b.Enqueue(ctxT(t), dead, 300*time.Millisecond, []lanes.Request{req("he", "M", 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Release(ctxT(t), "", []string{"wf", "hf", "again"}); err != nil {
		t.Fatal(err)
	}
	if r, err := b.Release(ctxT(t), o.ID, []string{"hr"}); err != nil || r.Was[0] != lanes.Held {
		t.Fatalf("Release(hr) = %+v, %v; want held", r, err)
	}
	enqueueAs(t, b, o, req("again", "N", 1)) // a new entry of a forced id
	if r, err := b.Release(ctxT(t), o.ID, []string{"again"}); err != nil || r.Was[0] != lanes.Held || r.Forced[0] {
		t.Fatalf("Release(again) = %+v, %v; want held, not forced", r, err)
	}
	passTTL(inst, 300*time.Millisecond)
	if inst.Advance == nil {
		time.Sleep(600 * time.Millisecond) // past he's deadline on the real clock: not renewed then
	}
	ids := []string{"hf", "wf", "hr", "again", "nosuch"}
	want := []bool{true, true, false, false, false}
	sts, err := b.Heartbeat(ctxT(t), o.ID, time.Minute, ids)
	if err != nil || len(sts) != len(ids) {
		t.Fatalf("Heartbeat(%v) = %+v, %v", ids, sts, err)
	}
	for i, st := range sts {
		if st.ID != ids[i] || st.State != lanes.Gone || st.Forced != want[i] || st.Err != nil {
			t.Errorf("Heartbeat status of %s = %+v; want gone, Forced %v", ids[i], st, want[i])
		}
	}
	sts, err = b.Heartbeat(ctxT(t), dead.ID, time.Minute, []string{"he"})
	if err != nil || len(sts) != 1 || sts[0].State != lanes.Gone || sts[0].Forced {
		t.Fatalf("Heartbeat(he), expired = %+v, %v; want gone, not forced", sts, err)
	}
}

// Issue 19: a release whose reply was lost, and that the Session sends
// again, reports success: the entry gone before the lease's local deadline
// was this caller's own doing. The lane passes on at once.
func testLostReleaseReplyIsSuccess(t *testing.T, inst Instance) {
	f := &Faulty{Backend: inst.Backend}
	s := session(t, f, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	l := acquire(t, s, req("r", "K", 1))
	w := enqueue(t, session(t, inst.Backend), req("w", "K", 1))[0]
	f.LoseReplies(1)
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatalf("Release() whose first reply was lost = %v; want nil: the release ran", err)
	}
	release(t, wait(t, w))
}

// Issue 19: an Acquire whose enqueue replies are all lost fails, and what
// its steps created is settled: the next acquirer is granted at once, not
// after the lost entry's TTL.
func testLostEnqueueReplyIsSettled(t *testing.T, inst Instance) {
	f := &Faulty{Backend: inst.Backend}
	s := session(t, f, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	f.LoseReplies(1 << 30)
	t.Cleanup(func() { f.LoseReplies(0) }) // before the Session's Close, which waits for its settling
	ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	defer cancel()
	// ErrUnavailable, or ErrWaitTimeout when the wait's deadline passed
	// while a step was still unanswered (a slow machine): either way the
	// entry the step may have made is the Session's to settle.
	if l, err := s.Acquire(ctx, req("", "K", 1)); err == nil || !(errors.Is(err, lanes.ErrUnavailable) || errors.Is(err, lanes.ErrWaitTimeout)) {
		if l != nil {
			release(t, l)
		}
		t.Fatalf("Acquire() with every enqueue reply lost = %v; want an error wrapping ErrUnavailable or ErrWaitTimeout", err)
	}
	f.LoseReplies(0)
	other := session(t, inst.Backend)
	ctx2, cancel2 := context.WithTimeout(ctxT(t), 10*time.Second) // the lost entry's TTL is a minute
	defer cancel2()
	l, err := other.Acquire(ctx2, req("next", "K", 1))
	if err != nil {
		t.Fatalf("Acquire(K) after the lost step = %v; want granted: the lost entry must be settled, not left to its TTL", err)
	}
	release(t, l)
}

// Issues 10 and 19: no entry is renewed past its deadline, and an expired
// holder blocks its key no longer than its deadline, whatever the backlog
// of expired waiters elsewhere.
func testExpiredHolderFreesDespiteBacklog(t *testing.T, inst Instance) {
	b := inst.Backend
	dead := lanes.Owner{ID: "dead-backlog", Host: "gone", PID: 1}
	const short = 300 * time.Millisecond
	var backlog []lanes.Request
	for i := range 150 { // more than one step reaps
		backlog = append(backlog, req("w"+string(rune('a'+i%26))+string(rune('a'+i/26)), "big", 1))
	}
	enqueueAs(t, b, dead, backlog...)
	enqueueAs(t, b, dead, req("h", "small", 1))
	if inst.Advance != nil {
		inst.Advance(2 * short)
	} else {
		time.Sleep(2 * short)
	}
	if st, err := b.Heartbeat(ctxT(t), dead.ID, time.Minute, []string{"h"}); err != nil || st[0].State != lanes.Gone {
		t.Fatalf("Heartbeat of an entry past its deadline = %+v, %v; want gone, not renewed", st, err)
	}
	st := enqueueAs(t, b, lanes.Owner{ID: "fresh", Host: "h", PID: 2}, req("fresh", "small", 1))
	if st[0].State != lanes.Held {
		t.Fatalf("Enqueue(small) after its holder expired = %+v; want held at once", st[0])
	}
	releaseAll(t, b, "fresh")
	eventually(t, "the dead waiters reaped", func() bool { return len(inspect(t, b, "big").Waiters) == 0 })
}

// enqueueAs runs one Enqueue step for owner o with a TTL of a minute (300ms
// for the owner "dead-backlog").
func enqueueAs(t *testing.T, b lanes.Backend, o lanes.Owner, reqs ...lanes.Request) []lanes.Status {
	t.Helper()
	ttl := time.Minute
	if o.ID == "dead-backlog" {
		ttl = 300 * time.Millisecond
	}
	st, err := b.Enqueue(ctxT(t), o, ttl, reqs)
	if err != nil {
		t.Fatalf("Enqueue(%s) = %v", o.ID, err)
	}
	return st
}

// releaseAll removes ids whoever owns them, as an operator would.
func releaseAll(t *testing.T, b lanes.Backend, ids ...string) {
	t.Helper()
	if _, err := b.Release(ctxT(t), "", ids); err != nil {
		t.Fatalf("Release(%v) = %v", ids, err)
	}
}

// Invariant 10, a lender kept before its borrower ends: A2 lends K2 to A1
// (which holds K0 in its own right) and expires first, kept for A1
// (revoked) with A1's deadline; then C, nested under A1 and waiting for K3,
// is granted K3 and borrows K0 from A1 (ended), with a long lease. When
// A1's deadline comes, A2's is the same: one step lists both as due. The
// first one reaped ends A1, kept for C with C's deadline (raising A2's);
// the step then expires the other all the same, as listed before the
// raise: A2 first, A2's removal ends A1 and then A1 (kept, listed) is
// removed with C; A1 first, A1 ends and raises A2, then A2 (kept, listed)
// is removed with its revoked A1, and A1 with C. Either way K0 and K3 pass
// on while C's lease runs and its owner released nothing; memory, miniredis
// and real Redis alike (each reaps a list of due ids without looking at
// the deadline again).
func testChainLenderRaisedInItsReap(t *testing.T, inst Instance) {
	b := inst.Backend
	ttl := expiryTTL(inst)
	a := newDirect(t, b, "a-owner", ttl)
	bo := newDirect(t, b, "b-owner", 3*ttl)
	long := newDirect(t, b, "long-owner", time.Minute)
	queued := newDirect(t, b, "queued-owner", time.Minute)
	wantStates(t, a.enqueue(req("A2", "K2", 1)), map[string]lanes.State{"A2": lanes.Held})
	wantStates(t, bo.enqueue(nested(req("A1", "K0", 1, "K2", 1), "A2")), map[string]lanes.State{"A1": lanes.Held})
	wantStates(t, long.enqueue(req("X", "K3", 1)), map[string]lanes.State{"X": lanes.Held})
	wantStates(t, long.enqueue(nested(req("C", "K0", 1, "K3", 1), "A2", "A1")), map[string]lanes.State{"C": lanes.Waiting})
	pass(inst, 2*ttl) // A2 expires; B (A1) still runs
	if ks := inspect(t, b, "K2"); !equal(holderIDs(ks), []string{"A2"}) || !ks.Holders[0].Ended {
		t.Fatalf("after A2 expired, K2 = %+v; want A2 kept (Ended) for A1", ks)
	}
	if rel := long.release("X"); !equal(rel.Granted, []string{"C"}) {
		t.Fatalf("X's release granted %v; want [C]", rel.Granted)
	}
	wantStates(t, queued.enqueue(req("W0", "K0", 1), req("W2", "K2", 1), req("W3", "K3", 1)),
		map[string]lanes.State{"W0": lanes.Waiting, "W2": lanes.Waiting, "W3": lanes.Waiting})
	pass(inst, 2*ttl) // A1's deadline, and so A2's, passed; C's runs
	for key, want := range map[string]string{"K0": "A1", "K2": "A2", "K3": "C"} {
		ks := inspect(t, b, key)
		if !equal(holderIDs(ks), []string{want}) || len(ks.Waiters) != 1 {
			t.Fatalf("after A1 and A2 expired in one step, %s = %+v; want %s holding for C, whose lease runs, and one waiter", key, ks, want)
		}
	}
	rel := long.release("C")
	if got := slices.Sorted(slices.Values(rel.Granted)); !equal(got, []string{"W0", "W2", "W3"}) {
		t.Fatalf("C's release granted %v; want [W0 W2 W3]", rel.Granted)
	}
	queued.release("W0", "W2", "W3")
	assertEmpty(t, b)
}

// ChainKeptForLastBorrower with more entries expiring in the step than one
// step reaps (REAP_MAX, 100, in lib.lua): 99 more holders of the short
// owner, whose ids sort between A's and B's, expire with A and B. The
// first step reaps A and those 99, leaving B (its borrower) for the next:
// A is kept with B's deadline, passed already. The contract is the same
// as with one step: A and B keep their slots for C, whose lease runs.
func testChainKeptPastReapMax(t *testing.T, inst Instance) {
	b := inst.Backend
	ttl := expiryTTL(inst)
	short := newDirect(t, b, "short-owner", ttl)
	long := newDirect(t, b, "long-owner", time.Minute)
	queued := newDirect(t, b, "queued-owner", time.Minute)
	reqs := []lanes.Request{req("A", "K2", 1), nested(req("B", "K0", 1, "K2", 1), "A")}
	for i := range 99 {
		reqs = append(reqs, req(fmt.Sprintf("A%02d", i), "KF", 99))
	}
	sts := short.enqueue(reqs...)
	wantStates(t, sts, map[string]lanes.State{"A": lanes.Held, "B": lanes.Held, "A00": lanes.Held, "A98": lanes.Held})
	wantStates(t, long.enqueue(nested(req("C", "K0", 1), "B")), map[string]lanes.State{"C": lanes.Held})
	sts = queued.enqueue(req("W0", "K0", 1), req("W2", "K2", 1))
	wantStates(t, sts, map[string]lanes.State{"W0": lanes.Waiting, "W2": lanes.Waiting})
	pass(inst, 2*ttl)
	for i := range 3 {
		for key, want := range map[string]string{"K0": "B", "K2": "A"} {
			ks := inspect(t, b, key)
			if !equal(holderIDs(ks), []string{want}) || !ks.Holders[0].Ended || len(ks.Waiters) != 1 {
				t.Fatalf("step %d after A, B and 99 more expired, %s = %+v; want %s kept (Ended) for C, whose lease runs, and one waiter", i+1, key, ks, want)
			}
		}
	}
	rel := long.release("C")
	if got := slices.Sorted(slices.Values(rel.Granted)); !equal(got, []string{"W0", "W2"}) {
		t.Fatalf("C's release granted %v; want [W0 W2]", rel.Granted)
	}
	queued.release("W0", "W2")
	assertEmpty(t, b)
}

// The plainest chain whose middle outlives its head: A lends K2 to B (B
// holds K0 in its own right), B lends K0 to C, all three held; A's lease
// is the shortest, B's longer, C's longest. A expires first: kept for B
// (revoked) with B's deadline; C, borrowing from B only, is not revoked.
// At B's deadline both A and B are due in one step, and the step removes
// the whole chain (see ChainLenderRaisedInItsReap): C is revoked and
// removed at once, and K0 passes on while C's lease runs.
func testChainMiddleOutlivesLender(t *testing.T, inst Instance) {
	b := inst.Backend
	ttl := expiryTTL(inst)
	a := newDirect(t, b, "a-owner", ttl)
	mid := newDirect(t, b, "b-owner", 3*ttl)
	long := newDirect(t, b, "long-owner", time.Minute)
	queued := newDirect(t, b, "queued-owner", time.Minute)
	wantStates(t, a.enqueue(req("A", "K2", 1)), map[string]lanes.State{"A": lanes.Held})
	wantStates(t, mid.enqueue(nested(req("B", "K0", 1, "K2", 1), "A")), map[string]lanes.State{"B": lanes.Held})
	wantStates(t, long.enqueue(nested(req("C", "K0", 1), "A", "B")), map[string]lanes.State{"C": lanes.Held})
	wantStates(t, queued.enqueue(req("W0", "K0", 1), req("W2", "K2", 1)), map[string]lanes.State{"W0": lanes.Waiting, "W2": lanes.Waiting})
	pass(inst, 2*ttl) // A expired: kept for B
	if ks := inspect(t, b, "K2"); !equal(holderIDs(ks), []string{"A"}) || !ks.Holders[0].Ended {
		t.Fatalf("after A expired, K2 = %+v; want A kept (Ended) for B", ks)
	}
	pass(inst, 2*ttl) // B's deadline (and A's) passed; C's lease runs
	if ks := inspect(t, b, "K0"); !equal(holderIDs(ks), []string{"B"}) || !equal(waiterIDs(ks), []string{"W0"}) {
		t.Fatalf("after B expired, K0 = %+v; want B kept for C, whose lease runs, and W0 waiting", ks)
	}
	// PROTOCOL.md: a chain of ended lenders lasts as long as the last
	// borrower that holds (B, ending kept for C, raises A's deadline).
	if ks := inspect(t, b, "K2"); !equal(holderIDs(ks), []string{"A"}) || !equal(waiterIDs(ks), []string{"W2"}) {
		t.Fatalf("after B expired, K2 = %+v; want A kept (the chain lasts as long as C) and W2 waiting", ks)
	}
	if rel := long.release("C"); !equal(slices.Sorted(slices.Values(rel.Granted)), []string{"W0", "W2"}) {
		t.Fatalf("C's release granted %v; want [W0 W2]", rel.Granted)
	}
	queued.release("W0", "W2")
	assertEmpty(t, b)
}
