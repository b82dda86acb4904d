package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// enqStepTTL keeps the step's entries alive without heartbeats while they
// are measured; they are released at once.
const enqStepTTL = time.Minute

// measureEnqueueStep sends, through a redislane.Backend (a Session would
// split it in pieces), one Enqueue step of cfg.enqStep requests, and then
// one Release step of their ids, twice: once with each request on a key of
// its own (every one granted at once), once with all of them on one key of
// limit 1 (one granted, the rest queued behind it). It reports how long
// each step held Redis: the script's run time, from SLOWLOG on a private
// server (the threshold set to 0 for the measurement and put back after),
// else from the usec of the script commands in INFO commandstats (server
// wide: other clients' scripts meanwhile would add theirs, which the note
// says when it happens).
func measureEnqueueStep(ctx context.Context, e *env, ks []*kind, res *results) error {
	if !slices.ContainsFunc(ks, func(k *kind) bool { return k.id == "lanes" }) {
		return nil
	}
	name := e.clientName("lanes", "enqstep", 0)
	c := e.newClient(name, nil)
	defer c.Close()
	b, err := redislane.New(c, e.lanesNamespace("enqstep"))
	if err != nil {
		return err
	}
	defer b.Close()
	e.enqSeq++
	n := e.cfg.enqStep
	var longest float64
	for _, v := range []struct {
		name string
		key  func(int) string
	}{
		{"own keys", func(i int) string { return "k" + strconv.Itoa(i) }},
		{"one key", func(int) string { return "q" }},
	} {
		reqs := make([]lanes.Request, n)
		ids := make([]string, n)
		for i := range reqs {
			ids[i] = fmt.Sprintf("s%d-%s-%d", e.enqSeq, strings.ReplaceAll(v.name, " ", ""), i)
			reqs[i] = lanes.Request{ID: ids[i], Lanes: []lanes.Lane{{Key: v.key(i), Limit: 1}}}
		}
		var held, waiting int
		enq, err := e.scriptTime(ctx, c, name, func() error {
			sts, err := b.Enqueue(ctx, prefillOwner(), enqStepTTL, reqs)
			for _, st := range sts {
				switch st.State {
				case lanes.Held:
					held++
				case lanes.Waiting:
					waiting++
				}
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("enqueue step of %d (%s): %w", n, v.name, err)
		}
		rel, err := e.scriptTime(ctx, c, name, func() error {
			_, err := b.Release(ctx, prefillOwner().ID, ids)
			return err
		})
		if err != nil {
			return fmt.Errorf("release step of %d (%s): %w", n, v.name, err)
		}
		longest = max(longest, enq.script, rel.script)
		col := "enqown"
		if v.name == "one key" {
			col = "enqone"
		}
		res.set(envRow, col, enq.script)
		res.set(envRow, col+"rel", rel.script)
		res.note("enqueue step of %d requests, %s (%d held, %d waiting): script %s (%s), call %s; release step of their ids: script %s (%s), call %s",
			n, v.name, held, waiting, fmtUS(enq.script), enq.source, fmtUS(us(enq.wall)), fmtUS(rel.script), rel.source, fmtUS(us(rel.wall)))
	}
	res.set(envRow, "enqstep", longest)
	return nil
}

// stepTime is how long one step held Redis and where that figure comes
// from.
type stepTime struct {
	script float64 // µs
	source string
	wall   time.Duration
}

// scriptTime runs f, which sends one script through client c (named
// name), and returns the script's run time.
func (e *env) scriptTime(ctx context.Context, c *redis.Client, name string, f func() error) (stepTime, error) {
	admin := e.srv.admin
	slow := e.srv.proc != nil // a private server: its configuration is ours
	var threshold string
	if slow {
		cfg, err := admin.ConfigGet(ctx, "slowlog-log-slower-than").Result()
		if err != nil {
			return stepTime{}, err
		}
		threshold = cfg["slowlog-log-slower-than"]
		if err := admin.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
			return stepTime{}, err
		}
		defer admin.ConfigSet(context.WithoutCancel(ctx), "slowlog-log-slower-than", threshold)
		if err := admin.Do(ctx, "slowlog", "reset").Err(); err != nil {
			return stepTime{}, err
		}
	}
	before, err := readCounters(ctx, admin)
	if err != nil {
		return stepTime{}, err
	}
	t0 := time.Now()
	if err := f(); err != nil {
		return stepTime{}, err
	}
	wall := time.Since(t0)
	after, err := readCounters(ctx, admin)
	if err != nil {
		return stepTime{}, err
	}
	calls, _ := after.sub(before)
	usec := after.usecSub(before)
	var scripts, micros int64
	for _, s := range scriptCommands {
		scripts += calls[s]
		micros += usec[s]
	}
	st := stepTime{script: float64(micros), wall: wall, source: "INFO commandstats"}
	if scripts != 1 {
		st.source = fmt.Sprintf("INFO commandstats, %d script calls on the server meanwhile: an upper bound", scripts)
	}
	if slow {
		entries, err := admin.SlowLogGet(ctx, 128).Result()
		if err != nil {
			return stepTime{}, err
		}
		var longest time.Duration
		found := false
		for _, en := range entries {
			if en.ClientName == name && len(en.Args) > 0 && isScriptCommand(en.Args[0]) {
				longest = max(longest, en.Duration)
				found = true
			}
		}
		if found {
			st.script, st.source = us(longest), "SLOWLOG"
		}
	}
	return st, nil
}
