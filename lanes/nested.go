package lanes

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ancestorHolding returns the nearest ancestor of e that holds key in its
// own right (not by re-entry), or nil.
func (m *Memory) ancestorHolding(e *memEntry, key string) *memEntry {
	for _, a := range slices.Backward(e.Lineage) {
		if x := m.entries[a]; x != nil && x.held && !x.ended() && x.borrowed[key] == nil {
			if _, ok := x.tokens[key]; ok {
				return x
			}
		}
	}
	return nil
}

// edge is one wait-for relation: its source waits for to.
type edge struct {
	to   string
	kind byte   // 'h' a holder of key, 'q' the entry queued just before on key, 'n' a nested call
	key  string // "" for a nested call
}

// waitsFor lists what x waits for, exactly as waits_for in enqueue.lua: on
// each key it is queued on, in the order it names them, the holders (by
// id) and the entry queued just before it (the last one for a new request,
// which is behind them all); then, for a stored entry, the nested calls
// started under it (by id), which it cannot finish before. Waiting for the
// entry just ahead reaches every entry ahead, through theirs.
func (m *Memory) waitsFor(x *memEntry, isNew bool) []edge {
	var out []edge
	if !x.held {
		for _, l := range x.Lanes {
			if x.borrowed[l.Key] != nil {
				continue
			}
			hs := make([]string, 0, len(m.holders[l.Key]))
			for _, h := range m.holders[l.Key] {
				hs = append(hs, h.ID)
			}
			slices.Sort(hs)
			for _, h := range hs[:min(len(hs), MaxCycleVisits)] {
				out = append(out, edge{h, 'h', l.Key})
			}
			q := m.queues[l.Key]
			at := len(q)
			if !isNew {
				at = slices.Index(q, x)
			}
			if at > 0 {
				out = append(out, edge{q[at-1].ID, 'q', l.Key})
			}
		}
	}
	if !isNew {
		kids := slices.Sorted(maps.Keys(m.nested[x.ID]))
		for _, id := range kids[:min(len(kids), MaxCycleVisits)] {
			out = append(out, edge{id, 'n', ""})
		}
	}
	return out
}

// cycle returns a *LockCycleError when the waiting entry r (isNew: not yet
// stored), through what it waits for, waits for one of its own ancestors,
// which wait for r. The search is breadth first, so the shortest such cycle
// found is named, and looks into at most MaxCycleVisits entries, as in
// enqueue.lua.
func (m *Memory) cycle(r *memEntry, isNew bool) error {
	ancestor := map[string]bool{}
	for _, a := range r.Lineage {
		ancestor[a] = true
	}
	type via struct {
		from string
		edge edge
	}
	prev := map[string]via{}
	seen := map[string]bool{r.ID: true}
	visits := 0
	queue := []*memEntry{r}
	for head := 0; head < len(queue); head++ {
		x := queue[head]
		for _, ed := range m.waitsFor(x, isNew && x == r) {
			if seen[ed.to] {
				continue
			}
			seen[ed.to] = true
			prev[ed.to] = via{x.ID, ed}
			if ancestor[ed.to] {
				return cycleError(r.ID, ed.to, func(y string) (string, edge) { return prev[y].from, prev[y].edge })
			}
			if visits < MaxCycleVisits {
				visits++
				if y := m.entries[ed.to]; y != nil {
					queue = append(queue, y)
				}
			}
		}
	}
	return nil
}

// cycleError walks back from the ancestor found to r and closes the circle.
func cycleError(r, found string, prev func(string) (string, edge)) error {
	var steps []edge
	for y := found; y != r; {
		from, ed := prev(y)
		steps = append(steps, ed)
		y = from
	}
	slices.Reverse(steps)
	err := &LockCycleError{Entries: []string{r}}
	var words []string
	from := r
	for _, s := range steps {
		words = append(words, waitWords(from, s.kind, s.key, s.to))
		err.Entries = append(err.Entries, s.to)
		if s.key != "" {
			err.Keys = append(err.Keys, s.key)
		}
		from = s.to
	}
	words = append(words, waitWords(from, 'n', "", r))
	err.Path = strings.Join(words, "; ")
	return err
}

// waitWords says one edge of a cycle, in the words of enqueue.lua.
func waitWords(from string, kind byte, key, to string) string {
	switch kind {
	case 'n':
		return fmt.Sprintf("%s waits for its nested call %s", from, to)
	case 'h':
		return fmt.Sprintf(`%s waits for key "%s" held by %s`, from, key, to)
	default:
		return fmt.Sprintf(`%s waits for key "%s" behind %s`, from, key, to)
	}
}
