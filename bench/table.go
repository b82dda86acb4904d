package main

import (
	"fmt"
	"io"
)

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
	fmt.Fprintln(w, "Scale (lanes, one run after the repetitions, not repeated; ratio to the first row in parentheses):")
	printGrid(w, e.cfg.md, headers, out)
	fmt.Fprintf(w, "  entries: waiters queued on one key (enqueue, poll, beat), or other keys each held by one entry (acq+rel); %d ops per cell;\n", e.cfg.scaleOps)
	fmt.Fprintln(w, "  beat of all: one heartbeat of every waiter in steps of at most lanes.MaxStepRequests ids, as a Session sends it every TTL/3;")
	fmt.Fprintf(w, "  handoff: on another key, for %v, to a Session (TTL 3s, so a beat every second) that owns N waiting entries\n", scaleHandoffTime)
}
