package main

import (
	"context"
	"fmt"
	"regexp"

	"github.com/redis/go-redis/v9"
	"strings"

	"github.com/lanes-dev/lanes/scripts/lua"
)

// The -fcall mode counts what the server spends on real FCALLs of the
// library, loaded once with FUNCTION LOAD as redislane loads it: parsing
// each command, the call, the commands inside and the reply, everything but
// the client's side. Unlike the EVAL scenarios, the library's Lua state
// lives from one call to the next, as in production (its caches of what
// lean steps wrote among it); and the FCALL's own cost (its KEYS and ARGV
// made Lua tables, the Lua GC step Redis runs every 50 calls) is in.

// caller sends one FCALL of the library's function fn (enqueue, release,
// …) with ARGV after the protocol and prefix, and returns its reply.
type caller func(fn string, args ...any) ([]any, error)

// fcallScenario is one kind of step sent as FCALLs: setup (not counted)
// and run (counted) send them through call; ops is the divisor.
type fcallScenario struct {
	name, what string
	setup, run func(call caller, r string) error
	ops        int
}

var fcallScenarios = []fcallScenario{
	{
		name: "acquire+release, one key", what: "one uncontended acquire and release of key k, 500 times", ops: 500,
		run: func(call caller, r string) error {
			return acqRelLoop(call, r, func(int) string { return "k" })
		},
	},
	{
		name: "acquire+release, new keys", what: "the same, each on a key never used before", ops: 500,
		run: func(call caller, r string) error {
			return acqRelLoop(call, r, func(i int) string { return fmt.Sprintf("k%s-%d", r, i) })
		},
	},
	{
		name: "release with a waiter", what: "a holder's release that grants the one waiter behind it (both enqueued just before, not counted), 200 times", ops: 200,
		setup: holdersAndWaiters,
		run:   func(call caller, r string) error { return releases200(call, r) },
	},
	{
		name: "enqueue behind a holder", what: "a request queued behind the holder of its key (the holder enqueued just before, not counted), 200 times", ops: 200,
		setup: func(call caller, r string) error { return holders(call, r) },
		run:   func(call caller, r string) error { return waiters(call, r) },
	},
	{
		name: "one key, two owners in turn", what: "per grant: the holder's release grants the waiter, then the holder queues again behind it (the one-key throughput cell's steps), 400 grants; the first holder's enqueue takes the general path (its TTL is longer than any before), as any general step on a key that stays busy", ops: 400,
		setup: func(call caller, r string) error {
			if _, err := call("enqueue", "600000", "o0", "host", "1", `[{"id":"t`+r+`-0","k":[["k",1]]}]`); err != nil {
				return err
			}
			_, err := call("enqueue", "600000", "o1", "host", "1", `[{"id":"t`+r+`-1","k":[["k",1]]}]`)
			return err
		},
		run: func(call caller, r string) error {
			for i := range 400 {
				rep, err := call("release", fmt.Sprintf("o%d", i%2), "0", fmt.Sprintf("t%s-%d", r, i))
				if err != nil {
					return err
				}
				if _, g := released(rep, 1); len(g) != 1 || g[0] != fmt.Sprintf("t%s-%d", r, i+1) {
					return fmt.Errorf("release %d answered %v, want t%s-%d granted", i, rep, r, i+1)
				}
				if _, err := call("enqueue", "600000", fmt.Sprintf("o%d", i%2), "host", "1", fmt.Sprintf(`[{"id":"t%s-%d","k":[["k",1]]}]`, r, i+2)); err != nil {
					return err
				}
			}
			return nil
		},
	},
	{
		name: "acquire+release, a tombstone alive", what: "the same on one key, after an operator's release by force of another entry (its tombstone lives an hour)", ops: 500,
		setup: func(call caller, r string) error {
			if _, err := call("enqueue", "30000", "o1", "host", "1", `[{"id":"forced`+r+`","k":[["f",1]]}]`); err != nil {
				return err
			}
			_, err := call("release", "", "3600000", "forced"+r)
			return err
		},
		run: func(call caller, r string) error {
			return acqRelLoop(call, r, func(int) string { return "k" })
		},
	},
	{
		name: "release with no waiter", what: "a holder's release with nobody behind it (enqueued just before, not counted), 200 times: what \"release with a waiter\" is compared with (issue 12: at most 1.5x)", ops: 200,
		setup: func(call caller, r string) error { return holders(call, r) },
		run:   func(call caller, r string) error { return releases200(call, r) },
	},
	{
		name: "release of waiters", what: "per id: 1,000 waiters behind a holder, enqueued in steps of 500 (the general path's: Backend.Enqueue splits them in 200s), released in steps of 250 (Session.Close)", ops: 1000,
		setup: func(call caller, r string) error { return enqueueWaiters1000(call, r, 500) },
		run:   releaseWaiters1000,
	},
	{
		name: "release of waiters enqueued by a Session", what: "the same, enqueued in steps of 100, as a Session sends them (lean steps: the release finds the last 1,000 records written in the lean steps' cache)", ops: 1000,
		setup: func(call caller, r string) error { return enqueueWaiters1000(call, r, 100) },
		run:   releaseWaiters1000,
	},
	{
		name: "a cancelled wait", what: "a waiter's own release while the holder of its key holds (Ticket.Wait given up: each of 200 keys with a holder and the waiter behind it, enqueued just before, not counted)", ops: 200,
		setup: holdersAndWaiters,
		run: func(call caller, r string) error {
			for i := range 200 {
				rep, err := call("release", "waiter", "0", fmt.Sprintf("w%s-%d", r, i))
				if err != nil {
					return err
				}
				if was, _ := released(rep, 1); len(was) != 1 || was[0] != "w" {
					return fmt.Errorf("release of a waiter answered %v", rep)
				}
			}
			return nil
		},
	},
}

// holders enqueues 200 holders, each of a key of its own (q<r>-<i>), and
// waiters one waiter behind each.
func holders(call caller, r string) error { return each200(call, r, "holder", "h") }

// holdersAndWaiters is holders, then waiters.
func holdersAndWaiters(call caller, r string) error {
	if err := holders(call, r); err != nil {
		return err
	}
	return waiters(call, r)
}
func waiters(call caller, r string) error { return each200(call, r, "waiter", "w") }

func each200(call caller, r, owner, prefix string) error {
	for i := range 200 {
		if _, err := call("enqueue", "600000", owner, "host", "1", fmt.Sprintf(`[{"id":"%s%s-%d","k":[["q%s-%d",1]]}]`, prefix, r, i, r, i)); err != nil {
			return err
		}
	}
	return nil
}

// enqueueWaiters1000 enqueues a holder of key c<r> and 1,000 waiters behind it
// (w<r>-0 …), owner o1, in steps of step requests.
func enqueueWaiters1000(call caller, r string, step int) error {
	if _, err := call("enqueue", "600000", "holder", "host", "1", `[{"id":"h`+r+`","k":[["c`+r+`",1]]}]`); err != nil {
		return err
	}
	for b := range 1000 / step {
		reqs := make([]string, step)
		for i := range reqs {
			reqs[i] = fmt.Sprintf(`{"id":"w%s-%d","k":[["c%s",1]]}`, r, b*step+i, r)
		}
		if _, err := call("enqueue", "600000", "o1", "host", "1", "["+strings.Join(reqs, ",")+"]"); err != nil {
			return err
		}
	}
	return nil
}

// releaseWaiters1000 releases the waiters of enqueueWaiters1000 in steps of 250,
// newest first (as Session.Close does).
func releaseWaiters1000(call caller, r string) error {
	for b := 3; b >= 0; b-- {
		args := []any{"o1", "0"}
		for i := 249; i >= 0; i-- {
			args = append(args, fmt.Sprintf("w%s-%d", r, b*250+i))
		}
		rep, err := call("release", args...)
		if err != nil {
			return err
		}
		if was, _ := released(rep, 250); len(was) != 250 || was[0] != "w" || was[249] != "w" {
			return fmt.Errorf("release of waiters answered %v", rep)
		}
	}
	return nil
}

// releases200 releases the 200 holders of holders.
func releases200(call caller, r string) error {
	for i := range 200 {
		if _, err := call("release", "holder", "0", fmt.Sprintf("h%s-%d", r, i)); err != nil {
			return err
		}
	}
	return nil
}

func acqRelLoop(call caller, r string, key func(int) string) error {
	for i := range 500 {
		id := fmt.Sprintf("e%s-%d", r, i)
		if _, err := call("enqueue", "30000", "o1", "host", "1", `[{"id":"`+id+`","k":[["`+key(i)+`",1]]}]`); err != nil {
			return err
		}
		if _, err := call("release", "o1", "0", id); err != nil {
			return err
		}
	}
	return nil
}

// protocolOf is the protocol a library's scripts speak (lib.lua's
// PROTOCOL), "2" when it names none.
func protocolOf(code string) string {
	if m := regexp.MustCompile(`(?m)^local PROTOCOL = '(\d+)'`).FindStringSubmatch(code); m != nil {
		return m[1]
	}
	return "2"
}

// released is what a release reply says of its n ids, in either form:
// protocol 2's {epoch, {states}, {granted}} and protocol 3's flat {epoch,
// states..., granted...}.
func released(rep []any, n int) (was, granted []any) {
	if w, ok := rep[1].([]any); ok && len(rep) == 3 {
		g, _ := rep[2].([]any)
		return w, g
	}
	if len(rep) < 1+n {
		return nil, nil
	}
	return rep[1 : 1+n], rep[1+n:]
}

// library is the Functions library of a version of the scripts, named
// name, as package lua's Library builds it.
func library(v version, name string) (string, error) {
	var code strings.Builder
	code.WriteString("#!lua name=" + name + "\n")
	lib, err := v.read("lib.lua")
	if err != nil {
		return "", err
	}
	code.WriteString(lib)
	for _, s := range lua.Scripts {
		body, err := v.read(s)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&code, "\nredis.register_function('%s', function(KEYS, ARGV)\n%s\nend)\n", name+"_"+strings.TrimSuffix(s, ".lua"), body)
	}
	return code.String(), nil
}

// runFcall counts the fcall scenarios for each version, each with its
// library loaded once on a server of its own.
func runFcall(versions []version, server string) error {
	counts := make([][]float64, len(fcallScenarios))
	var ver string
	for j, v := range versions {
		srv, err := startServer(server)
		if err != nil {
			return err
		}
		ver = srv.version
		name := fmt.Sprintf("luacost%d", j)
		code, err := library(v, name)
		proto := protocolOf(code)
		if err == nil {
			err = srv.c.FunctionLoad(context.Background(), code).Err()
		}
		if err != nil {
			srv.stop()
			return fmt.Errorf("%s: %w", v.name, err)
		}
		for i, sc := range fcallScenarios {
			n, err := srv.countFcall(name, proto, sc, fmt.Sprintf("c%d%d", i, j))
			if err != nil {
				srv.stop()
				return fmt.Errorf("%s (%s): %w", sc.name, v.name, err)
			}
			counts[i] = append(counts[i], n)
		}
		srv.stop()
	}
	fmt.Printf("machine instructions per op in the server, FCALLs of the library (callgrind, %s)\n\n", ver)
	printCounts(versions, func(i int) string { return fcallScenarios[i].name }, counts)
	for _, sc := range fcallScenarios {
		fmt.Printf("- %s: %s\n", sc.name, sc.what)
	}
	return nil
}

// countFcall runs sc's setup, then its run under a zeroed callgrind
// counter, on a namespace of its own (tag), and returns the instructions
// of the whole server for the run divided by sc.ops.
func (s *server) countFcall(lib, proto string, sc fcallScenario, tag string) (float64, error) {
	ctx := context.Background()
	keys := stateKeys(tag)
	defer s.c.Del(ctx, keys...)
	call := func(fn string, args ...any) ([]any, error) {
		a := append([]any{proto, "h:"}, args...)
		v, err := s.c.FCall(ctx, lib+"_"+fn, keys, a...).Result()
		if err != nil {
			return nil, err
		}
		r, ok := v.([]any)
		if !ok || len(r) < 2 {
			return nil, fmt.Errorf("%s answered %v", fn, v)
		}
		return r, nil
	}
	r := "r" + tag
	// a first step of the namespace makes its state (not counted)
	if _, err := call("enqueue", "30000", "o0", "host", "1", `[{"id":"warm","k":[["warm",1]]}]`); err != nil {
		return 0, err
	}
	if sc.setup != nil {
		if err := sc.setup(call, r); err != nil {
			return 0, fmt.Errorf("setup: %w", err)
		}
	}
	if err := s.control("-z"); err != nil {
		return 0, err
	}
	if err := sc.run(call, r); err != nil {
		return 0, err
	}
	total, err := s.dump(tag, sc.name)
	if err != nil {
		return 0, err
	}
	return float64(total) / float64(sc.ops), nil
}

// runCallFloors counts, as -fcall counts its scenarios (the whole server's
// work per op, the command's parsing and reply included), an acquire and
// release sent as two calls that do next to nothing, beside redislock's
// two scripts: what a step costs before any work, and how much of the
// issue 12 target (script time at most 2x redislock's) it leaves.
func runCallFloors(s *server) error {
	ctx := context.Background()
	const lib = "#!lua name=luacostfloor\n" +
		"redis.register_function('noop', function(KEYS, ARGV) return {ARGV[1]} end)\n"
	if err := s.c.FunctionLoad(ctx, lib).Err(); err != nil {
		return err
	}
	keys := stateKeys("floor")
	obtain := redis.NewScript(`if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return 0`)
	release := redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	for _, sc := range []*redis.Script{obtain, release} {
		if err := sc.Load(ctx, s.c).Err(); err != nil {
			return err
		}
	}
	floors := []struct {
		name, what string
		op         func(i int) error
	}{
		{"a lock of SET NX PX, then GET and DEL", "two EVALSHAs of one key each: a script that runs SET NX PX, then one that runs GET and DEL (what redislock sends)",
			func(i int) error {
				v := fmt.Sprintf("token-%022d", i)
				if err := obtain.EvalSha(ctx, s.c, []string{"floor:lock"}, v, 10000).Err(); err != nil {
					return err
				}
				return release.EvalSha(ctx, s.c, []string{"floor:lock"}, v).Err()
			}},
		{"two FCALLs that run nothing, with lanes' KEYS and ARGV", "the seven KEYS and the ARGV of an acquire (seven) and of a release (five), to a function that returns its first argument",
			func(i int) error {
				id := fmt.Sprintf("e-%018d", i)
				if err := s.c.FCall(ctx, "noop", keys, "3", "h:", "30000", "ff6cnq5przhafyxoxoba", "vm", "8141", `[{"id":"`+id+`","k":[["k",1]]}]`).Err(); err != nil {
					return err
				}
				return s.c.FCall(ctx, "noop", keys, "3", "h:", "ff6cnq5przhafyxoxoba", "0", id).Err()
			}},
	}
	fmt.Printf("\nmachine instructions per acquire+release, the whole server's (as -fcall counts)\n\n")
	fmt.Println("| floor | instructions |")
	fmt.Println("|---|---:|")
	for _, f := range floors {
		if err := s.control("-z"); err != nil {
			return err
		}
		const n = 500
		for i := range n {
			if err := f.op(i); err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
		}
		total, err := s.dump("floor", f.name)
		if err != nil {
			return err
		}
		fmt.Printf("| %s | %d |\n", f.name, total/n)
	}
	fmt.Println()
	for _, f := range floors {
		fmt.Printf("- %s: %s\n", f.name, f.what)
	}
	s.c.Del(ctx, "floor:lock")
	return nil
}
