package redislane_test

// A differential, model-based test of the two backends: random sequences of
// Backend steps run against the in-memory backend (the reference) and the
// Redis backend (miniredis, a real Redis server), compared after every step,
// with the invariants of DESIGN.md section 3 checked on every backend by
// itself.
//
//	go test -race -run Differential ./redislane/
//	LANES_DIFF_N=5000 LANES_DIFF_SEED=42 go test -run 'Differential(Miniredis|RealRedis)$' ./redislane/
//
// Mode A (TestDifferentialMiniredis): memory and miniredis read one fake
// clock that moves only at "adv" steps, so expiry is deterministic and every
// time a backend reports is compared. Mode B (TestDifferentialRealRedis):
// memory, miniredis and the real server at 127.0.0.1:6379 (LANES_REDIS_URL),
// on their own clocks with long TTLs and no expiry; times are not compared.
//
// A sequence is a list of steps in a small text form, so that a failure is
// printed as a script that a regression test replays (runDiffScript):
//
//	enq o1 200ms e1:k0/1,k2/2 e3:k1/1:e0,e1   owner o1 enqueues e1 (keys k0, k2) and e3 (lineage e0, e1)
//	hb o1 200ms e1 e3                           heartbeat
//	rel o1 e1 | rel - e1                        release by o1 | by an operator (force)
//	settle o2 50ms e1                           settle with a tombstone lifetime
//	insp | insp k0 k1                           inspect every key | these keys
//	adv 101ms                                   move the clock (mode A only)
//
// After every step but "adv", each backend is inspected (every key) and its
// hints are collected; the observation of each step (the step's answer, the
// hints per owner, the snapshot) is compared line by line with memory's.
// Tokens and sequence numbers differ in value between backends: each is
// shown as its rank among those the backend issued (per key for tokens),
// so their order is compared, not their values. At the end of a sequence an
// operator releases every id; then nothing may be left (Redis: no entry,
// queue member, hold, limit, deadline or nested link besides the markers).
//
// The differences it found (differential_known_test.go) are fixed and kept
// as named regression tests. LANES_DIFF_STRICT=0 steers the random test
// around them again (see diffAvoid), to look for others while one is open.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/internal/redistest"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

var diffOwners = []string{"o1", "o2", "o3"}

// diffBase is the fake clock's start in mode A: a whole millisecond, as
// Redis reads time in milliseconds.
var diffBase = time.UnixMilli(1_760_000_000_000)

// ---------------------------------------------------------------------------
// Steps and their text form

// dop is one step of a sequence.
type dop struct {
	kind string        // enq, hb, rel, settle, insp, adv
	who  string        // the owner; for rel the releasing owner, "" an operator
	d    time.Duration // enq and hb: TTL; settle: tombstone lifetime; adv: how far
	reqs []dreq        // enq
	ids  []string      // hb, rel, settle
	keys []string      // insp: the keys asked, none for every key
}

// dreq is one request of an enq step.
type dreq struct {
	id      string
	lanes   []lanes.Lane
	lineage []string
}

func (r dreq) String() string {
	parts := make([]string, len(r.lanes))
	for i, l := range r.lanes {
		parts[i] = fmt.Sprintf("%s/%d", l.Key, l.Limit)
	}
	s := r.id + ":" + strings.Join(parts, ",")
	if len(r.lineage) > 0 {
		s += ":" + strings.Join(r.lineage, ",")
	}
	return s
}

func (o dop) String() string {
	switch o.kind {
	case "enq":
		s := fmt.Sprintf("enq %s %v", cmp.Or(o.who, "-"), o.d)
		for _, r := range o.reqs {
			s += " " + r.String()
		}
		return s
	case "hb", "settle":
		return strings.TrimSpace(fmt.Sprintf("%s %s %v %s", o.kind, cmp.Or(o.who, "-"), o.d, strings.Join(o.ids, " ")))
	case "rel":
		return strings.TrimSpace(fmt.Sprintf("rel %s %s", cmp.Or(o.who, "-"), strings.Join(o.ids, " ")))
	case "insp":
		return strings.TrimSpace("insp " + strings.Join(o.keys, " "))
	case "adv":
		return fmt.Sprintf("adv %v", o.d)
	}
	return "?" + o.kind
}

// parseOp reads the text form of one step.
func parseOp(s string) (dop, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return dop{}, errors.New("empty step")
	}
	o := dop{kind: f[0]}
	need := func(n int) error {
		if len(f) < n {
			return fmt.Errorf("step %q: too few fields", s)
		}
		return nil
	}
	var err error
	switch o.kind {
	case "enq":
		if err = need(3); err != nil {
			return o, err
		}
		o.who = f[1]
		if o.d, err = time.ParseDuration(f[2]); err != nil {
			return o, err
		}
		for _, rs := range f[3:] {
			parts := strings.Split(rs, ":")
			if len(parts) < 2 || len(parts) > 3 {
				return o, fmt.Errorf("request %q: want id:key/limit,...[:lineage,...]", rs)
			}
			r := dreq{id: parts[0]}
			for _, kl := range strings.Split(parts[1], ",") {
				k, l, ok := strings.Cut(kl, "/")
				n, err := strconv.Atoi(l)
				if !ok || err != nil {
					return o, fmt.Errorf("lane %q: want key/limit", kl)
				}
				r.lanes = append(r.lanes, lanes.Lane{Key: k, Limit: n})
			}
			if len(parts) == 3 {
				r.lineage = strings.Split(parts[2], ",")
			}
			o.reqs = append(o.reqs, r)
		}
	case "hb", "settle":
		if err = need(3); err != nil {
			return o, err
		}
		o.who = f[1]
		if o.d, err = time.ParseDuration(f[2]); err != nil {
			return o, err
		}
		o.ids = f[3:]
	case "rel":
		if err = need(2); err != nil {
			return o, err
		}
		o.who = f[1]
		o.ids = f[2:]
	case "insp":
		o.keys = f[1:]
	case "adv":
		if err = need(2); err != nil {
			return o, err
		}
		if o.d, err = time.ParseDuration(f[1]); err != nil {
			return o, err
		}
	default:
		return o, fmt.Errorf("step %q: unknown kind", s)
	}
	if o.who == "-" {
		o.who = "" // an operator, or an empty owner
	}
	return o, nil
}

func parseScript(t testing.TB, script []string) []dop {
	t.Helper()
	ops := make([]dop, len(script))
	for i, s := range script {
		o, err := parseOp(s)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		ops[i] = o
	}
	return ops
}

func scriptText(ops []dop) string {
	var b strings.Builder
	for _, o := range ops {
		fmt.Fprintf(&b, "\t\t%q,\n", o.String())
	}
	return b.String()
}

func (o dop) clone() dop {
	c := o
	c.ids = slices.Clone(o.ids)
	c.keys = slices.Clone(o.keys)
	c.reqs = make([]dreq, len(o.reqs))
	for i, r := range o.reqs {
		c.reqs[i] = dreq{id: r.id, lanes: slices.Clone(r.lanes), lineage: slices.Clone(r.lineage)}
	}
	return c
}

func cloneOps(ops []dop) []dop {
	out := make([]dop, len(ops))
	for i, o := range ops {
		out[i] = o.clone()
	}
	return out
}

// ---------------------------------------------------------------------------
// The generator

// diffGen is how sequences are made for one mode.
type diffGen struct {
	timed     bool            // adv steps and short TTLs (mode A)
	ttls      []time.Duration // for enq and hb
	lifetimes []time.Duration // for settle
	advances  []time.Duration // for adv
	avoid     diffAvoid
}

// diffAvoid steers the random test around the differences of
// differential_known_test.go when LANES_DIFF_STRICT=0, so that it keeps
// checking everything else while one of them is open.
type diffAvoid struct {
	// reapAfterAdvance follows every adv step with a heartbeat or an
	// inspect, which reap first on every backend: the other Redis scripts
	// look at expired entries as if they were alive until something reaps
	// them (TestDifferentialKnownRetryRenewsExpiredLease and the rest).
	reapAfterAdvance bool
}

func modeAGen() diffGen {
	return diffGen{
		timed:     true,
		ttls:      []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 350 * time.Millisecond},
		lifetimes: []time.Duration{50 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond},
		advances: []time.Duration{time.Millisecond, 49 * time.Millisecond, 50 * time.Millisecond, 99 * time.Millisecond,
			100 * time.Millisecond, 101 * time.Millisecond, 150 * time.Millisecond, 200 * time.Millisecond, 351 * time.Millisecond},
	}
}

func modeBGen() diffGen {
	return diffGen{
		ttls:      []time.Duration{10 * time.Minute, 20 * time.Minute},
		lifetimes: []time.Duration{30 * time.Minute},
	}
}

// generate makes one sequence. Steps name ids from a small pool and keys
// from a few, so that retries, takeovers, conflicts, re-entry, borrowing,
// lock cycles and limit mismatches happen; what each step does is decided
// by the backend's state, which the generator does not know.
func (g diffGen) generate(r *rand.Rand) []dop {
	nIDs := 5 + r.IntN(8) // up to e11: ids that are prefixes of others
	nKeys := 2 + r.IntN(3)
	ids := make([]string, nIDs)
	for i := range ids {
		ids[i] = fmt.Sprintf("e%d", i)
	}
	// Keys that are prefixes of others, and beyond ASCII, now and then.
	names := []string{"k0", "k1", "k2", "k3"}
	if r.IntN(4) == 0 {
		names = []string{"k", "k0", "kk", "ü", "k.ü"}
		r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	}
	keys := make([]string, nKeys)
	limit := map[string]int{}
	for i := range keys {
		keys[i] = names[i]
		limit[keys[i]] = 1 + r.IntN(3)
	}
	pick := func(list []string, n int) []string {
		p := slices.Clone(list)
		r.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
		return p[:min(n, len(p))]
	}
	randLanes := func() []lanes.Lane {
		var ls []lanes.Lane
		for _, k := range pick(keys, 1+r.IntN(min(3, nKeys))) {
			ls = append(ls, lanes.Lane{Key: k, Limit: limit[k]})
		}
		return ls
	}
	randLineage := func(self int) []string {
		var lin []string
		for range 1 + r.IntN(2) {
			var a int
			if self > 0 && r.IntN(10) < 7 {
				a = r.IntN(self) // an earlier entry: nesting
			} else {
				a = r.IntN(nIDs) // any: cycles
			}
			if a != self && !slices.Contains(lin, ids[a]) {
				lin = append(lin, ids[a])
			}
		}
		return lin
	}
	// Each id has one request it mostly names, and an owner that mostly
	// enqueues it.
	canon := make([]dreq, nIDs)
	home := make([]string, nIDs)
	for i, id := range ids {
		canon[i] = dreq{id: id, lanes: randLanes()}
		if r.IntN(100) < 40 {
			canon[i].lineage = randLineage(i)
		}
		home[i] = diffOwners[r.IntN(len(diffOwners))]
	}
	idsOf := func(owner string, n int) []string {
		var out []string
		for range n {
			i := r.IntN(nIDs)
			if r.IntN(10) < 8 {
				var mine []int
				for j := range nIDs {
					if home[j] == owner {
						mine = append(mine, j)
					}
				}
				if len(mine) > 0 {
					i = mine[r.IntN(len(mine))]
				}
			}
			out = append(out, ids[i])
		}
		return out
	}
	var ops []dop
	n := 8 + r.IntN(33)
	for len(ops) < n {
		w := r.IntN(100)
		switch {
		case w < 38: // enqueue a batch
			first := r.IntN(nIDs)
			o := dop{kind: "enq", who: home[first], d: g.ttls[r.IntN(len(g.ttls))]}
			if r.IntN(100) < 12 {
				o.who = diffOwners[r.IntN(len(diffOwners))] // takeover, or a refusal
			}
			used := map[int]bool{}
			for j := range 1 + r.IntN(5) {
				i := first
				if j > 0 {
					i = r.IntN(nIDs)
				}
				if used[i] && r.IntN(100) >= 5 {
					continue // a duplicate id only now and then
				}
				used[i] = true
				q := canon[i]
				q = dreq{id: q.id, lanes: slices.Clone(q.lanes), lineage: slices.Clone(q.lineage)}
				switch m := r.IntN(100); {
				case m < 5: // other lanes: an id conflict, unless it is new
					q.lanes = randLanes()
				case m < 9: // another lineage
					if len(q.lineage) > 0 {
						q.lineage = nil
					} else {
						q.lineage = randLineage(i)
					}
				case m < 13: // a limit mismatch
					k := r.IntN(len(q.lanes))
					q.lanes[k].Limit = limit[q.lanes[k].Key]%3 + 1
				}
				o.reqs = append(o.reqs, q)
			}
			ops = append(ops, o)
		case w < 58: // heartbeat
			owner := diffOwners[r.IntN(len(diffOwners))]
			ops = append(ops, dop{kind: "hb", who: owner, d: g.ttls[r.IntN(len(g.ttls))], ids: idsOf(owner, 1+r.IntN(4))})
		case w < 74: // release
			by := diffOwners[r.IntN(len(diffOwners))]
			o := dop{kind: "rel", who: by, ids: idsOf(by, 1+r.IntN(3))}
			if r.IntN(100) < 20 {
				o.who = "" // an operator
			}
			ops = append(ops, o)
		case w < 79: // settle
			owner := diffOwners[r.IntN(len(diffOwners))]
			ops = append(ops, dop{kind: "settle", who: owner, d: g.lifetimes[r.IntN(len(g.lifetimes))], ids: idsOf(owner, 1+r.IntN(2))})
		case w < 84: // inspect
			o := dop{kind: "insp"}
			if r.IntN(2) == 0 {
				o.keys = pick(keys, 1+r.IntN(nKeys))
			}
			ops = append(ops, o)
		default: // time passes
			if !g.timed {
				continue
			}
			ops = append(ops, dop{kind: "adv", d: g.advances[r.IntN(len(g.advances))]})
			if g.avoid.reapAfterAdvance {
				// heartbeat.lua and inspect.lua reap before anything else
				if r.IntN(3) > 0 {
					owner := diffOwners[r.IntN(len(diffOwners))]
					ops = append(ops, dop{kind: "hb", who: owner, d: g.ttls[r.IntN(len(g.ttls))], ids: idsOf(owner, 1+r.IntN(4))})
				} else {
					o := dop{kind: "insp"}
					if r.IntN(2) == 0 {
						o.keys = pick(keys, 1+r.IntN(nKeys))
					}
					ops = append(ops, o)
				}
			}
		}
	}
	return ops
}

// ---------------------------------------------------------------------------
// Backends under test

// dclock is mode A's fake clock.
type dclock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *dclock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *dclock) advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

// dtarget is one backend under test and what the test knows of it.
type dtarget struct {
	name  string
	b     lanes.Backend
	timed bool // times are compared (mode A)

	// hints received, per owner, since they were last taken
	hmu    sync.Mutex
	hints  map[string][]lanes.Hint
	marks  map[string]int
	markCh chan struct{}
	mark   int
	// publish, for a Redis backend, sends marker n to every owner's hint
	// channel; hints published before it arrive before it.
	publish func(ctx context.Context, n int) error
	// leftovers, for a Redis backend, lists what remains in the state keys
	// besides the markers.
	leftovers func(ctx context.Context) []string
	closers   []func()

	// ranks: tokens per key and sequence numbers, by value
	seqRank      map[uint64]int
	maxSeq       uint64
	maxSeqBefore uint64 // maxSeq before the current step
	tokRank      map[string]map[uint64]int
	tokMax       map[string]uint64
	// order is each entry's place in the order of arrival (its sequence
	// number, or for one granted on arrival the last sequence number issued
	// before it plus one half); live the ids the last snapshot showed
	order map[string]float64
	live  map[string]bool
	// borrowed counts the keys of held statuses of the last step that the
	// entry holds by re-entry
	borrowed int
	// the model: the snapshot after the previous step, whether the clock
	// moved since, and the tombstones of settled ids
	prev     *lanes.Snapshot
	advanced bool
	tombs    map[string]time.Time
	now      func() time.Time
	// stepAt is the clock before the current step; lineage the lineage of
	// each id's last accepted request; deadline each entry's deadline as
	// far as this test can tell (a renewal's time plus its TTL: never
	// after the backend's); borrows the keys each entry was seen to hold by
	// re-entry (invariant 10), kept while its lease runs
	stepAt   time.Time
	lineage  map[string][]string
	deadline map[string]time.Time
	borrows  map[string]map[string]bool
}

func newTarget(name string, b lanes.Backend, timed bool) *dtarget {
	return &dtarget{
		name: name, b: b, timed: timed,
		hints: map[string][]lanes.Hint{}, marks: map[string]int{}, markCh: make(chan struct{}, 1),
		seqRank: map[uint64]int{}, tokRank: map[string]map[uint64]int{}, tokMax: map[string]uint64{},
		order: map[string]float64{}, live: map[string]bool{}, tombs: map[string]time.Time{}, now: time.Now,
		lineage: map[string][]string{}, deadline: map[string]time.Time{}, borrows: map[string]map[string]bool{},
	}
}

func (t *dtarget) subscribe(ctx context.Context) error {
	for _, o := range diffOwners {
		unsub, err := t.b.Subscribe(ctx, o, func(hs []lanes.Hint) {
			t.hmu.Lock()
			defer t.hmu.Unlock()
			for _, h := range hs {
				if n, ok := strings.CutPrefix(h.ID, "~mark~"); ok {
					t.marks[o], _ = strconv.Atoi(n)
					select {
					case t.markCh <- struct{}{}:
					default:
					}
					continue
				}
				if h.ID == "" {
					// The Redis backend announces a namespace's first state
					// (and a reset) to every owner; memory has nothing like it.
					continue
				}
				t.hints[o] = append(t.hints[o], h)
			}
		})
		if err != nil {
			return err
		}
		t.closers = append(t.closers, unsub)
	}
	return nil
}

// takeHints returns the hints received since the last call, once every hint
// published before it arrived.
func (t *dtarget) takeHints(ctx context.Context) (map[string][]lanes.Hint, error) {
	if t.publish != nil {
		t.mark++
		if err := t.publish(ctx, t.mark); err != nil {
			return nil, err
		}
		timeout := time.After(10 * time.Second)
		for {
			t.hmu.Lock()
			done := true
			for _, o := range diffOwners {
				if t.marks[o] < t.mark {
					done = false
				}
			}
			t.hmu.Unlock()
			if done {
				break
			}
			select {
			case <-t.markCh:
			case <-time.After(50 * time.Millisecond):
			case <-timeout:
				return nil, errors.New("hints: markers not delivered within 10s")
			}
		}
	}
	t.hmu.Lock()
	defer t.hmu.Unlock()
	h := t.hints
	t.hints = map[string][]lanes.Hint{}
	return h, nil
}

func (t *dtarget) close() {
	for _, c := range slices.Backward(t.closers) {
		c()
	}
}

// redisTarget makes a Redis backend in a fresh namespace on c.
func redisTarget(ctx context.Context, name string, c *redis.Client, timed bool) (*dtarget, error) {
	ns := redistest.Namespace("diff-")
	b, err := redislane.New(c, ns)
	if err != nil {
		return nil, err
	}
	t := newTarget(name, b, timed)
	t.closers = append(t.closers, func() {
		b.Close()
		c.Del(context.Background(), b.Keys()...)
	})
	t.publish = func(ctx context.Context, n int) error {
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, o := range diffOwners {
				p.Publish(ctx, redislane.DefaultPrefix+":{"+ns+"}:wake:"+o, fmt.Sprintf(`[{"id":"~mark~%d"}]`, n))
			}
			return nil
		})
		return err
	}
	t.leftovers = func(ctx context.Context) []string {
		out, err := b.Leftovers(ctx)
		if err != nil {
			out = append(out, err.Error())
		}
		return out
	}
	if err := t.subscribe(ctx); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// diffEnv makes the backends of one run of a sequence.
type diffEnv struct {
	mode  byte // 'A' or 'B'
	mini  *miniredis.Miniredis
	miniC *redis.Client
	realC *redis.Client
}

func newDiffEnv(t *testing.T, mode byte) *diffEnv {
	e := &diffEnv{mode: mode}
	e.mini = miniredis.RunT(t)
	e.miniC = redis.NewClient(&redis.Options{Addr: e.mini.Addr()})
	t.Cleanup(func() { e.miniC.Close() })
	if mode == 'B' {
		e.realC = realClient(t)
	}
	return e
}

// targets returns the backends of one run, memory first, and mode A's clock.
func (e *diffEnv) targets(ctx context.Context) ([]*dtarget, *dclock, error) {
	var out []*dtarget
	fail := func(err error) ([]*dtarget, *dclock, error) {
		for _, t := range out {
			t.close()
		}
		return nil, nil, err
	}
	if e.mode == 'A' {
		clk := &dclock{t: diffBase}
		mem := newTarget("memory", lanes.NewMemory(lanes.WithClock(clk.Now)), true)
		mem.now = clk.Now
		if err := mem.subscribe(ctx); err != nil {
			return fail(err)
		}
		out = append(out, mem)
		e.mini.SetTime(clk.Now())
		mt, err := redisTarget(ctx, "miniredis", e.miniC, true)
		if err != nil {
			return fail(err)
		}
		mt.now = clk.Now
		out = append(out, mt)
		return out, clk, nil
	}
	mem := newTarget("memory", lanes.NewMemory(), false)
	if err := mem.subscribe(ctx); err != nil {
		return fail(err)
	}
	out = append(out, mem)
	mt, err := redisTarget(ctx, "miniredis", e.miniC, false)
	if err != nil {
		return fail(err)
	}
	out = append(out, mt)
	rt, err := redisTarget(ctx, "redis", e.realC, false)
	if err != nil {
		return fail(err)
	}
	out = append(out, rt)
	return out, nil, nil
}

// ---------------------------------------------------------------------------
// Running a step and observing it

// obs is what one backend answered to one step, as compared.
type obs struct {
	lines []string // the step's answer, hints, snapshot: compared
	viol  []string // invariant violations of this backend
}

// section prefixes of obs lines, for failure signatures
const (
	secResult = "result"
	secHints  = "hints"
	secSnap   = "snap"
	secAfter  = "after" // hints during the snapshot that follows the step
)

type rawStep struct {
	statuses []lanes.Status
	rel      *lanes.Released
	err      error
	snapOp   *lanes.Snapshot
	hints    map[string][]lanes.Hint
	snap     *lanes.Snapshot
	snapErr  error
	after    map[string][]lanes.Hint
}

// run runs op on t and observes it; final marks the closing step.
func (t *dtarget) run(ctx context.Context, op dop) (obs, error) {
	var raw rawStep
	t.stepAt = t.now()
	owner := lanes.Owner{ID: op.who, Host: "host-" + op.who, PID: ownerPID(op.who)}
	switch op.kind {
	case "enq":
		reqs := make([]lanes.Request, len(op.reqs))
		for i, r := range op.reqs {
			reqs[i] = lanes.Request{ID: r.id, Lanes: slices.Clone(r.lanes), Lineage: slices.Clone(r.lineage),
				CallID: "call-" + r.id, Tool: "tool", Tenant: "tenant"}
		}
		raw.statuses, raw.err = t.b.Enqueue(ctx, owner, op.d, reqs)
	case "hb":
		raw.statuses, raw.err = t.b.Heartbeat(ctx, op.who, op.d, op.ids)
	case "rel":
		r, err := t.b.Release(ctx, op.who, op.ids)
		raw.rel, raw.err = &r, err
	case "settle":
		r, err := t.b.Settle(ctx, op.who, op.d, op.ids)
		raw.rel, raw.err = &r, err
	case "insp":
		raw.snapOp, raw.err = t.b.Inspect(ctx, op.keys)
	case "adv":
		return obs{}, nil
	}
	var err error
	if raw.hints, err = t.takeHints(ctx); err != nil {
		return obs{}, err
	}
	raw.snap, raw.snapErr = t.b.Inspect(ctx, nil)
	if raw.after, err = t.takeHints(ctx); err != nil {
		return obs{}, err
	}
	return t.observe(op, &raw), nil
}

func ownerPID(o string) int {
	if n, err := strconv.Atoi(strings.TrimPrefix(o, "o")); err == nil {
		return 100 + n
	}
	return 0
}

// rankNew gives ranks to the sequence numbers and tokens seen first in this
// step, in the order of their values, and reports tokens that are not above
// every token seen before on their key.
func (t *dtarget) rankNew(raw *rawStep) []string {
	var viol []string
	seqs := map[uint64]bool{}
	toks := map[string]map[uint64]bool{}
	addTok := func(k string, v uint64) {
		if toks[k] == nil {
			toks[k] = map[uint64]bool{}
		}
		toks[k][v] = true
	}
	for _, s := range raw.statuses {
		seqs[s.Seq] = true
		for k, v := range s.Tokens {
			addTok(k, v)
		}
	}
	for _, hm := range []map[string][]lanes.Hint{raw.hints, raw.after} {
		for _, hs := range hm {
			for _, h := range hs {
				seqs[h.Seq] = true
				for k, v := range h.Tokens {
					addTok(k, v)
				}
			}
		}
	}
	for _, snap := range []*lanes.Snapshot{raw.snapOp, raw.snap} {
		if snap == nil {
			continue
		}
		for _, ks := range snap.Keys {
			for _, h := range ks.Holders {
				addTok(ks.Key, h.Token)
			}
		}
	}
	t.maxSeqBefore = t.maxSeq
	var newSeqs []uint64
	for s := range seqs {
		if _, ok := t.seqRank[s]; !ok && s != 0 {
			newSeqs = append(newSeqs, s)
		}
	}
	slices.Sort(newSeqs)
	for _, s := range newSeqs {
		if s <= t.maxSeq {
			viol = append(viol, fmt.Sprintf("sequence number %d issued after %d", s, t.maxSeq))
		}
		t.seqRank[s] = len(t.seqRank) + 1
		t.maxSeq = max(t.maxSeq, s)
	}
	for k, set := range toks {
		if t.tokRank[k] == nil {
			t.tokRank[k] = map[uint64]int{}
		}
		var fresh []uint64
		for v := range set {
			if _, ok := t.tokRank[k][v]; !ok {
				fresh = append(fresh, v)
			}
		}
		slices.Sort(fresh)
		for _, v := range fresh {
			if v <= t.tokMax[k] {
				viol = append(viol, fmt.Sprintf("token: key %s: new token %d is not above %d, issued before", k, v, t.tokMax[k]))
			}
			t.tokRank[k][v] = len(t.tokRank[k]) + 1
			t.tokMax[k] = max(t.tokMax[k], v)
		}
	}
	return viol
}

func (t *dtarget) seqS(s uint64) string {
	if s == 0 {
		return "0"
	}
	if r, ok := t.seqRank[s]; ok {
		return fmt.Sprintf("#%d", r)
	}
	return fmt.Sprintf("?%d", s)
}

func (t *dtarget) tokS(k string, v uint64) string {
	if r, ok := t.tokRank[k][v]; ok {
		return fmt.Sprintf("#%d", r)
	}
	return fmt.Sprintf("?%d", v)
}

func (t *dtarget) timeS(x time.Time) string {
	if !t.timed {
		return "*"
	}
	if x.IsZero() {
		return "0"
	}
	return fmt.Sprintf("+%d", x.Sub(diffBase).Milliseconds())
}

func (t *dtarget) tokensS(m map[string]uint64) string {
	var parts []string
	for _, k := range slices.Sorted(mapKeys(m)) {
		parts = append(parts, k+":"+t.tokS(k, m[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// errS names an error by its kind and the fields the contract defines.
func errS(err error) string {
	if err == nil {
		return ""
	}
	var inv *lanes.InvalidError
	var lm *lanes.LimitMismatchError
	var idc *lanes.IDConflictError
	var cyc *lanes.LockCycleError
	switch {
	case errors.As(err, &cyc):
		return fmt.Sprintf("cycle(entries=%v keys=%v path=%q)", cyc.Entries, cyc.Keys, cyc.Path)
	case errors.As(err, &idc):
		return "idconflict(" + idc.ID + ")"
	case errors.As(err, &lm):
		return fmt.Sprintf("limitmismatch(%s recorded=%d requested=%d)", lm.Key, lm.Recorded, lm.Requested)
	case errors.As(err, &inv):
		return "invalid(" + inv.Field + ")"
	case errors.Is(err, lanes.ErrNotHolder):
		return "notholder"
	case errors.Is(err, lanes.ErrCanceled):
		return "canceled"
	case errors.Is(err, lanes.ErrUnavailable):
		return "unavailable: " + err.Error()
	}
	return "other: " + err.Error()
}

func (t *dtarget) statusS(s lanes.Status) string {
	out := fmt.Sprintf("%s %s seq=%s", s.ID, s.State, t.seqS(s.Seq))
	if s.Tokens != nil {
		out += " tok" + t.tokensS(s.Tokens)
	}
	if len(s.Positions) > 0 {
		var parts []string
		for _, k := range slices.Sorted(mapKeys(s.Positions)) {
			parts = append(parts, fmt.Sprintf("%s:%d", k, s.Positions[k]))
		}
		out += " pos{" + strings.Join(parts, " ") + "}"
	}
	if s.HolderTTL > 0 { // which waiter may poll, and, on the fake clock of mode A, when
		if t.timed {
			out += fmt.Sprintf(" httl=%v", s.HolderTTL)
		} else {
			out += " httl"
		}
	}
	if s.Err != nil {
		out += " err=" + errS(s.Err)
	}
	return out
}

func (t *dtarget) hintLines(sec string, hm map[string][]lanes.Hint) []string {
	var out []string
	for _, o := range diffOwners {
		for _, h := range hm[o] {
			if h.Tokens != nil {
				out = append(out, fmt.Sprintf("%s %s: %s granted seq=%s tok%s at=%s", sec, o, h.ID, t.seqS(h.Seq), t.tokensS(h.Tokens), t.timeS(h.Granted)))
			} else {
				out = append(out, fmt.Sprintf("%s %s: %s changed seq=%s", sec, o, h.ID, t.seqS(h.Seq)))
			}
		}
	}
	return out
}

func (t *dtarget) entryS(e lanes.Entry) string {
	var ls []string
	for _, l := range e.Lanes {
		ls = append(ls, fmt.Sprintf("%s/%d", l.Key, l.Limit))
	}
	return fmt.Sprintf("%s(owner=%s/%s/%d call=%s tool=%s tenant=%s lanes=%s lineage=%s enq=%s)",
		e.ID, e.Owner.ID, e.Owner.Host, e.Owner.PID, e.CallID, e.Tool, e.Tenant,
		strings.Join(ls, ","), strings.Join(e.Lineage, ","), t.timeS(e.Enqueued))
}

func (t *dtarget) snapLines(sec string, snap *lanes.Snapshot) []string {
	out := []string{fmt.Sprintf("%s time=%s frozen=%s stats{expired=%d evicted=%d revoked=%d resets=%d}", sec,
		t.timeS(snap.Time), t.timeS(snap.Frozen), snap.Stats.ExpiredHolders, snap.Stats.EvictedWaiters, snap.Stats.Revoked, snap.Stats.Resets)}
	for _, ks := range snap.Keys {
		out = append(out, fmt.Sprintf("%s key %s limit=%d holders=%d waiters=%d", sec, ks.Key, ks.Limit, len(ks.Holders), len(ks.Waiters)))
		for _, h := range ks.Holders {
			ended := ""
			if h.Ended {
				ended = " ended"
			}
			out = append(out, fmt.Sprintf("%s   holder %s tok=%s granted=%s expires=%s%s", sec, t.entryS(h.Entry), t.tokS(ks.Key, h.Token), t.timeS(h.Granted), t.timeS(h.Expires), ended))
		}
		for _, w := range ks.Waiters {
			out = append(out, fmt.Sprintf("%s   waiter %d %s expires=%s", sec, w.Position, t.entryS(w.Entry), t.timeS(w.Expires)))
		}
	}
	return out
}

// observe turns a step's raw answers into lines and checks the invariants.
func (t *dtarget) observe(op dop, raw *rawStep) obs {
	var o obs
	o.viol = append(o.viol, t.rankNew(raw)...)
	if raw.err != nil {
		o.lines = append(o.lines, secResult+" error "+errS(raw.err))
	}
	for _, s := range raw.statuses {
		o.lines = append(o.lines, secResult+" "+t.statusS(s))
	}
	if raw.rel != nil && raw.err == nil {
		for i, id := range op.ids {
			var was lanes.State
			var forced, revoked bool
			if i < len(raw.rel.Was) {
				was = raw.rel.Was[i]
			}
			if i < len(raw.rel.Forced) {
				forced = raw.rel.Forced[i]
			}
			if i < len(raw.rel.Revoked) {
				revoked = raw.rel.Revoked[i]
			}
			o.lines = append(o.lines, fmt.Sprintf("%s %s was=%s forced=%v revoked=%v", secResult, id, was, forced, revoked))
		}
		if len(raw.rel.Was) != len(op.ids) || len(raw.rel.Forced) != len(op.ids) || len(raw.rel.Revoked) != len(op.ids) {
			o.lines = append(o.lines, fmt.Sprintf("%s %d ids, %d Was, %d Forced, %d Revoked", secResult, len(op.ids), len(raw.rel.Was), len(raw.rel.Forced), len(raw.rel.Revoked)))
		}
		o.lines = append(o.lines, fmt.Sprintf("%s granted=%v", secResult, raw.rel.Granted))
	}
	if raw.snapOp != nil {
		o.lines = append(o.lines, t.snapLines(secResult, raw.snapOp)...)
	}
	o.lines = append(o.lines, t.hintLines(secHints, raw.hints)...)
	if raw.snapErr != nil {
		o.lines = append(o.lines, secSnap+" error "+errS(raw.snapErr))
	} else {
		o.lines = append(o.lines, t.snapLines(secSnap, raw.snap)...)
	}
	o.lines = append(o.lines, t.hintLines(secAfter, raw.after)...)
	if raw.snapErr == nil {
		o.viol = append(o.viol, t.check(op, raw)...)
	}
	return o
}

// check tests the invariants on a step's answers and the snapshot taken
// right after it, and updates what the test knows of the backend.
func (t *dtarget) check(op dop, raw *rawStep) []string {
	var viol []string
	bad := func(format string, args ...any) { viol = append(viol, fmt.Sprintf(format, args...)) }
	snap := raw.snap

	// Each entry's place in the order of arrival: the requests of a step
	// arrive in order, so one granted on arrival comes after the sequence
	// numbers issued before it, in this step or an earlier one.
	if op.kind == "enq" {
		running := t.maxSeqBefore
		for _, s := range raw.statuses {
			switch {
			case s.Err != nil || s.State == lanes.Gone:
			case s.Seq != 0:
				t.order[s.ID] = float64(s.Seq)
				running = max(running, s.Seq)
			case !t.live[s.ID]:
				t.order[s.ID] = float64(running) + 0.5
			}
		}
	}
	for _, hm := range []map[string][]lanes.Hint{raw.hints, raw.after} {
		for _, hs := range hm {
			for _, h := range hs {
				if h.Tokens != nil && h.Seq != 0 {
					t.order[h.ID] = float64(h.Seq)
				}
			}
		}
	}

	type place struct {
		key       string
		pos       int // 1-based among waiters
		held, lim int
	}
	waiting := map[string][]place{}
	holdTok := map[string]map[uint64]bool{}
	holders := map[string][]string{}
	live := map[string]bool{}
	t.borrowed = 0
	for _, ks := range snap.Keys {
		if len(ks.Holders) > ks.Limit {
			bad("limit: key %s has %d holders, limit %d", ks.Key, len(ks.Holders), ks.Limit)
		}
		if len(ks.Holders)+len(ks.Waiters) == 0 {
			bad("key %s is listed with neither holders nor waiters", ks.Key)
		}
		holdTok[ks.Key] = map[uint64]bool{}
		for i, h := range ks.Holders {
			live[h.ID] = true
			holders[ks.Key] = append(holders[ks.Key], h.ID)
			if holdTok[ks.Key][h.Token] {
				bad("token: key %s: two holders with token %d", ks.Key, h.Token)
			}
			holdTok[ks.Key][h.Token] = true
			if i > 0 && h.Token <= ks.Holders[i-1].Token {
				bad("token: key %s: holders in grant order have tokens %d then %d", ks.Key, ks.Holders[i-1].Token, h.Token)
			}
			// FIFO: when h was granted, the holders plus the entries queued
			// before it were fewer than the limit, and every step since kept
			// that so.
			oh, ok := t.order[h.ID]
			if !ok {
				continue
			}
			// A nested waiter (one with a lineage) is left out: when h was
			// granted it may have been about to borrow its ancestor's slot,
			// taking none, so h rightly went ahead; once that ancestor's
			// lease ends it waits for a slot of its own in its arrival
			// place, behind holders granted meanwhile (invariant 10; the
			// conformance test BorrowerKeepsArrivalPlace checks its place).
			ahead := 0
			for _, w := range ks.Waiters {
				if ow, ok := t.order[w.ID]; ok && ow < oh && len(w.Lineage) == 0 {
					ahead++
				}
			}
			// A holder that ended keeps its slot only until its revoked
			// borrowers are gone; the waiters it requeued were behind no
			// one when they borrowed: it does not count here.
			nh := 0
			for _, x := range ks.Holders {
				if !x.Ended {
					nh++
				}
			}
			if nh+ahead > ks.Limit {
				bad("fifo: key %s (limit %d): %s holds while %d holders that have not ended and %d entries that arrived before it wait", ks.Key, ks.Limit, h.ID, nh, ahead)
			}
		}
		for i, w := range ks.Waiters {
			live[w.ID] = true
			if w.Position != i+1 {
				bad("key %s: waiter %s at index %d has position %d", ks.Key, w.ID, i, w.Position)
			}
			if i > 0 {
				prev := ks.Waiters[i-1].ID
				if a, ok1 := t.order[prev]; ok1 {
					if b, ok2 := t.order[w.ID]; ok2 && a >= b {
						bad("fifo: key %s: %s is queued before %s, which arrived first", ks.Key, prev, w.ID)
					}
				}
			}
			waiting[w.ID] = append(waiting[w.ID], place{ks.Key, i + 1, len(ks.Holders), ks.Limit})
		}
	}
	// Every waiter waits for something: on one of its keys the holders plus
	// the entries ahead of it reach the limit (a backend grants what a step
	// frees in that step).
	for id, ps := range waiting {
		blocked := false
		for _, p := range ps {
			if p.held+p.pos-1 >= p.lim {
				blocked = true
			}
		}
		if !blocked {
			bad("liveness: %s waits although it is eligible on every key it queues on %v", id, ps)
		}
	}
	// What the step answered agrees with the snapshot right after it.
	if op.kind == "enq" || op.kind == "hb" {
		for _, s := range raw.statuses {
			if s.Err != nil {
				continue
			}
			switch s.State {
			case lanes.Waiting:
				ps := waiting[s.ID]
				if len(ps) == 0 {
					bad("status: %s answered waiting, the snapshot right after has it in no queue", s.ID)
				}
				for k, pos := range s.Positions {
					found := false
					for _, p := range ps {
						if p.key == k {
							found = true
							if p.pos != pos {
								bad("status: %s answered position %d on %s, the snapshot right after says %d", s.ID, pos, k, p.pos)
							}
						}
					}
					if !found {
						bad("status: %s answered position %d on %s, the snapshot right after has it not queued there", s.ID, pos, k)
					}
				}
			case lanes.Held:
				if len(waiting[s.ID]) > 0 {
					bad("status: %s answered held, the snapshot right after has it queued", s.ID)
				}
				for k, tok := range s.Tokens {
					if !slices.ContainsFunc(holders[k], func(h string) bool { return h == s.ID }) {
						t.borrowed++
					}
					if !holdTok[k][tok] {
						bad("status: %s answered held with token %d on %s, which no holder of %s has in the snapshot right after", s.ID, tok, k, k)
					}
				}
			}
		}
	}
	viol = append(viol, t.checkBorrows(op, raw, holders)...)
	viol = append(viol, t.model(op, raw)...)
	t.live = live
	t.prev, t.advanced = snap, false
	return viol
}

// checkBorrows checks that a key an entry holds by re-entry stays held by
// an entry of its lineage while the borrower's lease runs: it is released
// by neither its owner nor an operator and its deadline has not passed
// (PROTOCOL.md, "Re-entry and borrowers": a lender whose hold ends keeps
// its slots until its last holding borrower goes). An operator's release
// of a lender ends the check of the entries nested in it: the contract
// lets it free the keys. holders lists each key's holders in the snapshot right after
// the step. A borrower appears in no snapshot; what it borrowed is seen in
// the step's held statuses and grant hints.
func (t *dtarget) checkBorrows(op dop, raw *rawStep, holders map[string][]string) []string {
	var viol []string
	if op.kind == "rel" || op.kind == "settle" {
		gone := map[string]bool{}
		for _, id := range op.ids {
			gone[id] = true
			delete(t.deadline, id)
		}
		// an operator's release takes the entries nested in a released
		// one with it, however deep (their lineages may name only their
		// nearest ancestors)
		for grew := op.who == ""; grew; {
			grew = false
			for x, l := range t.lineage {
				if !gone[x] && slices.ContainsFunc(l, func(a string) bool { return gone[a] }) {
					gone[x], grew = true, true
				}
			}
		}
		for id := range gone {
			delete(t.borrows, id)
		}
	}
	// an entry whose deadline may have passed before the step may be gone,
	// and its id taken by a new request of this step
	for b, dl := range t.deadline {
		if !t.stepAt.Add(time.Millisecond).Before(dl) {
			delete(t.deadline, b)
			delete(t.borrows, b)
		}
	}
	if raw.err == nil && (op.kind == "enq" || op.kind == "hb") {
		for _, s := range raw.statuses {
			if s.Err != nil || s.State == lanes.Gone {
				continue
			}
			t.deadline[s.ID] = t.stepAt.Add(op.d)
			for _, r := range op.reqs {
				if r.id == s.ID {
					t.lineage[s.ID] = slices.Clone(r.lineage)
				}
			}
		}
	}
	borrowing := func(id string, tokens map[string]uint64) {
		for k := range tokens {
			if slices.Contains(holders[k], id) {
				continue
			}
			if t.borrows[id] == nil {
				t.borrows[id] = map[string]bool{}
			}
			t.borrows[id][k] = true
		}
	}
	for _, s := range raw.statuses {
		if s.Err == nil && s.State == lanes.Held {
			borrowing(s.ID, s.Tokens)
		}
	}
	for _, hm := range []map[string][]lanes.Hint{raw.hints, raw.after} {
		for _, hs := range hm {
			for _, h := range hs {
				if h.Tokens != nil {
					borrowing(h.ID, h.Tokens)
				}
			}
		}
	}
	// the snapshot came after the step: now bounds its time from above
	now := t.now().Add(time.Millisecond)
	for b, keys := range t.borrows {
		if dl, ok := t.deadline[b]; !ok || !now.Before(dl) {
			delete(t.borrows, b)
			continue
		}
		for k := range keys {
			if !slices.ContainsFunc(holders[k], func(h string) bool { return slices.Contains(t.lineage[b], h) }) {
				viol = append(viol, fmt.Sprintf("borrow: %s holds %s by re-entry and its lease runs until %s, but no entry of its lineage %v holds %s (holders %v)",
					b, k, t.timeS(t.deadline[b]), t.lineage[b], k, holders[k]))
			}
		}
	}
	return viol
}

// known is an entry the previous snapshot showed.
type known struct {
	lanes.Entry
	held  bool
	ended bool // revoked, or kept for revoked borrowers: gone to its owner
}

// model checks a step's answers against what the contract says they must
// be, given the snapshot after the previous step (when the clock has not
// moved since: nothing expired meanwhile) and the tombstones of settled
// ids. Entries that hold only borrowed keys appear in no snapshot; the
// checks leave alone what they cannot tell.
func (t *dtarget) model(op dop, raw *rawStep) []string {
	var viol []string
	bad := func(format string, args ...any) { viol = append(viol, fmt.Sprintf(format, args...)) }
	now := t.now()
	if op.kind == "settle" && raw.err == nil {
		for _, id := range op.ids {
			t.tombs[id] = now.Add(op.d.Truncate(time.Millisecond))
		}
	}
	if op.kind == "enq" {
		// duplicate ids refuse the step whole, on every backend
		seen := map[string]bool{}
		dup := false
		for _, r := range op.reqs {
			dup = dup || seen[r.id]
			seen[r.id] = true
		}
		if dup && errS(raw.err) != "invalid(id)" {
			bad("model: a step with a duplicate id answered %q, not invalid(id)", errS(raw.err))
		}
	}
	ents := map[string]known{}
	limits := map[string]int{}
	if t.prev != nil {
		for _, ks := range t.prev.Keys {
			limits[ks.Key] = ks.Limit
			for _, h := range ks.Holders {
				ents[h.ID] = known{h.Entry, true, h.Ended}
			}
			for _, w := range ks.Waiters {
				ents[w.ID] = known{w.Entry, false, false}
			}
		}
	}
	if op.kind == "enq" {
		for i, r := range op.reqs {
			if raw.err != nil || i >= len(raw.statuses) {
				break
			}
			if s := raw.statuses[i]; errors.Is(s.Err, lanes.ErrCanceled) {
				// Refused as settled (a tombstone), or as ended: revoked, or
				// kept for revoked borrowers (an entry may end in this very
				// step when its lender expires with a clock that moved).
				e, visible := ents[r.id]
				tomb, ok := t.tombs[r.id]
				// A borrower that holds only borrowed keys is in no snapshot.
				hidden := !visible && len(r.lineage) > 0
				if !(ok && tomb.After(now)) && !(visible && e.ended) && !(visible && e.held && (t.prev == nil || t.advanced)) && !hidden {
					bad("model: %s refused as settled or ended, but no tombstone of it lives and it had not ended", r.id)
				}
			}
		}
	}
	if t.prev == nil || t.advanced {
		return viol
	}
	switch op.kind {
	case "enq":
		if raw.err != nil {
			var lm *lanes.LimitMismatchError
			if errors.As(raw.err, &lm) {
				rec, ok := limits[lm.Key]
				for _, r := range op.reqs {
					if _, exists := ents[r.id]; exists || ok {
						continue
					}
					for _, l := range r.lanes {
						if l.Key == lm.Key && !ok {
							rec, ok = l.Limit, true
						}
					}
				}
				if !ok || rec != lm.Recorded {
					bad("model: limit mismatch on %s names recorded limit %d; the key had %d (recorded: %v)", lm.Key, lm.Recorded, rec, ok)
				}
			}
			return viol
		}
		batch := maps.Clone(limits)
		for i, r := range op.reqs {
			s := raw.statuses[i]
			e, visible := ents[r.id]
			switch {
			case visible && !sameSpec(e.Entry, r):
				if !errors.Is(s.Err, lanes.ErrIDConflict) {
					bad("model: %s exists with other lanes or lineage; the answer is %s, not an id conflict", r.id, t.statusS(s))
				}
			case visible && e.ended:
				if !errors.Is(s.Err, lanes.ErrCanceled) {
					bad("model: %s ended (revoked, or kept for revoked borrowers); the answer is %s, not canceled", r.id, t.statusS(s))
				}
			case visible && e.Owner.ID != op.who && e.held:
				if !errors.Is(s.Err, lanes.ErrNotHolder) {
					bad("model: %s is held by %s; the answer to %s is %s, not ErrNotHolder", r.id, e.Owner.ID, op.who, t.statusS(s))
				}
			case visible:
				if s.Err != nil || s.State == lanes.Gone || (e.held && s.State != lanes.Held) {
					bad("model: %s exists with the same lanes and lineage (held: %v); the answer is %s", r.id, e.held, t.statusS(s))
				}
			case s.Err == nil:
				for _, l := range r.lanes {
					if rec, ok := batch[l.Key]; ok && rec != l.Limit {
						bad("model: %s names %s/%d while the key's limit is %d, and the step was not refused", r.id, l.Key, l.Limit, rec)
					}
				}
			}
			if !visible && s.Err == nil {
				for _, l := range r.lanes {
					if _, ok := batch[l.Key]; !ok {
						batch[l.Key] = l.Limit
					}
				}
			}
		}
	case "rel", "settle":
		if raw.err != nil {
			return viol
		}
		for i, id := range op.ids {
			e, visible := ents[id]
			if !visible || slices.Contains(op.ids[:i], id) || i >= len(raw.rel.Was) {
				continue
			}
			// an earlier id of the step may have been its lender, or (for
			// a lender kept for its revoked borrowers) its last borrower
			if slices.ContainsFunc(op.ids[:i], func(a string) bool { return slices.Contains(e.Lineage, a) }) || e.ended && i > 0 {
				continue
			}
			mine := op.who == "" || e.Owner.ID == op.who
			want := lanes.Gone
			if mine && e.held && e.ended && op.who != "" {
				want = lanes.Gone // ended: gone to its owner
			} else if mine && e.held {
				want = lanes.Held
			} else if mine {
				want = lanes.Waiting
			}
			if raw.rel.Was[i] != want {
				bad("model: release by %q of %s (owner %s, held %v) answered Was=%s, want %s", op.who, id, e.Owner.ID, e.held, raw.rel.Was[i], want)
			}
		}
	}
	return viol
}

// sameSpec reports whether the entry e was made by the request r: the same
// lanes (in any order) and the same lineage.
func sameSpec(e lanes.Entry, r dreq) bool {
	if len(e.Lanes) != len(r.lanes) || !slices.Equal(e.Lineage, r.lineage) && len(e.Lineage)+len(r.lineage) > 0 {
		return false
	}
	for _, l := range r.lanes {
		if !slices.Contains(e.Lanes, l) {
			return false
		}
	}
	return true
}

// ---------------------------------------------------------------------------
// Running sequences

// dfail is the first failure of a sequence.
type dfail struct {
	step int    // index of the failing step; len(ops) for the closing steps
	sig  string // what failed, without values: a shrunk case keeps it
	msg  string
}

// closing is what ends every sequence: an operator releases every id, then
// nothing may be left.
func closingOps(ops []dop) []dop {
	ids := map[string]bool{}
	for _, o := range ops {
		for _, r := range o.reqs {
			ids[r.id] = true
			for _, a := range r.lineage {
				ids[a] = true
			}
		}
		for _, id := range o.ids {
			ids[id] = true
		}
	}
	if len(ids) == 0 {
		return []dop{{kind: "insp"}}
	}
	return []dop{{kind: "rel", ids: slices.Sorted(mapKeys(ids))}, {kind: "insp"}}
}

// diffStats counts what the runs did, and how often the reference backend
// showed each phenomenon the sequences are made to reach.
type diffStats struct {
	sequences, steps int
	seen             map[string]int
}

// diffPhenomena are substrings of observation lines, counted by diffStats.
var diffPhenomena = []struct{ name, sub string }{
	{"held", " held seq="}, {"waiting", " waiting seq="},
	{"id conflict", "err=idconflict"}, {"held by another owner", "err=notholder"},
	{"settled id refused", "err=canceled"}, {"lock cycle", "err=cycle"},
	{"limit mismatch", "error limitmismatch"}, {"duplicate ids", "error invalid(id)"},
	{"forced release", "result granted"}, {"released by force, told", "forced=true"},
	{"grant hint", " granted seq="}, {"changed hint (force, takeover, revoke)", " changed seq="},
	{"was held", "was=held"}, {"was waiting", "was=waiting"},
}

func (st *diffStats) tally(op dop, o obs, borrowed int) {
	if st == nil {
		return
	}
	if st.seen == nil {
		st.seen = map[string]int{}
	}
	for _, l := range o.lines {
		for _, p := range diffPhenomena {
			if strings.Contains(l, p.sub) && p.name != "forced release" {
				st.seen[p.name]++
			}
		}
		if strings.HasPrefix(l, secSnap+" time") {
			for _, f := range []string{"expired", "evicted", "revoked"} {
				if !strings.Contains(l, f+"=0") {
					st.seen["steps after any "+f]++
				}
			}
		}
	}
	if op.kind == "rel" && op.who == "" {
		st.seen["forced release"]++
	}
	st.seen["borrowed key in a held status"] += borrowed
}

func (st *diffStats) String() string {
	var parts []string
	for _, k := range slices.Sorted(mapKeys(st.seen)) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, st.seen[k]))
	}
	return strings.Join(parts, ", ")
}

// runOps runs ops and the closing steps on fresh backends and returns the
// first failure, or nil.
func (e *diffEnv) runOps(ops []dop, st *diffStats) (*dfail, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ts, clk, err := e.targets(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, t := range ts {
			t.close()
		}
	}()
	if st != nil {
		st.sequences++
	}
	all := append(slices.Clone(ops), closingOps(ops)...)
	for i, op := range all {
		if st != nil {
			st.steps++
		}
		if op.kind == "adv" {
			if clk == nil {
				return nil, errors.New("adv step in a mode without a fake clock")
			}
			e.mini.SetTime(clk.advance(op.d))
			for _, t := range ts {
				t.advanced = true
			}
			continue
		}
		step := min(i, len(ops))
		obs := make([]obs, len(ts))
		for j, t := range ts {
			o, err := t.run(ctx, op)
			if err != nil {
				return nil, fmt.Errorf("%s: step %d %q: %w", t.name, i, op, err)
			}
			obs[j] = o
		}
		st.tally(op, obs[0], ts[0].borrowed)
		for j := 1; j < len(ts); j++ {
			if !slices.Equal(obs[0].lines, obs[j].lines) {
				sec := firstDiffSection(obs[0].lines, obs[j].lines)
				return &dfail{step: step, sig: fmt.Sprintf("mismatch %s/%s %s %s", ts[0].name, ts[j].name, op.kind, sec),
					msg: fmt.Sprintf("step %d %q: %s and %s disagree (- %s, + %s):\n%s", i, op, ts[0].name, ts[j].name, ts[0].name, ts[j].name,
						lineDiff(obs[0].lines, obs[j].lines))}, nil
			}
		}
		for j, t := range ts {
			if len(obs[j].viol) > 0 {
				kind, _, _ := strings.Cut(obs[j].viol[0], ":")
				return &dfail{step: step, sig: fmt.Sprintf("invariant %s %s %s", t.name, op.kind, kind),
					msg: fmt.Sprintf("step %d %q: %s breaks an invariant:\n\t%s\nits observation:\n\t%s", i, op, t.name,
						strings.Join(obs[j].viol, "\n\t"), strings.Join(obs[j].lines, "\n\t"))}, nil
			}
		}
		if i == len(all)-1 { // the closing inspect
			for j, t := range ts {
				var left []string
				for _, l := range obs[j].lines {
					if strings.HasPrefix(l, secResult+" key ") {
						left = append(left, l)
					}
				}
				if t.leftovers != nil {
					left = append(left, t.leftovers(ctx)...)
				}
				if len(left) > 0 {
					return &dfail{step: step, sig: "leak " + t.name,
						msg: fmt.Sprintf("%s keeps state after every id was released:\n\t%s", t.name, strings.Join(left, "\n\t"))}, nil
				}
			}
		}
	}
	return nil, nil
}

func firstDiffSection(a, b []string) string {
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) || a[i] != b[i] {
			l := ""
			if i < len(a) {
				l = a[i]
			} else {
				l = b[i]
			}
			sec, _, _ := strings.Cut(l, " ")
			return sec
		}
	}
	return ""
}

// lineDiff shows two lists of lines with the differing ones marked.
func lineDiff(a, b []string) string {
	// a longest common subsequence, small inputs
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out strings.Builder
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			out.WriteString("\t  " + a[i] + "\n")
			i, j = i+1, j+1
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			out.WriteString("\t+ " + b[j] + "\n")
			j++
		default:
			out.WriteString("\t- " + a[i] + "\n")
			i++
		}
	}
	return out.String()
}

// shrink deletes steps, requests, ids, lanes and lineage entries while the
// failure keeps its signature.
func (e *diffEnv) shrink(ops []dop, f *dfail, budget time.Duration) ([]dop, *dfail) {
	ops = cloneOps(ops[:min(f.step+1, len(ops))])
	stop := time.Now().Add(budget)
	try := func(cand []dop) bool {
		if time.Now().After(stop) {
			return false
		}
		g, err := e.runOps(cand, nil)
		if err != nil || g == nil || g.sig != f.sig {
			return false
		}
		ops, f = cloneOps(cand[:min(g.step+1, len(cand))]), g
		return true
	}
	for changed := true; changed && time.Now().Before(stop); {
		changed = false
		for i := len(ops) - 1; i >= 0; i-- {
			if i < len(ops) && try(slices.Delete(cloneOps(ops), i, i+1)) {
				changed = true
			}
		}
		for i := 0; i < len(ops); i++ {
			for j := 0; i < len(ops) && j < len(ops[i].reqs) && len(ops[i].reqs) > 1; j++ {
				c := cloneOps(ops)
				c[i].reqs = slices.Delete(c[i].reqs, j, j+1)
				if try(c) {
					changed, j = true, j-1
				}
			}
			for j := 0; i < len(ops) && j < len(ops[i].ids) && len(ops[i].ids) > 1; j++ {
				c := cloneOps(ops)
				c[i].ids = slices.Delete(c[i].ids, j, j+1)
				if try(c) {
					changed, j = true, j-1
				}
			}
			for j := 0; i < len(ops) && j < len(ops[i].keys); j++ {
				c := cloneOps(ops)
				c[i].keys = slices.Delete(c[i].keys, j, j+1)
				if try(c) {
					changed, j = true, j-1
				}
			}
			for r := 0; i < len(ops) && r < len(ops[i].reqs); r++ {
				for j := 0; i < len(ops) && r < len(ops[i].reqs) && j < len(ops[i].reqs[r].lanes) && len(ops[i].reqs[r].lanes) > 1; j++ {
					c := cloneOps(ops)
					c[i].reqs[r].lanes = slices.Delete(c[i].reqs[r].lanes, j, j+1)
					if try(c) {
						changed, j = true, j-1
					}
				}
				for j := 0; i < len(ops) && r < len(ops[i].reqs) && j < len(ops[i].reqs[r].lineage); j++ {
					c := cloneOps(ops)
					c[i].reqs[r].lineage = slices.Delete(c[i].reqs[r].lineage, j, j+1)
					if try(c) {
						changed, j = true, j-1
					}
				}
			}
		}
	}
	return ops, f
}

// ---------------------------------------------------------------------------
// The tests

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func diffStrict() bool { return os.Getenv("LANES_DIFF_STRICT") != "0" }

// diffSeed is the first seed: LANES_DIFF_SEED, else the clock's.
func diffSeed(t *testing.T) uint64 {
	if v, err := strconv.ParseUint(os.Getenv("LANES_DIFF_SEED"), 10, 64); err == nil {
		return v
	}
	return uint64(time.Now().UnixNano() % 1_000_000_000)
}

// runRandom runs n random sequences made by g, seeds seed, seed+1, ...;
// it reports every distinct failure, shrunk, at most maxFails.
func runRandom(t *testing.T, e *diffEnv, g diffGen, n int) {
	seed := diffSeed(t)
	maxFails := envInt("LANES_DIFF_MAXFAILS", 3)
	if !diffStrict() {
		g.avoid = diffAvoid{reapAfterAdvance: true}
	}
	t.Logf("mode %c: %d sequences from seed %d (LANES_DIFF_SEED=%d LANES_DIFF_N=%d reproduces; strict=%v)", e.mode, n, seed, seed, n, diffStrict())
	var st diffStats
	seen := map[string]bool{}
	start := time.Now()
	for i := range n {
		s := seed + uint64(i)
		ops := g.generate(rand.New(rand.NewPCG(s, 0x1a9e5)))
		f, err := e.runOps(ops, &st)
		if err != nil {
			t.Fatalf("seed %d: %v\nsequence:\n%s", s, err, scriptText(ops))
		}
		if f == nil || seen[f.sig] {
			continue
		}
		seen[f.sig] = true
		small, sf := e.shrink(ops, f, 60*time.Second)
		t.Errorf("seed %d (LANES_DIFF_SEED=%d LANES_DIFF_N=1): %s\n%s\nshrunk to %d steps, then the closing ones %v (replay with runDiffScript(t, '%c', ...)):\n%s",
			s, s, sf.sig, sf.msg, len(small), closingOps(small), e.mode, scriptText(small))
		if len(seen) >= maxFails {
			t.Fatalf("stopping after %d distinct failures", len(seen))
		}
	}
	t.Logf("mode %c: %d sequences, %d steps (each on every backend), %v", e.mode, st.sequences, st.steps, time.Since(start).Round(time.Millisecond))
	t.Logf("seen: %s", &st)
}

func TestDifferentialMiniredis(t *testing.T) {
	t.Parallel()
	e := newDiffEnv(t, 'A')
	runRandom(t, e, modeAGen(), envInt("LANES_DIFF_N", 150))
}

func TestDifferentialRealRedis(t *testing.T) {
	t.Parallel()
	e := newDiffEnv(t, 'B') // skips, visibly, without a real server
	t.Logf("real Redis at %s", redistest.URL())
	runRandom(t, e, modeBGen(), envInt("LANES_DIFF_N", 50))
}

// runDiffScript replays a sequence in mode 'A' (memory and miniredis on one
// fake clock) or 'B' (memory, miniredis, real Redis) and returns its first
// failure, or nil.
func runDiffScript(t *testing.T, mode byte, script ...string) *dfail {
	t.Helper()
	ops := parseScript(t, script)
	e := newDiffEnv(t, mode)
	f, err := e.runOps(ops, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestDifferentialReplay replays the script in the file named by
// LANES_DIFF_SCRIPT (one step a line, # comments; mode B when
// LANES_DIFF_MODE=B) and logs what every backend observed at every step,
// past the first difference too, then the first failure. It skips
// without LANES_DIFF_SCRIPT.
func TestDifferentialReplay(t *testing.T) {
	name := os.Getenv("LANES_DIFF_SCRIPT")
	if name == "" {
		t.Skip("set LANES_DIFF_SCRIPT to a file of steps to replay one")
	}
	raw, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for _, l := range strings.Split(string(raw), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			steps = append(steps, l)
		}
	}
	mode := byte('A')
	if os.Getenv("LANES_DIFF_MODE") == "B" {
		mode = 'B'
	}
	ops := parseScript(t, steps)
	e := newDiffEnv(t, mode)
	ctx := context.Background()
	ts, clk, err := e.targets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, x := range ts {
			x.close()
		}
	}()
	for i, op := range ops {
		if op.kind == "adv" {
			if clk == nil {
				t.Fatal("adv in mode B")
			}
			e.mini.SetTime(clk.advance(op.d))
			for _, x := range ts {
				x.advanced = true
			}
			continue
		}
		for _, x := range ts {
			o, err := x.run(ctx, op)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("step %d %q on %s:\n\t%s\n\tinvariants: %v", i, op, x.name, strings.Join(o.lines, "\n\t"), o.viol)
		}
	}
	if f, err := e.runOps(ops, nil); err != nil {
		t.Fatal(err)
	} else if f != nil {
		t.Logf("first failure, at step %d: %s\n%s", f.step, f.sig, f.msg)
	} else {
		t.Log("the backends agree")
	}
}
