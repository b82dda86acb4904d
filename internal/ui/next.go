package ui

import (
	"cmp"
	"slices"

	"github.com/lanes-dev/lanes/lanes"
)

// NextGranted returns the waiters that removing entry should grant at once,
// as far as snap tells (it must hold every key: Inspect with no keys), in
// order of arrival: each waiter for which, on every key it asked for, the
// holders left plus the waiters queued before it are fewer than the limit
// (DESIGN.md invariant 2), and that was not grantable already. It is a
// forecast for a confirmation: the release step itself decides, and a
// namespace frozen after a reset grants nothing until it thaws.
func NextGranted(snap *lanes.Snapshot, entry string) []lanes.Entry {
	if snap.Frozen.After(snap.Time) {
		return nil
	}
	before := grantable(snap, "")
	var out []lanes.Entry
	for _, e := range grantable(snap, entry) {
		if !slices.ContainsFunc(before, func(b lanes.Entry) bool { return b.ID == e.ID }) {
			out = append(out, e)
		}
	}
	return out
}

// grantable returns the waiters of snap that could be granted if without
// (when not "") were gone, in order of arrival.
func grantable(snap *lanes.Snapshot, without string) []lanes.Entry {
	type keyInfo struct {
		limit, holders int
		ahead          map[string]int // waiter id -> waiters queued before it
	}
	keys := map[string]*keyInfo{}
	var waiters []lanes.Entry
	seen := map[string]bool{}
	for _, k := range snap.Keys {
		ki := &keyInfo{limit: k.Limit, ahead: map[string]int{}}
		for _, h := range k.Holders {
			if h.ID != without {
				ki.holders++
			}
		}
		for _, w := range k.Waiters {
			if w.ID == without {
				continue
			}
			ki.ahead[w.ID] = len(ki.ahead)
			if !seen[w.ID] {
				seen[w.ID] = true
				waiters = append(waiters, w.Entry)
			}
		}
		keys[k.Key] = ki
	}
	var out []lanes.Entry
	for _, w := range waiters {
		ok := true
		for _, l := range w.Lanes {
			ki := keys[l.Key]
			if ki == nil {
				continue // not in the snapshot, or (below) not queued there: borrowed
			}
			if ahead, queued := ki.ahead[w.ID]; queued && ki.holders+ahead >= ki.limit {
				ok = false
				break
			}
		}
		if ok && len(w.Lanes) > 0 {
			out = append(out, w)
		}
	}
	slices.SortStableFunc(out, func(a, b lanes.Entry) int { return cmp.Compare(a.Enqueued.UnixNano(), b.Enqueued.UnixNano()) })
	return out
}
