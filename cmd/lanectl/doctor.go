package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/lanes-dev/lanes/internal/evict"
	"github.com/lanes-dev/lanes/redislane"
)

// doctorOptions are the flags of `lanectl doctor` and `lanectl gc`.
type doctorOptions struct {
	global *globalOptions
	open   opener
	repair bool
}

// doctor is the part of a backend that doctor and gc use: the Redis one.
type doctor interface {
	Doctor(ctx context.Context, repair bool) (*redislane.Report, error)
	Reap(ctx context.Context) (int, error)
}

func (o *doctorOptions) backend(ctx context.Context) (doctor, func(), error) {
	b, closeBackend, err := o.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	d, ok := b.(doctor)
	if !ok {
		closeBackend()
		return nil, nil, fmt.Errorf("%T has no Redis state to check", b)
	}
	return d, closeBackend, nil
}

func newDoctorCommand(o *doctorOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "doctor [NAMESPACE] [--repair] [--json]",
		Short: "Check a namespace's Redis keys against each other, and repair them",
		Long: `doctor reads the namespace's state one bounded page at a time and reports each
inconsistency in one line: a state key missing while the others exist, keys
left by an older lanes (protocol 1), an entry its holders, queues or
deadlines do not list, a member of those that no entry accounts for, a
key record that lists a holder the key does not have or counts waiters its
queue does not hold, a server whose maxmemory-policy may evict the keys
(allkeys-*: every lock and batch refuses it, unless --allow-eviction). It
exits 0 when it found
nothing, 1 when it found something (and, with --repair, repaired it).

--repair fixes what it found: stray members are removed, key records mended
(holders that are none dropped, waiter counts taken from the queue), expired
entries reaped, protocol 1's keys deleted once no
entry of theirs is alive. A namespace missing some of its keys, or whose
entries disagree with their index, is reset: every lease and waiter of the
namespace ends (their processes are told), and nothing is granted until the
latest lease that could still be held has run out.

NAMESPACE, when given, names the namespace to check (as --namespace does).`,
		Args: namespaceArg(o.global),
		RunE: func(cmd *cobra.Command, args []string) error {
			useNamespaceArg(o.global, args)
			return o.runDoctor(cmd)
		},
	}
	cmd.Flags().BoolVar(&o.repair, "repair", false, "fix what doctor finds (may reset the namespace: see above)")
	return cmd
}

func newGCCommand(o *doctorOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "gc [NAMESPACE] [--json]",
		Short: "Remove every expired entry of the namespace now",
		Long: `gc removes every entry whose lease or wait expired (its process died or
stalled), in bounded steps, and grants what that frees. Every lanes step
removes some expired entries anyway; gc clears a backlog at once, for
instance after many processes died. NAMESPACE, when given, names the
namespace (as --namespace does).`,
		Args: namespaceArg(o.global),
		RunE: func(cmd *cobra.Command, args []string) error {
			useNamespaceArg(o.global, args)
			return o.runGC(cmd)
		},
	}
}

// namespaceArg accepts at most one argument, a namespace that takes the
// place of --namespace; naming two different ones is a usage error.
func namespaceArg(g *globalOptions) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > 1 {
			return usageErrorf("%s takes at most one NAMESPACE, got %d arguments", cmd.CommandPath(), len(args))
		}
		if len(args) == 0 {
			return nil
		}
		if cmd.Flags().Changed("namespace") && g.namespace != args[0] {
			return usageErrorf("two namespaces given: --namespace %s and the argument %s; give one", g.namespace, args[0])
		}
		return nil
	}
}

// useNamespaceArg makes the NAMESPACE argument, if any, the namespace the
// command opens (after the global flags' defaults were settled).
func useNamespaceArg(g *globalOptions, args []string) {
	if len(args) == 1 {
		g.namespace = args[0]
	}
}

func (o *doctorOptions) runDoctor(cmd *cobra.Command) error {
	ctx := cmd.Context()
	d, closeBackend, err := o.backend(ctx)
	if err != nil {
		return err
	}
	defer closeBackend()
	r, err := d.Doctor(ctx, o.repair)
	if err != nil {
		return o.global.unavailable(err)
	}
	if rb, ok := d.(*redisBackend); ok && !o.global.allowEviction && o.global.getenv("LANES_ALLOW_EVICTION") != "1" {
		// what every lock, batch and mcp serve refuses (exit 78): a
		// namespace whose keys may be evicted one at a time
		if p, err := evict.Evicting(ctx, rb.client); err == nil && p != "" {
			r.Problems = append(r.Problems, fmt.Sprintf("the server's maxmemory-policy is %s, which may evict the namespace's keys one at a time: lock, batch and mcp serve refuse it (exit 78); set noeviction (or a volatile-* policy), or pass --allow-eviction knowing what it risks", p))
		}
	}
	if o.global.json {
		if err := (jsonPrinter{cmd.OutOrStdout()}).write(newDoctorView(r)); err != nil {
			return err
		}
	} else if err := writeReport(cmd.OutOrStdout(), r, redactURL(o.global.redisURL)); err != nil {
		return err
	}
	if !r.OK() {
		return &exitError{code: exitNotFound}
	}
	return nil
}

// writeReport writes doctor's report for people, of a namespace on the
// server at url (redacted).
func writeReport(w io.Writer, r *redislane.Report, url string) error {
	epoch := r.Epoch
	switch {
	case epoch == "" && len(r.Missing) > 0:
		epoch = "none (some of its keys are missing)"
	case epoch == "":
		epoch = "none (no state)"
	}
	if url != "" {
		url = " on " + url
	}
	fmt.Fprintf(w, "namespace %s%s, epoch %s\n", r.Namespace, url, epoch)
	if r.Resets > 0 {
		began := ""
		if t, ok := epochTime(r.Epoch); ok {
			began = fmt.Sprintf("; the current epoch began %s, %s ago", t.UTC().Format(time.RFC3339), ms(max(time.Since(t), 0).Milliseconds()))
		}
		fmt.Fprintf(w, "reset %s since it was made (a state key was lost, or a repair): each ended every lease and waiter%s\n", plural(int(r.Resets), "time"), began)
	}
	if r.Frozen > 0 {
		fmt.Fprintf(w, "no grants for %s: the last reset holds them back until every lease granted before it has run out\n", ms(r.Frozen.Milliseconds()))
	}
	for _, k := range r.Missing {
		if len(r.Repairs) > 0 {
			fmt.Fprintf(w, "missing: %s\n", cell(k))
		} else {
			fmt.Fprintf(w, "missing: %s (the next step resets the namespace)\n", cell(k))
		}
	}
	for _, k := range r.Legacy {
		fmt.Fprintf(w, "protocol 1 key: %s\n", cell(k))
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "problem: %s\n", sentence(p))
	}
	for _, p := range r.Repairs {
		fmt.Fprintf(w, "repaired: %s\n", sentence(p))
	}
	if r.Reaped > 0 {
		fmt.Fprintf(w, "reaped %d expired entries\n", r.Reaped)
	}
	if r.Expired > 0 {
		fmt.Fprintf(w, "%d expired entries are not yet removed: every step removes up to 100, and until then status and keys may show some; lanectl gc removes them now\n", r.Expired)
	}
	switch {
	case r.OK() && r.Epoch == "":
		_, err := fmt.Fprintln(w, "no problem found: the namespace holds no state (never used on this server, or its keys were deleted; check its name)")
		return err
	case r.OK():
		_, err := fmt.Fprintln(w, "no problem found")
		return err
	}
	return nil
}

// epochTime reads an epoch, the Redis clock in µs when the namespace's
// state was made or last reset (docs/PROTOCOL.md, "Markers"); false when
// epoch is "" or not such a number.
func epochTime(epoch string) (time.Time, bool) {
	us, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil || us <= 0 {
		return time.Time{}, false
	}
	return time.UnixMicro(us), true
}

// sentence is a line of doctor's report, made safe as a cell is but cut
// only past 2,000 runes: it is read whole.
func sentence(s string) string { return clean(s, 2000) }

func (o *doctorOptions) runGC(cmd *cobra.Command) error {
	ctx := cmd.Context()
	d, closeBackend, err := o.backend(ctx)
	if err != nil {
		return err
	}
	defer closeBackend()
	n, err := d.Reap(ctx)
	if err != nil {
		return o.global.unavailable(err)
	}
	if o.global.json {
		return (jsonPrinter{cmd.OutOrStdout()}).write(map[string]any{"namespace": o.global.namespace, "reaped": n})
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "removed %d expired entries from namespace %s\n", n, o.global.namespace)
	return err
}

// doctorView is what `doctor --json` prints: the report with the field
// names of lanectl's other JSON, and lists that are never null.
type doctorView struct {
	Namespace string   `json:"namespace"`
	Epoch     string   `json:"epoch"`
	OK        bool     `json:"ok"`
	Missing   []string `json:"missing"`
	Legacy    []string `json:"legacy"`
	Problems  []string `json:"problems"`
	Repairs   []string `json:"repairs"`
	Reaped    int      `json:"reaped"`
	Resets    int64    `json:"resets"`    // resets of the namespace's state since it was made
	FrozenMS  int64    `json:"frozen_ms"` // how long grants are still held back by the last reset; 0: they are not
	Expired   int64    `json:"expired"`   // expired entries not yet removed
}

func newDoctorView(r *redislane.Report) doctorView {
	list := func(l []string) []string { return append([]string{}, l...) }
	return doctorView{Namespace: r.Namespace, Epoch: r.Epoch, OK: r.OK(), Missing: list(r.Missing),
		Legacy: list(r.Legacy), Problems: list(r.Problems), Repairs: list(r.Repairs), Reaped: r.Reaped,
		Resets: r.Resets, FrozenMS: r.Frozen.Milliseconds(), Expired: r.Expired}
}
