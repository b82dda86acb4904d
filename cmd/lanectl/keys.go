package main

import (
	"cmp"
	"slices"

	"github.com/spf13/cobra"

	"github.com/lanes-dev/lanes/lanes"
)

// keysOptions are the flags of `lanectl keys`.
type keysOptions struct {
	global *globalOptions
	open   opener
}

func newKeysCommand(o *keysOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "keys [--json]",
		Short: "List the keys that have holders or waiters, most contended first",
		Long: `keys lists every key that has holders or waiters, with its limit and how many
of each, sorted by waiters (most first), then by key. The first line names
the server and the namespace read. A namespace with no lanes on the server
at all is said so, with the namespaces that have some, closest first (as
status says it; --json: "no_lanes" and "other_namespaces").`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd)
		},
	}
}

func (o *keysOptions) run(cmd *cobra.Command) error {
	b, closeBackend, err := o.open(cmd.Context())
	if err != nil {
		return err
	}
	defer closeBackend()
	snap, err := o.global.snapshot(cmd.Context(), b, nil)
	if err != nil {
		return err
	}
	v := newKeysView(snap)
	v.Server = o.global.server()
	if len(snap.Keys) == 0 {
		// A namespace with no lanes at all: perhaps a typo, so name the
		// ones that have some (as status does).
		h := namespaceHint(cmd.Context(), b, v.Namespace)
		v.NoLanes, v.OtherNamespaces, v.noLanesLine = h.absent, h.others, h.line(v.Namespace)
	}
	return newPrinter(cmd.OutOrStdout(), o.global.json).Keys(v)
}

// keysView is what `keys` reports; its JSON form is the contract of
// `lanectl keys --json`.
type keysView struct {
	Namespace string     `json:"namespace"`
	Server    string     `json:"server"` // the Redis URL read, its password redacted
	Keys      []keyCount `json:"keys"`
	// NoLanes and OtherNamespaces are status's: the namespace has no
	// lanes on the server at all, and the namespaces that have some,
	// closest to its name first.
	NoLanes         bool     `json:"no_lanes,omitempty"`
	OtherNamespaces []string `json:"other_namespaces,omitempty"`
	// Overdue is status's: entries past their deadline, not yet removed.
	Overdue int `json:"overdue,omitempty"`
	// FrozenMS and Reset are status's: how long grants are still held
	// back after a reset, and whether this look itself reset the namespace.
	FrozenMS int64 `json:"frozen_ms"`
	Reset    bool  `json:"reset"`

	noLanesLine string // what the table says of it
}

type keyCount struct {
	Key     string `json:"key"`
	Limit   int    `json:"limit"`
	Holders int    `json:"holders"`
	Waiters int    `json:"waiters"`
}

// newKeysView counts the holders and waiters of each key of snap, sorted by
// waiters descending, then by key.
func newKeysView(snap *lanes.Snapshot) keysView {
	v := keysView{Namespace: snap.Namespace, Keys: []keyCount{}, Overdue: snap.Overdue(),
		FrozenMS: since(snap.Frozen, snap.Time), Reset: snap.Reset}
	for _, k := range snap.Keys {
		if len(k.Holders)+len(k.Waiters) == 0 {
			continue
		}
		v.Keys = append(v.Keys, keyCount{Key: k.Key, Limit: k.Limit, Holders: len(k.Holders), Waiters: len(k.Waiters)})
	}
	slices.SortFunc(v.Keys, func(a, b keyCount) int {
		return cmp.Or(cmp.Compare(b.Waiters, a.Waiters), cmp.Compare(a.Key, b.Key))
	})
	return v
}
