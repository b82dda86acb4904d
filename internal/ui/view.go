package ui

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
)

// Frame is what the page shows and GET /api/state returns: every namespace
// the UI watches, as its last look found it. Durations are measured on the
// Redis clock at that look; AgeMS says how long ago the look was, so that a
// reader can move them on.
type Frame struct {
	Time         string          `json:"time"`          // the UI's clock when the frame was sent
	IntervalMS   int64           `json:"interval_ms"`   // time between two looks at a namespace
	AllowRelease bool            `json:"allow_release"` // the page may release entries by force
	Namespaces   []NamespaceView `json:"namespaces"`
}

// NamespaceView is one namespace in a Frame. During an outage OK is false,
// Error says why, and Keys are those of the last good look (SeenAt).
type NamespaceView struct {
	Namespace   string    `json:"namespace"`
	OK          bool      `json:"ok"`
	Error       string    `json:"error,omitempty"`
	OutageSince string    `json:"outage_since,omitempty"` // the UI's clock, when the first failed look began
	SeenAt      string    `json:"seen_at,omitempty"`      // the Redis clock of the last good look
	AgeMS       int64     `json:"age_ms"`                 // how long ago that look was, when the frame was sent
	LookMS      float64   `json:"look_ms"`                // how long that look took (one Inspect)
	Epoch       string    `json:"epoch,omitempty"`
	HistoryFrom string    `json:"history_from,omitempty"` // the Redis clock of the first look: the timeline starts there
	Keys        []KeyView `json:"keys"`                   // busiest first
	Stats       StatsView `json:"stats"`
}

// StatsView counts what happened in a namespace since it was first used
// (lanes.Stats).
type StatsView struct {
	ExpiredHolders uint64 `json:"expired_holders"`
	EvictedWaiters uint64 `json:"evicted_waiters"`
	Revoked        uint64 `json:"revoked"`
	Resets         uint64 `json:"resets"`
}

// KeyView is one key: its class (see Class), limit, holders in grant order
// and waiters in queue order.
type KeyView struct {
	Key     string       `json:"key"`
	Class   string       `json:"class"`
	Limit   int          `json:"limit"`
	Rate    *RateView    `json:"rate,omitempty"` // rate lanes: the key's window, when it has a rate
	Holders []HolderView `json:"holders"`
	Waiters []WaiterView `json:"waiters"`
}

// RateView is a rate key's window at the snapshot's instant, as `lanectl
// status --json` shows it: the rate, the units spent in the window that
// ends then, and how long until the oldest of them leave it (0: none).
type RateView struct {
	Rate       string `json:"rate"`
	Limit      int    `json:"limit"`
	PerMS      int64  `json:"per_ms"`
	Spent      int    `json:"spent"`
	NextFreeMS int64  `json:"next_free_ms"`
}

// HolderView is a holder of a key, with the fields of `lanectl status
// --json` and more: the Redis clock's grant and expiry, the longest lease
// left seen (about the lease's TTL: the full width of its bar), and whether
// its hold ended while it keeps its slot (lanes.Holder.Ended: a lender kept
// until the nested borrowers it revoked are told, or such a revoked
// borrower).
type HolderView struct {
	Entry       string   `json:"entry"`
	Token       uint64   `json:"token"`
	Host        string   `json:"host"`
	PID         int      `json:"pid"`
	Tool        string   `json:"tool"`
	CallID      string   `json:"call_id"`
	Tenant      string   `json:"tenant"`
	HeldMS      int64    `json:"held_ms"`
	LeaseLeftMS int64    `json:"lease_left_ms"`
	LeaseMS     int64    `json:"lease_ms"`
	Granted     string   `json:"granted"`
	Expires     string   `json:"expires"`
	Ended       bool     `json:"ended"`
	Keys        []string `json:"keys"` // every key the entry asked for
}

// WaiterView is a waiter of a key, with the fields of `lanectl status
// --json` and the Redis clock's time it was enqueued.
type WaiterView struct {
	Entry     string   `json:"entry"`
	Position  int      `json:"position"`
	Host      string   `json:"host"`
	PID       int      `json:"pid"`
	Tool      string   `json:"tool"`
	CallID    string   `json:"call_id"`
	Tenant    string   `json:"tenant"`
	WaitingMS int64    `json:"waiting_ms"`
	Enqueued  string   `json:"enqueued"`
	Keys      []string `json:"keys"`
}

// The classes of keys, as the scheduler types them (sched's prefixes):
// Class returns one of these.
const (
	ClassConcurrency = "concurrency" // concurrency:NAME, a tool's concurrency key
	ClassLock        = "lock"        // lock:KEY, a key computed from a call's arguments
	ClassFile        = "file"        // lock:file:PATH (or file:PATH), a file's lock key
	ClassTool        = "tool"        // tool:NAME, the runner's per-tool lane
	ClassTenant      = "tenant"      // tenant:NAME, the runner's per-tenant lane
	ClassOther       = "other"       // any other key (`lanectl lock report`)
)

// Classes lists the classes a filter may name.
var Classes = []string{ClassConcurrency, ClassLock, ClassFile, ClassTool, ClassTenant, ClassOther}

// Class returns the class of a lane key. A run's own lane
// (run:ID/tenant:NAME, taken where a run narrowed a limit) has the class of
// the lane it narrows.
func Class(key string) string {
	if rest, ok := strings.CutPrefix(key, sched.RunPrefix); ok {
		if _, lane, ok := strings.Cut(rest, "/"); ok {
			key = lane
		}
	}
	switch {
	case strings.HasPrefix(key, sched.LockPrefix+"file:"), strings.HasPrefix(key, "file:"):
		return ClassFile
	case strings.HasPrefix(key, sched.LockPrefix):
		return ClassLock
	case strings.HasPrefix(key, sched.ConcurrencyPrefix):
		return ClassConcurrency
	case strings.HasPrefix(key, sched.ToolPrefix):
		return ClassTool
	case strings.HasPrefix(key, sched.TenantPrefix):
		return ClassTenant
	}
	return ClassOther
}

// Filter selects keys: by namespace, by prefix of the key, and by class
// ("lock" takes file keys too, since they are lock keys). Its zero value
// selects every key.
type Filter struct {
	Namespace string
	Prefix    string
	Class     string
}

// ParseFilter checks the fields of a filter as given in a query (ns,
// prefix, class) against the namespaces watched.
func ParseFilter(ns, prefix, class string, namespaces []string) (Filter, error) {
	f := Filter{Namespace: ns, Prefix: prefix, Class: class}
	if ns != "" && !slices.Contains(namespaces, ns) {
		return f, fmt.Errorf("namespace %q is not watched here (watched: %s)", ns, strings.Join(namespaces, ", "))
	}
	if class != "" && !slices.Contains(Classes, class) {
		return f, fmt.Errorf("unknown class %q; one of %s", class, strings.Join(Classes, ", "))
	}
	return f, nil
}

// keep reports whether f selects key.
func (f Filter) keep(key string) bool {
	if !strings.HasPrefix(key, f.Prefix) {
		return false
	}
	switch c := Class(key); f.Class {
	case "":
		return true
	case ClassLock:
		return c == ClassLock || c == ClassFile
	default:
		return c == f.Class
	}
}

// apply returns v with only the namespaces and keys f selects.
func (f Filter) apply(v []NamespaceView) []NamespaceView {
	out := make([]NamespaceView, 0, len(v))
	for _, n := range v {
		if f.Namespace != "" && n.Namespace != f.Namespace {
			continue
		}
		if f.Prefix != "" || f.Class != "" {
			keys := make([]KeyView, 0, len(n.Keys))
			for _, k := range n.Keys {
				if f.keep(k.Key) {
					keys = append(keys, k)
				}
			}
			n.Keys = keys
		}
		out = append(out, n)
	}
	return out
}

// buildKeys returns the keys of snap that have holders or waiters, busiest
// first: most waiters, then most holders, then by key. leaseMax gives the
// longest lease left seen for a holder of a key (0 when unknown). Every
// duration is measured against snap.Time, the backend's clock.
func buildKeys(snap *lanes.Snapshot, leaseMax func(key, entry string) int64) []KeyView {
	keys := make([]KeyView, 0, len(snap.Keys))
	for _, k := range snap.Keys {
		if len(k.Holders)+len(k.Waiters) == 0 {
			continue
		}
		kv := KeyView{Key: k.Key, Class: Class(k.Key), Limit: k.Limit, Holders: []HolderView{}, Waiters: []WaiterView{}}
		if r := k.Rate; r != nil {
			kv.Rate = &RateView{Rate: r.Rate.String(), Limit: r.Rate.Limit, PerMS: r.Rate.Per.Milliseconds(), Spent: r.Spent, NextFreeMS: since(r.NextFree, snap.Time)}
		}
		for _, h := range k.Holders {
			left := since(h.Expires, snap.Time)
			kv.Holders = append(kv.Holders, HolderView{
				Entry: h.ID, Token: h.Token, Host: h.Owner.Host, PID: h.Owner.PID,
				Tool: h.Tool, CallID: h.CallID, Tenant: h.Tenant,
				HeldMS: since(snap.Time, h.Granted), LeaseLeftMS: left,
				LeaseMS: max(left, leaseMax(k.Key, h.ID)),
				Granted: jsonTime(h.Granted), Expires: jsonTime(h.Expires),
				Ended: h.Ended, Keys: entryKeys(h.Entry, k.Key),
			})
		}
		for _, w := range k.Waiters {
			kv.Waiters = append(kv.Waiters, WaiterView{
				Entry: w.ID, Position: w.Position, Host: w.Owner.Host, PID: w.Owner.PID,
				Tool: w.Tool, CallID: w.CallID, Tenant: w.Tenant,
				WaitingMS: since(snap.Time, w.Enqueued), Enqueued: jsonTime(w.Enqueued),
				Keys: entryKeys(w.Entry, k.Key),
			})
		}
		keys = append(keys, kv)
	}
	slices.SortStableFunc(keys, func(a, b KeyView) int {
		return cmp.Or(cmp.Compare(len(b.Waiters), len(a.Waiters)), cmp.Compare(len(b.Holders), len(a.Holders)), cmp.Compare(a.Key, b.Key))
	})
	return keys
}

// entryKeys returns the keys e asked for, in its request's order, or key
// when the backend did not say.
func entryKeys(e lanes.Entry, key string) []string {
	keys := make([]string, 0, max(len(e.Lanes), 1))
	for _, l := range e.Lanes {
		keys = append(keys, l.Key)
	}
	if len(keys) == 0 {
		keys = append(keys, key)
	}
	return keys
}

// since returns now - then in milliseconds, never below 0 (a zero then
// counts as 0 too).
func since(now, then time.Time) int64 {
	if then.IsZero() || now.Before(then) {
		return 0
	}
	return now.Sub(then).Milliseconds()
}

// jsonTime formats t as the JSON of lanectl does (RFC 3339, milliseconds,
// UTC), or "" for a zero t.
func jsonTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}
