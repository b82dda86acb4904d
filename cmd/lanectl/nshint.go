package main

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/internal/textdist"
	"github.com/lanes-dev/lanes/lanes"
)

// Bounds of the look for the namespaces in use (namespaceHint): it names
// at most maxNamespaceHints of them, and reads at most namespaceScanCalls
// SCAN pages of namespaceScanCount keys on each server (a Cluster's every
// master), within namespaceScanTime.
const (
	maxNamespaceHints  = 5
	namespaceScanCalls = 10
	namespaceScanCount = 1000
	namespaceScanTime  = 2 * time.Second
	// maxNamespacesSeen bounds the names kept while scanning.
	maxNamespacesSeen = 1000
)

// nsHint is what status says of a namespace that has no lanes on the
// server: none of its state keys exists (never used there, or mistyped).
type nsHint struct {
	absent bool
	// others are other namespaces with lanes on the server, the closest
	// to the one named first, at most maxNamespaceHints; more says that
	// the look found more, or did not look at every key.
	others []string
	more   bool
}

// namespaceHint tells whether the namespace of b has no lanes on its
// server and, if so, which namespaces do. It costs one EXISTS when the
// namespace has state, and a bounded SCAN for the key that every
// namespace with lanes has (its meta key, lanes:{NS}:meta) when it has
// none. Any error leaves the answer at what is known: a namespace whose
// keys cannot be counted is taken as present (no hint rather than a wrong
// one), and a refused SCAN (an ACL without it) names no other namespace.
func namespaceHint(ctx context.Context, b lanes.Backend, ns string) nsHint {
	rb, ok := b.(*redisBackend)
	if !ok {
		return nsHint{}
	}
	ctx, cancel := context.WithTimeout(ctx, namespaceScanTime)
	defer cancel()
	state := rb.Keys()[:6] // entries, lanes, queue, deadlines, nested, meta: its state, whole or none
	if n, err := rb.client.Exists(ctx, state...).Result(); err != nil || n > 0 {
		return nsHint{}
	}
	meta := state[5]
	prefix, ok := strings.CutSuffix(meta, "{"+ns+"}:meta")
	if !ok {
		return nsHint{absent: true}
	}
	seen, complete := scanNamespaces(ctx, rb.client, prefix)
	delete(seen, ns)
	others := make([]string, 0, len(seen))
	for n := range seen {
		others = append(others, n)
	}
	others = textdist.Closest([]string{ns}, others, len(others))
	h := nsHint{absent: true, others: others, more: !complete && len(others) > 0}
	if len(others) > maxNamespaceHints {
		h.others, h.more = others[:maxNamespaceHints], true
	}
	return h
}

// scanNamespaces returns the namespaces whose meta key (prefix{NS}:meta)
// the bounded SCAN of c finds, and whether it looked at every key.
func scanNamespaces(ctx context.Context, c redis.UniversalClient, prefix string) (map[string]bool, bool) {
	var (
		mu       sync.Mutex
		seen     = map[string]bool{}
		complete = true
	)
	pattern := prefix + "{*}:meta"
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for range namespaceScanCalls {
			keys, next, err := c.Scan(ctx, cursor, pattern, namespaceScanCount).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			for _, k := range keys {
				n, ok := strings.CutPrefix(k, prefix+"{")
				if n, ok = strings.CutSuffix(n, "}:meta"); ok && lanes.ValidateNamespace(n) == nil && len(seen) < maxNamespacesSeen {
					seen[n] = true
				}
			}
			mu.Unlock()
			if cursor = next; cursor == 0 {
				return nil
			}
		}
		mu.Lock()
		complete = false
		mu.Unlock()
		return nil
	}
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, c)
	}
	if err != nil {
		complete = false
	}
	return seen, complete
}

// line is what status prints of h, "" for a namespace that has lanes.
func (h nsHint) line(ns string) string {
	if !h.absent {
		return ""
	}
	msg := "namespace " + ns + " has no lanes on this server"
	if len(h.others) == 0 {
		return msg
	}
	list := strings.Join(h.others, ", ")
	if h.more {
		list += ", ..."
	}
	return msg + "; namespaces with lanes here, closest first: " + list
}
