package redislane_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// checkWaitAfterCloseFails: a request is granted by its Enqueue, then the
// Session closes (which ends the lease and releases its entry in the
// backend) before the caller's Wait. Wait must fail (ErrClosed, as its doc
// lists), not hand out a Lease the backend no longer holds: that Lease has
// Err() = ErrClosed and a cancelled Context, but Lost never closes, so a
// holder that watches Lost (or trusts Wait's nil error) works unprotected
// while another holder may be granted the key. The same happens to an
// Acquire whose grant races a Close (Acquire is Enqueue then Wait).
func checkWaitAfterCloseFails(t *testing.T, b lanes.Backend) {
	ctx := context.Background()
	s, err := lanes.NewSession(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := s.Enqueue(ctx, lanes.Request{ID: "a", Lanes: one("k", 1)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Another process takes k: the first lease's slot is gone.
	other, err := lanes.NewSession(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	o, err := other.Acquire(wctx, lanes.Request{ID: "b", Lanes: one("k", 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Release(ctx)

	l, err := ts[0].Wait(ctx)
	if err == nil {
		lost := false
		select {
		case <-l.Lost():
			lost = true
		default:
		}
		t.Errorf("Wait after Close = a lease, nil error (lease Err %v, Lost closed %v) while another holder has k; want ErrClosed", l.Err(), lost)
	} else if !errors.Is(err, lanes.ErrClosed) {
		t.Errorf("Wait after Close = %v; want ErrClosed", err)
	}
}

// In-memory backend.
func TestWaitAfterCloseFailsMemory(t *testing.T) {
	checkWaitAfterCloseFails(t, lanes.NewMemory())
}

// Real Redis (127.0.0.1:6379).
func TestWaitAfterCloseFailsRealRedis(t *testing.T) {
	c := c7client(t, "127.0.0.1:6379")
	ns := fmt.Sprintf("c7-closewait-%d", time.Now().UnixNano())
	c7cleanup(t, c, ns)
	b, err := redislane.New(c, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	checkWaitAfterCloseFails(t, b)
}
