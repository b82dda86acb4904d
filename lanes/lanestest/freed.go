package lanestest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// Several slots of a key freed in one step: a release of several holders,
// holders that expire together, a session that closes, the last holders of
// keys leaving while waiters with different key sets queue behind them.
// Every waiter that becomes eligible in that step is granted in it, and in
// queue order (DESIGN.md invariants 2 and 5): the step's Granted list
// follows the queue, and on each key an earlier waiter gets the smaller
// token. A backend that grants them latest-first passes every test that
// frees one slot at a time, and fails these.
//
// A raised limit cannot free slots this way: invariant 9 refuses a new
// limit while the key has a holder or a waiter (LimitsAgree checks it,
// waiters alone included), so a key takes a new limit only once drained,
// when nobody waits to be granted.

// direct is an owner that runs Backend steps itself, with no Session, so
// that each step is exactly the one the test names. Its entries live for
// ttl after each of its steps; nothing renews them in between.
type direct struct {
	t     *testing.T
	b     lanes.Backend
	owner lanes.Owner
	ttl   time.Duration
}

func newDirect(t *testing.T, b lanes.Backend, name string, ttl time.Duration) *direct {
	return &direct{t: t, b: b, owner: lanes.Owner{ID: name, Host: "lanestest", PID: 3}, ttl: ttl}
}

// enqueue runs one Enqueue step of reqs and returns their statuses by id.
func (d *direct) enqueue(reqs ...lanes.Request) map[string]lanes.Status {
	d.t.Helper()
	sts, err := d.b.Enqueue(ctxT(d.t), d.owner, d.ttl, reqs)
	if err != nil {
		d.t.Fatalf("Enqueue(%s) = %v", d.owner.ID, err)
	}
	out := map[string]lanes.Status{}
	for _, st := range sts {
		if st.Err != nil {
			d.t.Fatalf("Enqueue(%s): entry %s refused: %v", d.owner.ID, st.ID, st.Err)
		}
		out[st.ID] = st
	}
	return out
}

// release runs one Release step of ids.
func (d *direct) release(ids ...string) lanes.Released {
	d.t.Helper()
	r, err := d.b.Release(ctxT(d.t), d.owner.ID, ids)
	if err != nil {
		d.t.Fatalf("Release(%v) = %v", ids, err)
	}
	return r
}

// status runs one Heartbeat step of ids (renewing them) and returns their
// statuses by id.
func (d *direct) status(ids ...string) map[string]lanes.Status {
	d.t.Helper()
	sts, err := d.b.Heartbeat(ctxT(d.t), d.owner.ID, d.ttl, ids)
	if err != nil {
		d.t.Fatalf("Heartbeat(%v) = %v", ids, err)
	}
	out := map[string]lanes.Status{}
	for _, st := range sts {
		out[st.ID] = st
	}
	return out
}

// wantStates fails t unless each id has the state named.
func wantStates(t *testing.T, sts map[string]lanes.Status, want map[string]lanes.State) {
	t.Helper()
	for id, w := range want {
		if got := sts[id].State; got != w {
			t.Fatalf("entry %s is %v; want %v", id, got, w)
		}
	}
}

// inQueueOrder checks that on key the tokens of ids (in queue order) rise
// strictly and are all above floor, the last token issued before them. It
// returns what is wrong, or "".
func inQueueOrder(key string, floor uint64, tokens map[string]map[string]uint64, ids ...string) string {
	last := floor
	var got []string
	bad := false
	for _, id := range ids {
		tok := tokens[id][key]
		got = append(got, fmt.Sprintf("%s=%d", id, tok))
		if tok <= last {
			bad = true
		}
		last = tok
	}
	if bad {
		return fmt.Sprintf("tokens of %s: %s (after %d); want them rising in queue order", key, strings.Join(got, " "), floor)
	}
	return ""
}

// tokensOf collects the tokens of held statuses, by id.
func tokensOf(sts map[string]lanes.Status) map[string]map[string]uint64 {
	out := map[string]map[string]uint64{}
	for id, st := range sts {
		out[id] = st.Tokens
	}
	return out
}

func maxToken(key string, sts map[string]lanes.Status) uint64 {
	var m uint64
	for _, st := range sts {
		m = max(m, st.Tokens[key])
	}
	return m
}

// One Release step of three holders of a limit-3 key grants the first
// three of five waiters, in queue order, whatever the order of the released
// ids; a later step freeing two grants the other two, in order.
func testReleaseSeveralInQueueOrder(t *testing.T, inst Instance) {
	holders := newDirect(t, inst.Backend, "holders-owner", time.Minute)
	waiters := newDirect(t, inst.Backend, "waiters-owner", time.Minute)
	hs := holders.enqueue(req("h1", "k", 3), req("h2", "k", 3), req("h3", "k", 3))
	wantStates(t, hs, map[string]lanes.State{"h1": lanes.Held, "h2": lanes.Held, "h3": lanes.Held})
	ws := waiters.enqueue(req("w1", "k", 3), req("w2", "k", 3), req("w3", "k", 3), req("w4", "k", 3), req("w5", "k", 3))
	for i, id := range []string{"w1", "w2", "w3", "w4", "w5"} {
		if ws[id].State != lanes.Waiting || ws[id].Positions["k"] != i+1 {
			t.Fatalf("%s enqueued as %v at %v; want waiting at %d", id, ws[id].State, ws[id].Positions, i+1)
		}
	}

	r := holders.release("h3", "h1", "h2")
	if !equal(r.Granted, []string{"w1", "w2", "w3"}) {
		t.Errorf("Release(h3 h1 h2).Granted = %v; want [w1 w2 w3]: the queue's order", r.Granted)
	}
	st := waiters.status("w1", "w2", "w3", "w4", "w5")
	wantStates(t, st, map[string]lanes.State{"w1": lanes.Held, "w2": lanes.Held, "w3": lanes.Held, "w4": lanes.Waiting, "w5": lanes.Waiting})
	if bad := inQueueOrder("k", maxToken("k", hs), tokensOf(st), "w1", "w2", "w3"); bad != "" {
		t.Errorf("after one step freed 3 slots: %s", bad)
	}
	if ks := inspect(t, inst.Backend, "k"); !equal(holderIDs(ks), []string{"w1", "w2", "w3"}) || !equal(waiterIDs(ks), []string{"w4", "w5"}) {
		t.Errorf("Inspect(k) = holders %v waiters %v; want [w1 w2 w3] (grant order) [w4 w5]", holderIDs(ks), waiterIDs(ks))
	}

	r = waiters.release("w2", "w1")
	if !equal(r.Granted, []string{"w4", "w5"}) {
		t.Errorf("Release(w2 w1).Granted = %v; want [w4 w5]", r.Granted)
	}
	st2 := waiters.status("w4", "w5")
	wantStates(t, st2, map[string]lanes.State{"w4": lanes.Held, "w5": lanes.Held})
	if bad := inQueueOrder("k", st["w3"].Tokens["k"], tokensOf(st2), "w4", "w5"); bad != "" {
		t.Errorf("after one step freed 2 slots: %s", bad)
	}
	if r := waiters.release("w3", "w4", "w5"); len(r.Granted) != 0 {
		t.Errorf("the last release granted %v; nobody waits", r.Granted)
	}
}

// Three holders of a dead process, enqueued in one step, expire together:
// the step that reaps them grants three of four waiters (of two sessions)
// in queue order. Uses Instance.Advance where set, a 300ms TTL otherwise.
func testExpiriesTogetherInQueueOrder(t *testing.T, inst Instance) {
	const ttl = 300 * time.Millisecond
	dead := deadOwner(t, inst.Backend, ttl, req("d1", "k", 3), req("d2", "k", 3), req("d3", "k", 3))
	var floor uint64
	for _, st := range dead {
		if st.State != lanes.Held {
			t.Fatalf("dead holder %s is %v; want held", st.ID, st.State)
		}
		floor = max(floor, st.Tokens["k"])
	}
	s1, s2 := session(t, inst.Backend), session(t, inst.Backend)
	var ts []*lanes.Ticket
	for i, id := range []string{"w1", "w2", "w3", "w4"} {
		ts = append(ts, enqueue(t, []*lanes.Session{s1, s2}[i%2], req(id, "k", 3))[0])
	}
	passTTL(inst, ttl)
	tokens := map[string]map[string]uint64{}
	var ls []*lanes.Lease
	for _, tk := range ts[:3] {
		l := wait(t, tk)
		ls = append(ls, l)
		tokens[l.ID()] = l.Tokens()
	}
	if bad := inQueueOrder("k", floor, tokens, "w1", "w2", "w3"); bad != "" {
		t.Errorf("after three holders expired together: %s", bad)
	}
	if ks := inspect(t, inst.Backend, "k"); !equal(holderIDs(ks), []string{"w1", "w2", "w3"}) || !equal(waiterIDs(ks), []string{"w4"}) {
		t.Errorf("Inspect(k) = holders %v waiters %v; want [w1 w2 w3] (grant order) [w4]", holderIDs(ks), waiterIDs(ks))
	}
	release(t, ls[1])
	l4 := wait(t, ts[3])
	if l4.Token("k") <= ls[2].Token("k") {
		t.Errorf("token of w4 = %d, not above w3's %d", l4.Token("k"), ls[2].Token("k"))
	}
	release(t, ls[0])
	release(t, ls[2])
	release(t, l4)
}

// A session that closes releases its three leases in one step: the waiters
// of two other sessions are granted in queue order.
func testClosedSessionHandsOffInQueueOrder(t *testing.T, inst Instance) {
	holder := session(t, inst.Backend)
	var floor uint64
	for _, id := range []string{"h1", "h2", "h3"} {
		floor = max(floor, acquire(t, holder, req(id, "k", 3)).Token("k"))
	}
	s1, s2 := session(t, inst.Backend), session(t, inst.Backend)
	var ts []*lanes.Ticket
	for i, id := range []string{"w1", "w2", "w3", "w4"} {
		ts = append(ts, enqueue(t, []*lanes.Session{s1, s2}[i%2], req(id, "k", 3))[0])
	}
	if err := holder.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	tokens := map[string]map[string]uint64{}
	var ls []*lanes.Lease
	for _, tk := range ts[:3] {
		l := wait(t, tk)
		ls = append(ls, l)
		tokens[l.ID()] = l.Tokens()
	}
	if bad := inQueueOrder("k", floor, tokens, "w1", "w2", "w3"); bad != "" {
		t.Errorf("after a session holding 3 slots closed: %s", bad)
	}
	release(t, ls[0])
	l4 := wait(t, ts[3])
	if l4.Token("k") <= ls[2].Token("k") {
		t.Errorf("token of w4 = %d, not above w3's %d", l4.Token("k"), ls[2].Token("k"))
	}
	release(t, ls[1])
	release(t, ls[2])
	release(t, l4)
}

// The last holders of two keys leave in one step, and four waiters with
// different key sets queue behind them: w1 {b}, w2 {a, b}, w3 {a}, w4 {b}
// (limits 2). w1, w2 and w3 become eligible at once and must be granted in
// queue order: on b, w1 (queued first) before w2; on a, w2 before w3.
func testFreedAcrossKeysInQueueOrder(t *testing.T, inst Instance) {
	holders := newDirect(t, inst.Backend, "holders-owner", time.Minute)
	waiters := newDirect(t, inst.Backend, "waiters-owner", time.Minute)
	hs := holders.enqueue(req("h", "a", 2, "b", 2), req("h2", "b", 2))
	wantStates(t, hs, map[string]lanes.State{"h": lanes.Held, "h2": lanes.Held})
	ws := waiters.enqueue(req("w1", "b", 2), req("w2", "a", 2, "b", 2), req("w3", "a", 2), req("w4", "b", 2))
	wantStates(t, ws, map[string]lanes.State{"w1": lanes.Waiting, "w2": lanes.Waiting, "w3": lanes.Waiting, "w4": lanes.Waiting})

	r := holders.release("h", "h2")
	st := waiters.status("w1", "w2", "w3", "w4")
	wantStates(t, st, map[string]lanes.State{"w1": lanes.Held, "w2": lanes.Held, "w3": lanes.Held, "w4": lanes.Waiting})
	var bad []string
	if !equal(r.Granted, []string{"w1", "w2", "w3"}) {
		bad = append(bad, fmt.Sprintf("Release(h h2).Granted = %v; want [w1 w2 w3]", r.Granted))
	}
	if b := inQueueOrder("b", maxToken("b", hs), tokensOf(st), "w1", "w2"); b != "" {
		bad = append(bad, b)
	}
	if b := inQueueOrder("a", maxToken("a", hs), tokensOf(st), "w2", "w3"); b != "" {
		bad = append(bad, b)
	}

	rel := waiters.release("w1")
	st4 := waiters.status("w4")
	wantStates(t, st4, map[string]lanes.State{"w4": lanes.Held})
	if !equal(rel.Granted, []string{"w4"}) || st4["w4"].Tokens["b"] <= maxToken("b", st) {
		bad = append(bad, fmt.Sprintf("after w1 left: granted %v with b=%d; want [w4] with b above %d", rel.Granted, st4["w4"].Tokens["b"], maxToken("b", st)))
	}
	waiters.release("w2", "w3", "w4")

	if len(bad) > 0 {
		t.Errorf("waiters freed together across keys:\n%s", strings.Join(bad, "\n"))
	}
}
