package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// cell is one throughput measurement: procs processes on keys keys, each
// process looping on one goroutine, or on goroutines goroutines of one
// process (a shared cell).
type cell struct {
	col    string
	procs  int
	keys   int
	shared bool // one process, e.cfg.gGoroutines goroutines on e.cfg.gKeys keys
}

// name is the cell's -cells name: "8x1" is 8 processes on 1 key;
// "goroutines" is many goroutines of one process on many keys.
func (c cell) name() string {
	if c.shared {
		return "goroutines"
	}
	return fmt.Sprintf("%dx%d", c.procs, c.keys)
}

var cells = []cell{
	{col: "thr1", procs: 1, keys: 1},
	{col: "thr8", procs: 8, keys: 1}, // also the fairness cell
	{col: "thr64", procs: 64, keys: 1},
	{col: "thr64k", procs: 64, keys: 64},
	{col: "thrG", procs: 1, shared: true},
}

// loops is how many goroutines of c loop on Acquire and release, and keys
// how many keys they pick from.
func (c cell) loops(e *env) (loops, keys int) {
	if c.shared {
		return e.cfg.gGoroutines, e.cfg.gKeys
	}
	return c.procs, c.keys
}

func cellNames() []string {
	var out []string
	for _, c := range cells {
		out = append(out, c.name())
	}
	return out
}

// op is one Acquire of a throughput cell: who, when it was called, when it
// returned with the key (never, for one still waiting at the end).
type op struct {
	proc    int
	arrive  time.Time
	queued  time.Time // when the request was surely queued (lanes: its Enqueue returned); zero: unknown
	granted time.Time // zero: not granted before the cell ended (endCell)
}

// cellResult is what one cell of one contender measured.
type cellResult struct {
	grants    int // granted before the end of the cell
	errs      int // failed Acquire calls (other than the end of the cell) and releases
	ops       []op
	rt        int64   // round trips of every process
	clientCPU float64 // this program's CPU time (user+sys), seconds
	serverCPU float64 // the server's, seconds (server-wide)
}

// measureThroughput runs every cell for each lock: each process acquires,
// releases at once, and repeats for cfg.dur; on one key, or on a key chosen
// at random among 64 per operation. In the shared cell, cfg.gGoroutines
// goroutines of one process (one Session, one client) do the same, each on
// a key chosen at random among cfg.gKeys. Grants per second count the
// Acquire calls that returned before the end. The 8-process cell also gives
// the fairness columns.
func measureThroughput(ctx context.Context, e *env, ks []*kind, res *results) error {
	for _, c := range cells { // cell by cell: noise falls on every row alike
		if len(e.cfg.cells) > 0 && !slices.Contains(e.cfg.cells, c.name()) {
			continue
		}
		for _, i := range rand.Perm(len(ks)) { // in a new order each cell
			k := ks[i]
			if !k.lock {
				continue
			}
			r, err := runCell(ctx, e, k, c)
			if err != nil {
				return err
			}
			rate := float64(r.grants) / e.cfg.dur.Seconds()
			res.set(k.id, c.col, rate)
			detail := ""
			if r.errs > 0 {
				detail = fmt.Sprintf(", %d failed attempts", r.errs)
			}
			if r.grants > 0 {
				g := float64(r.grants)
				if k.redis {
					detail += fmt.Sprintf(", %.1f round trips, client CPU %s, Redis CPU %s per grant",
						float64(r.rt)/g, fmtUS(r.clientCPU*1e6/g), fmtUS(r.serverCPU*1e6/g))
				} else {
					detail += fmt.Sprintf(", CPU %s per grant", fmtUS(r.clientCPU*1e6/g))
				}
			}
			res.note("throughput %s %s: %d grants in %v%s", k.id, c.col, r.grants, e.cfg.dur, detail)
			if c.col == "thr8" {
				setFairness(res, k.id, r.ops, c.procs)
			}
		}
	}
	return nil
}

// measureFairnessOnly runs the fairness cell alone (-cols fairness).
func measureFairnessOnly(ctx context.Context, e *env, ks []*kind, res *results) error {
	for _, k := range ks {
		if !k.lock {
			continue
		}
		r, err := runCell(ctx, e, k, cells[1])
		if err != nil {
			return err
		}
		setFairness(res, k.id, r.ops, cells[1].procs)
	}
	return nil
}

func runCell(ctx context.Context, e *env, k *kind, c cell) (cellResult, error) {
	var rt atomic.Int64
	loops, keys := c.loops(e)
	scope := fmt.Sprintf("thr-%d-%d", c.procs, keys)
	if c.shared {
		scope = fmt.Sprintf("thr-g%d-%d", loops, keys)
	}
	ps, closeAll, err := openProcs(ctx, e, k, scope, c.procs, &rt)
	if err != nil {
		return cellResult{}, err
	}
	defer closeAll()
	// Warm up each process on a key of its own: scripts, connections.
	for i, p := range ps {
		rel, err := p.Acquire(ctx, fmt.Sprintf("warm-%d", i))
		if err != nil {
			return cellResult{}, fmt.Errorf("%s: warm-up: %w", k.id, err)
		}
		if err := rel(); err != nil {
			return cellResult{}, fmt.Errorf("%s: warm-up release: %w", k.id, err)
		}
	}

	srv0, err := readCounters(ctx, e.srv.admin)
	if err != nil {
		return cellResult{}, err
	}
	cpu0 := processCPU()
	start := time.Now()
	end := start.Add(e.cfg.dur)
	cctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	rt.Store(0)
	var (
		mu   sync.Mutex
		all  []op
		errs atomic.Int64
		wg   sync.WaitGroup
	)
	for i := range loops {
		p := ps[i%len(ps)]
		wg.Go(func() {
			var mine []op
			for time.Now().Before(end) {
				key := "k"
				if keys > 1 {
					key = fmt.Sprintf("k%d", rand.N(keys))
				}
				o := op{proc: i, arrive: time.Now()}
				var rel func() error
				var err error
				if qa, ok := p.(queuedAcquirer); ok {
					rel, o.queued, err = qa.AcquireQueued(cctx, key)
				} else {
					rel, err = p.Acquire(cctx, key)
				}
				if err != nil {
					if cctx.Err() != nil {
						mine = append(mine, o) // still waiting when the cell ended
						break
					}
					errs.Add(1)
					continue
				}
				o.granted = time.Now()
				mine = append(mine, o)
				if err := rel(); err != nil && !errors.Is(err, context.Canceled) {
					errs.Add(1)
				}
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	cpu1 := processCPU()
	if err := ctx.Err(); err != nil {
		return cellResult{}, err
	}
	srv1, err := readCounters(ctx, e.srv.admin)
	if err != nil {
		return cellResult{}, err
	}
	_, serverCPU := srv1.sub(srv0)
	r := cellResult{errs: int(errs.Load()), ops: all, rt: rt.Load(), clientCPU: cpu1 - cpu0, serverCPU: serverCPU}
	r.grants = endCell(all, end)
	return r, nil
}

// endCell forgets the grants of ops that came after the cell's end, and
// returns how many came before. An op granted after the end is one that
// its process was still waiting for when the cell ended: the grant may be
// one that the ending itself freed (the waiters ahead, their context done,
// left the queue), which passes over nobody, and grants/s does not count
// it either.
func endCell(ops []op, end time.Time) (grants int) {
	for i := range ops {
		switch {
		case ops[i].granted.After(end):
			ops[i].granted = time.Time{}
		case !ops[i].granted.IsZero():
			grants++
		}
	}
	return grants
}

// processCPU is this program's CPU time so far (user+sys), in seconds.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
