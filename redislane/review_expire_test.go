package redislane_test

import "testing"

// Review of extend_lenders (1b9529f): it follows a kept borrower's r by id,
// so once an operator removed the lender and the id was enqueued again by
// someone else (an "f" tombstone does not stop an enqueue), the unrelated
// new entry e1, ended for its own borrower e5, has its deadline raised to
// e4's on Redis. Memory (pointer identity) leaves it alone: the contract
// raises "each ended lender of it (and of theirs)", and the new e1 is no
// lender of e2. Redis is wrong (a snapshot difference: e1 expires=+5000
// on Redis, +1000 on memory).
func TestReviewExtendLendersFollowsReusedID(t *testing.T) {
	knownDiff(t, 'A', 9, "mismatch memory/miniredis rel snap",
		"extend_lenders raises an unrelated entry that reuses a removed lender's id",
		"enq o1 1000ms e1:k1/1",
		"enq o1 1000ms e2:k1/1,k2/1:e1",
		"enq o1 1000ms e3:k2/1,k3/1:e1,e2",
		"enq o1 5000ms e4:k3/1:e1,e2,e3",
		"rel o1 e1",
		"rel - e1",
		"enq o2 1000ms e1:k1/1",
		"enq o2 1000ms e5:k1/1:e1",
		"rel o2 e1",
		"rel o1 e3")
}
