package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// column is one column of the table.
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

func pct(v float64) string   { return fmt.Sprintf("%.1f%%", v) }
func perOp(v float64) string { return fmt.Sprintf("%.1f", v) }

var columns = []column{
	{"unc50", "uncontended", "acq+rel p50", fmtUS, always},
	{"unc99", "uncontended", "acq+rel p99", fmtUS, always},
	{"hand50", "handoff", "handoff p50", fmtUS, isLock},
	{"hand99", "handoff", "handoff p99", fmtUS, isLock},
	{"thr1", "throughput", "1 key ×1 /s", fmtCount, isLock},
	{"thr8", "throughput", "1 key ×8 /s", fmtCount, isLock},
	{"thr64", "throughput", "1 key ×64 /s", fmtCount, isLock},
	{"thr64k", "throughput", "64 keys ×64 /s", fmtCount, isLock},
	{"ooo", "fairness", "out of order ×8", pct, isLock},
	{"grants", "fairness", "grants max/min", nil, isLock},
	{"rt", "commands", "RT/op", perOp, isRedis},
	{"srv", "commands", "srv cmds/op", perOp, isRedis},
	{"cpu", "commands", "Redis CPU/op", fmtUS, isRedis},
	{"conns", "waiters", "conns @1k wait", fmtCount, redisLock},
	{"load", "waiters", "cmds/s @1k wait", fmtCount, redisLock},
	{"mem", "memory", "B/waiter", fmtCount, queues},
}

// printTable prints the one table: a row per contender, a column per
// measurement; "n/a" where a column does not apply, "–" where it was not
// run. The details follow.
func printTable(w io.Writer, e *env, ks []*kind, res *results) {
	headers := []string{"contender"}
	var cols []column
	for _, c := range columns {
		if e.wants(c.group) || (c.group == "fairness" && e.wants("throughput")) {
			cols = append(cols, c)
			headers = append(headers, c.header)
		}
	}
	var rows [][]string
	for _, k := range ks {
		row := []string{k.name}
		for _, c := range cols {
			row = append(row, cellText(res, k, c))
		}
		rows = append(rows, row)
	}
	fmt.Fprintln(w)
	if e.cfg.md {
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
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, strings.Join(headers, "\t")+"\t")
		for _, r := range rows {
			fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
		}
		tw.Flush()
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Details:")
	for _, n := range res.notes {
		fmt.Fprintln(w, "  "+n)
	}
}

func cellText(res *results, k *kind, c column) string {
	if !c.applies(k) {
		return "n/a"
	}
	if t, ok := res.text[k.id][c.id]; ok {
		return t
	}
	v, ok := res.get(k.id, c.id)
	if !ok {
		return "–"
	}
	return c.format(v)
}

// printHeadline compares lanes with the floors and its peers, column by
// column, in words.
func printHeadline(w io.Writer, res *results) {
	if _, ok := res.vals["lanes"]; !ok {
		return
	}
	var lines []string
	get := func(kind, col string) (float64, bool) { return res.get(kind, col) }
	peers := []string{"redislock", "redsync-tuned", "redsync"}

	if l, ok := get("lanes", "unc50"); ok {
		s := fmt.Sprintf("uncontended acquire+release p50 %s", fmtUS(l))
		if f, ok := get("floor-rtt", "unc50"); ok {
			s += fmt.Sprintf(" = %s the floor of two EVALSHA round trips (%s)", ratio(l, f), fmtUS(f))
		}
		for _, p := range peers {
			if v, ok := get(p, "unc50"); ok {
				s += fmt.Sprintf(", %s %s", ratio(l, v), p)
			}
		}
		lines = append(lines, s)
	}
	if l, ok := get("lanes", "hand50"); ok {
		s := fmt.Sprintf("handoff p50 %s", fmtUS(l))
		if f, ok := get("floor-rtt", "acq50"); ok {
			s += fmt.Sprintf(" = %s one raw round trip (%s)", ratio(l, f), fmtUS(f))
		}
		if f, ok := get("floor-spin", "hand50"); ok {
			s += fmt.Sprintf(", %s the spin-mutex floor (%s)", ratio(l, f), fmtUS(f))
		}
		for _, p := range peers {
			if v, ok := get(p, "hand50"); ok {
				s += fmt.Sprintf("; %s: %s (%s)", p, fmtUS(v), speed(l, v))
			}
		}
		if l99, ok := get("lanes", "hand99"); ok {
			s += fmt.Sprintf("; lanes p99 %s", fmtUS(l99))
		}
		lines = append(lines, s)
	}
	for _, c := range cells {
		l, ok := get("lanes", c.col)
		if !ok {
			continue
		}
		s := fmt.Sprintf("throughput %d key(s) × %d: lanes %s/s", c.keys, c.procs, fmtCount(l))
		if f, ok := get("floor-spin", c.col); ok {
			s += fmt.Sprintf(" = %s of the spin-mutex floor", pct(100*l/f))
		}
		for _, p := range peers {
			if v, ok := get(p, c.col); ok {
				s += fmt.Sprintf("; %s %s of %s", ratio(l, v), p, fmtCount(v))
			}
		}
		lines = append(lines, s)
	}
	if l, ok := get("lanes", "ooo"); ok {
		s := fmt.Sprintf("fairness: lanes passes over an earlier arrival in %s of grants", pct(l))
		for _, p := range append([]string{"floor-spin"}, peers...) {
			if v, ok := get(p, "ooo"); ok {
				s += fmt.Sprintf(", %s in %s", p, pct(v))
			}
		}
		lines = append(lines, s)
	}
	if l, ok := get("lanes", "cpu"); ok {
		s := fmt.Sprintf("Redis CPU per acquire+release: lanes %s", fmtUS(l))
		for _, p := range append([]string{"floor-spin"}, peers...) {
			if v, ok := get(p, "cpu"); ok {
				s += fmt.Sprintf(", %s %s", ratio(l, v), p)
			}
		}
		lines = append(lines, s)
	}
	if l, ok := get("lanes", "load"); ok {
		s := fmt.Sprintf("1,000 waiters load Redis with %s cmds/s under lanes", fmtCount(l))
		for _, p := range peers {
			if v, ok := get(p, "load"); ok {
				s += fmt.Sprintf(", %s under %s", fmtCount(v), p)
			}
		}
		lines = append(lines, s)
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Headline (lanes against the floor and its peers):")
	for _, l := range lines {
		fmt.Fprintln(w, "  - "+l)
	}
}

// speed says how a lanes time compares with a peer's.
func speed(lanes, peer float64) string {
	if lanes <= peer {
		return "lanes " + ratio(peer, lanes) + " faster"
	}
	return "lanes " + ratio(lanes, peer) + " slower"
}

// printScale prints the scale table: each cost and its ratio to the
// smallest size.
func printScale(w io.Writer, e *env, rows []*scaleRow) {
	if len(rows) == 0 {
		return
	}
	base := rows[0]
	rel := func(v, b float64) string { return fmt.Sprintf("%s (%s)", fmtUS(v), ratio(v, b)) }
	headers := []string{"entries", "enqueue p50", "poll p50", "Redis CPU enq+poll+rel", "beat of all", "per entry", "longest step",
		"acq+rel p50, N keys held", "Redis CPU acq+rel", "handoff p50/p99/max, waiter's Session owns N"}
	var out [][]string
	for _, r := range rows {
		out = append(out, []string{
			fmtCount(float64(r.n)),
			rel(us(r.enq.pct(50)), us(base.enq.pct(50))),
			rel(us(r.beat.pct(50)), us(base.beat.pct(50))),
			rel(r.qCPU, base.qCPU),
			fmtUS(us(r.fullBeat)),
			fmtUS(us(r.fullBeat) / float64(r.n)),
			fmtUS(us(r.beatStep)),
			rel(us(r.pair.pct(50)), us(base.pair.pct(50))),
			rel(r.kCPU, base.kCPU),
			fmt.Sprintf("%s / %s / %s", fmtUS(us(r.hand.pct(50))), fmtUS(us(r.hand.pct(99))), fmtUS(us(r.hand.pct(100)))),
		})
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Scale (lanes; ratio to the first row in parentheses):")
	if e.cfg.md {
		fmt.Fprintln(w, "| "+strings.Join(headers, " | ")+" |")
		fmt.Fprintln(w, "|"+strings.Repeat("---:|", len(headers)))
		for _, r := range out {
			fmt.Fprintln(w, "| "+strings.Join(r, " | ")+" |")
		}
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, strings.Join(headers, "\t")+"\t")
		for _, r := range out {
			fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "  entries: waiters queued on one key (enqueue, poll, beat), or other keys each held by one entry (acq+rel); %d ops per cell;\n", e.cfg.scaleOps)
	fmt.Fprintln(w, "  beat of all: one heartbeat of every waiter in steps of at most lanes.MaxStepRequests ids, as a Session sends it every TTL/3;")
	fmt.Fprintf(w, "  handoff: on another key, for %v, to a Session (TTL 3s, so a beat every second) that owns N waiting entries\n", scaleHandoffTime)
}
