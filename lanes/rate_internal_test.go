package lanes

import (
	"testing"
	"time"
)

// The sliding log of a rate key: exact while it has at most MaxRateLog
// pairs; past it, merging the two oldest only keeps units in the window
// longer, so "at most Limit units in any window of Per" still holds.
func TestRateLogMergesOldestPastBound(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	l := &rateLog{rate: Rate{Limit: 5000, Per: time.Second}}
	for i := range MaxRateLog + 10 {
		l.spend(t0.Add(time.Duration(i)*time.Microsecond*100), 1)
	}
	if len(l.uses) != MaxRateLog || l.spent != MaxRateLog+10 {
		t.Fatalf("after %d spends: %d pairs, %d spent; want %d pairs and every unit", MaxRateLog+10, len(l.uses), l.spent, MaxRateLog)
	}
	if l.uses[0].cost != 11 || !l.uses[0].at.Equal(t0.Add(10*100*time.Microsecond)) {
		t.Errorf("oldest pair %+v; want the first 11 units at the 11th spend's time", l.uses[0])
	}
	// The merged units leave at the later time, never earlier.
	l.prune(t0.Add(time.Second + 500*time.Microsecond))
	if l.spent != MaxRateLog+10 {
		t.Errorf("spent %d just after the first spend's window; want all %d still counted (merged later)", l.spent, MaxRateLog+10)
	}
	l.prune(t0.Add(time.Second + 1001*time.Microsecond))
	if l.spent != MaxRateLog+10-11 {
		t.Errorf("spent %d after the merged pair's window; want %d", l.spent, MaxRateLog+10-11)
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
