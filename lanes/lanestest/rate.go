package lanestest

import (
	"context"
	"errors"
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
	if w := sts["d"].RateWait; w <= 0 || w > per {
		t.Errorf("Enqueue: head waiter's RateWait = %v; want in (0, %v]", w, per)
	}
	if w := sts["e"].RateWait; w <= 0 || w > per {
		t.Errorf("Enqueue: second waiter's RateWait = %v; want in (0, %v]", w, per)
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
