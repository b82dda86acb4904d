package main

import (
	"fmt"
	"slices"
	"time"
)

// fairness computes, from the operations of one cell on one key, the share
// of grants made out of arrival order and the most and fewest grants a
// process got.
//
// An operation arrives when its process calls Acquire. A grant is out of
// order when an operation that arrived earlier was still waiting at that
// moment (granted later, or never): it was passed over. Sorting by arrival,
// a grant is out of order exactly when some earlier arrival was granted
// after it, which one pass with a running maximum finds.
//
// slack forgives passing over an operation that arrived less than slack
// earlier: arrivals within a round trip of each other can reach the server
// in either order, which no lock can see.
func fairness(ops []op, procs int, slack time.Duration) (outOfOrder float64, most, fewest int) {
	sorted := slices.Clone(ops)
	slices.SortFunc(sorted, func(a, b op) int { return a.arrive.Compare(b.arrive) })
	never := time.Unix(1<<40, 0)
	grantOf := func(o op) time.Time {
		if o.granted.IsZero() {
			return never
		}
		return o.granted
	}
	// latest is the latest grant among the operations that arrived before
	// o (at least slack before); j walks them in arrival order.
	var granted, passed int
	var latest time.Time
	j := 0
	for _, o := range sorted {
		for j < len(sorted) && !sorted[j].arrive.Add(slack).After(o.arrive) && sorted[j].arrive.Before(o.arrive) {
			if g := grantOf(sorted[j]); g.After(latest) {
				latest = g
			}
			j++
		}
		if o.granted.IsZero() {
			continue
		}
		granted++
		if latest.After(o.granted) {
			passed++
		}
	}
	per := make([]int, procs)
	for _, o := range ops {
		if !o.granted.IsZero() {
			per[o.proc]++
		}
	}
	if granted == 0 {
		return 0, 0, 0
	}
	return float64(passed) / float64(granted), slices.Max(per), slices.Min(per)
}

// fairnessSlack is the forgiving variant's window (see fairness).
const fairnessSlack = time.Millisecond

func setFairness(res *results, id string, ops []op, procs int) {
	strict, most, fewest := fairness(ops, procs, 0)
	loose, _, _ := fairness(ops, procs, fairnessSlack)
	res.set(id, "ooo", strict*100)
	res.set(id, "gmax", float64(most))
	res.set(id, "gmin", float64(fewest))
	res.setText(id, "grants", fmt.Sprintf("%d/%d", most, fewest))
	res.note("fairness %s: %.1f%% of grants out of arrival order (%.1f%% ignoring arrivals less than %v apart); grants per process: most %d, fewest %d",
		id, strict*100, loose*100, fairnessSlack, most, fewest)
}
