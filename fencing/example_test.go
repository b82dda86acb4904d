package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/lanes-dev/lanes/fencing"
)

// A store refuses the write of a holder whose lease was lost. Holder 7 was
// granted the lease, stalled (a long GC pause) and lost it; holder 8 was
// granted the lease and wrote. When holder 7 wakes up and writes, the store
// refuses it.
func ExampleMemoryGuard() {
	ctx := context.Background()
	guard := fencing.NewMemoryGuard()

	var mu sync.Mutex // serializes the store's writes: Check and write are one step
	report := ""
	write := func(t fencing.Token, text string) error {
		mu.Lock()
		defer mu.Unlock()
		if err := guard.Check(ctx, "report", t); err != nil {
			return err
		}
		report = text
		return nil
	}

	fmt.Println("holder 8:", write(8, "written by holder 8"))
	err := write(7, "written by holder 7")
	fmt.Println("holder 7:", err)
	fmt.Println("stale:", errors.Is(err, fencing.ErrStale))
	fmt.Println("report:", report)
	// Output:
	// holder 8: <nil>
	// holder 7: fencing: stale token 7 for "report": highest seen is 8 (the holder lost its lease)
	// stale: true
	// report: written by holder 8
}

// A token arrives as decimal text, e.g. from the LANES_TOKEN environment
// variable that lanectl lock sets for its command.
func ExampleParseToken() {
	t, err := fencing.ParseToken("17")
	fmt.Println(t, err)
	_, err = fencing.ParseToken("0")
	fmt.Println(errors.Is(err, fencing.ErrInvalidToken))
	// Output:
	// 17 <nil>
	// true
}
