package redislane_test

// Review of 1b9529f (extend_lenders): step scripts that break a chain of
// ended lenders. Each fails while the difference stands.

import (
	"fmt"
	"strings"
	"testing"
)

// The chain of ChainKeptForLastBorrower (e1 <- e2 <- e3, e1 and e2
// expiring together, e3's lease longer) with 99 more holders of o1
// expiring with them, ids between e1's and e2's: Redis's first reap
// (REAP_MAX 100) takes e1 and the 99, leaving e2; e1 is kept with e2's
// deadline, passed already, and is not raised when the same step's purge
// of k0 ends e2 (kept for e3): the step's reply shows e1, e2 with
// deadline +100; the next step (inspect again, MORE) expires e1, whose
// removal takes e2 and e3: k0 and k2 pass to e4 and e5 while e3's lease
// runs. Memory (right) keeps e1 and e2 for e3.
func TestReviewChainKeptPastReapMax(t *testing.T) {
	fill := make([]string, 99)
	for i := range fill {
		fill[i] = fmt.Sprintf("e1%02d:kf/99", i)
	}
	if f := runDiffScript(t, 'A',
		"enq o1 100ms e1:k2/1 e2:k0/1,k2/1:e1 "+strings.Join(fill, " "),
		"enq o2 1000ms e3:k0/1:e1,e2",
		"enq o3 1000ms e4:k0/1 e5:k2/1",
		"adv 100ms",
		"insp k0",
		"insp"); f != nil {
		t.Fatalf("step %d, %s\n%s", f.step, f.sig, f.msg)
	}
}
