package main

import (
	"slices"
	"time"
)

// fairness computes, from the operations of one cell on one key, the share
// of grants made out of arrival order and the most and fewest grants a
// process got.
//
// An operation arrives when its process calls Acquire. A grant is out of
// order when an operation that surely arrived earlier was still waiting at
// that moment (granted later, or never): it was passed over.
//
// "Surely earlier": a process takes its timestamp just before it calls
// Acquire, and the scheduler can hold it between the two, so the request
// may reach Redis later than its timestamp says (on a loaded machine, by
// milliseconds). Where the contender tells when the request was surely in
// the queue (lanes: its Enqueue step returned), an earlier operation counts
// as passed over only if it was queued before the later one was even
// called; for the others (pollers have no queue) its call time stands.
//
// slack forgives passing over an operation that arrived less than slack
// earlier than that: arrivals within a round trip of each other can reach
// the server in either order, which no lock can see.
func fairness(ops []op, procs int, slack time.Duration) (outOfOrder float64, most, fewest int) {
	known := func(o op) time.Time {
		if o.queued.IsZero() {
			return o.arrive
		}
		return o.queued
	}
	byArrival := slices.Clone(ops)
	slices.SortFunc(byArrival, func(a, b op) int { return a.arrive.Compare(b.arrive) })
	byKnown := slices.Clone(ops)
	slices.SortFunc(byKnown, func(a, b op) int { return known(a).Compare(known(b)) })
	never := time.Unix(1<<40, 0)
	grantOf := func(o op) time.Time {
		if o.granted.IsZero() {
			return never
		}
		return o.granted
	}
	// latest is the latest grant among the operations surely queued (at
	// least slack) before o arrived; j walks them in that order, as o
	// walks the operations in arrival order.
	var granted, passed int
	var latest time.Time
	j := 0
	for _, o := range byArrival {
		for j < len(byKnown) && known(byKnown[j]).Add(slack).Before(o.arrive) {
			if g := grantOf(byKnown[j]); g.After(latest) {
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
	res.set(id, "ooo1", loose*100)
	res.set(id, "gmax", float64(most))
	res.set(id, "gmin", float64(fewest))
	if most > 0 {
		res.set(id, "gshare", 100*float64(fewest)/float64(most))
	}
	res.note("fairness %s: %.2f%% of grants out of arrival order (%.2f%% ignoring arrivals less than %v apart); grants per process: most %d, fewest %d",
		id, strict*100, loose*100, fairnessSlack, most, fewest)
}
