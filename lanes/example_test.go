package lanes_test

import (
	"context"
	"fmt"

	"github.com/lanes-dev/lanes/lanes"
)

// Two calls that renumber drafts share the lane "rfd" with limit 1: the
// second waits for the first, and each gets a fencing token to show the
// directory it writes to.
func ExampleSession_Acquire() {
	ctx := context.Background()
	s, err := lanes.NewSession(ctx, lanes.NewMemory())
	if err != nil {
		panic(err)
	}
	defer s.Close()

	rfd := []lanes.Lane{{Key: "rfd", Limit: 1}}
	first, err := s.Acquire(ctx, lanes.Request{ID: "renumber-008-011", Lanes: rfd})
	if err != nil {
		panic(err)
	}
	fmt.Println(first.ID(), "holds rfd with token", first.Token("rfd"))

	second, _ := s.Enqueue(ctx, lanes.Request{ID: "renumber-007-010", Lanes: rfd})
	fmt.Println(second[0].ID(), "waits at position", second[0].Positions()["rfd"])

	_ = first.Release(ctx)
	lease, err := second[0].Wait(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(lease.ID(), "holds rfd with token", lease.Token("rfd"))
	_ = lease.Release(ctx)
	// Output:
	// renumber-008-011 holds rfd with token 1
	// renumber-007-010 waits at position 1
	// renumber-007-010 holds rfd with token 2
}

// One step enqueues a batch in written order: three calls to a partner API
// whose quota allows two at once.
func ExampleSession_Enqueue() {
	ctx := context.Background()
	s, _ := lanes.NewSession(ctx, lanes.NewMemory())
	defer s.Close()

	quota := []lanes.Lane{{Key: "partner-api", Limit: 2}}
	tickets, err := s.Enqueue(ctx,
		lanes.Request{ID: "call-1", Lanes: quota},
		lanes.Request{ID: "call-2", Lanes: quota},
		lanes.Request{ID: "call-3", Lanes: quota},
	)
	if err != nil {
		panic(err)
	}
	for _, t := range tickets {
		select {
		case <-t.Ready():
			fmt.Println(t.ID(), "granted")
		default:
			fmt.Println(t.ID(), "queued at", t.Positions()["partner-api"])
		}
	}
	for _, t := range tickets {
		l, _ := t.Wait(ctx)
		_ = l.Release(ctx)
	}
	// Output:
	// call-1 granted
	// call-2 granted
	// call-3 queued at 1
}
