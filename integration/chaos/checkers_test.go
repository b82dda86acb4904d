package chaos

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// synth builds a synthetic history, times in arbitrary units.
type synth struct{ evs []Event }

func (s *synth) add(t int64, e Event) {
	e.Time = t
	s.evs = append(s.evs, e)
}

// proc records a clean start and exit of a process around everything.
func (s *synth) proc(name string) {
	s.add(0, Event{Proc: name, Op: OpStart, Phase: Ok})
	s.add(1_000_000, Event{Proc: name, Op: OpExit, Phase: Ok})
}

// grant records a request of key (limit) by proc that was invoked at inv,
// enqueued by enq, granted at got with tok, released over [rel, rel+1].
func (s *synth) grant(proc, id, key string, limit int, inv, enq, got int64, tok uint64, rel int64) {
	base := Event{Proc: proc, ID: id, NS: "ns", Keys: []string{key}, Limits: []int{limit}}
	s.add(inv, withOp(base, OpAcquire, Invoke))
	s.add(inv, withOp(base, OpEnqueue, Invoke))
	s.add(enq, withOp(base, OpEnqueue, Ok))
	ok := withOp(base, OpAcquire, Ok)
	ok.Tokens = map[string]uint64{key: tok}
	s.add(got, ok)
	if rel > 0 {
		s.add(rel, withOp(base, OpRelease, Invoke))
		s.add(rel+1, withOp(base, OpRelease, Ok))
	}
}

func (s *synth) history() *History {
	sort.SliceStable(s.evs, func(i, j int) bool { return s.evs[i].Time < s.evs[j].Time })
	return Build(s.evs)
}

func checkers(vs []Violation) string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Checker)
	}
	return strings.Join(out, ",")
}

func wantOnly(t *testing.T, vs []Violation, checker, text string) {
	t.Helper()
	if len(vs) == 0 {
		t.Fatalf("no violation reported; want %s (%q)", checker, text)
	}
	for _, v := range vs {
		t.Logf("reported: %s", v)
		if v.Checker != checker || !strings.Contains(v.Msg, text) {
			t.Errorf("got %s; want only %s violations mentioning %q", v, checker, text)
		}
	}
}

// A valid history, with a lease lost and confirmed gone and a killed
// process, raises nothing.
func TestCheckersAcceptValidHistory(t *testing.T) {
	s := &synth{}
	s.proc("a")
	s.proc("b")
	s.add(0, Event{Proc: "c", Op: OpStart, Phase: Ok})
	s.grant("a", "a1", "K", 1, 10, 11, 12, 1, 20)
	s.grant("b", "b1", "K", 1, 15, 16, 25, 2, 30) // waited for a1
	s.grant("a", "a2", "K", 1, 40, 41, 42, 3, 0)  // lost: never released, confirmed gone at 60
	lost := Event{Proc: "a", ID: "a2", NS: "ns", Keys: []string{"K"}, Limits: []int{1}}
	s.add(55, withOp(lost, OpRelease, Invoke))
	f := withOp(lost, OpRelease, Fail)
	f.Class = ClassLost
	s.add(56, f)
	s.add(60, withOp(lost, OpGone, Ok))
	s.grant("b", "b2", "K", 1, 45, 46, 58, 4, 70) // granted after a2 expired
	s.grant("c", "c1", "K", 1, 80, 81, 82, 5, 0)  // c dies holding it
	s.add(85, Event{Proc: "harness", Op: OpKill, Phase: Ok, ID: "c"})
	s.grant("a", "a3", "K", 1, 84, 86, 95, 6, 100)
	s.grant("a", "s1", "S", 2, 10, 11, 12, 1, 50)
	s.grant("b", "s2", "S", 2, 10, 11, 12, 2, 50)
	h := s.history()
	if vs := Check(h, Options{}); len(vs) != 0 {
		t.Fatalf("violations in a valid history: %v", vs)
	}
	rs := Recoveries(h)
	if len(rs) != 1 || rs[0].Took != 10 {
		t.Fatalf("recoveries %v; want one of 10 units (kill at 85, a3 granted at 95)", rs)
	}
}

// An over-limit overlap: b1 is granted while a1 still holds the mutex.
func TestCheckersCatchOverLimitOverlap(t *testing.T) {
	s := &synth{}
	s.proc("a")
	s.proc("b")
	s.grant("a", "a1", "K", 1, 10, 11, 12, 1, 30)
	s.grant("b", "b1", "K", 1, 13, 14, 15, 2, 40)
	wantOnly(t, Check(s.history(), Options{}), "mutex", "over-limit overlap")
}

// The semaphore: three holders of a key of limit 2.
func TestCheckersCatchSemaphoreOverLimit(t *testing.T) {
	s := &synth{}
	s.proc("a")
	s.proc("b")
	s.grant("a", "s1", "S", 2, 10, 11, 12, 1, 30)
	s.grant("b", "s2", "S", 2, 10, 11, 13, 2, 30)
	s.grant("a", "s3", "S", 2, 10, 11, 14, 3, 30)
	wantOnly(t, Check(s.history(), Options{}), "semaphore", "over-limit overlap")
}

// An out-of-order grant: a1's enqueue returned before b1 asked, yet b1 was
// granted (and released) first.
func TestCheckersCatchOutOfOrderGrant(t *testing.T) {
	s := &synth{}
	s.proc("a")
	s.proc("b")
	s.grant("a", "a1", "K", 1, 1, 5, 20, 2, 25)
	s.grant("b", "b1", "K", 1, 6, 7, 10, 1, 15)
	wantOnly(t, Check(s.history(), Options{}), "fifo", "out-of-order grant")
}

// Concurrent enqueues have no known order: the same grants are fine when
// a1's enqueue had not returned before b1 asked.
func TestCheckersLeaveConcurrentEnqueuesUnordered(t *testing.T) {
	s := &synth{}
	s.proc("a")
	s.proc("b")
	s.grant("a", "a1", "K", 1, 1, 8, 20, 2, 25)
	s.grant("b", "b1", "K", 1, 6, 7, 10, 1, 15)
	if vs := Check(s.history(), Options{}); len(vs) != 0 {
		t.Fatalf("violations for concurrent enqueues: %v", vs)
	}
}

// A lease its holder still found valid (Lease.Err said nil) after its slot
// went to another: the holder was not told of the loss in time.
func TestCheckersCatchValidAfterRegrant(t *testing.T) {
	s := &synth{}
	s.proc("a")
	s.proc("b")
	s.grant("a", "a1", "K", 1, 1, 2, 3, 1, 0)
	base := Event{Proc: "a", ID: "a1", NS: "ns", Keys: []string{"K"}, Limits: []int{1}}
	s.add(30, withOp(base, OpValid, Invoke))
	s.add(31, withOp(base, OpValid, Ok))
	s.add(40, withOp(base, OpRelease, Invoke))
	f := withOp(base, OpRelease, Fail)
	f.Class = ClassNotHolder
	s.add(41, f)
	s.add(42, withOp(base, OpGone, Ok))
	s.grant("b", "b1", "K", 1, 10, 11, 20, 2, 50)
	wantOnly(t, Check(s.history(), Options{}), "mutex", "not told of its loss in time")
	if vs := Check(s.history(), Options{DataLoss: true}); len(vs) != 0 {
		t.Fatalf("with DataLoss, Lease.Err answers are not checked; got %v", vs)
	}
}

// A repeated token: two grants of the key with the same token.
func TestCheckersCatchRepeatedToken(t *testing.T) {
	s := &synth{}
	s.proc("a")
	s.proc("b")
	s.grant("a", "a1", "K", 1, 1, 2, 3, 7, 10)
	s.grant("b", "b1", "K", 1, 12, 13, 14, 7, 20)
	wantOnly(t, Check(s.history(), Options{}), "fencing", "repeated token")
}

// Tokens that go down between two grants in real-time order.
func TestCheckersCatchDecreasingToken(t *testing.T) {
	s := &synth{}
	s.proc("a")
	s.proc("b")
	s.grant("a", "a1", "K", 1, 1, 2, 3, 9, 10)
	s.grant("b", "b1", "K", 1, 12, 13, 14, 8, 20)
	wantOnly(t, CheckLanes(s.history(), Options{}), "fencing", "token out of grant order")
}

// A lost waiter: a request that never got an answer in a process that
// exited cleanly.
func TestCheckersCatchLostWaiter(t *testing.T) {
	s := &synth{}
	s.proc("a")
	s.proc("b")
	s.grant("a", "a1", "K", 1, 1, 2, 3, 1, 10)
	base := Event{Proc: "b", ID: "b1", NS: "ns", Keys: []string{"K"}, Limits: []int{1}}
	s.add(5, withOp(base, OpAcquire, Invoke))
	s.add(5, withOp(base, OpEnqueue, Invoke))
	s.add(6, withOp(base, OpEnqueue, Ok))
	wantOnly(t, Check(s.history(), Options{}), "liveness", "lost waiter")
}

// A wait that ran to its bound is a stuck queue; a process that vanished
// without being killed is reported too.
func TestCheckersCatchStuckWaitAndVanishedProcess(t *testing.T) {
	s := &synth{}
	s.proc("a")
	base := Event{Proc: "a", ID: "a1", NS: "ns", Keys: []string{"K"}, Limits: []int{1}}
	s.add(5, withOp(base, OpAcquire, Invoke))
	f := withOp(base, OpAcquire, Fail)
	f.Class, f.Err = ClassTimeout, "lanes: wait timed out"
	s.add(500, f)
	s.add(0, Event{Proc: "ghost", Op: OpStart, Phase: Ok})
	vs := Check(s.history(), Options{})
	if checkers(vs) != "liveness,liveness" || !strings.Contains(vs[0].Msg+vs[1].Msg, "stuck") || !strings.Contains(vs[0].Msg+vs[1].Msg, "ghost") {
		t.Fatalf("got %v; want a stuck wait and a vanished process", vs)
	}
}

// A lost update on the protected counter: two accepted writes read the same
// value, and the final value is below the number of accepted writes.
func TestCheckersCatchLostUpdate(t *testing.T) {
	s := &synth{}
	s.proc("a")
	s.proc("b")
	w := func(proc, id string, t0 int64, tok uint64, v int64) {
		e := Event{Proc: proc, ID: id, NS: "ns", Keys: []string{"K"}, Tokens: map[string]uint64{"K": tok}, Value: v}
		s.add(t0, withOp(e, OpWrite, Invoke))
		s.add(t0+1, withOp(e, OpWrite, Ok))
	}
	w("a", "a1", 10, 5, 1)
	w("b", "b1", 20, 6, 2)
	w("a", "a0", 30, 4, 2) // a stalled holder's late write with its older token
	vs := CheckResources(s.history(), map[string]int64{"ns/K": 2})
	var all []string
	for _, v := range vs {
		t.Logf("reported: %s", v)
		all = append(all, v.Msg)
	}
	for _, want := range []string{"lost update", "lower token", "final value 2 after 3 accepted writes"} {
		if !strings.Contains(strings.Join(all, "\n"), want) {
			t.Errorf("no violation mentions %q", want)
		}
	}
}

// A heartbeat that renewed an entry after its release.
func TestCheckersCatchRenewalAfterUnlock(t *testing.T) {
	s := &synth{}
	s.proc("a")
	s.grant("a", "a1", "K", 1, 1, 2, 3, 1, 10)
	p := withOp(Event{Proc: "a", ID: "a1"}, OpProbe, Ok)
	p.State = "held"
	s.add(12, p)
	wantOnly(t, Check(s.history(), Options{}), "probe", "renewal after unlock")
}

// The owner-aware models refuse a release by anyone but the holder.
func TestModelsAreOwnerAware(t *testing.T) {
	for _, limit := range []int{1, 3} {
		ops := []porcupine.Operation{
			{Input: LaneOp{Acquire: true, Entry: "e1", Owner: "a", Token: 1}, Call: 0, Return: 1},
			{Input: LaneOp{Entry: "e1", Owner: "b"}, Call: 2, Return: 3},
		}
		if porcupine.CheckOperations(LaneModel(limit, true), ops) {
			t.Errorf("limit %d: a release by another owner was accepted", limit)
		}
		ops[1].Input = LaneOp{Entry: "e1", Owner: "a"}
		if !porcupine.CheckOperations(LaneModel(limit, true), ops) {
			t.Errorf("limit %d: the holder's own release was refused", limit)
		}
	}
}

// The checker of a lease that must not survive a fault.
func TestCheckLostAcross(t *testing.T) {
	s := &synth{}
	s.proc("a")
	s.grant("a", "a1", "K", 1, 1, 2, 3, 1, 100)
	h := s.history()
	if vs := CheckLostAcross(h, unix(10), unix(50)); len(vs) != 1 {
		t.Fatalf("got %v; want the lease that survived the fault", vs)
	}
	if vs := CheckLostAcross(h, unix(1), unix(50)); len(vs) != 0 {
		t.Fatalf("got %v for a lease granted after the fault began", vs)
	}
}

// Files written by a Recorder merge back in time order, a torn last line
// ignored.
func TestRecorderAndReadHistory(t *testing.T) {
	dir := t.TempDir()
	r1, err := NewRecorder(filepath.Join(dir, "a.jsonl"), "a")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := NewRecorder(filepath.Join(dir, "b.jsonl"), "b")
	if err != nil {
		t.Fatal(err)
	}
	r1.Record(Event{Op: OpStart, Phase: Ok})
	r2.Record(Event{Op: OpStart, Phase: Ok})
	r1.Record(Event{Op: OpExit, Phase: Ok})
	if err := errorsJoin(r1.Close(), r2.Close()); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(filepath.Join(dir, "b.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"t":1,"p":"b","op":"acq`)
	f.Close()
	h, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Events) != 3 || h.Procs["a"] != "exit" || h.Procs["b"] != "" {
		t.Fatalf("history %v, procs %v", h.Events, h.Procs)
	}
	if vs := CheckLiveness(h); len(vs) != 1 {
		t.Fatalf("got %v; want b reported as vanished", vs)
	}
}

func unix(n int64) time.Time { return time.Unix(0, n) }

func errorsJoin(errs ...error) error { return errors.Join(errs...) }

// A fleet that made no progress passes every other checker; the progress
// checker catches it, overall and per process that exited cleanly.
func TestCheckersCatchNoProgress(t *testing.T) {
	s := &synth{}
	s.proc("a")
	s.proc("b")
	s.add(0, Event{Proc: "c", Op: OpStart, Phase: Ok})
	s.grant("a", "a1", "K", 1, 10, 11, 12, 1, 20)
	s.add(50, Event{Proc: "harness", Op: OpKill, Phase: Ok, ID: "c"}) // killed: not held to a minimum
	h := s.history()
	if vs := Check(h, Options{MinGrants: 1, MinGrantsPerProc: 0}); len(vs) != 0 {
		t.Fatalf("violations with one grant wanted: %v", vs)
	}
	wantOnly(t, Check(h, Options{MinGrants: 2}), "progress", "1 grants in 1 requests; want at least 2")
	wantOnly(t, Check(h, Options{MinGrantsPerProc: 1}), "progress", "process b exited cleanly after 0 grants")
}

// nested records a request of key nested under lineage, as grant does; its
// Enqueue step answers "ready" (granted at once) when enq == got.
func (s *synth) nested(proc, id, key string, limit int, lineage []string, inv, enq, got int64, tok uint64, rel int64) Event {
	base := Event{Proc: proc, ID: id, NS: "ns", Keys: []string{key}, Limits: []int{limit}, Lin: lineage}
	s.add(inv, withOp(base, OpAcquire, Invoke))
	s.add(inv, withOp(base, OpEnqueue, Invoke))
	e := withOp(base, OpEnqueue, Ok)
	e.State = "waiting"
	if enq == got {
		e.State = "ready"
	}
	s.add(enq, e)
	ok := withOp(base, OpAcquire, Ok)
	ok.Tokens = map[string]uint64{key: tok}
	s.add(got, ok)
	if rel > 0 {
		s.add(rel, withOp(base, OpRelease, Invoke))
		s.add(rel+1, withOp(base, OpRelease, Ok))
	}
	return base
}

func (s *synth) valid(base Event, at int64) {
	s.add(at, withOp(base, OpValid, Invoke))
	s.add(at+1, withOp(base, OpValid, Ok))
}

// Re-entry as it should be: a nested request in the same process and one
// in another take the parent's slot at once with its token, a waiter
// enqueued before them is granted after the parent without a FIFO
// complaint, and a borrower whose lender released first is told before the
// next holder comes.
func TestCheckersAcceptNestedHistory(t *testing.T) {
	s := &synth{}
	s.proc("a")
	s.proc("b")
	s.proc("c")
	s.grant("a", "a1", "K", 1, 10, 11, 12, 5, 100)
	s.grant("c", "c1", "K", 1, 14, 15, 105, 6, 110) // queued before the nested requests asked
	kid := s.nested("a", "a1-n", "K", 1, []string{"a1"}, 20, 21, 21, 5, 50)
	s.valid(kid, 30)
	other := s.nested("b", "b1", "K", 1, []string{"a1"}, 25, 26, 26, 5, 60)
	s.valid(other, 40)
	// A parent that released before its nested request: the borrower is
	// told (Lost) before the next holder is granted.
	s.grant("a", "a2", "J", 1, 10, 11, 12, 7, 200)
	d := s.nested("a", "a2-n", "J", 1, []string{"a2"}, 20, 21, 21, 7, 0)
	s.valid(d, 150)
	s.add(203, withOp(d, OpLost, Ok))
	s.add(210, withOp(d, OpRelease, Invoke))
	f := withOp(d, OpRelease, Fail)
	f.Class = ClassLost
	s.add(211, f)
	s.add(212, withOp(d, OpGone, Ok))
	s.grant("c", "c2", "J", 1, 190, 191, 205, 8, 220)
	h := s.history()
	if vs := Check(h, Options{}); len(vs) != 0 {
		t.Fatalf("violations in a valid nested history: %v", vs)
	}
	st := Nesting(h)
	if st.Nested != 3 || st.Reentered != 3 || st.Cross != 1 || st.Orphaned != 1 {
		t.Fatalf("nesting %+v; want 3 nested, 3 re-entered, 1 across processes, 1 orphaned", st)
	}
}

// A borrowed slot that outlived its lender: a1 released K, c1 was granted
// it, and a1's nested request still found its lease valid.
func TestCheckersCatchBorrowerOutlivingLender(t *testing.T) {
	s := &synth{}
	s.proc("a")
	s.proc("c")
	s.grant("a", "a1", "K", 1, 10, 11, 12, 5, 40)
	kid := s.nested("a", "a1-n", "K", 1, []string{"a1"}, 20, 21, 21, 5, 0)
	s.valid(kid, 50)
	s.add(60, withOp(kid, OpLost, Ok))
	s.add(61, withOp(kid, OpRelease, Invoke))
	f := withOp(kid, OpRelease, Fail)
	f.Class = ClassLost
	s.add(62, f)
	s.add(63, withOp(kid, OpGone, Ok))
	s.grant("c", "c1", "K", 1, 30, 31, 45, 6, 70)
	vs := Check(s.history(), Options{})
	for _, v := range vs {
		t.Logf("reported: %s", v)
	}
	if got := checkers(vs); got != "mutex,borrow" {
		t.Fatalf("checkers %q; want mutex (the model) and borrow", got)
	}
	if !strings.Contains(vs[1].Msg, "outlived its lender") {
		t.Errorf("borrow violation %q does not say the slot outlived its lender", vs[1].Msg)
	}
}

// A nested request whose parent held its key throughout, yet got a token
// of its own (the key was granted twice).
func TestCheckersCatchReentryWithAnotherToken(t *testing.T) {
	s := &synth{}
	s.proc("a")
	s.grant("a", "a1", "K", 1, 10, 11, 12, 5, 100)
	s.nested("a", "a1-n", "K", 1, []string{"a1"}, 20, 21, 21, 6, 50)
	vs := Check(s.history(), Options{})
	for _, v := range vs {
		t.Logf("reported: %s", v)
	}
	if !strings.Contains(checkers(vs), "reentry") || !strings.Contains(checkers(vs), "mutex") {
		t.Fatalf("checkers %q; want the mutex model and reentry", checkers(vs))
	}
}

// A nested request on its parent's key that was queued instead of granted
// at once, and gave up.
func TestCheckersCatchReentryQueued(t *testing.T) {
	s := &synth{}
	s.proc("a")
	s.grant("a", "a1", "K", 1, 10, 11, 12, 5, 100)
	base := Event{Proc: "a", ID: "a1-n", NS: "ns", Keys: []string{"K"}, Limits: []int{1}, Lin: []string{"a1"}}
	s.add(20, withOp(base, OpAcquire, Invoke))
	s.add(20, withOp(base, OpEnqueue, Invoke))
	e := withOp(base, OpEnqueue, Ok)
	e.State = "waiting"
	s.add(21, e)
	f := withOp(base, OpAcquire, Fail)
	f.Class = ClassCancel
	s.add(60, f)
	wantOnly(t, Check(s.history(), Options{}), "reentry", "instead of being granted at once")
}

// A grant with its lender's token after the lender had released: re-entry
// under a lease that had ended.
func TestCheckersCatchReentryAfterLenderLeft(t *testing.T) {
	s := &synth{}
	s.proc("a")
	s.proc("b")
	s.grant("a", "a1", "K", 1, 10, 11, 12, 5, 20)
	s.nested("b", "b1", "K", 1, []string{"a1"}, 30, 31, 31, 5, 40)
	wantOnly(t, CheckLanes(s.history(), Options{}), "mutex", "no order")
}

// With BorrowLag, a borrower told within the lag of the next grant is the
// known bug (borrow-lag) and the models let it be; later, it is a
// violation.
func TestCheckersBorrowLag(t *testing.T) {
	s := &synth{}
	s.proc("a")
	s.proc("c")
	s.grant("a", "a1", "K", 1, 10, 11, 12, 5, 40)
	kid := s.nested("a", "a1-n", "K", 1, []string{"a1"}, 20, 21, 21, 5, 0)
	s.valid(kid, 50)
	s.add(60, withOp(kid, OpLost, Ok))
	s.add(61, withOp(kid, OpRelease, Invoke))
	f := withOp(kid, OpRelease, Fail)
	f.Class = ClassLost
	s.add(62, f)
	s.add(63, withOp(kid, OpGone, Ok))
	s.grant("c", "c1", "K", 1, 30, 31, 45, 6, 70)
	wantOnly(t, Check(s.history(), Options{BorrowLag: 10}), "borrow-lag", "outlived its lender by 5ns")
	wantOnly(t, Check(s.history(), Options{BorrowLag: 2}), "borrow", "outlived its lender by 5ns")
}

// An entry that borrowed K from a1 and holds J in its own right is removed
// whole when a1 releases: J may go to the next holder, and the entry must
// not find its lease valid after that (or, with BorrowLag, only within the
// lag).
func TestCheckersRevokedEntryLosesItsOwnKeys(t *testing.T) {
	mk := func() *History {
		s := &synth{}
		s.proc("a")
		s.proc("b")
		s.proc("c")
		s.grant("a", "a1", "K", 1, 10, 11, 12, 5, 40)
		base := Event{Proc: "b", ID: "b1", NS: "ns", Keys: []string{"K", "J"}, Limits: []int{1, 1}, Lin: []string{"a1"}}
		s.add(20, withOp(base, OpAcquire, Invoke))
		s.add(20, withOp(base, OpEnqueue, Invoke))
		e := withOp(base, OpEnqueue, Ok)
		e.State = "ready"
		s.add(21, e)
		ok := withOp(base, OpAcquire, Ok)
		ok.Tokens = map[string]uint64{"K": 5, "J": 9}
		s.add(21, ok)
		s.valid(base, 30)
		s.valid(base, 50) // after c1 got J
		s.add(60, withOp(base, OpLost, Ok))
		s.add(61, withOp(base, OpRelease, Invoke))
		f := withOp(base, OpRelease, Fail)
		f.Class = ClassLost
		s.add(62, f)
		s.add(63, withOp(base, OpGone, Ok))
		s.grant("c", "c1", "J", 1, 35, 36, 45, 10, 70)
		return s.history()
	}
	vs := Check(mk(), Options{})
	for _, v := range vs {
		t.Logf("reported: %s", v)
	}
	if got := checkers(vs); got != "mutex,borrow" {
		t.Fatalf("checkers %q; want mutex (the model) and borrow", got)
	}
	wantOnly(t, Check(mk(), Options{BorrowLag: 10}), "borrow-lag", `key "J": a borrowed slot outlived its lender by 5ns`)
}
