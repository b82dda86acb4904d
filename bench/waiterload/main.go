// Command waiterload measures what waiters behind live holders cost
// Redis: -limit holders in -hs Sessions hold key k (of that limit) with a
// short TTL (-hold), -n waiters in -s other Sessions (TTL -wttl) queue
// behind them, and for -d it counts the waiters' Heartbeat steps and the
// ids they carried (a wrapping Backend), and Redis's commands and CPU
// (INFO deltas). Break-it reviews of the holder TTL (issue 12) found every
// waiter polling at the holder's deadline, then every one of the first
// limit waiters of a full semaphore; only the waiter next in line should.
//
//	go run ./waiterload -redis redis://127.0.0.1:6379 -n 10000 -s 20
//	go run ./waiterload -redis redis://127.0.0.1:6379 -limit 1000 -hs 10 -hold 1s -n 2000 -s 20
//
// (from bench/; use a server of its own: it counts every command.)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// counting counts the Heartbeat steps of the waiters' Sessions.
type counting struct {
	lanes.Backend
	steps, ids *atomic.Int64
}

func (c counting) Heartbeat(ctx context.Context, owner string, ttl time.Duration, ids []string) ([]lanes.Status, error) {
	c.steps.Add(1)
	c.ids.Add(int64(len(ids)))
	return c.Backend.Heartbeat(ctx, owner, ttl, ids)
}

func main() {
	url := flag.String("redis", "redis://127.0.0.1:6379", "Redis URL")
	ns := flag.String("ns", fmt.Sprintf("waiterload-%d", os.Getpid()), "namespace (its keys are deleted at the end)")
	hold := flag.Duration("hold", 100*time.Millisecond, "the holder's TTL")
	wttl := flag.Duration("wttl", time.Hour, "the waiters' TTL")
	limit := flag.Int("limit", 1, "the key's limit, and its holders")
	holderSessions := flag.Int("hs", 1, "the holders' Sessions")
	n := flag.Int("n", 10000, "waiters")
	sessions := flag.Int("s", 20, "waiters' Sessions")
	d := flag.Duration("d", 10*time.Second, "how long to count")
	flag.Parse()
	if err := run(*url, *ns, *hold, *wttl, *limit, *holderSessions, *n, *sessions, *d); err != nil {
		fmt.Fprintln(os.Stderr, "waiterload:", err)
		os.Exit(1)
	}
}

func run(url, ns string, hold, wttl time.Duration, limit, holderSessions, n, sessions int, d time.Duration) error {
	if n < 1 || sessions < 1 || limit < 1 || holderSessions < 1 {
		return errors.New("-limit, -hs, -n and -s must be at least 1")
	}
	ctx := context.Background()
	opt, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	opt.PoolSize = 50
	c := redis.NewClient(opt)
	defer c.Close()
	backend := func() (*redislane.Backend, error) { return redislane.New(c, ns) }
	hb, err := backend()
	if err != nil {
		return err
	}
	defer c.Del(context.Background(), hb.Keys()...)
	lane := []lanes.Lane{{Key: "k", Limit: limit}}
	var held []*lanes.Lease
	for si := range holderSessions {
		hs, err := lanes.NewSession(ctx, hb, lanes.WithTTL(hold))
		if err != nil {
			return err
		}
		defer hs.Close()
		for i := si; i < limit; i += holderSessions {
			l, err := hs.Acquire(ctx, lanes.Request{ID: fmt.Sprintf("h%06d", i), Lanes: lane})
			if err != nil {
				return err
			}
			held = append(held, l)
		}
	}
	var steps, ids atomic.Int64
	for si := range sessions {
		b, err := backend()
		if err != nil {
			return err
		}
		ws, err := lanes.NewSession(ctx, counting{b, &steps, &ids}, lanes.WithTTL(wttl))
		if err != nil {
			return err
		}
		defer ws.Close()
		var reqs []lanes.Request
		for i := si; i < n; i += sessions {
			reqs = append(reqs, lanes.Request{ID: fmt.Sprintf("w%06d", i), Lanes: lane})
		}
		for len(reqs) > 0 {
			m := min(len(reqs), 100)
			if _, err := ws.Enqueue(ctx, reqs[:m]...); err != nil {
				return err
			}
			reqs = reqs[m:]
		}
	}
	time.Sleep(time.Second) // the enqueues settle
	s0, i0, cmd0, cpu0 := steps.Load(), ids.Load(), info(ctx, c, "stats", "total_commands_processed"), cpu(ctx, c)
	start := time.Now()
	time.Sleep(d)
	el := time.Since(start).Seconds()
	fmt.Printf("%d waiters in %d Sessions (TTL %v) behind %d holders of TTL %v (limit %d), over %.1fs:\n", n, sessions, wttl, limit, hold, limit, el)
	fmt.Printf("  waiters' Heartbeat steps %.1f/s carrying %.1f ids/s\n", float64(steps.Load()-s0)/el, float64(ids.Load()-i0)/el)
	fmt.Printf("  Redis: %.0f commands/s, CPU %.1f%%\n", (info(ctx, c, "stats", "total_commands_processed")-cmd0)/el, 100*(cpu(ctx, c)-cpu0)/el)
	lost := 0
	for _, l := range held {
		if l.Err() != nil {
			lost++
		}
	}
	fmt.Printf("  holders that lost their lease: %d of %d\n", lost, len(held))
	return nil
}

// info returns a numeric field of INFO section (0 when missing).
func info(ctx context.Context, c *redis.Client, section, field string) float64 {
	s, _ := c.Info(ctx, section).Result()
	for line := range strings.SplitSeq(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// cpu returns the seconds of CPU Redis has used (user and system).
func cpu(ctx context.Context, c *redis.Client) float64 {
	return info(ctx, c, "cpu", "used_cpu_user") + info(ctx, c, "cpu", "used_cpu_sys")
}
