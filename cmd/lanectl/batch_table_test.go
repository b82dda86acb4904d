package main

import (
	"strings"
	"testing"
)

// A call an earlier run left in flight comes back from the run's records
// with no times: the table shows none for it, not "queued 0ms ran 0ms"
// (found by a README trial); a call of this run shows its times even when
// they round to 0.
func TestBatchTableTimesOfStoredCalls(t *testing.T) {
	var b strings.Builder
	err := printBatchTable(&b, []batchOutcome{
		{ID: "c1", Tool: "step", Status: "indeterminate", Stored: true},
		{ID: "c2", Tool: "step", Status: "ok", Stored: true, QueuedMS: 3, RanMS: 40},
		{ID: "c3", Tool: "step", Status: "ok"},
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("table = %q; want 3 lines", b.String())
	}
	for i, want := range []bool{false, true, true} {
		if got := strings.Contains(lines[i], "queued "); got != want {
			t.Errorf("line %q shows times: %v; want %v", lines[i], got, want)
		}
	}
}
