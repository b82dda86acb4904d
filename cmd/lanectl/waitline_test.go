package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// TestLockWaitLineTerminal runs lock in a real pseudo-terminal while the
// test's own process holds the key (miniredis and real Redis): its
// standard error shows one line kept up to date with its place, the
// holder, for how long and the lease left, redrawn in place; the line is
// cleared before the command runs. --quiet shows none.
func TestLockWaitLineTerminal(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		for _, quiet := range []bool{false, true} {
			lease := s.hold(t, "k")
			args := s.args("lock", "k", "--", "echo", "GRANTED")
			if quiet {
				args = s.args("lock", "--quiet", "k", "--", "echo", "GRANTED")
			}
			p := startPTY(t, args...)
			eventually(t, "lock waits for k", func() bool {
				snap := s.inspect(t)
				return len(snap.Keys) == 1 && len(snap.Keys[0].Waiters) == 1
			})
			if !quiet {
				eventually(t, "lock redrew its line", func() bool { return strings.Count(p.out.String(), "\rlanectl: waiting") >= 2 })
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			if err := lease.Release(ctx); err != nil {
				t.Fatalf("Release() = %v", err)
			}
			cancel()
			if code := p.wait(t); code != 0 {
				t.Fatalf("lock = %d; output %q", code, p.out)
			}
			out := p.out.String()
			granted := strings.Index(out, "GRANTED")
			if granted < 0 {
				t.Fatalf("output %q; want the command's GRANTED", out)
			}
			if quiet {
				if strings.Contains(out, "waiting") {
					t.Errorf("lock --quiet printed %q; want no status line", out)
				}
				continue
			}
			before := out[:granted]
			clear := strings.LastIndex(before, "\r"+ansiClearLine)
			last := strings.LastIndex(before, "\rlanectl: waiting")
			if clear < 0 || clear < last || strings.TrimSpace(before[clear+len("\r"+ansiClearLine):]) != "" {
				t.Errorf("output before the command = %q; want the status line cleared last", before)
			}
			line := before[last+1 : strings.Index(before[last:], ansiClearLine)+last]
			for _, want := range []string{"lanectl: waiting ", " for k: 1st in line, held by test-host:4242 (test) for ", ", lease left "} {
				if !strings.Contains(line, want) {
					t.Errorf("status line %q lacks %q", line, want)
				}
			}
			if strings.Contains(line, "\n") {
				t.Errorf("status line %q spans lines", line)
			}
		}
	})
}

// TestLockNoWaitLineWithoutTerminal: with standard error a pipe, a lock
// that waits prints nothing of its own (miniredis).
func TestLockNoWaitLineWithoutTerminal(t *testing.T) {
	s := newMiniredis(t)
	lease := s.hold(t, "k")
	p := startBin(t, s.args("lock", "k", "--", "true")...)
	eventually(t, "lock waits for k", func() bool {
		snap := s.inspect(t)
		return len(snap.Keys) == 1 && len(snap.Keys[0].Waiters) == 1
	})
	// Long enough for several redraws, were there any.
	time.Sleep(3 * waitLineEvery)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 0 || p.stderr.String() != "" {
		t.Errorf("lock = %d, stderr %q; want 0 and nothing", code, p.stderr)
	}
}

// TestWaitText: what the line says for one key and several, a limit above
// 1, a free key, a key without a holder, and narrow terminals.
func TestWaitText(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	holder := func(id, host string, pid int, tool, call string, held, left time.Duration) lanes.Holder {
		return lanes.Holder{Entry: lanes.Entry{ID: id, Owner: lanes.Owner{Host: host, PID: pid}, Tool: tool, CallID: call},
			Granted: now.Add(-held), Expires: now.Add(left)}
	}
	waiter := func(id string, pos int) lanes.Waiter {
		return lanes.Waiter{Entry: lanes.Entry{ID: id}, Position: pos}
	}
	snap := &lanes.Snapshot{Time: now, Keys: []lanes.KeyState{
		{Key: "gpu", Limit: 2, Holders: []lanes.Holder{
			holder("a", "build-7", 42, lockTool, "make", 63*time.Second, 8200*time.Millisecond),
			holder("b", "build-8", 43, "edit", "call-1", time.Second, time.Second)},
			Waiters: []lanes.Waiter{waiter("x", 1), waiter("me", 2)}},
		{Key: "report", Limit: 1, Holders: []lanes.Holder{holder("c", "h", 1, "edit", "call-9", 3100*time.Millisecond, 6900*time.Millisecond)},
			Waiters: []lanes.Waiter{waiter("me", 1)}},
		{Key: "queue", Limit: 1, Waiters: []lanes.Waiter{waiter("y", 1), waiter("me", 2)}},
		{Key: "switch", Limit: lanes.MaxLimit, Waiters: []lanes.Waiter{{Entry: lanes.Entry{ID: "me",
			Lanes: []lanes.Lane{{Key: "switch", Limit: lanes.MaxLimit, Rate: lanes.Rate{Limit: 3, Per: time.Second}, Cost: 3}}}, Position: 1}},
			Rate: &lanes.RateWindow{Rate: lanes.Rate{Limit: 100, Per: time.Hour}, Spent: 10, NextFree: now.Add(time.Hour)}},
		{Key: "api", Limit: lanes.MaxLimit, Waiters: []lanes.Waiter{waiter("me", 1)},
			Rate: &lanes.RateWindow{Rate: lanes.Rate{Limit: 5, Per: time.Hour}, Spent: 5, NextFree: now.Add(12 * time.Minute)}},
		{Key: "llm", Limit: 1, Holders: []lanes.Holder{holder("d", "h", 2, "ask", "call-3", 2*time.Second, 8*time.Second)},
			Waiters: []lanes.Waiter{waiter("me", 1)},
			Rate:    &lanes.RateWindow{Rate: lanes.Rate{Limit: 10, Per: time.Second}, Spent: 3, NextFree: now.Add(400 * time.Millisecond)}},
	}}
	for _, tt := range []struct {
		keys []string
		want string
	}{
		{[]string{"report"}, "lanectl: waiting 4.2s for report: 1st in line, held by h:1 (edit call-9) for 3.1s, lease left 6.9s"},
		{[]string{"gpu", "free"}, "lanectl: waiting 4.2s for gpu: 2nd in line, held by 2 of 2, the longest by build-7:42 (make) for 1m3s, lease left 8.2s; free: free"},
		{[]string{"queue"}, "lanectl: waiting 4.2s for queue: 2nd in line, no holder yet"},
		// Regression (review of rate lanes, finding 4): held back by a rate,
		// the line says so and when the next unit frees, not "no holder yet".
		{[]string{"api"}, "lanectl: waiting 4.2s for api: 1st in line, no holder, held back by the rate 5/h: 5 of 5 units spent, the next frees in 12m0s"},
		{[]string{"switch"}, "lanectl: waiting 4.2s for switch: 1st in line, no holder, held back by the rate 3/s (the units the key's last grants spent under 100/h count within its window)"},
		{[]string{"llm"}, "lanectl: waiting 4.2s for llm: 1st in line, held by h:2 (ask call-3) for 2s, lease left 8s, rate 10/s: 3 of 10 units spent, the next frees in 400ms"},
	} {
		if got := waitText(snap, "me", tt.keys, 4200*time.Millisecond); got != tt.want {
			t.Errorf("waitText(%q) =\n%q; want\n%q", tt.keys, got, tt.want)
		}
	}
	// After a reset, a key with no holder waits out the freeze: the line
	// says so, not "no holder yet" (found by a README trial).
	frozen := *snap
	frozen.Frozen = now.Add(9200 * time.Millisecond)
	if got, want := waitText(&frozen, "me", []string{"queue"}, time.Second),
		"lanectl: waiting 1s for queue: 2nd in line, no holder, no grant for 9.2s more: the namespace's state was lost and reset, and leases of the lost state may still run"; got != want {
		t.Errorf("waitText(frozen) =\n%q; want\n%q", got, want)
	}
	if got, want := takenText(snap, "me", []string{"gpu", "free", "queue"}), "gpu: held by 2 of 2, the longest by build-7:42 (make) for 1m3s, lease left 8.2s, 1 waiter before; queue: no holder yet, 1 waiter before"; got != want {
		t.Errorf("takenText() =\n%q; want\n%q", got, want)
	}
	// Regression (break-it review of 2026-12-04): a --wait that ran out
	// during a freeze left the queue before the text was made, and the
	// line ended "not granted:" with nothing after it. A key nobody holds
	// or waits for says the freeze; with no freeze, nothing.
	if got, want := takenText(&frozen, "me", []string{"gone"}), "gone: no holder, no grant for 9.2s more: the namespace's state was lost and reset, and leases of the lost state may still run"; got != want {
		t.Errorf("takenText(frozen, a key with no state) =\n%q; want\n%q", got, want)
	}
	if got := takenText(snap, "me", []string{"gone"}); got != "" {
		t.Errorf("takenText(a key with no state) = %q; want nothing", got)
	}
	for n, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 102: "102nd", 111: "111th"} {
		if got := ordinal(n); got != want {
			t.Errorf("ordinal(%d) = %q; want %q", n, got, want)
		}
	}

	// On a terminal 30 columns wide the line takes 29, cleared to its end.
	var out syncBuffer
	l := &waitLine{w: &out, id: "me", keys: []string{"report"}, width: func() int { return 30 },
		look: func(context.Context) (*lanes.Snapshot, error) { return snap, nil }}
	l.start(context.Background())
	eventually(t, "the line is drawn", func() bool { return out.String() != "" })
	l.stop()
	got := out.String()
	first := strings.TrimPrefix(got[:strings.Index(got, ansiClearLine)], "\r")
	if len([]rune(first)) != 29 || !strings.HasPrefix(first, "lanectl: waiting") {
		t.Errorf("line on a 30-column terminal = %q (%d runes); want 29", first, len([]rune(first)))
	}
	if !strings.HasSuffix(got, "\r"+ansiClearLine) {
		t.Errorf("output after stop = %q; want it to end by clearing the line", got)
	}
	n := len(out.String())
	l.stop() // twice: nothing more
	if len(out.String()) != n {
		t.Errorf("a second stop wrote %q", out.String()[n:])
	}
}
