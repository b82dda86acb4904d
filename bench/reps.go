package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// summary holds the results of every repetition. A cell of the tables is
// the median of its values across repetitions with their range; a ratio is
// taken in each repetition (both sides measured minutes apart at most, in
// a random order) and then summarized the same way.
type summary struct {
	kinds []*kind
	reps  []*results
}

// values returns the values of kind's col in the repetitions that have it.
func (s *summary) values(kind, col string) []float64 {
	var out []float64
	for _, r := range s.reps {
		if v, ok := r.get(kind, col); ok {
			out = append(out, v)
		}
	}
	return out
}

// perRep returns f of each repetition where f has a value.
func (s *summary) perRep(f func(r *results) (float64, bool)) []float64 {
	var out []float64
	for _, r := range s.reps {
		if v, ok := f(r); ok {
			out = append(out, v)
		}
	}
	return out
}

// ratioOf is kind a's col over kind b's col in one repetition.
func ratioOf(a, acol, b, bcol string) func(r *results) (float64, bool) {
	return func(r *results) (float64, bool) {
		x, ok1 := r.get(a, acol)
		y, ok2 := r.get(b, bcol)
		if !ok1 || !ok2 || y == 0 {
			return 0, false
		}
		return x / y, true
	}
}

// spread is the median, least and greatest of a series.
type spread struct {
	med, lo, hi float64
	n           int
}

func spreadOf(vs []float64) (spread, bool) {
	if len(vs) == 0 {
		return spread{}, false
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{med: m, lo: s[0], hi: s[len(s)-1], n: len(s)}, true
}

// format prints "median [min–max]", each with f; a single value alone.
func (sp spread) format(f func(float64) string) string {
	if sp.n == 1 {
		return f(sp.med)
	}
	return fmt.Sprintf("%s [%s–%s]", f(sp.med), f(sp.lo), f(sp.hi))
}

// formatRatio prints "1.49x [1.42–1.84]".
func (sp spread) formatRatio() string {
	x := func(v float64) string { return ratioText(v) }
	if sp.n == 1 {
		return x(sp.med) + "x"
	}
	return fmt.Sprintf("%sx [%s–%s]", x(sp.med), x(sp.lo), x(sp.hi))
}

// ratioText prints a ratio with two significant decimals below 10.
func ratioText(v float64) string {
	switch {
	case math.IsInf(v, 0) || math.IsNaN(v):
		return "∞"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 0.1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// column is one column of a table: a measured value of each contender.
type column struct {
	id      string
	group   string // the -cols measurement that fills it
	header  string
	format  func(float64) string
	applies func(*kind) bool
}

func always(*kind) bool      { return true }
func isLock(k *kind) bool    { return k.lock }
func isRedis(k *kind) bool   { return k.redis }
func redisLock(k *kind) bool { return k.redis && k.lock }
func queues(k *kind) bool    { return k.id == "lanes" }

// pct prints a percentage, with two decimals below 1% so that a small
// share does not print as 0.
func pct(v float64) string {
	if v > 0 && v < 1 {
		return fmt.Sprintf("%.2f%%", v)
	}
	return fmt.Sprintf("%.1f%%", v)
}
func perOp(v float64) string { return fmt.Sprintf("%.1f", v) }

// tables groups the columns; each group is one table, a row per contender.
var tables = []struct {
	title string
	cols  []column
}{
	{"Latency: one process on a key nobody else wants (acq+rel), and two processes on one key (handoff, releases)", []column{
		{"unc50", "uncontended", "acq+rel p50", fmtUS, always},
		{"unc99", "uncontended", "acq+rel p99", fmtUS, always},
		{"hand50", "handoff", "handoff p50", fmtUS, isLock},
		{"hand99", "handoff", "handoff p99", fmtUS, isLock},
		{"relg50", "handoff", "release, a waiter, p50", fmtUS, isLock},
		{"reln50", "handoff", "release, no waiter (same pause), p50", fmtUS, isLock},
	}},
	{"Throughput: grants per second (processes × keys; goroutines: one process)", []column{
		{"thr1", "throughput", "1×1", fmtCount, isLock},
		{"thr8", "throughput", "8×1", fmtCount, isLock},
		{"thr64", "throughput", "64×1", fmtCount, isLock},
		{"thr64k", "throughput", "64×64", fmtCount, isLock},
		{"thrG", "throughput", "goroutines", fmtCount, isLock},
	}},
	{"Fairness: 8 processes on one key", []column{
		{"ooo", "fairness", "out of order", pct, isLock},
		{"ooo1", "fairness", "out of order >1ms", pct, isLock},
		{"gshare", "fairness", "fewest/most grants", pct, isLock},
	}},
	{"Redis per uncontended acquire+release (INFO commandstats and cpu deltas)", []column{
		{"rt", "commands", "round trips", perOp, isRedis},
		{"sent", "commands", "cmds sent", perOp, isRedis},
		{"inner", "commands", "cmds in scripts", perOp, isRedis},
		{"script", "commands", "script time", fmtUS, isRedis},
		{"stime", "commands", "time in cmds sent", fmtUS, isRedis},
		{"cpu", "commands", "Redis CPU", fmtUS, isRedis},
	}},
	{"Waiting: 1,000 waiters in one process; lanes with 10,000 waiters", []column{
		{"conns", "waiters", "conns", fmtCount, redisLock},
		{"load", "waiters", "cmds/s", fmtCount, redisLock},
		{"mem", "memory", "Redis B/waiter", fmtCount, queues},
		{"close", "memory", "Session.Close", fmtUS, queues},
	}},
}

// printGrid prints one table, Markdown or aligned text (right-aligned
// but for the first column).
func printGrid(w io.Writer, md bool, headers []string, rows [][]string) {
	printGridAligned(w, md, headers, rows, tabwriter.AlignRight)
}

func printGridAligned(w io.Writer, md bool, headers []string, rows [][]string, flags uint) {
	if md {
		fmt.Fprintln(w, "| "+strings.Join(headers, " | ")+" |")
		seps := make([]string, len(headers))
		for i := range seps {
			seps[i] = "---:"
		}
		seps[0] = "---"
		fmt.Fprintln(w, "|"+strings.Join(seps, "|")+"|")
		for _, r := range rows {
			fmt.Fprintln(w, "| "+strings.Join(r, " | ")+" |")
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', flags)
	fmt.Fprintln(tw, strings.Join(headers, "\t")+"\t")
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	tw.Flush()
}

// printTables prints every group of columns that ran: median [min–max]
// across repetitions; "n/a" where a column does not apply, "–" where it
// has no value.
func printTables(w io.Writer, e *env, s *summary) {
	for _, t := range tables {
		var cols []column
		for _, c := range t.cols {
			if e.wants(c.group) || (c.group == "fairness" && e.wants("throughput")) {
				cols = append(cols, c)
			}
		}
		if len(cols) == 0 {
			continue
		}
		headers := []string{"contender"}
		for _, c := range cols {
			headers = append(headers, c.header)
		}
		var rows [][]string
		for _, k := range s.kinds {
			row := []string{k.name}
			has := false
			for _, c := range cols {
				txt := "n/a"
				if c.applies(k) {
					txt = "–"
					if sp, ok := spreadOf(s.values(k.id, c.id)); ok {
						txt = sp.format(c.format)
						has = true
					}
				}
				row = append(row, txt)
			}
			if has {
				rows = append(rows, row)
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, t.title+":")
		printGrid(w, e.cfg.md, headers, rows)
	}
}

// ratioRow is one row of the ratios table: lanes' col over each peer's,
// and over a floor.
type ratioRow struct {
	label      string
	col        string
	floor      string // kind id, or envRow
	floorCol   string
	floorLabel string
}

var ratioRows = []ratioRow{
	{"uncontended acq+rel p50", "unc50", "floor-rtt", "unc50", "2 raw round trips"},
	{"uncontended acq+rel p99", "unc99", "floor-rtt", "unc99", "2 raw round trips"},
	{"script time per acq+rel", "script", "floor-spin", "script", "spin mutex"},
	{"time in cmds sent per acq+rel", "stime", "floor-spin", "stime", "spin mutex"},
	{"Redis CPU per acq+rel", "cpu", "floor-spin", "cpu", "spin mutex"},
	{"commands Redis runs per acq+rel", "srv", "floor-spin", "srv", "spin mutex"},
	{"handoff p50", "hand50", envRow, "rtt", "1 raw round trip"},
	{"handoff p50, paused", "hand50", envRow, "rttp", "1 raw round trip after a pause"},
	{"release with a waiter p50", "relg50", "", "", ""},
	{"release with no waiter p50", "reln50", "", "", ""},
	{"grants/s 1×1", "thr1", "floor-spin", "thr1", "spin mutex"},
	{"grants/s 8×1", "thr8", "floor-spin", "thr8", "spin mutex"},
	{"grants/s 64×1", "thr64", "floor-spin", "thr64", "spin mutex"},
	{"grants/s 64×64", "thr64k", "floor-spin", "thr64k", "spin mutex"},
	{"grants/s goroutines", "thrG", "floor-spin", "thrG", "spin mutex"},
}

var ratioPeers = []string{"redislock", "redsync", "redsync-tuned"}

// printRatios prints lanes against its peers and the floors, each ratio
// taken per repetition.
func printRatios(w io.Writer, e *env, s *summary) {
	if !slices.ContainsFunc(s.kinds, func(k *kind) bool { return k.id == "lanes" }) {
		return
	}
	headers := []string{"lanes / ..."}
	var peers []string
	for _, p := range ratioPeers {
		if slices.ContainsFunc(s.kinds, func(k *kind) bool { return k.id == p }) {
			peers = append(peers, p)
			headers = append(headers, p)
		}
	}
	headers = append(headers, "floor", "lanes / floor")
	var rows [][]string
	for _, rr := range ratioRows {
		if len(s.values("lanes", rr.col)) == 0 {
			continue
		}
		row := []string{rr.label}
		for _, p := range peers {
			txt := "–"
			if sp, ok := spreadOf(s.perRep(ratioOf("lanes", rr.col, p, rr.col))); ok {
				txt = sp.formatRatio()
			}
			row = append(row, txt)
		}
		fl, ftxt := "", "–"
		if rr.floor != "" {
			fl = rr.floorLabel
			if sp, ok := spreadOf(s.perRep(ratioOf("lanes", rr.col, rr.floor, rr.floorCol))); ok {
				ftxt = sp.formatRatio()
			}
		}
		rows = append(rows, append(row, fl, ftxt))
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Ratios (each taken within a repetition, then median [min–max]; for grants/s above 1 is better, elsewhere below 1):")
	printGrid(w, e.cfg.md, headers, rows)
}

// target is one target of issue 12.
type target struct {
	text   string
	value  func(r *results) (float64, bool)
	format func(float64) string // the measured value; nil: a ratio
	// ok says whether one value meets the target; all: the target is met
	// only when every repetition meets it (an absolute "no ..."), else when
	// the median does.
	ok  func(v float64) bool
	all bool
}

func atMost(x float64) func(float64) bool  { return func(v float64) bool { return v <= x } }
func atLeast(x float64) func(float64) bool { return func(v float64) bool { return v >= x } }

func lanesValue(col string) func(r *results) (float64, bool) {
	return func(r *results) (float64, bool) { return r.get("lanes", col) }
}

func envValue(col string) func(r *results) (float64, bool) {
	return func(r *results) (float64, bool) { return r.get(envRow, col) }
}

func targets(cfg config) []target {
	ts := []target{
		{text: "uncontended acquire+release p50 ≤ 1.1x redislock", value: ratioOf("lanes", "unc50", "redislock", "unc50"), ok: atMost(1.1)},
		{text: "script time per acquire+release ≤ 2x redislock's", value: ratioOf("lanes", "script", "redislock", "script"), ok: atMost(2)},
		{text: "commands inside the scripts of an uncontended acquire+release ≤ 8", value: lanesValue("inner"), format: perOp, ok: atMost(8)},
		{text: "Redis CPU per acquire+release ≤ 1.3x redislock's", value: ratioOf("lanes", "cpu", "redislock", "cpu"), ok: atMost(1.3)},
		{text: "one key, 8 processes: grants/s ≥ 1.0x redislock", value: ratioOf("lanes", "thr8", "redislock", "thr8"), ok: atLeast(1)},
		{text: "one key, 8 processes: grants/s ≥ 1.0x redsync (default)", value: ratioOf("lanes", "thr8", "redsync", "thr8"), ok: atLeast(1)},
		{text: "one key, 8 processes: no grant out of arrival order beyond 1 ms (every repetition)", value: lanesValue("ooo1"), format: pct, ok: atMost(0), all: true},
		{text: "64 processes on 64 random keys: grants/s ≥ 0.7x redislock", value: ratioOf("lanes", "thr64k", "redislock", "thr64k"), ok: atLeast(0.7)},
	}
	g := fmt.Sprintf("%d goroutines of one process on %s keys", cfg.gGoroutines, fmtCount(float64(cfg.gKeys)))
	if cfg.batchBaseline > 0 {
		ts = append(ts, target{
			text:  fmt.Sprintf("%s: grants/s ≥ 2x the baseline (%s/s)", g, fmtCount(cfg.batchBaseline)),
			value: func(r *results) (float64, bool) { v, ok := r.get("lanes", "thrG"); return v / cfg.batchBaseline, ok },
			ok:    atLeast(2)})
	} else {
		ts = append(ts, target{text: g + ": grants/s (no -batch-baseline: today's figure)", value: lanesValue("thrG"), format: fmtCount})
	}
	if cfg.batchRatio > 0 {
		ts = append(ts, target{
			text: fmt.Sprintf("%s: lanes / redislock ≥ 2x the baseline's (%sx), the same target against a control", g, ratioText(cfg.batchRatio)),
			value: func(r *results) (float64, bool) {
				v, ok := ratioOf("lanes", "thrG", "redislock", "thrG")(r)
				return v / cfg.batchRatio, ok
			},
			ok: atLeast(2)})
	} else {
		ts = append(ts, target{text: g + ": lanes / redislock grants/s (no -batch-baseline-ratio: today's figure)", value: ratioOf("lanes", "thrG", "redislock", "thrG")})
	}
	ts = append(ts,
		target{text: "a Release that grants a waiter ≤ 1.5x one that grants nobody after the same pause (p50)", value: ratioOf("lanes", "relg50", "lanes", "reln50"), ok: atMost(1.5)},
		target{text: "hand-off, holder's Release call to the waiter's return (p50) ≤ 5 round trips after the same pause", value: ratioOf("lanes", "hand50", envRow, "rttp"), ok: atMost(5)},
		target{text: "the same in round trips in a row (no pause: no target, for comparison)", value: ratioOf("lanes", "hand50", envRow, "rtt")},
		target{text: fmt.Sprintf("an enqueue step of %s requests holds Redis ≤ 20 ms (longest script)", fmtCount(float64(cfg.enqStep))), value: envValue("enqstep"), format: fmtUS, ok: atMost(20_000)},
		target{text: fmt.Sprintf("Session.Close with %s waiters ≤ 100 ms", fmtCount(float64(cfg.memWaiters))), value: lanesValue("close"), format: fmtUS, ok: atMost(100_000)},
	)
	return ts
}

// printTargets prints each target of issue 12: the measured median
// [min–max] and whether it is met.
func printTargets(w io.Writer, e *env, s *summary) {
	headers := []string{"target", "measured: median [min–max]", "met"}
	var rows [][]string
	for _, t := range targets(e.cfg) {
		vs := s.perRep(t.value)
		sp, ok := spreadOf(vs)
		if !ok {
			rows = append(rows, []string{t.text, "not measured", "–"})
			continue
		}
		txt := sp.formatRatio()
		if t.format != nil {
			txt = sp.format(t.format)
		}
		met := "–"
		if t.ok != nil {
			good := 0
			for _, v := range vs {
				if t.ok(v) {
					good++
				}
			}
			yes := t.ok(sp.med)
			if t.all {
				yes = good == len(vs)
			}
			met = fmt.Sprintf("%s (%d/%d reps)", map[bool]string{true: "met", false: "NOT met"}[yes], good, len(vs))
		}
		rows = append(rows, []string{t.text, txt, met})
	}
	fmt.Fprintln(w)
	how := "unpinned"
	if e.srv.pinned != "" {
		how = "PINNED: the targets are judged unpinned; this run is an aside"
	}
	fmt.Fprintf(w, "Targets of issue 12 (%s; met: by the median, or in every repetition where it says so):\n", how)
	printGridAligned(w, e.cfg.md, headers, rows, 0)
}
