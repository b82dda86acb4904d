package lanestest

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// Faulty wraps a Backend and fails steps with an error wrapping
// lanes.ErrUnavailable, as a backend behind a bad network would: while it
// is down, every step fails without reaching the backend (a cut network);
// LoseReplies makes the next steps reach the backend and run, and then
// fail as if their reply was lost. Steps already in flight when it goes
// down complete.
type Faulty struct {
	lanes.Backend
	down atomic.Bool
	lose atomic.Int64
}

// SetDown cuts (true) or restores (false) the backend.
func (f *Faulty) SetDown(down bool) { f.down.Store(down) }

// LoseReplies makes the next n steps run in the backend and then fail as
// if their reply was lost.
func (f *Faulty) LoseReplies(n int) { f.lose.Store(int64(n)) }

func (f *Faulty) before() error {
	if f.down.Load() {
		return fmt.Errorf("%w: injected fault", lanes.ErrUnavailable)
	}
	return nil
}

// after turns a step's outcome into a lost reply while LoseReplies asks.
func (f *Faulty) after(err error) error {
	if err == nil && f.lose.Add(-1) >= 0 {
		return fmt.Errorf("%w: injected fault: the reply was lost", lanes.ErrUnavailable)
	}
	return err
}

// Enqueue implements lanes.Backend.
func (f *Faulty) Enqueue(ctx context.Context, o lanes.Owner, ttl time.Duration, reqs []lanes.Request) ([]lanes.Status, error) {
	if err := f.before(); err != nil {
		return nil, err
	}
	st, err := f.Backend.Enqueue(ctx, o, ttl, reqs)
	if err = f.after(err); err != nil {
		return nil, err
	}
	return st, nil
}

// Heartbeat implements lanes.Backend.
func (f *Faulty) Heartbeat(ctx context.Context, owner string, ttl time.Duration, ids []string) ([]lanes.Status, error) {
	if err := f.before(); err != nil {
		return nil, err
	}
	st, err := f.Backend.Heartbeat(ctx, owner, ttl, ids)
	if err = f.after(err); err != nil {
		return nil, err
	}
	return st, nil
}

// Release implements lanes.Backend.
func (f *Faulty) Release(ctx context.Context, by string, ids []string) (lanes.Released, error) {
	if err := f.before(); err != nil {
		return lanes.Released{}, err
	}
	r, err := f.Backend.Release(ctx, by, ids)
	if err = f.after(err); err != nil {
		return lanes.Released{}, err
	}
	return r, nil
}

// Settle implements lanes.Backend.
func (f *Faulty) Settle(ctx context.Context, owner string, lifetime time.Duration, ids []string) (lanes.Released, error) {
	if err := f.before(); err != nil {
		return lanes.Released{}, err
	}
	r, err := f.Backend.Settle(ctx, owner, lifetime, ids)
	if err = f.after(err); err != nil {
		return lanes.Released{}, err
	}
	return r, nil
}

// Inspect implements lanes.Backend.
func (f *Faulty) Inspect(ctx context.Context, keys []string) (*lanes.Snapshot, error) {
	if err := f.before(); err != nil {
		return nil, err
	}
	return f.Backend.Inspect(ctx, keys)
}
