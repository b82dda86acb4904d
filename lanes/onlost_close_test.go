package lanes_test

import (
	"context"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// Session.Close called from an OnLost callback returns: OnLost is
// documented as the place to stop, for good, what runs under the lease,
// and shutting the Session down there is a natural thing to do. Before,
// the callbacks ran on a goroutine of the Session's background group and
// Close, which waits for that group, waited for itself. Found by a review.
// Memory backend.
func TestCloseFromOnLostCallbackReturns(t *testing.T) {
	m := lanes.NewMemory()
	ctx := context.Background()
	s, err := lanes.NewSession(ctx, m, lanes.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Acquire(ctx, lanes.Request{ID: "a", Lanes: []lanes.Lane{{Key: "k", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	a.OnLost(func() { closed <- s.Close() })
	if _, err := m.Release(ctx, "", []string{"a"}); err != nil { // an operator takes a away: a is lost
		t.Fatal(err)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close from OnLost = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Session.Close called from an OnLost callback has not returned after 5s (it waits for its own goroutine: s.bg.Wait)")
	}
}
