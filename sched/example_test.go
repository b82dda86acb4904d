package sched_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
)

// One model response: two renumbers that share the key "rfd" (so they run
// one at a time, in the order written) and a lookup that runs beside them.
// Outcomes come back in call order.
func Example() {
	ctx := context.Background()
	s, err := lanes.NewSession(ctx, lanes.NewMemory()) // or a redislane Backend, shared by every runner
	if err != nil {
		panic(err)
	}
	defer s.Close()

	var mu sync.Mutex
	var order []string
	renumber := func(ctx context.Context, inv sched.Invocation) (string, error) {
		var a struct{ From, To string }
		if err := json.Unmarshal(inv.Args, &a); err != nil {
			return "", err
		}
		mu.Lock()
		order = append(order, inv.CallID)
		mu.Unlock()
		return a.From + " → " + a.To, nil
	}
	lookup := func(ctx context.Context, inv sched.Invocation) (string, error) { return "3 drafts", nil }

	sc, err := sched.New(sched.Config{
		Runner: sched.DefaultRunner(), // the zero Runner too: safe calls together, 10 at once
		Tools: map[string]sched.Tool{
			"rfd_renumber": {Concurrency: sched.Concurrency{Key: "rfd"}, Safe: sched.Always(true), Run: renumber},
			"rfd_list":     {ReadOnlyHint: true, Run: lookup},
		},
	}, s)
	if err != nil {
		panic(err)
	}
	res, err := sc.Run(ctx, []sched.Call{
		{ID: "c1", Tool: "rfd_renumber", Args: json.RawMessage(`{"From":"008","To":"011"}`)},
		{ID: "c2", Tool: "rfd_list", Args: json.RawMessage(`{}`)},
		{ID: "c3", Tool: "rfd_renumber", Args: json.RawMessage(`{"From":"007","To":"010"}`)},
	}, sched.Options{})
	if err != nil {
		panic(err)
	}
	for _, o := range res.Outcomes {
		fmt.Printf("%s %s %s: %s\n", o.CallID, o.Tool, o.Status, o.Output)
	}
	fmt.Println("renumbered in order:", order)
	// Output:
	// c1 rfd_renumber ok: 008 → 011
	// c2 rfd_list ok: 3 drafts
	// c3 rfd_renumber ok: 007 → 010
	// renumbered in order: [c1 c3]
}

// The simple case in one call: tools that declare only a concurrency key
// are ordered by that key alone (DESIGN.md section 5), so the two keys run
// beside each other while each key's calls keep their written order.
func ExampleRun() {
	var mu sync.Mutex
	order := map[string][]string{}
	edit := func(ctx context.Context, inv sched.Invocation) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		order[inv.Tool] = append(order[inv.Tool], inv.CallID)
		return "edited", nil
	}
	res, err := sched.Run(context.Background(), sched.Config{Tools: map[string]sched.Tool{
		"rfd_renumber": {Concurrency: sched.Concurrency{Key: "rfd"}, Run: edit},
		"gh_comment":   {Concurrency: sched.Concurrency{Key: "github", Limit: 4}, Run: edit},
	}}, []sched.Call{
		{ID: "r1", Tool: "rfd_renumber", Args: json.RawMessage(`{}`)},
		{ID: "g1", Tool: "gh_comment", Args: json.RawMessage(`{}`)},
		{ID: "r2", Tool: "rfd_renumber", Args: json.RawMessage(`{}`)},
	}, sched.Options{})
	if err != nil {
		panic(err)
	}
	for _, o := range res.Outcomes {
		fmt.Println(o.CallID, o.Status)
	}
	fmt.Println("rfd in order:", order["rfd_renumber"])
	// Output:
	// r1 ok
	// g1 ok
	// r2 ok
	// rfd in order: [r1 r2]
}
