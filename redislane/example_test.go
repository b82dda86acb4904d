package redislane_test

import (
	"context"
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// Processes that share a Redis server share its lanes: each one makes a
// Backend for the namespace and a Session on it. This one holds the lane of
// a file while it writes it, and passes the fencing token to the storage.
func Example() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()

	backend, err := redislane.New(client, "agents")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer backend.Close()
	s, err := lanes.NewSession(ctx, backend)
	if err != nil {
		fmt.Fprintln(os.Stderr, err) // wraps lanes.ErrUnavailable when Redis is down
		return
	}
	defer s.Close()

	lease, err := s.Acquire(ctx, lanes.Request{
		Lanes: []lanes.Lane{{Key: "file:/srv/plan.md", Limit: 1}},
		Tool:  "write_file",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer lease.Release(ctx)
	select {
	case <-lease.Lost():
		// Renewals stopped reaching Redis: stop writing.
	default:
		fmt.Println("writing with token", lease.Token("file:/srv/plan.md"))
	}
}
