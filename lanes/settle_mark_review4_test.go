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

// B's entry passes its local deadline while B waits in awaitSettles on A's
// mark: untrack makes no mark for B (the id already has one). A's step is
// refused whole, unpend closes A's mark, and B's step is sent for an entry
// nobody keeps alive, with no mark for its id. C, enqueued while B's step
// is in flight, passes awaitSettles at once and is granted the entry that
// B's settle then removes.
func TestExpiredWhileAwaitingSettleLeavesNoMark(t *testing.T) {
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
		if err == nil && l.Err() == nil {
			t.Errorf("C was granted a lease (still held locally: Err=%v) that B's settle removed: k = %+v; want C to wait for B's step and get ErrIDRetired", l.Err(), snap.Keys)
		} else if !errors.Is(err, lanes.ErrIDRetired) {
			t.Errorf("C: Wait = %v; want ErrIDRetired", err)
		}
		_ = s.Close()
	})
}
