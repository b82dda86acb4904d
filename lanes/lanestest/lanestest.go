// Package lanestest is the conformance suite every lanes.Backend runs: the
// invariants 1 to 12 of DESIGN.md section 3, checked through the Backend
// interface and through a lanes.Session on top of it.
//
// A backend's test calls Run with a Harness that makes one empty backend per
// test. The in-memory backend runs it in package lanes, the Redis backend in
// package redislane against miniredis and a real Redis server.
package lanestest

import (
	"context"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// Instance is one empty backend made for one test.
type Instance struct {
	Backend lanes.Backend
	// Advance, when set, moves the clock the backend reads forward by d.
	// Expiry tests use it where they can; without it they use short TTLs
	// on the real clock.
	Advance func(d time.Duration)
}

// Harness makes backends for the suite.
type Harness struct {
	// New returns an empty backend for t, cleaned up with t.Cleanup.
	New func(t *testing.T) Instance
}

// Run runs every conformance test against backends made by h.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, Instance)
	}{
		{"Limit", testLimit},
		{"LimitConcurrent", testLimitConcurrent},
		{"LimitZeroIsUnbounded", testLimitZero},
		{"FIFO", testFIFO},
		{"NoBarging", testNoBarging},
		{"NoBargingLeavesRoomBehindBlockedEntry", testRoomBehindBlocked},
		{"AllKeysAtOnce", testAllKeysAtOnce},
		{"BatchEnqueueInOrder", testBatchOrder},
		{"BatchWithMismatchEnqueuesNone", testBatchAtomic},
		{"TokensIncreasePerKey", testTokens},
		{"TokensSurviveEmptyLane", testTokensSurvive},
		{"ReleaseOfSeveralGrantsInQueueOrder", testReleaseSeveralInQueueOrder},
		{"ExpiriesTogetherGrantInQueueOrder", testExpiriesTogetherInQueueOrder},
		{"ClosedSessionHandsOffInQueueOrder", testClosedSessionHandsOffInQueueOrder},
		{"FreedAcrossKeysInQueueOrder", testFreedAcrossKeysInQueueOrder},
		{"DeadHolderExpires", testDeadHolder},
		{"HolderTTL", testHolderTTL},
		{"DeadHolderTakenOverAtItsDeadline", testDeadHolderTakenOverAtItsDeadline},
		{"HolderTTLOfSeveralKeys", testHolderTTLOfSeveralKeys},
		{"DeadHolderOfOneKeyTakenOverAtItsDeadline", testDeadHolderOfOneKeyTakenOverAtItsDeadline},
		{"WaiterMovedUpIsToldToLookAgain", testWaiterMovedUpIsToldToLookAgain},
		{"WaiterWithinRoomIsToldToLookAgain", testWaiterWithinRoomIsToldToLookAgain},
		{"LookAgainOnceAStep", testLookAgainOnceAStep},
		{"DeadHolderTakenOverAfterTheWaiterAheadLeft", testDeadHolderTakenOverAfterTheWaiterAheadLeft},
		{"DeadWaiterIsPurged", testDeadWaiter},
		{"StatsCountExpiries", testStats},
		{"LiveWaiterIsNeverEvicted", testLiveWaiter},
		{"LostBeforeRegranted", testLostBeforeRegrant},
		{"ForceReleasedLeaseIsLost", testForceRelease},
		{"HandoffAtDefaultTTLByHint", testHandoffAtDefaultTTL},
		{"CancelLeavesEveryQueue", testCancel},
		{"CancelledHeadWakesNext", testCancelledHead},
		{"CancelAfterGrantGivesItBack", testCancelAfterGrant},
		{"IdempotentEntries", testIdempotent},
		{"RestartedBatchKeepsOrder", testRestartKeepsOrder},
		{"TakeoverOfHeldEntryRefused", testTakeoverOfHeldRefused},
		{"TakeoverOfWaiterTellsOldOwner", testTakeoverOfWaiterTellsOldOwner},
		{"LimitsAgree", testLimitsAgree},
		{"ReentryAlongLineage", testReentry},
		{"ReentryThroughAChain", testReentryChain},
		{"ReentryEndsWithTheAncestorsHold", testReentryEndsWithAncestor},
		{"LockCycleFailsFast", testLockCycle},
		{"LockCycleInABatch", testLockCycleInBatch},
		{"BackendDown", testBackendDown},
		{"ReleaseTwiceAndAfterLoss", testReleaseResults},
		{"CloseReleasesEverything", testClose},
		{"InvalidInput", testInvalid},
		{"RandomHistory", testRandomHistory},
		{"MixedTTLs", testMixedTTLs},
		{"IDBoundToRequest", testIDBoundToRequest},
		{"DuplicateIDsInOneStep", testDuplicateIDsInOneStep},
		{"BorrowerEndsWithLender", testBorrowerEndsWithLender},
		{"ChainKeptForLastBorrower", testChainKeptForLastBorrower},
		{"ChainLenderRaisedInItsReap", testChainLenderRaisedInItsReap},
		{"ChainKeptPastReapMax", testChainKeptPastReapMax},
		{"ChainMiddleOutlivesLender", testChainMiddleOutlivesLender},
		{"RefusedCycleKeepsLimits", testRefusedCycleKeepsLimits},
		{"BorrowerKeepsArrivalPlace", testBorrowerKeepsArrivalPlace},
		{"SettledIDRefused", testSettledIDRefused},
		{"ForcedReleaseIsTold", testForcedReleaseIsTold},
		{"HeartbeatTellsForcedRelease", testHeartbeatTellsForcedRelease},
		{"RevokedBorrowerReleaseIsLost", testRevokedBorrowerReleaseIsLost},
		{"WaitAfterCloseFails", testWaitAfterCloseFails},
		{"ReleaseAfterFailedClose", testReleaseAfterFailedClose},
		{"RevokedBorrowerOfForcedLender", testRevokedBorrowerOfForcedLender},
		{"ReleaseAfterCloseReportsLoss", testReleaseAfterCloseReportsLoss},
		{"LostReleaseReplyIsSuccess", testLostReleaseReplyIsSuccess},
		{"LostEnqueueReplyIsSettled", testLostEnqueueReplyIsSettled},
		{"ExpiredHolderFreesDespiteBacklog", testExpiredHolderFreesDespiteBacklog},
		{"RunRecords", testRunRecords},
		{"ReusedIDReleaseIgnoresOldTombstone", testReusedIDReleaseIgnoresOldTombstone},
		{"RevokedBorrowerLostReleaseReply", testRevokedBorrowerLostReleaseReply},
		{"OnLostCloseReleasesRevokedBorrower", testOnLostCloseReleasesRevokedBorrower},
		{"CloseOfLenderAndBorrowerIsNoLoss", testCloseOfLenderAndBorrowerIsNoLoss},
	}
	run(t, h, append(tests, rateTests...))
}

// RunRate runs the rate lane tests alone, e.g. against a backend on the
// real clock where Run's instances advance theirs.
func RunRate(t *testing.T, h Harness) { run(t, h, rateTests) }

var rateTests = []struct {
	name string
	fn   func(*testing.T, Instance)
}{
	{"RateBoundsGrantsPerWindow", testRateBoundsGrantsPerWindow},
	{"RateNoOvertaking", testRateNoOvertaking},
	{"RateWithConcurrency", testRateWithConcurrency},
	{"RatesAgree", testRatesAgree},
	{"RateSessionWakesAtWindow", testRateSessionWakesAtWindow},
	{"RateWaiterHasNoHolderTTL", testRateWaiterHasNoHolderTTL},
	{"RateHeldWaiterHasNoHolderTTL", testRateHeldWaiterHasNoHolderTTL},
	{"RateSwitchDecidesRateFirst", testRateSwitchDecidesRateFirst},
	{"RateLeftoverLogBindsNoOne", testRateLeftoverLogBindsNoOne},
}

func run(t *testing.T, h Harness, tests []struct {
	name string
	fn   func(*testing.T, Instance)
}) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inst := h.New(t)
			tc.fn(t, inst)
			assertEmpty(t, inst.Backend)
		})
	}
}

// ctxT returns a context bounded well beyond any wait the suite expects, so
// a broken backend fails the test instead of hanging it.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// session starts a Session on b that is closed with the test.
func session(t *testing.T, b lanes.Backend, opts ...lanes.Option) *lanes.Session {
	t.Helper()
	s, err := lanes.NewSession(ctxT(t), b, append([]lanes.Option{lanes.WithTTL(30 * time.Second), lanes.WithHeartbeat(50 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatalf("NewSession() = %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func req(id string, lanesKV ...any) lanes.Request {
	r := lanes.Request{ID: id}
	for i := 0; i < len(lanesKV); i += 2 {
		r.Lanes = append(r.Lanes, lanes.Lane{Key: lanesKV[i].(string), Limit: lanesKV[i+1].(int)})
	}
	return r
}

func acquire(t *testing.T, s *lanes.Session, r lanes.Request) *lanes.Lease {
	t.Helper()
	l, err := s.Acquire(ctxT(t), r)
	if err != nil {
		t.Fatalf("Acquire(%s) = %v", r.ID, err)
	}
	return l
}

func enqueue(t *testing.T, s *lanes.Session, rs ...lanes.Request) []*lanes.Ticket {
	t.Helper()
	ts, err := s.Enqueue(ctxT(t), rs...)
	if err != nil {
		t.Fatalf("Enqueue() = %v", err)
	}
	return ts
}

func release(t *testing.T, l *lanes.Lease) {
	t.Helper()
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release(%s) = %v", l.ID(), err)
	}
}

func isReady(tk *lanes.Ticket) bool {
	select {
	case <-tk.Ready():
		return true
	default:
		return false
	}
}

// wait returns the lease of tk, failing the test if it ends otherwise.
func wait(t *testing.T, tk *lanes.Ticket) *lanes.Lease {
	t.Helper()
	l, err := tk.Wait(ctxT(t))
	if err != nil {
		t.Fatalf("Wait(%s) = %v", tk.ID(), err)
	}
	return l
}

// inspect returns the state of key, or a zero KeyState when it has none.
func inspect(t *testing.T, b lanes.Backend, key string) lanes.KeyState {
	t.Helper()
	snap, err := b.Inspect(ctxT(t), []string{key})
	if err != nil {
		t.Fatalf("Inspect(%q) = %v", key, err)
	}
	for _, ks := range snap.Keys {
		if ks.Key == key {
			return ks
		}
	}
	return lanes.KeyState{Key: key}
}

func holderIDs(ks lanes.KeyState) []string {
	var out []string
	for _, h := range ks.Holders {
		out = append(out, h.ID)
	}
	return out
}

func waiterIDs(ks lanes.KeyState) []string {
	var out []string
	for _, w := range ks.Waiters {
		out = append(out, w.ID)
	}
	return out
}

// assertEmpty checks DESIGN.md invariant 7's "nothing leaks": after the test
// released everything, the backend holds no holder, waiter or entry.
func assertEmpty(t *testing.T, b lanes.Backend) {
	t.Helper()
	snap, err := b.Inspect(context.Background(), nil)
	if err != nil {
		t.Fatalf("Inspect() after the test = %v", err)
	}
	// Sessions are closed by t.Cleanup, after this check; closing them is
	// what the test must not rely on, so only entries the test released
	// count. Every test releases or cancels all it took.
	for _, ks := range snap.Keys {
		if len(ks.Holders)+len(ks.Waiters) == 0 {
			continue // a rate key's window: units spent, no entry
		}
		t.Errorf("after the test, key %q still has holders %v and waiters %v", ks.Key, holderIDs(ks), waiterIDs(ks))
	}
}

// eventually polls cond until it holds or 10s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not true after 10s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
