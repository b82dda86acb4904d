package main

import (
	"testing"
	"time"
)

func TestFairness(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	cases := []struct {
		name         string
		ops          []op
		slack        time.Duration
		wantOutOfOrd float64
	}{
		{"in order", []op{
			{proc: 0, arrive: at(0), granted: at(1)},
			{proc: 1, arrive: at(2), granted: at(3)},
		}, 0, 0},
		{"passed over", []op{
			{proc: 0, arrive: at(0), granted: at(10)},
			{proc: 1, arrive: at(2), granted: at(5)},
		}, 0, 0.5},
		{"passed over, never granted", []op{
			{proc: 0, arrive: at(0)},
			{proc: 1, arrive: at(2), granted: at(5)},
		}, 0, 1},
		{"within the slack", []op{
			{proc: 0, arrive: at(0), granted: at(10)},
			{proc: 1, arrive: at(0.5), granted: at(5)},
		}, time.Millisecond, 0},
		{"beyond the slack", []op{
			{proc: 0, arrive: at(0), granted: at(10)},
			{proc: 1, arrive: at(2), granted: at(5)},
		}, time.Millisecond, 0.5},
		{"queued after the other's call: not surely earlier", []op{
			{proc: 0, arrive: at(0), queued: at(2.5), granted: at(10)},
			{proc: 1, arrive: at(2), queued: at(2.1), granted: at(5)},
		}, 0, 0},
		{"queued before the other's call, beyond the slack", []op{
			{proc: 0, arrive: at(0), queued: at(0.5), granted: at(10)},
			{proc: 1, arrive: at(2), queued: at(2.1), granted: at(5)},
		}, time.Millisecond, 0.5},
		{"queued before the other's call, within the slack", []op{
			{proc: 0, arrive: at(0), queued: at(1.5), granted: at(10)},
			{proc: 1, arrive: at(2), queued: at(2.1), granted: at(5)},
		}, time.Millisecond, 0},
	}
	for _, c := range cases {
		got, _, _ := fairness(c.ops, 2, c.slack)
		if got != c.wantOutOfOrd {
			t.Errorf("%s: out of order %v, want %v", c.name, got, c.wantOutOfOrd)
		}
	}
}

func TestSpread(t *testing.T) {
	sp, ok := spreadOf([]float64{5, 1, 3, 2, 4})
	if !ok || sp.med != 3 || sp.lo != 1 || sp.hi != 5 || sp.n != 5 {
		t.Errorf("spreadOf odd: %+v", sp)
	}
	sp, _ = spreadOf([]float64{4, 1, 3, 2})
	if sp.med != 2.5 {
		t.Errorf("spreadOf even: median %v, want 2.5", sp.med)
	}
	if got := sp.formatRatio(); got != "2.50x [1.00–4.00]" {
		t.Errorf("formatRatio: %q", got)
	}
}

// A grant after the cell's end passes over nobody: the waiters ahead left
// the queue because the cell ended (their contexts were done). endCell
// forgets it, as grants/s does; grants before the end still count.
func TestEndCell(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	end := at(100)
	ops := []op{
		{proc: 0, arrive: at(0), granted: at(5)},
		{proc: 1, arrive: at(98), queued: at(98.2)},                    // still waiting at the end
		{proc: 2, arrive: at(99.5), queued: at(101), granted: at(101)}, // granted once the end freed the key
	}
	if out, _, _ := fairness(ops, 3, time.Millisecond); out == 0 {
		t.Fatalf("before endCell: fairness = 0; want the late grant counted as passing over proc 1 (the case endCell is for)")
	}
	if n := endCell(ops, end); n != 1 {
		t.Errorf("endCell = %d grants; want 1, the one before the end", n)
	}
	if out, _, _ := fairness(ops, 3, time.Millisecond); out != 0 {
		t.Errorf("after endCell: fairness = %v; want 0", out)
	}
	if !ops[2].granted.IsZero() || ops[0].granted != at(5) {
		t.Errorf("endCell left %v and %v; want the late grant forgotten and the other kept", ops[2].granted, ops[0].granted)
	}
}
