package lanes_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// scripted is a Memory whose first Enqueue waits for refuseA and is then
// refused whole (ErrLimitMismatch: it left nothing), whose second Enqueue
// runs at once but answers only once replyB is closed, and whose Settle
// steps wait for gate.
type scripted struct {
	*lanes.Memory
	n                     atomic.Int32
	refuseA, replyB, gate chan struct{}
}

func (g *scripted) Enqueue(ctx context.Context, o lanes.Owner, ttl time.Duration, reqs []lanes.Request) ([]lanes.Status, error) {
	switch g.n.Add(1) {
	case 1:
		<-g.refuseA
		return nil, fmt.Errorf("%w: injected, refused whole", lanes.ErrLimitMismatch)
	case 2:
		st, err := g.Memory.Enqueue(ctx, o, ttl, reqs)
		<-g.replyB
		return st, err
	}
	return g.Memory.Enqueue(ctx, o, ttl, reqs)
}

func (g *scripted) Settle(ctx context.Context, owner string, lifetime time.Duration, ids []string) (lanes.Released, error) {
	<-g.gate
	return g.Memory.Settle(ctx, owner, lifetime, ids)
}

// (Found by a review.) B's entry passes its local deadline while B waits in
// awaitSettles on A's mark, so untrack makes no mark for B (the id has
// one). A's step is refused whole and unpend closes A's mark. B's step was
// then sent for an entry nobody kept alive, with no mark for its id, and C
// was granted the entry B's settle then removed. Now B sends nothing (every
// entry of it finished while it waited), and C's lease is one the backend
// holds.
func TestEnqueueThatExpiredWhileAwaitingSettleSendsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := lanes.NewMemory()
		g := &scripted{Memory: m, refuseA: make(chan struct{}), replyB: make(chan struct{}), gate: make(chan struct{})}
		s, err := lanes.NewSession(ctx, g, lanes.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		req := lanes.Request{ID: "job-1", Lanes: []lanes.Lane{{Key: "k", Limit: 1}}}
		aDone := make(chan error, 1)
		go func() { _, err := s.Enqueue(ctx, req); aDone <- err }() // A: step in flight
		time.Sleep(9500 * time.Millisecond)                         // A's local deadline passed: A's mark
		bDone := make(chan struct{})
		go func() { // B: waits on A's mark
			defer close(bDone)
			if ts, err := s.Enqueue(ctx, req); err == nil {
				_, _ = ts[0].Wait(ctx)
			}
		}()
		time.Sleep(10 * time.Second) // B's local deadline passes while it waits
		close(g.refuseA)             // A refused whole: unpend closes A's mark; B sends
		if err := <-aDone; !errors.Is(err, lanes.ErrLimitMismatch) {
			t.Fatalf("A = %v", err)
		}
		synctest.Wait() // B's step runs and waits for its reply
		var c []*lanes.Ticket
		var cErr error
		cDone := make(chan struct{})
		go func() { defer close(cDone); c, cErr = s.Enqueue(ctx, req) }()
		synctest.Wait()
		close(g.replyB) // B's reply: its entry is abandoned and settled (at the gate)
		<-cDone
		<-bDone
		synctest.Wait()
		close(g.gate)
		synctest.Wait()
		if cErr != nil {
			t.Fatalf("C = %v", cErr)
		}
		l, err := c[0].Wait(ctx)
		snap, _ := m.Inspect(ctx, []string{"k"})
		held := len(snap.Keys) == 1 && len(snap.Keys[0].Holders) == 1
		switch {
		case err == nil && (l.Err() != nil || !held):
			t.Errorf("C was granted a lease (Err=%v) the backend does not hold: k = %+v", l.Err(), snap.Keys)
		case err != nil && !errors.Is(err, lanes.ErrIDRetired):
			t.Errorf("C: Wait = %v; want a lease the backend holds, or ErrIDRetired", err)
		}
		_ = s.Close()
	})
}
