package lanes

import (
	"fmt"
	"slices"
	"strings"
)

// LockCycleError reports a request that would close a wait-for cycle
// through nested calls (DESIGN.md invariant 11): it was not enqueued.
// errors.Is(err, ErrLockCycle) reports true for it.
type LockCycleError struct {
	Entries []string // the entries of the cycle, from the refused request on
	Keys    []string // the keys they wait for
	Path    string   // the cycle in words: "a waits for key k held by b; ..."
}

func (e *LockCycleError) Error() string { return "lanes: lock cycle: " + e.Path }

// Is reports whether target is ErrLockCycle.
func (e *LockCycleError) Is(target error) bool { return target == ErrLockCycle }

// ancestorHolding returns the nearest ancestor of e that holds key in its
// own right (not by re-entry), or nil.
func (m *Memory) ancestorHolding(e *memEntry, key string) *memEntry {
	for _, a := range slices.Backward(e.Lineage) {
		if x := m.entries[a]; x != nil && x.held && x.borrowed[key] == nil {
			if _, ok := x.tokens[key]; ok {
				return x
			}
		}
	}
	return nil
}

// edge is one wait-for relation: its source waits for to.
type edge struct {
	to   *memEntry
	kind byte   // 'h' a holder of key, 'q' an entry queued before on key, 'n' a nested call
	key  string // "" for a nested call
}

// waitsFor lists the entries x waits for: the holders of, and the entries
// queued before it on, each key it is queued on; and, held or waiting, the
// nested calls started under it, which it cannot finish before.
func (m *Memory) waitsFor(x *memEntry) []edge {
	var out []edge
	if !x.held {
		for _, l := range x.Lanes {
			if x.borrowed[l.Key] != nil {
				continue
			}
			for _, h := range m.holders[l.Key] {
				out = append(out, edge{h, 'h', l.Key})
			}
			for _, w := range m.queues[l.Key] {
				if w == x {
					break
				}
				out = append(out, edge{w, 'q', l.Key})
			}
		}
	}
	kids := make([]string, 0, len(m.nested[x.ID]))
	for id := range m.nested[x.ID] {
		kids = append(kids, id)
	}
	slices.Sort(kids)
	for _, id := range kids {
		if c := m.entries[id]; c != nil {
			out = append(out, edge{c, 'n', ""})
		}
	}
	return out
}

// cycleMax bounds the entries one cycle search visits, as in lib.lua.
const cycleMax = 10000

// cycle returns a *LockCycleError when the waiting entry r, through what it
// waits for, waits for one of its own ancestors, which wait for r: a
// breadth-first search, so the shortest such cycle is named.
func (m *Memory) cycle(r *memEntry) error {
	ancestor := map[string]bool{}
	for _, a := range r.Lineage {
		ancestor[a] = true
	}
	type via struct {
		from *memEntry
		edge edge
	}
	prev := map[*memEntry]via{}
	seen := map[*memEntry]bool{r: true}
	for queue := []*memEntry{r}; len(queue) > 0 && len(seen) <= cycleMax; queue = queue[1:] {
		x := queue[0]
		for _, ed := range m.waitsFor(x) {
			if seen[ed.to] {
				continue
			}
			seen[ed.to] = true
			prev[ed.to] = via{x, ed}
			if !ancestor[ed.to.ID] {
				queue = append(queue, ed.to)
				continue
			}
			// Walk back from the ancestor to r, then close the circle.
			var steps []edge
			for y := ed.to; y != r; y = prev[y].from {
				steps = append(steps, prev[y].edge)
			}
			slices.Reverse(steps)
			err := &LockCycleError{Entries: []string{r.ID}}
			var words []string
			from := r
			for _, s := range steps {
				words = append(words, waitWords(from.ID, s.kind, s.key, s.to.ID))
				err.Entries = append(err.Entries, s.to.ID)
				if s.key != "" {
					err.Keys = append(err.Keys, s.key)
				}
				from = s.to
			}
			words = append(words, waitWords(from.ID, 'n', "", r.ID))
			err.Path = strings.Join(words, "; ")
			return err
		}
	}
	return nil
}

// waitWords says one edge of a cycle, in the words of lib.lua.
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
