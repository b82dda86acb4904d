package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/redislane"
)

// connect returns a client of what t names, checked with one round trip
// bounded by connectTimeout, so that an unreachable server is reported at
// once (an unreachableError). A one-server URL whose server says it is a
// Redis Cluster node (INFO: cluster_enabled:1) gets a cluster client with
// that server as its seed; a server that refuses INFO (an ACL, miniredis)
// is taken as one server, and PINGed instead. ns is the namespace lanectl
// works on.
func (g *globalOptions) connect(ctx context.Context, t *redisTarget, ns string) (redis.UniversalClient, error) {
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	t.honourContexts()
	switch {
	case t.cluster != nil:
		return g.check(ctx, pctx, redis.NewClusterClient(t.cluster))
	case t.failover != nil:
		c, err := g.check(ctx, pctx, redis.NewFailoverClient(t.failover))
		if err != nil && notSentinel(err) {
			// A server answered SENTINEL with "unknown command": a
			// Redis server, not a Sentinel, named where Sentinels go.
			return nil, &configError{fmt.Sprintf("%s names a server that is not a Sentinel (SENTINEL is an unknown command there): with master_name=, the URL's host and any addr= must be Sentinels (port 26379 by default); without master_name=, the URL names the server itself", redactURL(g.redisURL))}
		}
		if err != nil && errors.Is(err, redis.Nil) {
			// go-redis's "all sentinels are unreachable: redis: nil": the
			// Sentinels answered, and none knows the master's name.
			return nil, &configError{fmt.Sprintf("no Sentinel at %s knows a master named %q (master_name=)", redactURL(g.redisURL), t.failover.MasterName)}
		}
		return c, err
	}
	probe := *t.single
	probe.DB = 0 // a cluster node refuses SELECT: ask before choosing a database
	// One attempt: go-redis retries a failed dial three times with
	// backoff, which made a refused connection take about 2 s to report.
	// The probe serves the first contact only.
	probe.MaxRetries = -1
	c := redis.NewClient(&probe)
	info, err := c.Info(pctx, "cluster").Result()
	var reply redis.Error
	switch {
	case errors.As(err, &reply):
		// INFO refused (an ACL, a managed service, miniredis): cannot
		// tell, so one server, unless a read of the namespace's first key
		// meets MOVED (a cluster node that does not own its slot), which
		// would otherwise surface only at the first step, after retries.
		c.Close()
		c, err := g.check(ctx, pctx, redis.NewClient(t.single))
		if err != nil {
			return nil, err
		}
		b, err := redislane.New(c, ns)
		if err == nil {
			err = c.Exists(pctx, b.Keys()[0]).Err()
		}
		if m := misrouted(err); m != "" {
			c.Close()
			return nil, g.unreachable(err)
		}
		return c, nil
	case err != nil:
		c.Close()
		return nil, g.connectError(ctx, err)
	case strings.Contains(info, "cluster_enabled:1"):
		c.Close()
		seed, err := t.seedOf()
		if err != nil {
			return nil, err
		}
		return g.check(ctx, pctx, redis.NewClusterClient(seed.cluster))
	case t.single.DB != 0:
		c.Close()
		return g.check(ctx, pctx, redis.NewClient(t.single))
	}
	// The probe answered; the client kept has go-redis's retries, so that
	// a connection dropped later is dialed again (the probe has none).
	c.Close()
	return redis.NewClient(t.single), nil
}

// check PINGs c within pctx, a bound of ctx, and returns it, or closes it
// and returns why it cannot be used.
func (g *globalOptions) check(ctx, pctx context.Context, c redis.UniversalClient) (redis.UniversalClient, error) {
	if err := c.Ping(pctx).Err(); err != nil {
		c.Close()
		return nil, g.connectError(ctx, err)
	}
	return c, nil
}

// connectError is the error of a first contact that failed with err: the
// cause of ctx when it ended, else an unreachableError.
func (g *globalOptions) connectError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return g.unreachable(err)
}

// honourContexts makes the client t gives end a command when its
// context ends: go-redis otherwise bounds a command's socket reads by its
// ReadTimeout only (3s a try), so a release step on a paused server took
// several of those past the release timeout, and lock's exit with it.
func (t *redisTarget) honourContexts() {
	switch {
	case t.cluster != nil:
		t.cluster.ContextTimeoutEnabled = true
	case t.failover != nil:
		t.failover.ContextTimeoutEnabled = true
	default:
		t.single.ContextTimeoutEnabled = true
	}
}

// dialOnce makes the client t gives dial once a try, unless the URL asked
// for more (dialer_retries): go-redis dials five times 100ms apart in each
// of its four tries of a command, so that a step to a server that refuses
// connections took about 1.8s to fail, longer than lock's release timeout
// (lock lingered that long after Redis went down). A command is still
// tried four times (a dropped connection is dialed again), and the lanes
// Session retries a failed release for its release timeout, giving up
// sooner only while every connection is refused (Redis is down). Only lock
// asks for it: watch's and ui's polls keep go-redis's patience, which
// leaves outages of less than about two seconds unreported (README).
func (t *redisTarget) dialOnce() {
	switch {
	case t.cluster != nil && t.cluster.DialerRetries == 0:
		t.cluster.DialerRetries = 1
	case t.failover != nil && t.failover.DialerRetries == 0:
		t.failover.DialerRetries = 1
	case t.single != nil && t.single.DialerRetries == 0:
		t.single.DialerRetries = 1
	}
}

// notSentinel reports whether err holds a server's refusal of the
// SENTINEL command as unknown: go-redis asked a server that is no
// Sentinel for the master's address (its error joins the answer of every
// Sentinel it tried).
func notSentinel(err error) bool {
	var walk func(error) bool
	walk = func(err error) bool {
		if re, ok := err.(redis.Error); ok {
			msg := strings.ToLower(re.Error())
			if strings.Contains(msg, "unknown command") && strings.Contains(msg, "sentinel") {
				return true
			}
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if walk(e) {
					return true
				}
			}
		case interface{ Unwrap() error }:
			if e := u.Unwrap(); e != nil {
				return walk(e)
			}
		}
		return false
	}
	return err != nil && walk(err)
}

// configError is a Redis set up otherwise than its URL says (exit 78).
type configError struct{ msg string }

func (e *configError) Error() string { return e.msg }

// misrouted returns what a Redis Cluster's refusal in err says, "" when
// err holds none: MOVED or ASK (a key lives on another node: lanectl talks
// to a cluster node as to one server), CROSSSLOT (one step's keys span
// slots: something between lanectl and the cluster rewrote them). Both are
// configuration errors, not an unreachable server.
func misrouted(err error) string {
	var re redis.Error
	if err == nil || !errors.As(err, &re) {
		return ""
	}
	msg := re.Error()
	switch code, _, _ := strings.Cut(msg, " "); code {
	case "MOVED", "ASK":
		return fmt.Sprintf("answered %q: it is a Redis Cluster node, and lanectl spoke to it as to one server (was INFO refused?); "+
			"name the cluster's nodes with addr= (redis://HOST:PORT?addr=HOST2:PORT2)", msg)
	case "CROSSSLOT":
		return fmt.Sprintf("answered %q: a namespace's keys share one hash slot, unless something between lanectl and the cluster renames them (a proxy?); "+
			"connect to the cluster's nodes directly", msg)
	}
	return ""
}
