package redislane_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// hookedBackend runs after once an Enqueue step has answered and before
// the answer reaches the Session, and reports each hint message the
// Session is given.
type hookedBackend struct {
	*redislane.Backend
	after func()
	hints chan []lanes.Hint
}

func (b *hookedBackend) Enqueue(ctx context.Context, o lanes.Owner, ttl time.Duration, reqs []lanes.Request) ([]lanes.Status, error) {
	sts, err := b.Backend.Enqueue(ctx, o, ttl, reqs)
	if err == nil && b.after != nil {
		f := b.after
		b.after = nil
		f()
	}
	return sts, err
}

func (b *hookedBackend) Subscribe(ctx context.Context, owner string, hint func([]lanes.Hint)) (func(), error) {
	return b.Backend.Subscribe(ctx, owner, func(hs []lanes.Hint) {
		hint(hs)
		select {
		case b.hints <- hs:
		default:
		}
	})
}

// On Redis: a waiter is granted by another process's release and then
// released by force by an operator, both before its Enqueue step's answer
// reaches the Session; the grant hint (kept) is not taken, and the wait
// ends with ErrLeaseLost.
func TestEarlyGrantHintThenForcedReleaseRealRedis(t *testing.T) {
	c := realClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rb := newBackend(t, c)
	b := &hookedBackend{Backend: rb, hints: make(chan []lanes.Hint, 16)}
	holder, err := lanes.NewSession(ctx, rb)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	s, err := lanes.NewSession(ctx, b, lanes.WithTTL(time.Minute)) // no heartbeat within the test
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h, err := holder.Acquire(ctx, lanes.Request{ID: "h", Lanes: []lanes.Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	b.after = func() {
		if err := h.Release(ctx); err != nil { // grants w
			t.Error(err)
		}
		if _, err := rb.Release(ctx, "", []string{"w"}); err != nil { // by force
			t.Error(err)
		}
		granted, told := false, false
		for !granted || !told {
			select {
			case hs := <-b.hints:
				for _, h := range hs {
					granted = granted || h.ID == "w" && h.Tokens != nil
					told = told || h.ID == "w" && h.Tokens == nil
				}
			case <-ctx.Done():
				t.Error("the grant and removal hints did not come")
				return
			}
		}
	}
	tk, err := s.Enqueue(ctx, lanes.Request{ID: "w", Lanes: []lanes.Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := tk[0].Wait(ctx); !errors.Is(err, lanes.ErrLeaseLost) {
		t.Fatalf("Wait() = %v, %v; want ErrLeaseLost (released by force before the Enqueue step answered)", l, err)
	}
}
