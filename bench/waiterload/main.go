// Command waiterload measures what waiters behind a live holder cost
// Redis: one Session holds key k with a short TTL (-hold), -n waiters in
// -s other Sessions (TTL -wttl) queue behind it, and for -d it counts the
// waiters' Heartbeat steps and the ids they carried (a wrapping Backend),
// and Redis's commands and CPU (INFO deltas). A break-it review of the
// holder TTL (issue 12) found every waiter polling at the holder's
// deadline; only the waiter next in line should.
//
//	go run ./waiterload -redis redis://127.0.0.1:6379 -n 10000 -s 20
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
	n := flag.Int("n", 10000, "waiters")
	sessions := flag.Int("s", 20, "waiters' Sessions")
	d := flag.Duration("d", 10*time.Second, "how long to count")
	flag.Parse()
	if err := run(*url, *ns, *hold, *wttl, *n, *sessions, *d); err != nil {
		fmt.Fprintln(os.Stderr, "waiterload:", err)
		os.Exit(1)
	}
}

func run(url, ns string, hold, wttl time.Duration, n, sessions int, d time.Duration) error {
	if n < 1 || sessions < 1 {
		return errors.New("-n and -s must be at least 1")
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
	hs, err := lanes.NewSession(ctx, hb, lanes.WithTTL(hold))
	if err != nil {
		return err
	}
	defer hs.Close()
	lane := []lanes.Lane{{Key: "k", Limit: 1}}
	l, err := hs.Acquire(ctx, lanes.Request{ID: "holder", Lanes: lane})
	if err != nil {
		return err
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
	fmt.Printf("%d waiters in %d Sessions (TTL %v) behind a holder of TTL %v, over %.1fs:\n", n, sessions, wttl, hold, el)
	fmt.Printf("  waiters' Heartbeat steps %.1f/s carrying %.1f ids/s\n", float64(steps.Load()-s0)/el, float64(ids.Load()-i0)/el)
	fmt.Printf("  Redis: %.0f commands/s, CPU %.1f%%\n", (info(ctx, c, "stats", "total_commands_processed")-cmd0)/el, 100*(cpu(ctx, c)-cpu0)/el)
	if err := l.Err(); err != nil {
		fmt.Printf("  the holder lost its lease: %v\n", err)
	} else {
		fmt.Println("  the holder kept its lease")
	}
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
