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

// rateAgrees checks l's rate against the one key is in use with (the rate
// its holders and waiters carry: DESIGN.md invariant 9, as limits), or
// that batch (the step's earlier requests) names, and notes it in batch.
// The log of spent units binds no one by itself.
func (m *Memory) rateAgrees(l Lane, batch map[string]Rate) error {
	rec, ok := batch[l.Key]
	if !ok {
		rec, ok = m.rateInUse(l.Key)
	}
	if ok && rec != l.Rate {
		return &RateMismatchError{Key: l.Key, Recorded: rec, Requested: l.Rate}
	}
	batch[l.Key] = l.Rate
	return nil
}

// rateInUse returns the rate key's holders and waiters carry (they all
// agree), and false when it has none.
func (m *Memory) rateInUse(key string) (Rate, bool) {
	for _, list := range [][]*memEntry{m.holders[key], m.queues[key]} {
		for _, e := range list {
			for _, l := range e.Lanes {
				if l.Key == key {
					return l.Rate, true
				}
			}
		}
	}
	return Rate{}, false
}

// spendRate spends l's cost on its key's log at now, under l's rate: the
// rate of a key's last grant is the one its log is kept under (a waiter
// that leaves without a grant changes nothing of it).
func (m *Memory) spendRate(l Lane, now time.Time) {
	if l.Rate.IsZero() {
		return
	}
	rl := m.rates[l.Key]
	if rl == nil {
		rl = &rateLog{rate: l.Rate}
		m.rates[l.Key] = rl
	}
	rl.rate = l.Rate
	rl.prune(now)
	rl.spend(now, l.cost())
}

// rateRoom reports whether l's rate lets an entry with ahead entries queued
// before it on l's key be granted now: none ahead (strict FIFO), and its
// cost fits in the window of l's rate (the one in force: on an idle key
// the request's own, not the one the log was last kept under). It changes
// nothing.
func (m *Memory) rateRoom(l Lane, ahead int) bool {
	if l.Rate.IsZero() {
		return true
	}
	if ahead > 0 {
		return false
	}
	rl := m.rates[l.Key]
	return rl == nil || rl.within(m.at, l.Rate.Per)+l.cost() <= l.Rate.Limit
}

// rateWait is Status.RateWait for the waiting entry e.
func (m *Memory) rateWait(e *memEntry) time.Duration {
	var wait time.Duration
	for _, l := range e.Lanes {
		if l.Rate.IsZero() || e.borrowed[l.Key] != nil {
			continue
		}
		rl := m.rates[l.Key]
		if rl == nil {
			continue
		}
		at, ok := rl.nextFree(m.at, l.Rate.Per)
		if !ok {
			continue
		}
		if slices.Index(m.queues[l.Key], e) == 0 {
			at = rl.freeAt(m.at, l.Rate, l.cost())
		}
		wait = max(wait, at.Sub(m.at))
	}
	return wait
}
