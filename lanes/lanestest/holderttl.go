package lanestest

import (
	"context"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// Status.HolderTTL: a waiting status tells how long the first lease of a
// holder of its keys has left, so that a waiter behind a holder whose
// runner died is granted when that lease runs out, not at its next
// heartbeat (a new user's trial of lanectl lock saw the takeover come up
// to a third of the waiter's TTL after the dead holder's lease ran out).

// A waiting status that one holder's end would grant (on each of its keys
// with no room for it, the holders and waiters before it are exactly the
// limit) carries the time left on the first lease to run out among those
// holders (the holder of the shorter TTL), on Enqueue and on Heartbeat;
// one further back (a second waiter of a full key of limit 2 needs two
// holders' ends), or whose keys have room, none; a held status none. A
// grant earlier in the same step counts. Break-it reviews found every
// waiter of a key polling at its holder's TTL (10,000 waiters behind a
// 100ms holder took 94% of Redis's CPU and cost the holder its lease), and
// then every one of the first Limit waiters of a full semaphore.
func testHolderTTL(t *testing.T, inst Instance) {
	long := newDirect(t, inst.Backend, "ttl-long", time.Minute)
	short := newDirect(t, inst.Backend, "ttl-short", 3*time.Second)
	waiter := newDirect(t, inst.Backend, "ttl-waiter", time.Hour)
	wantStates(t, long.enqueue(req("h1", "a", 2)), map[string]lanes.State{"h1": lanes.Held})
	sts := short.enqueue(req("h2", "a", 2))
	wantStates(t, sts, map[string]lanes.State{"h2": lanes.Held})
	if d := sts["h2"].HolderTTL; d != 0 {
		t.Errorf("Enqueue: held h2 has HolderTTL %v; want 0", d)
	}
	// a (limit 2) is full: w is its first waiter, f1 the second, f2 the
	// third; w also waits on b, which has room; x waits on b behind w.
	sts = waiter.enqueue(req("w", "a", 2, "b", 1), req("x", "b", 1), req("f1", "a", 2), req("f2", "a", 2))
	wantStates(t, sts, map[string]lanes.State{"w": lanes.Waiting, "x": lanes.Waiting, "f1": lanes.Waiting, "f2": lanes.Waiting})
	check := func(step string, sts map[string]lanes.Status) {
		t.Helper()
		if d := sts["w"].HolderTTL; d <= 0 || d > 3*time.Second {
			t.Errorf("%s: w behind leases of 1m and 3s has HolderTTL %v; want in (0, 3s]", step, d)
		}
		if d := sts["f1"].HolderTTL; d != 0 {
			t.Errorf("%s: f1, second waiter of a full key of limit 2, has HolderTTL %v; want 0 (two holders must end)", step, d)
		}
		if d := sts["x"].HolderTTL; d != 0 {
			t.Errorf("%s: x, behind w on b (limit 1, no holder), has HolderTTL %v; want 0", step, d)
		}
		if d := sts["f2"].HolderTTL; d != 0 {
			t.Errorf("%s: f2, third waiter of a (limit 2), has HolderTTL %v; want 0", step, d)
		}
	}
	check("Enqueue", sts)
	check("Heartbeat", waiter.status("w", "x", "f1", "f2"))
	// One step of an owner with a 2s TTL: g is granted d, q queued behind
	// it: q's first lease to run out is g's, granted in q's own step.
	short2 := newDirect(t, inst.Backend, "ttl-short2", 2*time.Second)
	sts = short2.enqueue(req("g", "d", 1), req("q", "d", 1))
	wantStates(t, sts, map[string]lanes.State{"g": lanes.Held, "q": lanes.Waiting})
	if d := sts["q"].HolderTTL; d <= 0 || d > 2*time.Second {
		t.Errorf("Enqueue: q, behind g granted d in the same step for 2s, has HolderTTL %v; want in (0, 2s]", d)
	}
	short2.release("g", "q")
	short.release("h2")
	long.release("h1")
	wantStates(t, waiter.status("w"), map[string]lanes.State{"w": lanes.Held})
	waiter.release("w", "x", "f1", "f2")
}

// A Session's waiter behind a holder whose runner died is granted when the
// holder's lease runs out, long before its own next heartbeat (20s here):
// it polls at the HolderTTL its status gave. Real clock, as the Session's
// timer.
func testDeadHolderTakenOverAtItsDeadline(t *testing.T, inst Instance) {
	dead := deadOwner(t, inst.Backend, 400*time.Millisecond, req("dead", "k", 1))
	s := session(t, inst.Backend, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second) // half the heartbeat interval
	defer cancel()
	l, err := s.Acquire(ctx, req("w", "k", 1))
	if err != nil {
		t.Fatalf("Acquire(k) behind a dead holder of a 400ms lease = %v; want a grant when that lease runs out, before the next heartbeat", err)
	}
	if l.Token("k") <= dead[0].Tokens["k"] {
		t.Errorf("token after the takeover %d; want above the dead holder's %d", l.Token("k"), dead[0].Tokens["k"])
	}
	release(t, l)
}

// A waiter of several keys, each held, gets the latest of their holders'
// first deadlines: a holder's end frees it only once the other keys have
// room too (the earliest made a waiter of two keys poll at every renewal
// of a short lease on one while a long one held the other: a review saw
// 500 such waiters cost 25,000 commands/s). When the holder of the later
// one leaves without granting it, the step tells its owner to look again
// (a hint of its id alone), and its next status gives the other holder's
// deadline: without it, a review saw a dead holder taken over 13.4s late.
func testHolderTTLOfSeveralKeys(t *testing.T, inst Instance) {
	long := newDirect(t, inst.Backend, "ttl-mk-long", time.Minute)
	short := newDirect(t, inst.Backend, "ttl-mk-short", 3*time.Second)
	// w1 of a TTL no longer than any before (Redis: the lean enqueue), w2
	// of a longer one (the general path)
	w1 := newDirect(t, inst.Backend, "ttl-mk-w1", time.Minute)
	w2 := newDirect(t, inst.Backend, "ttl-mk-w2", time.Hour)
	wantStates(t, long.enqueue(req("ha", "a", 1), req("hc", "c", 1)), map[string]lanes.State{"ha": lanes.Held, "hc": lanes.Held})
	wantStates(t, short.enqueue(req("hb", "b", 1), req("hd", "d", 1)), map[string]lanes.State{"hb": lanes.Held, "hd": lanes.Held})
	check := func(step string, sts map[string]lanes.Status, id string, lo, hi time.Duration) {
		t.Helper()
		if st := sts[id]; st.State != lanes.Waiting || st.HolderTTL <= lo || st.HolderTTL > hi {
			t.Errorf("%s: %s = %v, HolderTTL %v; want waiting, in (%v, %v]", step, id, st.State, st.HolderTTL, lo, hi)
		}
	}
	check("Enqueue behind holders of 1m and 3s", w1.enqueue(req("w1", "a", 1, "b", 1)), "w1", 3*time.Second, time.Minute)
	check("Enqueue behind holders of 1m and 3s", w2.enqueue(req("w2", "c", 1, "d", 1)), "w2", 3*time.Second, time.Minute)
	// w3 waits on e, held, and on s (limit 3), whose two holders leave it
	// room: a holder leaving s was not to make room for it, and tells it
	// nothing (a review saw every waiter within a churning semaphore's
	// room told at each release)
	w3 := newDirect(t, inst.Backend, "ttl-mk-w3", time.Minute)
	sem := newDirect(t, inst.Backend, "ttl-mk-sem", time.Minute)
	wantStates(t, long.enqueue(req("he", "e", 1)), map[string]lanes.State{"he": lanes.Held})
	wantStates(t, sem.enqueue(req("s1", "s", 3), req("s2", "s", 3)), map[string]lanes.State{"s1": lanes.Held, "s2": lanes.Held})
	wantStates(t, w3.enqueue(req("w3", "e", 1, "s", 3)), map[string]lanes.State{"w3": lanes.Waiting})
	hints := make(chan string, 16)
	for _, o := range []string{"ttl-mk-w1", "ttl-mk-w2", "ttl-mk-w3"} {
		unsub, err := inst.Backend.Subscribe(ctxT(t), o, func(hs []lanes.Hint) {
			for _, h := range hs {
				hints <- h.ID
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer unsub()
	}
	sem.release("s1")        // first: a hint to w3 would come before those below
	long.release("ha", "hc") // grants neither: b and d are held
	told := map[string]bool{}
	for !told["w1"] || !told["w2"] {
		select {
		case id := <-hints:
			told[id] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("hints after the release of ha and hc: %v; want w1 and w2 told to look again", told)
		}
	}
	if told["w3"] {
		t.Error("w3 was told to look again when a holder left s, which had room for it")
	}
	check("Heartbeat after the 1m holders left", w1.status("w1"), "w1", 0, 3*time.Second)
	check("Heartbeat after the 1m holders left", w2.status("w2"), "w2", 0, 3*time.Second)
	short.release("hb", "hd")
	wantStates(t, w1.status("w1"), map[string]lanes.State{"w1": lanes.Held})
	wantStates(t, w2.status("w2"), map[string]lanes.State{"w2": lanes.Held})
	w1.release("w1")
	w2.release("w2")
	w3.release("w3")
	sem.release("s2")
	long.release("he")
}

// A Session's waiter of two keys, one held by a live holder that releases
// and one by a holder whose runner died, is granted when the dead lease
// runs out, long before its own next heartbeat (20s): the release of the
// live holder tells it to look again, and the look gives the dead one's
// deadline as its holder TTL. Real clock, as the Session's timer.
func testDeadHolderOfOneKeyTakenOverAtItsDeadline(t *testing.T, inst Instance) {
	dead := deadOwner(t, inst.Backend, 1500*time.Millisecond, req("dead", "b", 1))
	live := session(t, inst.Backend, lanes.WithTTL(time.Minute))
	la := acquire(t, live, req("ha", "a", 1))
	s := session(t, inst.Backend, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	tk := enqueue(t, s, req("w", "a", 1, "b", 1))[0]
	release(t, la)                                              // grants nobody: b is held
	ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second) // half the heartbeat interval
	defer cancel()
	l, err := tk.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait(a, b) behind a released holder of a and a dead holder of b (1.5s lease) = %v; want a grant when that lease runs out, before the next heartbeat", err)
	}
	if l.Token("b") <= dead[0].Tokens["b"] {
		t.Errorf("token of b after the takeover %d; want above the dead holder's %d", l.Token("b"), dead[0].Tokens["b"])
	}
	release(t, l)
}

// A waiter that moves up to the limit on a key with holders (a waiter
// ahead of it left) is told to look again (a hint of its id), and its
// next status gives the holder TTL it now has: before, it had 0 and
// learned only at its next heartbeat, and a review saw a dead holder taken
// over 14s late after the waiter ahead cancelled.
func testWaiterMovedUpIsToldToLookAgain(t *testing.T, inst Instance) {
	short := newDirect(t, inst.Backend, "mu-short", 3*time.Second)
	a := newDirect(t, inst.Backend, "mu-a", time.Minute)
	b := newDirect(t, inst.Backend, "mu-b", time.Minute)
	wantStates(t, short.enqueue(req("h", "k", 1)), map[string]lanes.State{"h": lanes.Held})
	wantStates(t, a.enqueue(req("v", "k", 1)), map[string]lanes.State{"v": lanes.Waiting})
	sts := b.enqueue(req("w", "k", 1))
	if st := sts["w"]; st.State != lanes.Waiting || st.HolderTTL != 0 {
		t.Fatalf("Enqueue: w behind v = %v, HolderTTL %v; want waiting, 0", st.State, st.HolderTTL)
	}
	hints := make(chan string, 16)
	unsub, err := inst.Backend.Subscribe(ctxT(t), "mu-b", func(hs []lanes.Hint) {
		for _, h := range hs {
			hints <- h.ID
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	a.release("v") // a cancelled wait
	select {
	case id := <-hints:
		if id != "w" {
			t.Errorf("hint to w's owner after v left names %q; want w", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no hint to w's owner after v, ahead of it, left; want w told to look again")
	}
	if st := b.status("w")["w"]; st.State != lanes.Waiting || st.HolderTTL <= 0 || st.HolderTTL > 3*time.Second {
		t.Errorf("Heartbeat: w, now first behind h (3s) = %v, HolderTTL %v; want waiting, in (0, 3s]", st.State, st.HolderTTL)
	}
	// the same where the waiter ahead is settled (Redis: the general
	// path's step, where a cancel above took the lean one)
	wantStates(t, short.enqueue(req("h2", "k2", 1)), map[string]lanes.State{"h2": lanes.Held})
	wantStates(t, a.enqueue(req("v2", "k2", 1)), map[string]lanes.State{"v2": lanes.Waiting})
	wantStates(t, b.enqueue(req("w2", "k2", 1)), map[string]lanes.State{"w2": lanes.Waiting})
	if _, err := inst.Backend.Settle(ctxT(t), "mu-a", time.Second, []string{"v2"}); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-hints:
		if id != "w2" {
			t.Errorf("hint to w2's owner after v2 was settled names %q; want w2", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no hint to w2's owner after v2, ahead of it, was settled; want w2 told to look again")
	}
	short.release("h", "h2")
	wantStates(t, b.status("w", "w2"), map[string]lanes.State{"w": lanes.Held, "w2": lanes.Held})
	b.release("w", "w2")
}

// A Session's waiter behind another waiter and a holder whose runner
// died is granted when that lease runs out, long before its own next
// heartbeat (20s), though the waiter ahead cancelled after it queued.
// Real clock, as the Session's timer.
func testDeadHolderTakenOverAfterTheWaiterAheadLeft(t *testing.T, inst Instance) {
	dead := deadOwner(t, inst.Backend, 1500*time.Millisecond, req("dead", "k", 1))
	ahead := session(t, inst.Backend, lanes.WithTTL(time.Minute))
	tv := enqueue(t, ahead, req("v", "k", 1))[0]
	s := session(t, inst.Backend, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	tk := enqueue(t, s, req("w", "k", 1))[0]
	cctx, ccancel := context.WithCancel(ctxT(t))
	ccancel()
	if _, err := tv.Wait(cctx); err == nil {
		t.Fatal("v's Wait on a cancelled context returned a lease")
	}
	ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second) // half the heartbeat interval
	defer cancel()
	l, err := tk.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait(k) behind a dead holder (1.5s lease) after the waiter ahead left = %v; want a grant when that lease runs out, before the next heartbeat", err)
	}
	if l.Token("k") <= dead[0].Tokens["k"] {
		t.Errorf("token after the takeover %d; want above the dead holder's %d", l.Token("k"), dead[0].Tokens["k"])
	}
	release(t, l)
}

// A waiter told to look again for several reasons in one step (a holder
// of one of its keys left, waiters ahead of it left its other keys) is
// told once: a review saw one step's message name it four times.
func testLookAgainOnceAStep(t *testing.T, inst Instance) {
	a := newDirect(t, inst.Backend, "once-a", time.Minute)
	x := newDirect(t, inst.Backend, "once-x", 3*time.Second)
	e := newDirect(t, inst.Backend, "once-e", time.Minute)
	wantStates(t, a.enqueue(req("ha", "k", 1)), map[string]lanes.State{"ha": lanes.Held})
	wantStates(t, x.enqueue(req("x1", "j1", 1), req("x2", "j2", 1)), map[string]lanes.State{"x1": lanes.Held, "x2": lanes.Held})
	wantStates(t, a.enqueue(req("v1", "j1", 1), req("v2", "j2", 1)), map[string]lanes.State{"v1": lanes.Waiting, "v2": lanes.Waiting})
	wantStates(t, e.enqueue(req("e", "k", 1, "j1", 1, "j2", 1)), map[string]lanes.State{"e": lanes.Waiting})
	msgs := make(chan []string, 8)
	unsub, err := inst.Backend.Subscribe(ctxT(t), "once-e", func(hs []lanes.Hint) {
		var ids []string
		for _, h := range hs {
			ids = append(ids, h.ID)
		}
		msgs <- ids
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	a.release("ha", "v1", "v2")
	select {
	case ids := <-msgs:
		if len(ids) != 1 || ids[0] != "e" {
			t.Errorf("the step's hint to e's owner names %v; want e once", ids)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no hint to e's owner after ha, v1 and v2 left; want e told to look again")
	}
	x.release("x1", "x2")
	wantStates(t, e.status("e"), map[string]lanes.State{"e": lanes.Held})
	e.release("e")
}

// A waiter of several keys that comes within one key's room in a step
// while another key holds it back is told to look again, whether its place
// there was at the limit (its holder TTL may have been that key's holder's,
// the later one) or past it (its holder TTL was 0); and a waiter that moves
// up to the limit because a holder left whose slot no waiter took is told
// too (its holder TTL was 0). Each look gives the holder TTL of the key
// still holding it back. A review saw a dead holder taken over 18.5s late
// when the waiter before a waiter of two keys cancelled.
func testWaiterWithinRoomIsToldToLookAgain(t *testing.T, inst Instance) {
	long := newDirect(t, inst.Backend, "wr-long", time.Minute)
	short := newDirect(t, inst.Backend, "wr-short", 3*time.Second)
	xo := newDirect(t, inst.Backend, "wr-x", time.Minute)
	wo := newDirect(t, inst.Backend, "wr-w", time.Minute)
	hints := make(chan string, 16)
	told := func(step, want string) {
		t.Helper()
		select {
		case id := <-hints:
			if id != want {
				t.Errorf("%s: hint to %s's owner names %q; want %s", step, want, id, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no hint to %s's owner; want it told to look again", step, want)
		}
	}
	checkTTL := func(step, id string, st lanes.Status, lo, hi time.Duration) {
		t.Helper()
		if st.State != lanes.Waiting || st.HolderTTL <= lo || st.HolderTTL > hi {
			t.Errorf("%s: %s = %v, HolderTTL %v; want waiting, in (%v, %v]", step, id, st.State, st.HolderTTL, lo, hi)
		}
	}

	// 1. At the limit before: a (limit 2) has ha and x (x is held back by
	// c); w waits on a and on b (held 3s). x leaves: w is within a's room.
	wantStates(t, long.enqueue(req("ha", "a", 2), req("hc", "c", 1)), map[string]lanes.State{"ha": lanes.Held, "hc": lanes.Held})
	// (subscribed once the namespace's state is made: its making is told
	// on the namespace's channel)
	unsub, err := inst.Backend.Subscribe(ctxT(t), "wr-w", func(hs []lanes.Hint) {
		for _, h := range hs {
			if len(h.Tokens) > 0 {
				hints <- h.ID + " granted"
			} else {
				hints <- h.ID
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	wantStates(t, short.enqueue(req("hb", "b", 1)), map[string]lanes.State{"hb": lanes.Held})
	wantStates(t, xo.enqueue(req("x", "a", 2, "c", 1)), map[string]lanes.State{"x": lanes.Waiting})
	checkTTL("Enqueue behind holders of 1m and 3s", "w", wo.enqueue(req("w", "a", 2, "b", 1))["w"], 3*time.Second, time.Minute)
	xo.release("x")
	told("x, before w on a, left", "w")
	checkTTL("Heartbeat after x left", "w", wo.status("w")["w"], 0, 3*time.Second)

	// 2. Past the limit before: g (limit 1) has hg and y, both long's; z
	// waits on g and on b2 (held 3s). hg and y leave in one step.
	wantStates(t, long.enqueue(req("hg", "g", 1), req("y", "g", 1)), map[string]lanes.State{"hg": lanes.Held, "y": lanes.Waiting})
	wantStates(t, short.enqueue(req("hb2", "b2", 1)), map[string]lanes.State{"hb2": lanes.Held})
	if st := wo.enqueue(req("z", "g", 1, "b2", 1))["z"]; st.State != lanes.Waiting || st.HolderTTL != 0 {
		t.Errorf("Enqueue: z behind hg and y = %v, HolderTTL %v; want waiting, 0", st.State, st.HolderTTL)
	}
	long.release("hg", "y")
	told("hg and y, before z on g, left", "z")
	checkTTL("Heartbeat after hg and y left", "z", wo.status("z")["z"], 0, 3*time.Second)

	// 3. s (limit 2) has hs1 (1m) and hs2 (3s); v waits on s and on c2
	// (held), u on s behind v. hs1 leaves: v comes within the room and is
	// not granted (c2 holds it back), u moves up to the limit.
	wantStates(t, long.enqueue(req("hs1", "s", 2), req("hc2", "c2", 1)), map[string]lanes.State{"hs1": lanes.Held, "hc2": lanes.Held})
	wantStates(t, short.enqueue(req("hs2", "s", 2)), map[string]lanes.State{"hs2": lanes.Held})
	wantStates(t, xo.enqueue(req("v", "s", 2, "c2", 1)), map[string]lanes.State{"v": lanes.Waiting})
	if st := wo.enqueue(req("u", "s", 2))["u"]; st.State != lanes.Waiting || st.HolderTTL != 0 {
		t.Errorf("Enqueue: u behind v = %v, HolderTTL %v; want waiting, 0", st.State, st.HolderTTL)
	}
	long.release("hs1")
	told("hs1 left s, its slot granted to nobody", "u")
	checkTTL("Heartbeat after hs1 left", "u", wo.status("u")["u"], 0, 3*time.Second)

	// 4. A hand-off tells no one: n1 (of h and a free key) is granted h
	// when hh leaves, and n2, behind it, moves up to the limit.
	wantStates(t, long.enqueue(req("hh", "h", 1)), map[string]lanes.State{"hh": lanes.Held})
	wantStates(t, xo.enqueue(req("n1", "h", 1, "q", 1)), map[string]lanes.State{"n1": lanes.Waiting})
	wantStates(t, wo.enqueue(req("n2", "h", 1)), map[string]lanes.State{"n2": lanes.Waiting})
	long.release("hh")
	wantStates(t, xo.status("n1"), map[string]lanes.State{"n1": lanes.Held})
	xo.release("n1") // a hand-off to n2, whose owner hears of its grant
	select {
	case id := <-hints:
		if id != "n2 granted" {
			t.Errorf("hint to wr-w's owner: %q; want n2's grant, and no look again before it (a hand-off tells no one)", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no grant hint for n2")
	}
	wantStates(t, wo.status("n2"), map[string]lanes.State{"n2": lanes.Held})
	wo.release("n2")
	select {
	case id := <-hints:
		t.Errorf("hint to wr-w's owner names %q; want none past those above", id)
	default:
	}
	short.release("hb", "hb2", "hs2")
	long.release("hc", "hc2")
	wantStates(t, wo.status("w", "z", "u"), map[string]lanes.State{"w": lanes.Held, "z": lanes.Held, "u": lanes.Held})
	wantStates(t, xo.status("v"), map[string]lanes.State{"v": lanes.Held})
	wo.release("w", "z", "u")
	xo.release("v")
	long.release("ha")
}
