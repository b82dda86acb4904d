package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lanes-dev/lanes/internal/textdist"
	"github.com/lanes-dev/lanes/lanes"
)

// statusOptions are the flags and arguments of `lanectl status`.
type statusOptions struct {
	global *globalOptions
	open   opener
	keys   []string
}

func newStatusCommand(o *statusOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "status [KEY...] [--json]",
		Short: "Show who holds and who waits for each key",
		Long: `status shows, for each key (every key that has holders or waiters when none is
named), its limit, its holders (entry, owner host and pid, tool, call id,
tenant, fencing token, how long held, lease left) and its waiters in queue
order (entry, position, owner, how long waiting). An entry that "lanectl
lock" made shows the command it runs (its name, not its arguments) in the
COMMAND column, in place of a tool and a call id. The first line names the
server and the namespace read; a line follows when this read found part of
the namespace's state lost (a key deleted or evicted by hand) and reset it,
as every step does (every lease and waiter of the namespace ended; --json:
"reset"), and one when grants are held back after such a reset (every
lease that could still run ends first). A holder whose own lease ended while leases borrowed
from it still run shows STATE "ended": its slot stays taken until each
borrower releases or expires. Durations are measured on the Redis clock.

A namespace that has no lanes on the server at all (never used there, or
mistyped) is said so, with up to five namespaces that have lanes there, the
closest to the one named first (found by a bounded SCAN; --json:
"no_lanes" and "other_namespaces"). Keys named that nobody holds or waits
for, in a namespace where other keys are busy, are said so with up to five
of those, the closest to a key named first (--json: "other_keys"); keys
named that are idle beside busy ones are named on the table's last line.`,
		Args: func(cmd *cobra.Command, args []string) error {
			for _, k := range args {
				if err := lanes.ValidateKey(k); err != nil {
					return usageErrorf("bad key: %v", err)
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.keys = args
			return o.run(cmd)
		},
	}
}

func (o *statusOptions) run(cmd *cobra.Command) error {
	b, closeBackend, err := o.open(cmd.Context())
	if err != nil {
		return err
	}
	defer closeBackend()
	snap, err := o.global.snapshot(cmd.Context(), b, o.keys)
	if err != nil {
		return err
	}
	v := newStatusView(snap)
	v.Server = o.global.server()
	if len(snap.Keys) == 0 {
		// A namespace with no lanes at all: perhaps a typo, so name the
		// ones that have some.
		h := namespaceHint(cmd.Context(), b, v.Namespace)
		v.NoLanes, v.OtherNamespaces, v.noLanesLine = h.absent, h.others, h.line(v.Namespace)
	}
	if len(v.Keys) == 0 && !v.NoLanes && len(o.keys) > 0 {
		// Named keys that nobody holds or waits for: perhaps a typo, so
		// name the keys that have holders or waiters, closest first.
		// A key with a rate window and no holders or waiters is listed by
		// the snapshot, and is not busy (a new user's trial).
		if all, err := o.global.snapshot(cmd.Context(), b, nil); err == nil && len(withEntries(all.Keys)) > 0 {
			busy := withEntries(all.Keys)
			v.OtherKeys = closestKeys(o.keys, busy, maxKeyHints)
			v.noLanesLine = fmt.Sprintf("no holders or waiters for %s; keys with holders or waiters, closest first: %s",
				strings.Join(dedupe(o.keys), ", "), strings.Join(v.OtherKeys, ", "))
			if len(busy) > maxKeyHints {
				v.noLanesLine += ", ..."
			}
		}
	}
	v.noteIdle(o.keys)
	return newPrinter(cmd.OutOrStdout(), o.global.json).Status(v)
}

// noteIdle sets IdleKeys to the keys of named (in order, once each) that
// have no holders or waiters and, when others do, the table's last line
// that names them ("no holders or waiters for ..."): the table of the busy
// ones would leave them out without a word.
func (v *statusView) noteIdle(named []string) {
	v.IdleKeys = nil
	for _, k := range dedupe(named) {
		if !slices.ContainsFunc(v.Keys, func(b statusKey) bool { return b.Key == k }) {
			v.IdleKeys = append(v.IdleKeys, k)
		}
	}
	v.idleLine = ""
	if len(v.Keys) > 0 && len(v.IdleKeys) > 0 {
		v.idleLine = "no holders or waiters for " + strings.Join(v.IdleKeys, ", ")
	}
}

// overdueLine says that n entries shown had passed their deadline and were
// not yet removed ("" when n is 0).
func overdueLine(n int) string {
	if n == 0 {
		return ""
	}
	what := "entries shown are past their"
	if n == 1 {
		what = "entry shown is past its"
	}
	return fmt.Sprintf("%d %s deadline and not yet removed: Redis removes expired entries about 100 at a time, and a look removes what it can in about a second; look again, or run lanectl gc", n, what)
}

// statusView is what `status` reports; its JSON form is the contract of
// `lanectl status --json`.
type statusView struct {
	Namespace string `json:"namespace"`
	// Server is the Redis URL read, its password redacted; `watch`
	// leaves it out.
	Server string `json:"server,omitempty"`
	// FrozenMS is how long grants are still held back after a reset of
	// the namespace's state (Snapshot.Frozen); 0 when they are not.
	FrozenMS int64 `json:"frozen_ms"`
	// Reset: this read found part of the namespace's state lost and reset
	// it (Snapshot.Reset), ending every lease and waiter it had.
	Reset bool        `json:"reset"`
	Keys  []statusKey `json:"keys"`
	// NoLanes: the namespace has no lanes on the server at all (none of
	// its keys exists: never used there, or mistyped); OtherNamespaces
	// then names some that have, the closest to it first (namespaceHint).
	// `status` alone sets them; both are left out otherwise.
	NoLanes         bool     `json:"no_lanes,omitempty"`
	OtherNamespaces []string `json:"other_namespaces,omitempty"`
	// OtherKeys: the keys named have no holders or waiters, and these
	// (at most maxKeyHints, the closest to a named one first) have.
	OtherKeys []string `json:"other_keys,omitempty"`
	// IdleKeys: the keys named (in the order given, once each) that have
	// no holders or waiters; left out when none is, or none was named.
	IdleKeys []string `json:"idle_keys,omitempty"`
	// Overdue counts the entries shown whose deadline had passed when the
	// snapshot was taken, not yet removed (lanes.Snapshot.Overdue): a
	// backlog of expired entries larger than one look removes. Left out
	// when 0.
	Overdue     int    `json:"overdue,omitempty"`
	noLanesLine string // what the table says of it
	idleLine    string // the table's last line: keys named that are idle (noteIdle)
}

// withEntries returns the keys of ks that have holders or waiters.
func withEntries(ks []lanes.KeyState) []lanes.KeyState {
	return slices.DeleteFunc(slices.Clone(ks), func(k lanes.KeyState) bool { return len(k.Holders) == 0 && len(k.Waiters) == 0 })
}

// maxKeyHints is how many busy keys status names when the keys it was
// given have no holders or waiters.
const maxKeyHints = 5

// closestKeys returns the names of up to n of keys, the closest to one of
// named first (textdist.Closest).
func closestKeys(named []string, keys []lanes.KeyState, n int) []string {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.Key
	}
	return textdist.Closest(named, names, n)
}

type statusKey struct {
	Key     string       `json:"key"`
	Limit   int          `json:"limit"`
	Rate    *rateView    `json:"rate,omitempty"` // a rate key's window (rate lanes)
	Holders []holderView `json:"holders"`
	Waiters []waiterView `json:"waiters"`
}

// rateView is a rate key's window at the snapshot's instant: its rate,
// the units spent in the window that ends then, and how long until the
// oldest of them leave it (0: none spent).
type rateView struct {
	Rate       string `json:"rate"` // e.g. "10/s"
	Limit      int    `json:"limit"`
	PerMS      int64  `json:"per_ms"`
	Spent      int    `json:"spent"`
	NextFreeMS int64  `json:"next_free_ms"`
}

type holderView struct {
	Entry       string `json:"entry"`
	Token       uint64 `json:"token"`
	Host        string `json:"host"`
	PID         int    `json:"pid"`
	Tool        string `json:"tool"`
	CallID      string `json:"call_id"`
	Command     string `json:"command"`
	Tenant      string `json:"tenant"`
	HeldMS      int64  `json:"held_ms"`
	LeaseLeftMS int64  `json:"lease_left_ms"`
	// Ended: the holder's own lease ended while leases borrowed from it
	// run; its slot is kept until they go (lanes.Holder.Ended).
	Ended bool `json:"ended"`
}

type waiterView struct {
	Entry     string `json:"entry"`
	Position  int    `json:"position"`
	Host      string `json:"host"`
	PID       int    `json:"pid"`
	Tool      string `json:"tool"`
	CallID    string `json:"call_id"`
	Command   string `json:"command"`
	Tenant    string `json:"tenant"`
	WaitingMS int64  `json:"waiting_ms"`
}

// newStatusView builds the view of snap, with every duration measured
// against snap.Time, the backend's clock, never the local one.
func newStatusView(snap *lanes.Snapshot) statusView {
	v := statusView{Namespace: snap.Namespace, Keys: []statusKey{}, FrozenMS: since(snap.Frozen, snap.Time), Reset: snap.Reset, Overdue: snap.Overdue()}
	for _, k := range snap.Keys {
		sk := statusKey{Key: k.Key, Limit: k.Limit, Holders: []holderView{}, Waiters: []waiterView{}}
		if r := k.Rate; r != nil {
			sk.Rate = &rateView{Rate: r.Rate.String(), Limit: r.Rate.Limit, PerMS: r.Rate.Per.Milliseconds(),
				Spent: r.Spent, NextFreeMS: since(r.NextFree, snap.Time)}
		}
		for _, h := range k.Holders {
			sk.Holders = append(sk.Holders, holderView{
				Entry: h.ID, Token: h.Token, Host: h.Owner.Host, PID: h.Owner.PID,
				Tool: h.Tool, CallID: h.CallID, Command: lockCommand(h.Entry), Tenant: h.Tenant,
				HeldMS:      since(snap.Time, h.Granted),
				LeaseLeftMS: since(h.Expires, snap.Time),
				Ended:       h.Ended,
			})
		}
		for _, w := range k.Waiters {
			sk.Waiters = append(sk.Waiters, waiterView{
				Entry: w.ID, Position: w.Position, Host: w.Owner.Host, PID: w.Owner.PID,
				WaitingMS: since(snap.Time, w.Enqueued),
				Tool:      w.Tool, CallID: w.CallID, Command: lockCommand(w.Entry), Tenant: w.Tenant,
			})
		}
		v.Keys = append(v.Keys, sk)
	}
	return v
}

// since returns now - then in milliseconds, never below 0 (a zero then
// counts as 0 too).
func since(now, then time.Time) int64 {
	if then.IsZero() || now.Before(then) {
		return 0
	}
	return now.Sub(then).Milliseconds()
}
