package fencing

import (
	"context"
	"sync"
)

// MemoryGuard is a Guard kept in the memory of one process: for resources
// that only this process writes (tests, a single-replica service, an
// in-process cache). Its records are lost when the process exits.
//
// The zero value is ready to use. A MemoryGuard is safe for concurrent use
// and must not be copied after first use.
type MemoryGuard struct {
	mu      sync.Mutex
	highest map[string]Token // per resource; never deleted
}

var _ Guard = (*MemoryGuard)(nil)

// NewMemoryGuard returns an empty MemoryGuard.
func NewMemoryGuard() *MemoryGuard { return &MemoryGuard{} }

// Check implements Guard: it refuses t with a *StaleError if it is lower than
// the highest token recorded for resource, and otherwise records it. It never
// blocks beyond a short mutex hold and returns ctx.Err() only when ctx is
// already done on entry.
func (g *MemoryGuard) Check(ctx context.Context, resource string, t Token) error {
	if err := validate(resource, t); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if h := g.highest[resource]; t < h {
		return &StaleError{Resource: resource, Token: t, Highest: h}
	}
	if g.highest == nil {
		g.highest = make(map[string]Token)
	}
	g.highest[resource] = t
	return nil
}
