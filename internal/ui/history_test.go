package ui

import (
	"fmt"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// These tests feed the history snapshots made by hand (no backend), to pin
// down what it infers from two looks.

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func entry(id string, enq int, keys ...string) lanes.Entry {
	e := lanes.Entry{ID: id, Owner: lanes.Owner{Host: "h", PID: 1}, Tool: "t", Enqueued: at(enq)}
	for _, k := range keys {
		e.Lanes = append(e.Lanes, lanes.Lane{Key: k, Limit: 1})
	}
	return e
}

func holder(e lanes.Entry, token uint64, granted, expires int) lanes.Holder {
	return lanes.Holder{Entry: e, Token: token, Granted: at(granted), Expires: at(expires)}
}

func snapAt(ms int, keys ...lanes.KeyState) *lanes.Snapshot {
	return &lanes.Snapshot{Time: at(ms), Keys: keys}
}

func TestHistoryHandOffEndsTheHoldExactly(t *testing.T) {
	h := newHistory(100, time.Hour)
	a, b := entry("a", 0, "k"), entry("b", 50, "k")
	h.observe(snapAt(100, lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{holder(a, 1, 0, 5000)},
		Waiters: []lanes.Waiter{{Entry: b, Position: 1, Expires: at(5000)}}}))
	// a released at 180, which granted b: the next look, at 350, sees b.
	h.observe(snapAt(350, lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{holder(b, 2, 180, 5000)}}))
	spans, first, last := h.spans("k", at(0))
	if len(spans) != 2 || first != at(100) || last != at(350) {
		t.Fatalf("spans() = %+v, %v, %v; want a and b, first look 100, last 350", spans, first, last)
	}
	sa, sb := spans[0], spans[1]
	if sa.Entry != "a" || sa.GoneBy != at(180) || !sa.EndExact || sa.SeenUntil != at(100) || sa.Expired {
		t.Errorf("a's span = %+v; want gone exactly at b's grant (180), seen until 100, not expired", sa)
	}
	if sb.Entry != "b" || sb.Enqueued != at(50) || sb.Granted != at(180) || !sb.Open() || sb.Token != 2 {
		t.Errorf("b's span = %+v; want enqueued 50, granted 180, token 2, open", sb)
	}
}

// TestHistoryHandOffInTheMillisecondOfALook: looks and grants are stamped
// in whole milliseconds of the Redis clock, so a release may grant the
// waiter in the very millisecond of the look that last saw the holder, or
// of the look that first sees it gone. Either is still a hand-off: the
// hold ends at the grant. (The first was missed: the hold was drawn until
// the next look, over the successor's, and TestUIBrowserRealRedis failed
// once in CI.) A holder seen beside the one that left is no successor,
// even granted in that millisecond.
func TestHistoryHandOffInTheMillisecondOfALook(t *testing.T) {
	for _, grant := range []int{100, 350} {
		t.Run(fmt.Sprint(grant), func(t *testing.T) {
			h := newHistory(100, time.Hour)
			a, b := entry("a", 0, "k"), entry("b", 50, "k")
			h.observe(snapAt(100, lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{holder(a, 1, 0, 5000)},
				Waiters: []lanes.Waiter{{Entry: b, Position: 1, Expires: at(5000)}}}))
			h.observe(snapAt(350, lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{holder(b, 2, grant, 5000)}}))
			spans, _, _ := h.spans("k", at(0))
			if sa := spans[0]; sa.Entry != "a" || sa.GoneBy != at(grant) || !sa.EndExact {
				t.Errorf("a's span = %+v; want gone exactly at b's grant (%d)", sa, grant)
			}
		})
	}
	// c held beside a (as the snapshot says), granted in the millisecond
	// of the look that saw them both: when a leaves, c is no successor.
	h := newHistory(100, time.Hour)
	a, c := entry("a", 0, "k"), entry("c", 100, "k")
	h.observe(snapAt(100, lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{holder(a, 1, 0, 5000), holder(c, 2, 100, 5000)}}))
	h.observe(snapAt(350, lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{holder(c, 2, 100, 5000)}}))
	spans, _, _ := h.spans("k", at(0))
	if sa := spans[0]; sa.Entry != "a" || sa.GoneBy != at(350) || sa.EndExact {
		t.Errorf("a's span = %+v; want gone by the look at 350: c held beside it, no successor", sa)
	}
}

// TestHistoryIDEnqueuedAgainIsAnotherSpan: an entry that left and was
// enqueued again under the same id between two looks (lanectl lock --id x
// run twice) is a new span, so the hold of the first ends and hand-offs
// to and from the second are seen. (A break-it review's case: the
// second x, seen waiting and then holding, kept the first's grant time
// and was taken for a holder seen beside s, so s's hold was drawn over
// x's until the next look.) Both ways: enqueued at another time, and in
// the same millisecond but seen waiting after it was seen holding.
func TestHistoryIDEnqueuedAgainIsAnotherSpan(t *testing.T) {
	for _, enq2 := range []int{70, 0} {
		t.Run(fmt.Sprint(enq2), func(t *testing.T) {
			h := newHistory(100, time.Hour)
			x1, s, x2 := entry("x", 0, "k"), entry("s", 40, "k"), entry("x", enq2, "k")
			h.observe(snapAt(10, lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{holder(x1, 1, 0, 5000)}}))
			// x released at 60, granting s; x enqueued again, waiting.
			h.observe(snapAt(100, lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{holder(s, 2, 60, 5000)},
				Waiters: []lanes.Waiter{{Entry: x2, Position: 1, Expires: at(5000)}}}))
			// s released at 200, granting x.
			h.observe(snapAt(350, lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{holder(x2, 3, 200, 5000)}}))
			spans, _, _ := h.spans("k", at(0))
			if len(spans) != 3 {
				t.Fatalf("spans() = %+v; want x, s and x again", spans)
			}
			byGrant := map[int]Span{}
			for _, sp := range spans {
				byGrant[int(sp.Granted.Sub(t0)/time.Millisecond)] = sp
			}
			if sx := byGrant[0]; sx.Entry != "x" || sx.GoneBy != at(60) || !sx.EndExact || sx.Token != 1 {
				t.Errorf("first x's span = %+v; want token 1, gone exactly at s's grant (60)", sx)
			}
			if ss := byGrant[60]; ss.Entry != "s" || ss.GoneBy != at(200) || !ss.EndExact {
				t.Errorf("s's span = %+v; want gone exactly at the second x's grant (200)", ss)
			}
			if sx := byGrant[200]; sx.Entry != "x" || !sx.Open() || sx.Token != 3 || sx.Enqueued != at(enq2) {
				t.Errorf("second x's span = %+v; want granted 200, token 3, enqueued %d, open", sx, enq2)
			}
		})
	}
	// Granted again at once, between two looks: the second hold is its own
	// span, and the first ended by its grant (not exact: it never waited).
	h := newHistory(100, time.Hour)
	x1, x2 := entry("x", 0, "k"), entry("x", 150, "k")
	h.observe(snapAt(100, lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{holder(x1, 1, 0, 5000)}}))
	h.observe(snapAt(350, lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{holder(x2, 2, 150, 5000)}}))
	spans, _, _ := h.spans("k", at(0))
	if len(spans) != 2 || spans[0].GoneBy != at(150) || spans[0].EndExact || spans[1].Granted != at(150) || !spans[1].Open() {
		t.Errorf("spans() = %+v; want the first x gone by 150 (not exact) and the second granted 150, open", spans)
	}
	// Released and enqueued again, granted at once, all in the millisecond
	// of the look that saw the first (a second review's case): the same
	// times, told apart by the new fencing token.
	h = newHistory(100, time.Hour)
	x1, x2 = entry("x", 100, "k"), entry("x", 100, "k")
	h.observe(snapAt(100, lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{holder(x1, 1, 100, 5000)}}))
	h.observe(snapAt(350, lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{holder(x2, 2, 100, 5000)}}))
	spans, _, _ = h.spans("k", at(0))
	if len(spans) != 2 || spans[0].Token != 1 || spans[0].Open() || spans[1].Token != 2 || !spans[1].Open() {
		t.Errorf("spans() = %+v; want token 1's span closed and token 2's open", spans)
	}
}

// TestHistorySameEntryStaysOneSpan: what again() must not take for another
// entry: one entry on two keys seen waiting, then holding (listed twice on
// a key, as inspect.lua's pages may list it), then ended (kept for its
// borrowers), stays one span per key. (A second review's case.)
func TestHistorySameEntryStaysOneSpan(t *testing.T) {
	h := newHistory(100, time.Hour)
	x, a := entry("x", 10, "k", "j"), entry("a", 0, "k", "j")
	h.observe(snapAt(100,
		lanes.KeyState{Key: "j", Limit: 1, Holders: []lanes.Holder{holder(a, 1, 0, 5000)}, Waiters: []lanes.Waiter{{Entry: x, Position: 1, Expires: at(5000)}}},
		lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{holder(a, 1, 0, 5000)}, Waiters: []lanes.Waiter{{Entry: x, Position: 1, Expires: at(5000)}}}))
	hx := holder(x, 2, 200, 5000)
	h.observe(snapAt(350,
		lanes.KeyState{Key: "j", Limit: 1, Holders: []lanes.Holder{hx}},
		lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{hx, hx}}))
	hx.Ended = true
	h.observe(snapAt(600,
		lanes.KeyState{Key: "j", Limit: 1, Holders: []lanes.Holder{hx}},
		lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{hx}}))
	for _, key := range []string{"j", "k"} {
		spans, _, _ := h.spans(key, at(0))
		if len(spans) != 2 || spans[1].Entry != "x" || !spans[1].Open() || spans[1].Granted != at(200) || !spans[1].Ended {
			t.Errorf("%s: spans() = %+v; want a, and x as one open span granted 200, ended", key, spans)
		}
	}
}

func TestHistoryEndBetweenLooksWhenNoHandOff(t *testing.T) {
	h := newHistory(100, time.Hour)
	a := entry("a", 0, "k")
	h.observe(snapAt(100, lanes.KeyState{Key: "k", Limit: 2, Holders: []lanes.Holder{holder(a, 1, 0, 5000)}}))
	// On a key of limit 2, a holder granted meanwhile does not tell when a left.
	c := entry("c", 200, "k")
	h.observe(snapAt(350, lanes.KeyState{Key: "k", Limit: 2, Holders: []lanes.Holder{holder(c, 2, 200, 5000)}}))
	spans, _, _ := h.spans("k", at(0))
	if sa := spans[0]; sa.Entry != "a" || sa.SeenUntil != at(100) || sa.GoneBy != at(350) || sa.EndExact {
		t.Errorf("a's span = %+v; want gone between the looks at 100 and 350, not exact", sa)
	}
}

func TestHistoryKeyFreedThenTakenBoundsTheEndButIsNotExact(t *testing.T) {
	h := newHistory(100, time.Hour)
	a := entry("a", 0, "k")
	h.observe(snapAt(100, lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{holder(a, 1, 0, 5000)}}))
	// c enqueued at 250 and was granted at once: a had left by then.
	c := entry("c", 250, "k")
	h.observe(snapAt(350, lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{holder(c, 2, 250, 5000)}}))
	spans, _, _ := h.spans("k", at(0))
	if sa := spans[0]; sa.GoneBy != at(250) || sa.EndExact {
		t.Errorf("a's span = %+v; want gone by c's grant (250), not exact (c never waited)", sa)
	}
}

func TestHistoryMarksAnExpiredLease(t *testing.T) {
	h := newHistory(100, time.Hour)
	a := entry("a", 0, "k")
	s1 := snapAt(100, lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{holder(a, 1, 0, 300)}})
	h.observe(s1)
	s2 := snapAt(400)
	s2.Stats.ExpiredHolders = 1
	h.observe(s2)
	spans, _, _ := h.spans("k", at(0))
	if !spans[0].Expired {
		t.Errorf("a's span = %+v; want expired (gone after its deadline while expired_holders grew)", spans[0])
	}
}

func TestHistoryWaiterThatLeftIsNotAHold(t *testing.T) {
	h := newHistory(100, time.Hour)
	a, b := entry("a", 0, "k"), entry("b", 50, "k")
	h.observe(snapAt(100, lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{holder(a, 1, 0, 5000)},
		Waiters: []lanes.Waiter{{Entry: b, Position: 1}}}))
	h.observe(snapAt(200, lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{holder(a, 1, 0, 5000)}}))
	spans, _, _ := h.spans("k", at(0))
	if sb := spans[1]; sb.Entry != "b" || !sb.Granted.IsZero() || sb.GoneBy != at(200) {
		t.Errorf("b's span = %+v; want never granted, gone by 200", sb)
	}
	if v := spanView(spans[1]); v.State != "left" {
		t.Errorf("b's state = %q; want left", v.State)
	}
}

func TestHistoryKeepsAtMostMaxSpans(t *testing.T) {
	const max = 5
	h := newHistory(max, time.Hour)
	for i := range 12 {
		e := entry(fmt.Sprint("e", i), 10*i, "k")
		h.observe(snapAt(10*i+1, lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{holder(e, uint64(i+1), 10*i, 99999)}}))
	}
	h.observe(snapAt(1000))
	spans, _, _ := h.spans("k", at(0))
	if len(spans) != max {
		t.Fatalf("spans() has %d spans; want the newest %d", len(spans), max)
	}
	for i, s := range spans {
		if want := fmt.Sprint("e", 12-max+i); s.Entry != want {
			t.Errorf("spans()[%d] = %s; want %s (the oldest dropped first)", i, s.Entry, want)
		}
	}
}

func TestHistoryDropsWhatEndedBeforeItsWindow(t *testing.T) {
	h := newHistory(100, time.Second)
	a := entry("a", 0, "k")
	h.observe(snapAt(100, lanes.KeyState{Key: "k", Limit: 1, Holders: []lanes.Holder{holder(a, 1, 0, 99999)}}))
	h.observe(snapAt(200)) // a gone by 200
	if spans, _, _ := h.spans("k", at(0)); len(spans) != 1 {
		t.Fatalf("spans() = %+v; want a's", spans)
	}
	h.observe(snapAt(1300)) // 1.1s after a left: past the window
	if spans, _, _ := h.spans("k", at(0)); len(spans) != 0 {
		t.Errorf("spans() = %+v; want none: a ended more than the history's window ago", spans)
	}
}
