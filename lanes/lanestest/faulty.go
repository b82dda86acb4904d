package lanestest

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// Faulty wraps a Backend and fails every step with an error wrapping
// lanes.ErrUnavailable while it is down, as a backend behind a cut network
// would. Steps already in flight when it goes down complete.
type Faulty struct {
	lanes.Backend
	down atomic.Bool
}

// SetDown cuts (true) or restores (false) the backend.
func (f *Faulty) SetDown(down bool) { f.down.Store(down) }

func (f *Faulty) check() error {
	if f.down.Load() {
		return fmt.Errorf("%w: injected fault", lanes.ErrUnavailable)
	}
	return nil
}

// Enqueue implements lanes.Backend.
func (f *Faulty) Enqueue(ctx context.Context, o lanes.Owner, ttl time.Duration, reqs []lanes.Request) ([]lanes.Status, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Backend.Enqueue(ctx, o, ttl, reqs)
}

// Heartbeat implements lanes.Backend.
func (f *Faulty) Heartbeat(ctx context.Context, owner string, ttl time.Duration, ids []string) ([]lanes.Status, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Backend.Heartbeat(ctx, owner, ttl, ids)
}

// Release implements lanes.Backend.
func (f *Faulty) Release(ctx context.Context, by string, ids []string) (lanes.Released, error) {
	if err := f.check(); err != nil {
		return lanes.Released{}, err
	}
	return f.Backend.Release(ctx, by, ids)
}

// Inspect implements lanes.Backend.
func (f *Faulty) Inspect(ctx context.Context, keys []string) (*lanes.Snapshot, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Backend.Inspect(ctx, keys)
}
