package lanes_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// slowFirst is a Memory whose first Enqueue runs at once but answers only
// when reply is closed (a slow reply), and whose Settle steps run only after
// a second Enqueue has been answered (a settle that happens to be slower
// than the next step: its retries, or a busy backend).
type slowFirst struct {
	*lanes.Memory
	n      atomic.Int32
	reply  chan struct{}
	second chan struct{}
}

func (g *slowFirst) Enqueue(ctx context.Context, o lanes.Owner, ttl time.Duration, reqs []lanes.Request) ([]lanes.Status, error) {
	st, err := g.Memory.Enqueue(ctx, o, ttl, reqs)
	switch g.n.Add(1) {
	case 1:
		<-g.reply
	case 2:
		close(g.second)
	}
	return st, err
}

func (g *slowFirst) Settle(ctx context.Context, owner string, lifetime time.Duration, ids []string) (lanes.Released, error) {
	<-g.second
	return g.Memory.Settle(ctx, owner, lifetime, ids)
}

// Review of awaitSettles (2d04b0c): it only sees settles already
// registered. An Enqueue whose reply is late past the entry's local
// deadline has its entry untracked by the timer (so prepare lets the same
// id in again) while its settle is registered only once the reply comes
// (apply's abandoned ids). A second Enqueue of the id in that window is
// sent, renews the entry and is granted; the settle then removes the entry
// behind that lease: the lease reports held while the backend lets another
// owner take the key.
func TestReviewEnqueueBeforeLateReplySettles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := lanes.NewMemory()
		g := &slowFirst{Memory: m, reply: make(chan struct{}), second: make(chan struct{})}
		s, err := lanes.NewSession(ctx, g, lanes.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		req := lanes.Request{ID: "job-1", Lanes: []lanes.Lane{{Key: "k", Limit: 1}}}
		first := make(chan error, 1)
		go func() {
			_, err := s.Enqueue(ctx, req)
			first <- err
		}()
		time.Sleep(9500 * time.Millisecond) // past the local deadline (9s): the entry is untracked
		synctest.Wait()
		var again []*lanes.Ticket
		var againErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			again, againErr = s.Enqueue(ctx, req)
		}()
		synctest.Wait() // the second Enqueue waits behind the first step
		close(g.reply)
		<-done
		<-first
		if againErr != nil {
			t.Fatalf("second Enqueue: %v", againErr)
		}
		l, err := again[0].Wait(ctx)
		if err != nil {
			t.Logf("second Enqueue refused: %v (held)", err)
			return
		}
		synctest.Wait() // the settle ran
		other, err := lanes.NewSession(ctx, m, lanes.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		actx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if ol, err := other.Acquire(actx, lanes.Request{Lanes: []lanes.Lane{{Key: "k", Limit: 1}}}); err == nil {
			if l.Err() == nil {
				t.Errorf("another session acquired k (token %v) while the second Enqueue's lease of job-1 reports held: the background settle removed its entry", ol.Tokens())
			}
			_ = ol.Release(ctx)
		}
		_ = l.Release(ctx)
		_ = other.Close()
		_ = s.Close()
	})
}
