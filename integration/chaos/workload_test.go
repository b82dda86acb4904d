package chaos

import (
	"maps"
	"testing"
)

// Regression (TestChaosNestedLineages, long mode, twice): a nested request
// under an adopted parent (lineage [lender, parent]) took m1 from the
// lender, which its parent does not hold, and was lent the lender's token;
// knowing only its parent's tokens, the worker wrote the lender's counter
// as if it held m1 in its own right, and an update was lost. Its lent
// tokens are the parent's and those the parent was lent, the parent's
// first.
func TestKidLentIncludesTheParentsLenders(t *testing.T) {
	parentLent := map[string]uint64{"m0": 7, "m1": 7} // the lender's lease, from the board
	held := map[string]uint64{"m0": 7, "s0": 9}       // the parent's lease: m0 borrowed, s0 its own
	got := kidLent(parentLent, held)
	want := map[string]uint64{"m0": 7, "m1": 7, "s0": 9}
	if !maps.Equal(got, want) {
		t.Errorf("kidLent() = %v; want %v", got, want)
	}
	if parentLent["s0"] != 0 {
		t.Errorf("kidLent changed the parent's lent tokens: %v", parentLent)
	}
	// The parent's own token wins over an older one lent to it (a key it
	// holds in its own right after its lender's hold ended).
	if got := kidLent(map[string]uint64{"m0": 3}, map[string]uint64{"m0": 8}); got["m0"] != 8 {
		t.Errorf("kidLent() m0 = %d; want the parent's 8", got["m0"])
	}
	if got := kidLent(nil, map[string]uint64{"m0": 8}); !maps.Equal(got, map[string]uint64{"m0": 8}) {
		t.Errorf("kidLent(nil) = %v", got)
	}
}
