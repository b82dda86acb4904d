package lanes

import (
	"testing"
	"time"
)

// The sliding log of a rate key: a spend in the same slice of the window
// (its MaxRateLog-th part) as the last joins its pair at the later time,
// so units leave at most a slice late and "at most Limit units in any
// window of Per" still holds.
func TestRateLogMergesWithinASlice(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	l := &rateLog{rate: Rate{Limit: 5000, Per: time.Second}} // slices of 1ms
	for i := range MaxRateLog + 10 {
		l.spend(t0.Add(time.Duration(i)*time.Microsecond*100), 1)
	}
	if len(l.uses) != 101 || l.spent != MaxRateLog+10 {
		t.Fatalf("after %d spends 100µs apart: %d pairs, %d spent; want 101 pairs (one a ms) and every unit", MaxRateLog+10, len(l.uses), l.spent)
	}
	if l.uses[0].cost != 10 || !l.uses[0].at.Equal(t0.Add(900*time.Microsecond)) {
		t.Errorf("oldest pair %+v; want the first ms's 10 units at its last spend's time", l.uses[0])
	}
	// The merged units leave at the later time, never earlier.
	l.prune(t0.Add(time.Second + 500*time.Microsecond))
	if l.spent != MaxRateLog+10 {
		t.Errorf("spent %d just after the first spend's window; want all %d still counted (merged later)", l.spent, MaxRateLog+10)
	}
	l.prune(t0.Add(time.Second + 901*time.Microsecond))
	if l.spent != MaxRateLog {
		t.Errorf("spent %d after the merged pair's window; want %d", l.spent, MaxRateLog)
	}
}

// Regression (break-it review of 2026-12-04, finding 1): with more than
// MaxRateLog grants a window, merging the two oldest pairs at every spend
// carried units forward for as long as the grants kept coming: spent only
// grew, and a rate used at 30% stalled once it reached the limit. Spent
// now stays what the window holds, give or take a slice at each end.
func TestRateLogSteadyPastMaxRateLog(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	l := &rateLog{rate: Rate{Limit: 5000, Per: time.Second}}
	const every = 666 * time.Microsecond // 1,501 a window
	for i := range 15000 {               // 10 windows
		now := t0.Add(time.Duration(i) * every)
		l.prune(now)
		if got := l.within(now, l.rate.Per); got+1 > l.rate.Limit || got > 1503 {
			t.Fatalf("spend %d: %d units counted in the window, which holds 1,501 spends; want no more than 1,503", i, got)
		}
		l.spend(now, 1)
		if len(l.uses) > MaxRateLog+1 {
			t.Fatalf("spend %d: %d pairs; want at most %d", i, len(l.uses), MaxRateLog+1)
		}
	}
}

// Past MaxRateLog + 1 pairs within the window (kept under an earlier
// rate's finer slices), the two oldest merge at the later time.
func TestRateLogMergesOldestPastBound(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	l := &rateLog{rate: Rate{Limit: 5000, Per: time.Second}}
	for i := range MaxRateLog + 1 { // 10µs apart: an earlier rate's slices
		l.uses = append(l.uses, rateUse{t0.Add(time.Duration(i) * 10 * time.Microsecond), 1})
		l.spent++
	}
	l.spend(t0.Add(20*time.Millisecond), 1)
	if len(l.uses) != MaxRateLog+1 || l.spent != MaxRateLog+2 {
		t.Fatalf("%d pairs, %d spent; want %d pairs and every unit", len(l.uses), l.spent, MaxRateLog+1)
	}
	if l.uses[0].cost != 2 || !l.uses[0].at.Equal(t0.Add(10*time.Microsecond)) {
		t.Errorf("oldest pair %+v; want the first 2 units at the second's time", l.uses[0])
	}
}

func TestRateLogFreeAt(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	l := &rateLog{rate: Rate{Limit: 10, Per: time.Second}}
	l.spend(t0, 4)
	l.spend(t0.Add(100*time.Millisecond), 3)
	l.spend(t0.Add(200*time.Millisecond), 3)
	now := t0.Add(300 * time.Millisecond)
	for cost, want := range map[int]time.Time{
		4:  t0.Add(time.Second),             // the first 4 units must leave
		5:  t0.Add(1100 * time.Millisecond), // and the next 3
		10: t0.Add(1200 * time.Millisecond), // all of them
		1:  t0.Add(time.Second),             // the window is full: one unit frees with the first pair
	} {
		if got := l.freeAt(now, l.rate, cost); !got.Equal(want) {
			t.Errorf("freeAt(cost %d) = %v; want %v", cost, got.Sub(t0), want.Sub(t0))
		}
	}
	l.prune(t0.Add(time.Second))
	if got := l.within(t0.Add(time.Second), l.rate.Per); got != 6 {
		t.Errorf("after the first pair left: within = %d; want 6 (4 more fit, not 5)", got)
	}
	if got := l.freeAt(t0.Add(time.Second), l.rate, 4); !got.Equal(t0.Add(time.Second)) {
		t.Errorf("freeAt(4) when it fits = %v; want now", got.Sub(t0))
	}
}
