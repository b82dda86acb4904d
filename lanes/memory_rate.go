package lanes

import (
	"slices"
	"time"
)

// The rate lanes of the memory backend: one sliding log per rate key (see
// rate.go), read at the clock of the step running (m.at). m.mu is held by
// every method here.

// rateScan bounds the waiters of a rate key one scan looks at: grants on
// it go from the head in order, and a grant makes the key scanned again.
const rateScan = 200

// rateOf returns key's log pruned at the step's clock, or nil when key has
// no rate; a log left empty on a key without holders or waiters is
// forgotten.
func (m *Memory) rateOf(key string) *rateLog {
	rl := m.rates[key]
	if rl == nil {
		return nil
	}
	rl.prune(m.at)
	if _, inUse := m.limits[key]; !inUse && len(rl.uses) == 0 {
		delete(m.rates, key)
		return nil
	}
	return rl
}

// rateAgrees checks l's rate against the one key is in use with (while it
// has holders or waiters, as limits: DESIGN.md invariant 9), or that batch
// (the step's earlier requests) names, and notes it in batch.
func (m *Memory) rateAgrees(l Lane, batch map[string]Rate) error {
	rec, ok := batch[l.Key]
	if _, inUse := m.limits[l.Key]; !ok && inUse {
		ok = true
		if rl := m.rateOf(l.Key); rl != nil {
			rec = rl.rate
		}
	}
	if ok && rec != l.Rate {
		return &RateMismatchError{Key: l.Key, Recorded: rec, Requested: l.Rate}
	}
	batch[l.Key] = l.Rate
	return nil
}

// noteRate records l's rate for its key. Units an earlier rate spent that
// are still in the window count against the new one.
func (m *Memory) noteRate(l Lane) {
	switch rl := m.rates[l.Key]; {
	case l.Rate.IsZero():
	case rl == nil:
		m.rates[l.Key] = &rateLog{rate: l.Rate}
	default:
		rl.rate = l.Rate
	}
}

// rateRoom reports whether l's rate lets an entry with ahead entries queued
// before it on l's key be granted now: none ahead (strict FIFO), and its
// cost fits in the window.
func (m *Memory) rateRoom(l Lane, ahead int) bool {
	if l.Rate.IsZero() {
		return true
	}
	if ahead > 0 {
		return false
	}
	rl := m.rateOf(l.Key)
	return rl == nil || rl.fits(l.cost())
}

// rateWait is Status.RateWait for the waiting entry e.
func (m *Memory) rateWait(e *memEntry) time.Duration {
	var wait time.Duration
	for _, l := range e.Lanes {
		if l.Rate.IsZero() || e.borrowed[l.Key] != nil {
			continue
		}
		rl := m.rateOf(l.Key)
		if rl == nil || len(rl.uses) == 0 {
			continue
		}
		at := rl.uses[0].at.Add(rl.rate.Per)
		if slices.Index(m.queues[l.Key], e) == 0 {
			at = rl.freeAt(m.at, l.cost())
		}
		wait = max(wait, at.Sub(m.at))
	}
	return wait
}
