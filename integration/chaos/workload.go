package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/fencing"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
	"github.com/lanes-dev/lanes/scripts/lua"
)

// The crash points of a worker: where it SIGKILLs itself (DESIGN.md
// invariants 6 and 7 under a crash).
const (
	CrashEnqueue   = "enqueue"   // its Enqueue step committed, the reply never used
	CrashWaiting   = "waiting"   // queued behind a holder
	CrashHolding   = "holding"   // inside the critical section, after reading the resource
	CrashReleasing = "releasing" // with its release step in flight
)

// Guard kinds of the protected resource.
const (
	GuardNone = "none" // plain writes: a stalled holder's late write can land
	GuardFile = "file" // fencing.FileGuard: Check on entry, WriteFile with the token
)

// LaneSpec is one key a worker asks for, with its limit.
type LaneSpec struct {
	Key   string
	Limit int
}

// ParseLanes parses "a:1,b:1,s:3".
func ParseLanes(s string) ([]LaneSpec, error) {
	var out []LaneSpec
	for _, f := range strings.Split(s, ",") {
		k, l, ok := strings.Cut(strings.TrimSpace(f), ":")
		n, err := strconv.Atoi(l)
		if !ok || k == "" || err != nil || n < 1 {
			return nil, fmt.Errorf("lane %q: want key:limit", f)
		}
		out = append(out, LaneSpec{k, n})
	}
	return out, nil
}

// WorkerConfig is what one replica process does. The chaosworker binary
// fills it from its flags (Flags).
type WorkerConfig struct {
	Redis        string        // redis:// URL of a standalone server (or a proxy)
	Cluster      []string      // cluster seed addresses, instead of Redis
	RedisRetries int           // go-redis MaxRetries (-1: none, so lanes itself retries)
	Namespaces   []string      // one Backend and Session per namespace
	Proc         string        // this incarnation's name, e.g. "r2.1"
	History      string        // history file
	Seed         uint64        // with the client number, seeds each client's choices
	Clients      int           // goroutines, each running Ops requests one after another
	Ops          int           // requests per client (at most, with For)
	For          time.Duration // when set, each client goes on until this long after the start
	Lanes        []LaneSpec    // the keys of each namespace
	Multi        float64       // probability that a request names two keys; 1: every one does
	TTL          time.Duration // lease TTL
	Hold         time.Duration // longest pause inside the critical section
	HoldMin      time.Duration // shortest pause inside the critical section
	Pace         time.Duration // longest pause between requests
	Wait         time.Duration // bound on a wait; reaching it is a liveness failure
	Cancel       float64       // probability of a short wait (0 to CancelWait) that may be cancelled
	CancelWait   time.Duration
	Retry        time.Duration // how long an Enqueue is retried after an ambiguous error
	Guard        string        // GuardNone or GuardFile
	ResourceDir  string        // directory of the counters (one file per ns and key of limit 1)
	FenceRedis   string        // optional: a RedisGuard on this server checks every token too
	Crash        string        // a Crash* point, or ""
	CrashOp      int           // request number (of client 0) at or after which to crash
	Victim       time.Duration // client 0's first critical section pauses this long after its read
	Probe        float64       // fraction of confirmed releases followed by a heartbeat probe
	Nested       float64       // probability that a holder starts a nested request under its lease, on a goroutine of its own
	NestedOther  float64       // probability that a nested request names another key besides its lender's
	Detach       float64       // probability that a parent releases without waiting for its nested request
	NestedWait   time.Duration // bound on a nested request's wait (a short wait: reaching it is no liveness failure)
	Board        string        // directory where leases are published for nested requests of other processes
	Adopt        float64       // probability that a request is nested under a lease another process published on Board
	Poll         time.Duration // a nested holder asks Lease.Err this often while it holds
	CheckEvery   time.Duration // when set, every holder asks Lease.Err this often while it holds
}

// Flags registers the worker's flags on fs and returns a function that
// finishes parsing the list-valued ones.
func (c *WorkerConfig) Flags(fs *flag.FlagSet) func() error {
	fs.StringVar(&c.Redis, "redis", "", "redis URL")
	cluster := fs.String("cluster", "", "comma-separated cluster seed addresses")
	fs.IntVar(&c.RedisRetries, "redis-retries", 0, "go-redis MaxRetries (0: its default, -1: none)")
	ns := fs.String("ns", "chaos", "comma-separated namespaces")
	fs.StringVar(&c.Proc, "proc", "r0.0", "process incarnation name")
	fs.StringVar(&c.History, "history", "", "history file")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed")
	fs.IntVar(&c.Clients, "clients", 1, "goroutines")
	fs.IntVar(&c.Ops, "ops", 10, "requests per goroutine (at most, with -for)")
	fs.DurationVar(&c.For, "for", 0, "go on until this long after the start")
	lanesFlag := fs.String("lanes", "m0:1", "keys and limits, key:limit,...")
	fs.Float64Var(&c.Multi, "multi", 0, "probability of a two-key request (1: every request names two keys)")
	fs.DurationVar(&c.TTL, "ttl", time.Second, "lease TTL")
	fs.DurationVar(&c.Hold, "hold", 5*time.Millisecond, "longest pause in the critical section")
	fs.DurationVar(&c.HoldMin, "hold-min", 0, "shortest pause in the critical section")
	fs.DurationVar(&c.Pace, "pace", 0, "longest pause between requests")
	fs.DurationVar(&c.Wait, "wait", 2*time.Minute, "bound on a wait")
	fs.Float64Var(&c.Cancel, "cancel", 0, "probability of a short, cancellable wait")
	fs.DurationVar(&c.CancelWait, "cancel-wait", 5*time.Millisecond, "longest short wait")
	fs.DurationVar(&c.Retry, "retry", 30*time.Second, "how long to retry an ambiguous enqueue")
	fs.StringVar(&c.Guard, "guard", GuardNone, "none or file")
	fs.StringVar(&c.ResourceDir, "resource", "", "directory of the protected counters")
	fs.StringVar(&c.FenceRedis, "fence-redis", "", "redis URL of a RedisGuard that checks every token")
	fs.StringVar(&c.Crash, "crash", "", "crash point: enqueue, waiting, holding or releasing")
	fs.IntVar(&c.CrashOp, "crash-op", 0, "request number at or after which to crash")
	fs.DurationVar(&c.Victim, "victim", 0, "pause of client 0's first critical section after its read")
	fs.Float64Var(&c.Probe, "probe", 0, "fraction of releases followed by a heartbeat probe")
	fs.Float64Var(&c.Nested, "nested", 0, "probability that a holder starts a nested request under its lease")
	fs.Float64Var(&c.NestedOther, "nested-other", 0.3, "probability that a nested request names another key too")
	fs.Float64Var(&c.Detach, "detach", 0, "probability that a parent releases without waiting for its nested request")
	fs.DurationVar(&c.NestedWait, "nested-wait", 2*time.Second, "bound on a nested request's wait")
	fs.StringVar(&c.Board, "board", "", "directory where leases are published for nested requests of other processes")
	fs.Float64Var(&c.Adopt, "adopt", 0, "probability that a request is nested under a lease found on -board")
	fs.DurationVar(&c.Poll, "poll", time.Millisecond, "a nested holder asks Lease.Err this often")
	fs.DurationVar(&c.CheckEvery, "check-every", 0, "every holder asks Lease.Err this often while it holds (0: only at the end)")
	return func() error {
		if *cluster != "" {
			c.Cluster = strings.Split(*cluster, ",")
		}
		c.Namespaces = strings.Split(*ns, ",")
		var err error
		c.Lanes, err = ParseLanes(*lanesFlag)
		return err
	}
}

// worker is one running replica.
type worker struct {
	cfg    WorkerConfig
	rec    *Recorder
	client redis.UniversalClient
	fence  *fencing.RedisGuard
	fenceC *redis.Client
	file   *fencing.FileGuard
	ns     map[string]*nsPart
	kids   sync.WaitGroup // nested requests under way
}

// nsPart is the Backend and Session of one namespace.
type nsPart struct {
	b *redislane.Backend
	s *lanes.Session
}

// RunWorker runs one replica to the end of its requests, recording every
// step in cfg.History. It returns an error only when it cannot start.
func RunWorker(cfg WorkerConfig) error {
	rec, err := NewRecorder(cfg.History, cfg.Proc)
	if err != nil {
		return err
	}
	defer rec.Close()
	w := &worker{cfg: cfg, rec: rec, ns: map[string]*nsPart{}}
	if err := w.connect(); err != nil {
		return err
	}
	defer w.close()
	rec.Record(Event{Op: OpStart, Phase: Ok, Err: fmt.Sprintf("pid %d, scripts %s", os.Getpid(), ScriptsDigest())})
	var wg sync.WaitGroup
	for c := range cfg.Clients {
		wg.Go(func() { w.client1(c) })
	}
	wg.Wait()
	w.kids.Wait()
	for _, p := range w.ns {
		_ = p.s.Close()
	}
	rec.Record(Event{Op: OpExit, Phase: Ok})
	return nil
}

func (w *worker) connect() error {
	cfg := w.cfg
	if len(cfg.Cluster) > 0 {
		w.client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.Cluster, MaxRetries: cfg.RedisRetries,
			ContextTimeoutEnabled: true, DialTimeout: time.Second})
	} else {
		opt, err := redis.ParseURL(cfg.Redis)
		if err != nil {
			return err
		}
		opt.MaxRetries, opt.ContextTimeoutEnabled, opt.DialTimeout = cfg.RedisRetries, true, time.Second
		w.client = redis.NewClient(opt)
	}
	if cfg.FenceRedis != "" {
		opt, err := redis.ParseURL(cfg.FenceRedis)
		if err != nil {
			return err
		}
		w.fenceC = redis.NewClient(opt)
		if w.fence, err = fencing.NewRedisGuard(w.fenceC, "chaos"); err != nil {
			return err
		}
	}
	if cfg.Guard == GuardFile {
		g, err := fencing.NewFileGuard(cfg.ResourceDir)
		if err != nil {
			return err
		}
		w.file = g
	}
	host, _ := os.Hostname()
	for _, ns := range cfg.Namespaces {
		b, err := redislane.New(w.client, ns)
		if err != nil {
			return err
		}
		// Redis may be down while this incarnation starts (a restart under
		// way): keep trying for a while.
		var s *lanes.Session
		deadline := time.Now().Add(30 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			s, err = lanes.NewSession(ctx, b, lanes.WithTTL(cfg.TTL), lanes.WithOwner(host, os.Getpid()))
			cancel()
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("session on %s: %w", ns, err)
		}
		w.ns[ns] = &nsPart{b: b, s: s}
	}
	return nil
}

func (w *worker) close() {
	for _, p := range w.ns {
		_ = p.s.Close()
		_ = p.b.Close()
	}
	_ = w.client.Close()
	if w.fenceC != nil {
		_ = w.fenceC.Close()
	}
}

// classify maps an error of lanes or fencing to a Class.
func classify(err error) string {
	switch {
	case errors.Is(err, lanes.ErrLockCycle):
		return ClassCycle
	case errors.Is(err, lanes.ErrCanceled):
		return ClassCancel
	case errors.Is(err, lanes.ErrWaitTimeout):
		return ClassCancel // the caller's own deadline; the worker tells a timeout apart itself
	case errors.Is(err, lanes.ErrLeaseLost):
		return ClassLost
	case errors.Is(err, lanes.ErrNotHolder):
		return ClassNotHolder
	case errors.Is(err, lanes.ErrUnavailable), errors.Is(err, lanes.ErrClosed):
		return ClassUnavailable
	case errors.Is(err, fencing.ErrStale):
		return ClassStale
	}
	return ClassOther
}

func stateName(s lanes.State) string {
	switch s {
	case lanes.Held:
		return "held"
	case lanes.Waiting:
		return "waiting"
	}
	return "gone"
}

// crash records a crash point and SIGKILLs the process.
func (w *worker) crash(c int, id, point string, ev Event) {
	ev.Op, ev.Phase, ev.Client, ev.ID, ev.Err = OpCrash, Ok, c, id, point
	w.rec.Record(ev)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL cannot be caught
}

// client1 runs one goroutine's requests.
func (w *worker) client1(c int) {
	cfg := w.cfg
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(c)+1))
	crashArmed := c == 0 && cfg.Crash != ""
	began := time.Now()
	for i := 0; i < cfg.Ops && (cfg.For == 0 || time.Since(began) < cfg.For); i++ {
		ns := cfg.Namespaces[rng.IntN(len(cfg.Namespaces))]
		p := w.ns[ns]
		i1 := rng.IntN(len(cfg.Lanes))
		l1 := cfg.Lanes[i1]
		req := lanes.Request{ID: fmt.Sprintf("%s-c%d-%d", cfg.Proc, c, i), Lanes: []lanes.Lane{{Key: l1.Key, Limit: l1.Limit}}}
		if len(cfg.Lanes) > 1 && rng.Float64() < cfg.Multi {
			l2 := cfg.Lanes[rng.IntN(len(cfg.Lanes))]
			if l2.Key == l1.Key && cfg.Multi >= 1 { // -multi 1: always two keys
				l2 = cfg.Lanes[(i1+1)%len(cfg.Lanes)]
			}
			if l2.Key != l1.Key {
				req.Lanes = append(req.Lanes, lanes.Lane{Key: l2.Key, Limit: l2.Limit})
			}
		}
		o := runOpts{ns: ns}
		if cfg.Adopt > 0 && rng.Float64() < cfg.Adopt {
			// Nested under a lease another process published: re-entry
			// across processes (DESIGN.md invariant 10).
			if l := w.pickLender(rng, ns); l != nil {
				req.Lanes = []lanes.Lane{{Key: l.Key, Limit: l.Limit}}
				w.otherLane(rng, &req)
				req.Lineage = []string{l.ID}
				o.lent = l.Tokens
			}
		}
		short := rng.Float64() < cfg.Cancel
		o.waitFor = cfg.Wait
		if short {
			o.waitFor = time.Duration(rng.Int64N(int64(cfg.CancelWait) + 1))
		}
		if o.lent != nil {
			short, o.waitFor = true, cfg.NestedWait
		}
		o.short = short
		o.hold = w.holdFor(rng)
		pace := time.Duration(rng.Int64N(int64(cfg.Pace) + 1))
		o.victim = c == 0 && i == 0 && cfg.Victim > 0
		if crashArmed && i >= cfg.CrashOp {
			o.crash = cfg.Crash
		}
		if cfg.Nested > 0 && rng.Float64() < cfg.Nested {
			k := &kidPlan{lanes: req.Lanes[:1:1], hold: w.holdFor(rng), detach: rng.Float64() < cfg.Detach}
			kr := lanes.Request{Lanes: k.lanes}
			w.otherLane(rng, &kr)
			k.lanes = kr.Lanes
			o.kid = k
		}
		o.jitter = time.Duration(rng.Int64N(int64(time.Millisecond)))
		o.probe = rng.Float64() < cfg.Probe
		w.run(c, p, req, o)
		time.Sleep(pace)
	}
}

// holdFor draws a pause inside the critical section.
func (w *worker) holdFor(rng *rand.Rand) time.Duration {
	return w.cfg.HoldMin + time.Duration(rng.Int64N(int64(max(w.cfg.Hold-w.cfg.HoldMin, 0))+1))
}

// otherLane adds, with probability NestedOther, a key that req does not
// name yet to a nested request.
func (w *worker) otherLane(rng *rand.Rand, req *lanes.Request) {
	if rng.Float64() >= w.cfg.NestedOther {
		return
	}
	l := w.cfg.Lanes[rng.IntN(len(w.cfg.Lanes))]
	for _, x := range req.Lanes {
		if x.Key == l.Key {
			return
		}
	}
	req.Lanes = append(req.Lanes, lanes.Lane{Key: l.Key, Limit: l.Limit})
}

// runOpts is how one request runs.
type runOpts struct {
	ns      string
	short   bool          // a short wait: reaching its bound is no liveness failure
	waitFor time.Duration // bound on the wait
	hold    time.Duration // pause inside the critical section
	victim  bool          // pause for cfg.Victim inside the critical section (the harness stops the process there)
	crash   string        // crash point armed for this request, or ""
	jitter  time.Duration // how long a crash while releasing lets the release run
	probe   bool          // send a heartbeat for the entry after a confirmed release
	// lent holds, per key, the token of the lease this request is nested
	// under: a key granted with that token was taken by re-entry, and
	// shares its lender's slot and resource.
	lent map[string]uint64
	kid  *kidPlan // a nested request to start while holding, or nil
}

// kidPlan is a nested request a holder starts on a goroutine of its own.
type kidPlan struct {
	lanes  []lanes.Lane  // the parent's first key, maybe another
	hold   time.Duration // its pause inside the critical section
	detach bool          // the parent releases without waiting for it
}

// run makes one lane request: enqueue, wait, critical section, release,
// every step recorded.
func (w *worker) run(c int, p *nsPart, req lanes.Request, o runOpts) {
	cfg := w.cfg
	base := Event{Client: c, ID: req.ID, NS: o.ns, Lin: req.Lineage}
	for _, l := range req.Lanes {
		base.Keys = append(base.Keys, l.Key)
		base.Limits = append(base.Limits, l.Limit)
	}
	w.rec.Record(withOp(base, OpAcquire, Invoke))
	if o.crash == CrashEnqueue {
		// The step commits, then the process dies without using the
		// reply: to Redis, that is a reply lost on the way back.
		w.rec.Record(withOp(base, OpEnqueue, Invoke))
		sts, err := p.b.Enqueue(context.Background(), p.s.Owner(), cfg.TTL, []lanes.Request{req})
		ev := base
		if err == nil && len(sts) == 1 {
			ev.State, ev.Tokens = stateName(sts[0].State), sts[0].Tokens
		}
		w.crash(c, req.ID, CrashEnqueue, ev)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), o.waitFor)
	t, err := w.enqueue(ctx, p, base, req)
	if err == nil && o.crash == CrashWaiting {
		select {
		case <-t.Ready():
			// Granted at once: crash at a later request that waits.
		default:
			w.crash(c, req.ID, CrashWaiting, base)
		}
	}
	var lease *lanes.Lease
	if err == nil {
		lease, err = t.Wait(ctx)
	}
	cancel()
	if err != nil {
		ev := withOp(base, OpAcquire, Fail)
		ev.Class, ev.Err = classify(err), err.Error()
		if ev.Class == ClassCancel && !o.short && time.Since(start) >= o.waitFor {
			ev.Class = ClassTimeout
		}
		w.rec.Record(ev)
		return
	}
	ok := withOp(base, OpAcquire, Ok)
	ok.Tokens = lease.Tokens()
	w.rec.Record(ok)
	stop := w.watchLost(base, lease)
	defer stop()
	w.publish(o.ns, req, lease)

	var kidDone chan struct{}
	if o.kid != nil {
		kidDone = w.startKid(c, p, o, req, lease)
	}
	borrowed := map[string]bool{}
	for k, tok := range o.lent {
		if lease.Token(k) == tok {
			borrowed[k] = true
		}
	}
	if len(borrowed) > 0 {
		defer w.markLent(req)()
	}
	w.critical(c, p, base, req, lease, o.hold, o.victim, o.crash == CrashHolding, borrowed, len(req.Lineage) > 0)
	if kidDone != nil && !o.kid.detach {
		<-kidDone // a tool that ran a sub-agent returns when it does
	}
	w.unpublish(req)

	if o.crash == CrashReleasing {
		w.rec.Record(withOp(base, OpRelease, Invoke))
		go func() { _ = lease.Release(context.Background()) }()
		time.Sleep(o.jitter)
		w.crash(c, req.ID, CrashReleasing, base)
	}
	w.release(p, base, lease, o.probe)
}

// startKid starts the nested request o.kid, under lease, on a goroutine of
// its own (its client number is the parent's plus 1000), and returns a
// channel closed when it is done.
func (w *worker) startKid(c int, p *nsPart, o runOpts, parent lanes.Request, lease *lanes.Lease) chan struct{} {
	done := make(chan struct{})
	req := lanes.Request{ID: parent.ID + "-n", Lanes: o.kid.lanes, Lineage: append(slices.Clone(parent.Lineage), parent.ID)}
	ko := runOpts{ns: o.ns, short: true, waitFor: w.cfg.NestedWait, hold: o.kid.hold, lent: kidLent(o.lent, lease.Tokens())}
	w.kids.Add(1)
	go func() {
		defer w.kids.Done()
		defer close(done)
		w.run(c+1000, p, req, ko)
	}()
	return done
}

// kidLent returns the tokens a request nested under a lease (with tokens
// held) may be lent, its parent having been lent parentLent: a key its
// parent does not hold but the parent's own lender does is lent by that
// lender (DESIGN.md invariant 10: the nearest ancestor holding it), so it
// is the parent's tokens and those the parent was lent, the parent's
// first.
func kidLent(parentLent, held map[string]uint64) map[string]uint64 {
	lent := maps.Clone(parentLent)
	if lent == nil {
		lent = map[string]uint64{}
	}
	maps.Copy(lent, held)
	return lent
}

// watchLost records the moment lease's Lost closes (the holder is told),
// until stop is called.
func (w *worker) watchLost(base Event, lease *lanes.Lease) (stop func()) {
	done := make(chan struct{})
	go func() {
		select {
		case <-lease.Lost():
			ev := withOp(base, OpLost, Ok)
			if err := lease.Err(); err != nil {
				ev.Err = err.Error()
			}
			w.rec.Record(ev)
		case <-done:
		}
	}()
	return func() { close(done) }
}

// BoardEntry is a lease published on the board, for nested requests of
// other processes (DESIGN.md invariant 10: lineage crosses processes).
type BoardEntry struct {
	ID     string            `json:"id"`
	NS     string            `json:"ns"`
	Key    string            `json:"key"` // the lease's first key, which a nested request names
	Limit  int               `json:"limit"`
	Tokens map[string]uint64 `json:"tokens"` // every key's token: a nested request borrows each it names
}

// publish puts a lease (of a request nested under nothing) on the board,
// when there is one: its first key and its tokens, in a file named by its
// entry id.
func (w *worker) publish(ns string, req lanes.Request, lease *lanes.Lease) {
	if w.cfg.Board == "" || len(req.Lineage) > 0 {
		return
	}
	l := req.Lanes[0]
	b, _ := json.Marshal(BoardEntry{ID: req.ID, NS: ns, Key: l.Key, Limit: l.Limit, Tokens: lease.Tokens()})
	_ = writeAtomic(filepath.Join(w.cfg.Board, req.ID), b)
}

// unpublish takes a lease off the board before its release.
func (w *worker) unpublish(req lanes.Request) {
	if w.cfg.Board != "" && len(req.Lineage) == 0 {
		_ = os.Remove(filepath.Join(w.cfg.Board, req.ID))
	}
}

// markLent notes on the board, until the returned function runs, that
// req holds a key by re-entry: a file lent/<lender id>.<entry id>, so that
// a harness can hit a lender while its borrower holds.
func (w *worker) markLent(req lanes.Request) func() {
	if w.cfg.Board == "" {
		return func() {}
	}
	dir := filepath.Join(w.cfg.Board, "lent")
	name := filepath.Join(dir, req.Lineage[len(req.Lineage)-1]+"."+req.ID)
	if os.MkdirAll(dir, 0o755) != nil || os.WriteFile(name, nil, 0o644) != nil {
		return func() {}
	}
	return func() { _ = os.Remove(name) }
}

// pickLender picks a lease of namespace ns that another process published
// on the board, or nil. Files of killed processes stay: a request nested
// under a lease that ended is an ordinary one.
func (w *worker) pickLender(rng *rand.Rand, ns string) *BoardEntry {
	ents, err := os.ReadDir(w.cfg.Board)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range ents {
		if n := e.Name(); !e.IsDir() && !strings.HasPrefix(n, ".") && !strings.HasPrefix(n, w.cfg.Proc+"-") {
			names = append(names, n)
		}
	}
	for range min(3, len(names)) {
		b, err := os.ReadFile(filepath.Join(w.cfg.Board, names[rng.IntN(len(names))]))
		var e BoardEntry
		if err == nil && json.Unmarshal(b, &e) == nil && e.NS == ns {
			return &e
		}
	}
	return nil
}

func withOp(e Event, op string, ph Phase) Event {
	e.Op, e.Phase = op, ph
	return e
}

// enqueue runs Enqueue steps until one answers: after an ambiguous error
// (ErrUnavailable: the step may have committed) it retries with the same
// entry id, which keeps the entry's place if the step did commit
// (DESIGN.md invariant 8), for at most cfg.Retry or until ctx ends.
func (w *worker) enqueue(ctx context.Context, p *nsPart, base Event, req lanes.Request) (*lanes.Ticket, error) {
	first := time.Now()
	backoff := 10 * time.Millisecond
	for {
		w.rec.Record(withOp(base, OpEnqueue, Invoke))
		ts, err := p.s.Enqueue(ctx, req)
		if err == nil {
			ev := withOp(base, OpEnqueue, Ok)
			select {
			case <-ts[0].Ready():
				ev.State = "ready"
			default:
				ev.State = "waiting"
			}
			w.rec.Record(ev)
			return ts[0], nil
		}
		ev := withOp(base, OpEnqueue, Fail)
		ev.Class, ev.Err = classify(err), err.Error()
		if ev.Class == ClassUnavailable {
			ev.Phase = Info
		}
		w.rec.Record(ev)
		if ev.Class != ClassUnavailable || ctx.Err() != nil || time.Since(first) > w.cfg.Retry {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// critical is the critical section: for each key of limit 1, check the
// token with the guard and read the counter; pause; write each counter one
// higher. A refused token ends the section at once. Keys taken by re-entry
// (borrowed) are their lender's: the nested holder leaves their counters
// alone. With poll, the pause asks Lease.Err every cfg.Poll (else every
// cfg.CheckEvery, when set), and ends when the lease is lost.
func (w *worker) critical(c int, p *nsPart, base Event, req lanes.Request, lease *lanes.Lease, hold time.Duration, victim, crash bool,
	borrowed map[string]bool, poll bool) {
	type cell struct {
		key   string
		tok   uint64
		value int64
	}
	var cells []cell
	for _, l := range req.Lanes {
		if l.Limit == 1 && w.cfg.ResourceDir != "" && !borrowed[l.Key] {
			cells = append(cells, cell{key: l.Key, tok: lease.Token(l.Key)})
		}
	}
	resEvent := func(op string, ph Phase, key string, tok uint64, v int64) Event {
		e := base
		e.Op, e.Phase, e.Keys, e.Limits, e.Tokens, e.Value = op, ph, []string{key}, []int{1}, map[string]uint64{key: tok}, v
		return e
	}
	refused := false
	for i := range cells {
		x := &cells[i]
		name := resourceFile(base.NS, x.key)
		if w.file != nil {
			w.rec.Record(resEvent(OpCheck, Invoke, x.key, x.tok, 0))
			if err := w.file.Check(context.Background(), name, fencing.Token(x.tok)); err != nil {
				ev := resEvent(OpCheck, Fail, x.key, x.tok, 0)
				ev.Class, ev.Err = classify(err), err.Error()
				w.rec.Record(ev)
				refused = true
				break
			}
			w.rec.Record(resEvent(OpCheck, Ok, x.key, x.tok, 0))
		}
		if !w.fenceCheck(base, x.key, x.tok, resEvent) {
			refused = true
			break
		}
		w.rec.Record(resEvent(OpRead, Invoke, x.key, x.tok, 0))
		v, err := readCounter(filepath.Join(w.cfg.ResourceDir, name))
		if err != nil {
			ev := resEvent(OpRead, Fail, x.key, x.tok, 0)
			ev.Class, ev.Err = ClassOther, err.Error()
			w.rec.Record(ev)
			refused = true
			break
		}
		x.value = v
		w.rec.Record(resEvent(OpRead, Ok, x.key, x.tok, v))
	}
	if crash {
		w.crash(c, base.ID, CrashHolding, base)
	}
	if victim {
		time.Sleep(w.cfg.Victim) // the harness stops the process here
	}
	every := w.cfg.CheckEvery
	if poll {
		every = w.cfg.Poll
	}
	if every > 0 {
		for end := time.Now().Add(hold); time.Now().Before(end) && w.valid(base, lease); {
			time.Sleep(min(every, time.Until(end)))
		}
	} else {
		time.Sleep(hold)
	}
	if !refused {
		for _, x := range cells {
			name := resourceFile(base.NS, x.key)
			// The RedisGuard's answer is recorded; the file's own guard,
			// which checks and writes in one step, decides.
			w.fenceCheck(base, x.key, x.tok, resEvent)
			w.rec.Record(resEvent(OpWrite, Invoke, x.key, x.tok, x.value+1))
			data := []byte(strconv.FormatInt(x.value+1, 10) + "\n")
			var err error
			if w.file != nil {
				err = w.file.WriteFile(context.Background(), name, fencing.Token(x.tok), data, 0o644)
			} else {
				err = writeAtomic(filepath.Join(w.cfg.ResourceDir, name), data)
			}
			if err != nil {
				ev := resEvent(OpWrite, Fail, x.key, x.tok, x.value+1)
				ev.Class, ev.Err = classify(err), err.Error()
				w.rec.Record(ev)
				break
			}
			w.rec.Record(resEvent(OpWrite, Ok, x.key, x.tok, x.value+1))
		}
	}
	w.valid(base, lease)
}

// valid asks the lease whether it still holds (Lease.Err), records the
// answer, and returns it.
func (w *worker) valid(base Event, lease *lanes.Lease) bool {
	w.rec.Record(withOp(base, OpValid, Invoke))
	err := lease.Err()
	if err == nil {
		w.rec.Record(withOp(base, OpValid, Ok))
		return true
	}
	ev := withOp(base, OpValid, Fail)
	ev.Class, ev.Err = classify(err), err.Error()
	w.rec.Record(ev)
	if errors.Is(err, lanes.ErrLeaseLost) {
		w.rec.Record(withOp(ev, OpLost, Ok))
	}
	return false
}

// fenceCheck runs the optional RedisGuard check; false when it refused.
func (w *worker) fenceCheck(base Event, key string, tok uint64, mk func(string, Phase, string, uint64, int64) Event) bool {
	if w.fence == nil {
		return true
	}
	w.rec.Record(mk(OpFence, Invoke, key, tok, 0))
	err := w.fence.Check(context.Background(), Resource(base.NS, key), fencing.Token(tok))
	if err == nil {
		w.rec.Record(mk(OpFence, Ok, key, tok, 0))
		return true
	}
	ev := mk(OpFence, Fail, key, tok, 0)
	ev.Class, ev.Err = classify(err), err.Error()
	if ev.Class != ClassStale {
		ev.Phase = Info
	}
	w.rec.Record(ev)
	return ev.Class != ClassStale
}

// release gives the lease back. When that fails (the lease was lost, the
// backend did not have it, or the reply was lost), a release step by entry
// id confirms that the entry is gone, so the history bounds when the hold
// ended. probe sends a heartbeat for the entry after a confirmed release:
// it must find the entry gone.
func (w *worker) release(p *nsPart, base Event, lease *lanes.Lease, probe bool) {
	w.rec.Record(withOp(base, OpRelease, Invoke))
	err := lease.Release(context.Background())
	if err == nil {
		w.rec.Record(withOp(base, OpRelease, Ok))
		if probe {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			sts, err := p.b.Heartbeat(ctx, p.s.Owner().ID, w.cfg.TTL, []string{base.ID})
			cancel()
			if err == nil && len(sts) == 1 {
				ev := withOp(base, OpProbe, Ok)
				ev.State = stateName(sts[0].State)
				w.rec.Record(ev)
			}
		}
		return
	}
	ev := withOp(base, OpRelease, Fail)
	ev.Class, ev.Err = classify(err), err.Error()
	if ev.Class == ClassUnavailable {
		ev.Phase = Info
	}
	w.rec.Record(ev)
	if ev.Class == ClassLost {
		w.rec.Record(withOp(base, OpLost, Ok))
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r, err := p.b.Release(ctx, p.s.Owner().ID, []string{base.ID})
		cancel()
		if err == nil {
			g := withOp(base, OpGone, Ok)
			if len(r.Was) == 1 {
				g.State = stateName(r.Was[0])
			}
			w.rec.Record(g)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// LoadScripts loads the lanes Functions library, as this binary embeds it,
// into the server at url and returns "name function" for each script (e.g.
// "enqueue.lua lanes_0123456789ab_enqueue"): a harness that drops the
// replies of one script matches the FCALL the workers really send.
func LoadScripts(url string) ([]string, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	c := redis.NewClient(opt)
	defer c.Close()
	_, code := lua.Library()
	if err := c.FunctionLoad(context.Background(), code).Err(); err != nil && !strings.Contains(err.Error(), "already exists") {
		return nil, err
	}
	var out []string
	for _, name := range []string{"enqueue.lua", "heartbeat.lua", "release.lua", "inspect.lua"} {
		out = append(out, name+" "+lua.Function(name))
	}
	return out, nil
}

// ScriptsDigest names the lanes scripts a binary embeds (the first bytes of
// a SHA-256 of them all): a worker records it when it starts, so that a
// harness can tell it runs workers built from its own source.
func ScriptsDigest() string {
	h := sha256.New()
	for _, name := range []string{"enqueue.lua", "heartbeat.lua", "release.lua", "inspect.lua", "record.lua", "doctor.lua"} {
		h.Write([]byte(lua.Source(name)))
	}
	return fmt.Sprintf("%x", h.Sum(nil)[:8])
}

// resourceFile is the counter file of key in namespace ns, relative to the
// resource directory.
func resourceFile(ns, key string) string {
	r := strings.NewReplacer("/", "_", "{", "_", "}", "_", ":", "_")
	return "counter-" + r.Replace(ns) + "-" + r.Replace(key)
}

// ReadCounters reads the counter of every key of limit 1 in namespaces.
func ReadCounters(dir string, namespaces []string, ls []LaneSpec) (map[string]int64, error) {
	out := map[string]int64{}
	for _, ns := range namespaces {
		for _, l := range ls {
			if l.Limit != 1 {
				continue
			}
			v, err := readCounter(filepath.Join(dir, resourceFile(ns, l.Key)))
			if err != nil {
				return nil, err
			}
			out[Resource(ns, l.Key)] = v
		}
	}
	return out, nil
}

// readCounter reads a counter file; a missing one is 0.
func readCounter(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// writeAtomic replaces path with data (temporary file, rename): readers see
// the old value or the new one. It checks no token: a holder that lost its
// lease overwrites whatever the next holder wrote.
func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
