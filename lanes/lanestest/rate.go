package lanestest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// Rate lanes (issue 15): a key's grants spend at most Rate.Limit units in
// any window of Rate.Per, in the key's FIFO order, on every backend. Where
// the instance has no Advance (a real Redis server) the windows run on the
// real clock; a check that the window has not passed yet is made only while
// it surely has not.

// rateReq is a request for key with limit, rate and cost.
func rateReq(id, key string, limit int, r lanes.Rate, cost int) lanes.Request {
	return lanes.Request{ID: id, Lanes: []lanes.Lane{{Key: key, Limit: limit, Rate: r, Cost: cost}}}
}

// expiryTTL is the TTL of a test's entries meant to expire: 300ms on the
// real clock; 5s where the instance has Advance (well under the minute of
// the entries meant to last), so that a loaded machine's pauses between
// the test's steps, which the real clock also counts, do not expire them
// before the test advances the clock.
func expiryTTL(inst Instance) time.Duration {
	if inst.Advance != nil {
		return 5 * time.Second
	}
	return 300 * time.Millisecond
}

// pass moves the backend's clock past d: by Advance, or by sleeping.
func pass(inst Instance, d time.Duration) {
	if inst.Advance != nil {
		inst.Advance(d)
		return
	}
	time.Sleep(d)
}

// A window of limit units grants that many, holds the rest back however
// the holders come and go, and grants them in order once the units leave
// the window; a waiter at the head learns when that is.
func testRateBoundsGrantsPerWindow(t *testing.T, inst Instance) {
	per := time.Second
	r := lanes.Rate{Limit: 3, Per: per}
	d := newDirect(t, inst.Backend, "rate-owner", time.Minute)
	start := time.Now()
	sts := d.enqueue(
		rateReq("a", "r", lanes.MaxLimit, r, 1), rateReq("b", "r", lanes.MaxLimit, r, 1),
		rateReq("c", "r", lanes.MaxLimit, r, 1), rateReq("d", "r", lanes.MaxLimit, r, 1),
		rateReq("e", "r", lanes.MaxLimit, r, 1))
	wantStates(t, sts, map[string]lanes.State{"a": lanes.Held, "b": lanes.Held, "c": lanes.Held, "d": lanes.Waiting, "e": lanes.Waiting})
	// A unit leaves the window just after per (Redis counts its last µs:
	// the wait, in ms, is rounded up).
	if w := sts["d"].RateWait; w <= 0 || w > per+time.Millisecond {
		t.Errorf("Enqueue: head waiter's RateWait = %v; want in (0, %v]", w, per+time.Millisecond)
	}
	if w := sts["e"].RateWait; w <= 0 || w > per+time.Millisecond {
		t.Errorf("Enqueue: second waiter's RateWait = %v; want in (0, %v]", w, per+time.Millisecond)
	}
	d.release("a", "b", "c")
	if inst.Advance != nil || time.Since(start) < per/2 {
		// The holders left, the units did not: the rate holds d back.
		wantStates(t, d.status("d", "e"), map[string]lanes.State{"d": lanes.Waiting, "e": lanes.Waiting})
		ks := inspect(t, inst.Backend, "r")
		if ks.Rate == nil || ks.Rate.Spent != 3 || ks.Rate.Rate != r || ks.Rate.NextFree.IsZero() {
			t.Errorf("Inspect(r).Rate = %+v; want rate %v with 3 units spent and a next free time", ks.Rate, r)
		}
	}
	pass(inst, per)
	// d's poll grants d, and e behind it in the same step.
	wantStates(t, d.status("d"), map[string]lanes.State{"d": lanes.Held})
	wantStates(t, d.status("e"), map[string]lanes.State{"e": lanes.Held})
	d.release("d", "e")
}

// A later request never overtakes an earlier one that waits only for the
// rate, even when its own smaller cost would fit.
func testRateNoOvertaking(t *testing.T, inst Instance) {
	per := time.Second
	r := lanes.Rate{Limit: 3, Per: per}
	d := newDirect(t, inst.Backend, "rate-fifo", time.Minute)
	start := time.Now()
	sts := d.enqueue(rateReq("a", "r", 5, r, 1), rateReq("b", "r", 5, r, 3), rateReq("c", "r", 5, r, 1))
	wantStates(t, sts, map[string]lanes.State{"a": lanes.Held, "b": lanes.Waiting, "c": lanes.Waiting})
	d.release("a")
	if inst.Advance != nil || time.Since(start) < per/2 {
		// Two units are free; c costs 1 but stands behind b, which costs 3.
		wantStates(t, d.status("c", "b"), map[string]lanes.State{"b": lanes.Waiting, "c": lanes.Waiting})
	}
	pass(inst, per)
	wantStates(t, d.status("c"), map[string]lanes.State{"c": lanes.Waiting})
	st := d.status("b", "c")
	wantStates(t, st, map[string]lanes.State{"b": lanes.Held, "c": lanes.Waiting})
	if st["c"].RateWait <= 0 {
		t.Errorf("Heartbeat: c behind a full window has RateWait %v; want > 0", st["c"].RateWait)
	}
	pass(inst, per)
	wantStates(t, d.status("c"), map[string]lanes.State{"c": lanes.Held})
	d.release("b", "c")
}

// A key with a rate and a concurrency limit waits for both: a grant needs a
// free slot and room in the window.
func testRateWithConcurrency(t *testing.T, inst Instance) {
	per := time.Second
	r := lanes.Rate{Limit: 2, Per: per}
	d := newDirect(t, inst.Backend, "rate-conc", time.Minute)
	start := time.Now()
	sts := d.enqueue(rateReq("a", "k", 1, r, 1), rateReq("b", "k", 1, r, 1), rateReq("c", "k", 1, r, 1))
	wantStates(t, sts, map[string]lanes.State{"a": lanes.Held, "b": lanes.Waiting, "c": lanes.Waiting})
	if sts["b"].RateWait != 0 {
		t.Errorf("Enqueue: b waits for a slot, not the rate; RateWait = %v, want 0", sts["b"].RateWait)
	}
	rel := d.release("a") // the slot frees and one unit is left: b
	if len(rel.Granted) != 1 || rel.Granted[0] != "b" {
		t.Fatalf("Release(a).Granted = %v; want [b]", rel.Granted)
	}
	d.release("b") // the slot frees, the window is full: c waits for the rate
	if inst.Advance != nil || time.Since(start) < per/2 {
		st := d.status("c")
		wantStates(t, st, map[string]lanes.State{"c": lanes.Waiting})
		if st["c"].RateWait <= 0 {
			t.Errorf("Heartbeat: c held back by the rate has RateWait %v; want > 0", st["c"].RateWait)
		}
	}
	pass(inst, per)
	wantStates(t, d.status("c"), map[string]lanes.State{"c": lanes.Held})
	d.release("c")
}

// One key, one rate: while a key has holders or waiters, a request naming
// another rate (or none) is refused with both rates named, and the whole
// step with it. On an idle key another rate may be named, and the units
// still in the window count against it.
func testRatesAgree(t *testing.T, inst Instance) {
	per := time.Second
	r := lanes.Rate{Limit: 3, Per: per}
	d := newDirect(t, inst.Backend, "rate-agree", time.Minute)
	start := time.Now()
	d.enqueue(rateReq("a", "r", 4, r, 1))
	for _, other := range []lanes.Request{
		rateReq("x", "r", 4, lanes.Rate{Limit: 4, Per: per}, 1),
		{ID: "y", Lanes: []lanes.Lane{{Key: "r", Limit: 4}}},
	} {
		_, err := d.b.Enqueue(ctxT(t), d.owner, d.ttl, []lanes.Request{rateReq("ok", "o", 1, lanes.Rate{}, 0), other})
		var rm *lanes.RateMismatchError
		if !errors.As(err, &rm) || !errors.Is(err, lanes.ErrLimitMismatch) || rm.Key != "r" || rm.Recorded != r || rm.Requested != other.Lanes[0].Rate {
			t.Errorf("Enqueue(%+v while r is held at %v) = %v; want RateMismatchError naming both", other.Lanes[0], r, err)
		}
	}
	d.release("a")
	if ks := inspect(t, d.b, "o"); len(ks.Holders)+len(ks.Waiters) != 0 {
		t.Errorf("a refused step enqueued %v %v", holderIDs(ks), waiterIDs(ks))
	}
	// Idle: another rate may be named; a's unit, still in the window (on
	// the real clock, surely while a window has not passed), counts.
	r2 := lanes.Rate{Limit: 2, Per: per}
	sts := d.enqueue(rateReq("y", "r", 4, r2, 1), rateReq("z", "r", 4, r2, 1))
	if inst.Advance != nil || time.Since(start) < per/2 {
		wantStates(t, sts, map[string]lanes.State{"y": lanes.Held, "z": lanes.Waiting})
	}
	d.release("y", "z")
}

// Through a Session: a waiter the rate holds back is granted when the
// window frees, not at the next heartbeat (here far later than the wait's
// context allows), and a cost above the rate's limit is refused at once.
func testRateSessionWakesAtWindow(t *testing.T, inst Instance) {
	if inst.Advance != nil {
		t.Skip("runs on the real clock: the Session's wake-up timer does, and an advanced backend clock would not match it")
	}
	s := session(t, inst.Backend, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	r := lanes.Rate{Limit: 2, Per: 300 * time.Millisecond}
	lane := lanes.Request{Lanes: []lanes.Lane{{Key: "w", Rate: r}}}
	for range 2 {
		release(t, acquire(t, s, lane))
	}
	ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second) // half the heartbeat interval
	defer cancel()
	l, err := s.Acquire(ctx, lane)
	if err != nil {
		t.Fatalf("Acquire(third unit of %v) = %v; want a grant when the window frees, before the next heartbeat", r, err)
	}
	release(t, l)
	_, err = s.Acquire(ctxT(t), lanes.Request{Lanes: []lanes.Lane{{Key: "w", Rate: r, Cost: 3}}})
	var inv *lanes.InvalidError
	if !errors.As(err, &inv) || inv.Field != "cost" {
		t.Errorf("Acquire(cost 3 on %v) = %v; want an InvalidError on the cost", r, err)
	}
}

// A waiter that a rate holds back, on a lane whose holders leave room
// (Limit MaxLimit), gets no HolderTTL: a holder's end frees no unit of the
// window, so a poll then would be for nothing (a break-it review: 20
// rate-held waiters polled at a 1s holder's TTL, 23 script calls a second
// where 3 were needed). Its RateWait says when to poll.
func testRateWaiterHasNoHolderTTL(t *testing.T, inst Instance) {
	r := lanes.Rate{Limit: 1, Per: time.Minute}
	d := newDirect(t, inst.Backend, "rate-ttl", time.Minute)
	holder := newDirect(t, inst.Backend, "rate-ttl-holder", time.Second)
	wantStates(t, holder.enqueue(rateReq("h", "r", lanes.MaxLimit, r, 1)), map[string]lanes.State{"h": lanes.Held})
	sts := d.enqueue(rateReq("w", "r", lanes.MaxLimit, r, 1))
	wantStates(t, sts, map[string]lanes.State{"w": lanes.Waiting})
	if st := sts["w"]; st.RateWait <= 0 || st.HolderTTL != 0 {
		t.Errorf("Enqueue: w held back by %v beside a holder = RateWait %v, HolderTTL %v; want RateWait > 0 and HolderTTL 0", r, st.RateWait, st.HolderTTL)
	}
	if st := d.status("w")["w"]; st.HolderTTL != 0 {
		t.Errorf("Heartbeat: w has HolderTTL %v; want 0", st.HolderTTL)
	}
	holder.release("h")
	d.release("w")
}

// grantN enqueues n requests of cost 1 on key under r, wants each granted
// at once, and releases them.
func grantN(t *testing.T, d *direct, prefix, key string, r lanes.Rate, n int) {
	t.Helper()
	var reqs []lanes.Request
	var ids []string
	for i := range n {
		id := fmt.Sprintf("%s%d", prefix, i)
		reqs = append(reqs, rateReq(id, key, lanes.MaxLimit, r, 1))
		ids = append(ids, id)
	}
	for id, st := range d.enqueue(reqs...) {
		if st.State != lanes.Held {
			t.Fatalf("Enqueue(%s under %v) = %v; want held", id, r, st.State)
		}
	}
	d.release(ids...)
}

// Regression (review of rate lanes, finding 1): a new rate on an idle key
// is decided before the room under it. Its window is the one that counts:
// a stricter rate sees every unit the log holds within its window (10
// units spent under 100/h hold back a cost of 3 under 3/s), a looser one
// grants at once what it has room for, a longer window counts the units an
// earlier shorter one let go, and a request that leaves without a grant
// changes nothing of the log.
func testRateSwitchDecidesRateFirst(t *testing.T, inst Instance) {
	d := newDirect(t, inst.Backend, "rate-switch", time.Minute)
	start := time.Now()
	grantN(t, d, "s", "strict", lanes.Rate{Limit: 100, Per: time.Hour}, 10)
	sts := d.enqueue(rateReq("s3", "strict", lanes.MaxLimit, lanes.Rate{Limit: 3, Per: time.Second}, 3))
	if inst.Advance != nil || time.Since(start) < 500*time.Millisecond {
		wantStates(t, sts, map[string]lanes.State{"s3": lanes.Waiting})
	}
	d.release("s3")

	grantN(t, d, "l", "loose", lanes.Rate{Limit: 5, Per: time.Hour}, 5)
	sts = d.enqueue(rateReq("l100", "loose", lanes.MaxLimit, lanes.Rate{Limit: 100, Per: time.Hour}, 1))
	wantStates(t, sts, map[string]lanes.State{"l100": lanes.Held})
	d.release("l100")

	start = time.Now()
	grantN(t, d, "w", "wider", lanes.Rate{Limit: 5, Per: 100 * time.Millisecond}, 5)
	pass(inst, 200*time.Millisecond)
	sts = d.enqueue(rateReq("w1s", "wider", lanes.MaxLimit, lanes.Rate{Limit: 5, Per: time.Second}, 1))
	if inst.Advance != nil || time.Since(start) < 700*time.Millisecond {
		// five units within the last second: 5/s has no room
		wantStates(t, sts, map[string]lanes.State{"w1s": lanes.Waiting})
	}
	d.release("w1s")

	start = time.Now()
	hour := lanes.Rate{Limit: 5, Per: time.Hour}
	grantN(t, d, "c", "cancel", hour, 5)
	sts = d.enqueue(rateReq("c300", "cancel", lanes.MaxLimit, lanes.Rate{Limit: 1, Per: 300 * time.Millisecond}, 1))
	if inst.Advance != nil || time.Since(start) < 150*time.Millisecond {
		wantStates(t, sts, map[string]lanes.State{"c300": lanes.Waiting})
	}
	d.release("c300") // it leaves without a grant: the log stays under 5/h
	pass(inst, 400*time.Millisecond)
	sts = d.enqueue(rateReq("c5h", "cancel", lanes.MaxLimit, hour, 1))
	wantStates(t, sts, map[string]lanes.State{"c5h": lanes.Waiting})
	if ks := inspect(t, inst.Backend, "cancel"); ks.Rate == nil || ks.Rate.Rate != hour || ks.Rate.Spent != 5 {
		t.Errorf("Inspect(cancel).Rate = %+v; want 5 units spent under %v", ks.Rate, hour)
	}
	d.release("c5h")
}

// Regression (review of rate lanes, finding 2): the units a rate spent
// stay in the log for the window, but bind no one by themselves: the rate
// a key is in use with is the one its holders and waiters carry. Beside a
// holder without a rate, another request without one is granted and any
// rate is refused; once the key is idle again, the units still count.
func testRateLeftoverLogBindsNoOne(t *testing.T, inst Instance) {
	d := newDirect(t, inst.Backend, "rate-leftover", time.Minute)
	hour := lanes.Rate{Limit: 5, Per: time.Hour}
	sts := d.enqueue(rateReq("r", "k", 2, hour, 1))
	wantStates(t, sts, map[string]lanes.State{"r": lanes.Held})
	d.release("r")
	sts = d.enqueue(rateReq("a", "k", 2, lanes.Rate{}, 0))
	wantStates(t, sts, map[string]lanes.State{"a": lanes.Held})
	sts = d.enqueue(rateReq("b", "k", 2, lanes.Rate{}, 0))
	wantStates(t, sts, map[string]lanes.State{"b": lanes.Held})
	for _, r := range []lanes.Rate{hour, {Limit: 6, Per: time.Hour}} {
		_, err := d.b.Enqueue(ctxT(t), d.owner, d.ttl, []lanes.Request{rateReq("c", "k", 2, r, 1)})
		var rm *lanes.RateMismatchError
		if !errors.As(err, &rm) || rm.Recorded != (lanes.Rate{}) || rm.Requested != r {
			t.Errorf("Enqueue(rate %v beside holders without one) = %v; want RateMismatchError naming none and %v", r, err, r)
		}
	}
	d.release("a", "b")
	sts = d.enqueue(rateReq("r5", "k", 2, hour, 5))
	wantStates(t, sts, map[string]lanes.State{"r5": lanes.Waiting}) // r's unit is still in the window
	d.release("r5")
}

// A waiter that a rate holds back gets no HolderTTL even where one
// holder's end would make room for it: on a lane with both a limit and a
// rate, and when the rate is on another of its keys. A break-it review of
// the holder TTL found such a waiter, held for a minute by its rate,
// polling at a 150ms holder's deadline (20 steps in 3s).
func testRateHeldWaiterHasNoHolderTTL(t *testing.T, inst Instance) {
	r := lanes.Rate{Limit: 1, Per: time.Minute}
	d := newDirect(t, inst.Backend, "rate-held", time.Minute)
	holder := newDirect(t, inst.Backend, "rate-held-holder", time.Second)
	// one lane with a limit and a rate: h holds it and spent its unit
	wantStates(t, holder.enqueue(rateReq("h", "rl", 1, r, 1)), map[string]lanes.State{"h": lanes.Held})
	// the rate on another key: g spent r2's unit; h2 holds k
	wantStates(t, d.enqueue(rateReq("g", "r2", lanes.MaxLimit, r, 1)), map[string]lanes.State{"g": lanes.Held})
	d.release("g")
	wantStates(t, holder.enqueue(req("h2", "k", 1)), map[string]lanes.State{"h2": lanes.Held})
	both := lanes.Request{ID: "w2", Lanes: []lanes.Lane{{Key: "k", Limit: 1}, {Key: "r2", Limit: lanes.MaxLimit, Rate: r, Cost: 1}}}
	check := func(step string, sts map[string]lanes.Status) {
		t.Helper()
		for _, id := range []string{"w1", "w2"} {
			if st := sts[id]; st.State != lanes.Waiting || st.RateWait <= 0 || st.HolderTTL != 0 {
				t.Errorf("%s: %s held back by %v and behind a holder = %v, RateWait %v, HolderTTL %v; want waiting, RateWait > 0 and HolderTTL 0", step, id, r, st.State, st.RateWait, st.HolderTTL)
			}
		}
	}
	check("Enqueue", d.enqueue(rateReq("w1", "rl", 1, r, 1), both))
	check("Heartbeat", d.status("w1", "w2"))
	d.release("w1", "w2")
	holder.release("h", "h2")
}
