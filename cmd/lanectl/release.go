package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lanes-dev/lanes/lanes"
)

// releaseOptions are the flags and arguments of `lanectl release`.
type releaseOptions struct {
	global *globalOptions
	open   opener
	force  bool
	yes    bool
	ids    []string
}

func newReleaseCommand(o *releaseOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "release --force [--yes] ENTRY...",
		Short: "Evict entries by force: a holder's lease ends, a waiter leaves its queues",
		Long: `release removes entries by id, whatever their state: a holder's slots pass to
the next waiters and its process loses its lease (a lanectl lock kills its
command at once, SIGKILL, and exits 79); a waiter leaves every queue. It needs --force,
since it takes a lease from another process. On a terminal it asks before
evicting each entry, unless --yes; without one (a script) it does not ask.
It says which holders it evicted and which waiters were granted next, each
named as status names a holder (owner host:pid, and its command or tool and
call id), and exits 1 when a named entry was not found.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("release needs at least one ENTRY id (see lanectl status)")
			}
			for _, id := range args {
				if err := lanes.ValidateEntryID(id); err != nil {
					return usageErrorf("%s", describe(err))
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if !o.force {
				return usageErrorf("release evicts another process's lease or queued entry; it needs --force")
			}
			o.ids = dedupe(args) // a repeated id would be "gone" the second time
			if len(o.ids) > lanes.MaxStepRequests {
				return usageErrorf("release takes at most %d entries at a time, got %d", lanes.MaxStepRequests, len(o.ids))
			}
			return o.run(cmd)
		},
	}
	cmd.Flags().BoolVar(&o.force, "force", false, "really evict the entries")
	cmd.Flags().BoolVarP(&o.yes, "yes", "y", false, "do not ask for confirmation on a terminal")
	return cmd
}

func (o *releaseOptions) run(cmd *cobra.Command) error {
	ctx := cmd.Context()
	b, closeBackend, err := o.open(ctx)
	if err != nil {
		return err
	}
	defer closeBackend()

	// Look the entries up first, to say what each held or waited for.
	snap, err := b.Inspect(ctx, nil)
	if err != nil {
		return o.global.unavailable(err)
	}
	known := entryInfos(snap)
	if !o.yes && o.global.tty(cmd.InOrStdin()) {
		o.ids = confirm(cmd.InOrStdin(), cmd.ErrOrStderr(), o.ids, known)
		if len(o.ids) == 0 {
			_, err := fmt.Fprintln(cmd.ErrOrStderr(), "nothing released")
			return err
		}
	}
	v, missing, err := forceRelease(ctx, b, o.ids, known)
	if err != nil {
		return o.global.unavailable(err)
	}
	if err := newPrinter(cmd.OutOrStdout(), o.global.json).Release(v); err != nil {
		return err
	}
	if len(missing) > 0 {
		return &exitError{code: exitNotFound, err: fmt.Errorf("no entry %s in namespace %s", strings.Join(missing, ", "), o.global.namespace)}
	}
	return nil
}

// forceRelease releases ids as an operator (every owner hears of it) and
// returns what each was, with its keys as known tells them, the entries
// granted next, and the ids that were not found. `lanectl ui
// --allow-release` releases through it too.
//
// A holder that leases borrowed from live on ends but keeps its slot until
// they end (DESIGN.md invariant 10): a second look after the release tells
// such entries (Kept, with their borrowers), and a kept lender that left
// in the same step as its last borrower is reported released, not gone.
// If that look fails, the release is reported as the step answered it.
func forceRelease(ctx context.Context, b lanes.Backend, ids []string, known map[string]entryInfo) (releaseView, []string, error) {
	rel, err := b.Release(ctx, "", ids)
	if err != nil {
		return releaseView{}, nil, err
	}
	if len(rel.Was) != len(ids) {
		return releaseView{}, nil, fmt.Errorf("backend answered %d states for %d entries", len(rel.Was), len(ids))
	}
	var after map[string]entryInfo
	if snap, err := b.Inspect(ctx, nil); err == nil {
		after = entryInfos(snap)
	}
	v := releaseView{Released: []releasedEntry{}, Granted: []string{}, Next: []grantedEntry{}}
	// left: an entry the first look found and the second did not.
	left := func(id string) bool {
		_, was := known[id]
		_, stays := after[id]
		return after != nil && was && !stays
	}
	var missing []string
	for i, id := range ids {
		r := releasedEntry{Entry: id, Was: rel.Was[i].String(), Keys: []string{}}
		e := known[id]
		if rel.Was[i] == lanes.Gone && e.held && left(id) && slices.ContainsFunc(ids, func(n string) bool { return n != id && nested(id, n, known) }) {
			r.Was = lanes.Held.String() // it left with another entry of its lineage named here
		}
		if r.Was == lanes.Gone.String() {
			missing = append(missing, id)
			v.Released = append(v.Released, r)
			continue
		}
		r.Keys = append(r.Keys, e.keys...)
		r.Ended = e.ended && r.Was == lanes.Held.String()
		r.Revoked = r.Ended && len(e.lineage) > 0 && len(borrowersOf(id, known)) == 0
		if _, stays := after[id]; stays && r.Was == lanes.Held.String() {
			r.Kept, r.Borrowers = true, borrowersOf(id, after)
		}
		v.Released = append(v.Released, r)
	}
	// The entries not named that left with named ones, each said once,
	// beside the first named entry of its lineage: those nested under it,
	// and the one it was nested under, kept for it until this step.
	for _, u := range slices.Sorted(maps.Keys(known)) {
		if slices.Contains(ids, u) || !left(u) {
			continue
		}
		for i, id := range ids {
			r := &v.Released[i]
			if r.Was == lanes.Gone.String() || !nested(u, id, known) {
				continue
			}
			if slices.Contains(known[u].lineage, id) {
				r.withNested = append(r.withNested, u)
			} else {
				r.withLenders = append(r.withLenders, u)
			}
			r.With = append(r.With, u)
			break
		}
	}
	v.Granted = append(v.Granted, rel.Granted...)
	for _, id := range rel.Granted {
		e, ok := after[id] // a holder now
		if !ok {
			e = known[id] // a waiter before (or unknown: its id alone)
		}
		v.Next = append(v.Next, grantedEntry{Entry: id, Keys: append([]string{}, e.keys...), Host: e.host, PID: e.pid,
			Tool: e.tool, CallID: e.callID, Command: e.command, Tenant: e.tenant})
	}
	return v, missing, nil
}

// nested reports whether a and b are of one lineage: one was nested under
// the other (its request's lineage names it).
func nested(a, b string, known map[string]entryInfo) bool {
	return slices.Contains(known[a].lineage, b) || slices.Contains(known[b].lineage, a)
}

// borrowersOf returns, sorted, the entries of infos whose lineage names id:
// the leases borrowed from it, and from those.
func borrowersOf(id string, infos map[string]entryInfo) []string {
	var out []string
	for other, e := range infos {
		if other != id && slices.Contains(e.lineage, id) {
			out = append(out, other)
		}
	}
	slices.Sort(out)
	return out
}

// releaseView is what `release` reports; its JSON form is the contract of
// `lanectl release --json`.
type releaseView struct {
	Released []releasedEntry `json:"released"`
	Granted  []string        `json:"granted"`
	// Next names each entry of Granted, in its order, as `lanectl status`
	// names a holder: its keys, owner host and pid, and its command (a
	// `lanectl lock`) or tool and call id, and tenant.
	Next []grantedEntry `json:"granted_holders"`
}

// grantedEntry is an entry a forced release granted, as status names it;
// fields not known are empty (0 for the pid).
type grantedEntry struct {
	Entry   string   `json:"entry"`
	Keys    []string `json:"keys"`
	Host    string   `json:"host"`
	PID     int      `json:"pid"`
	Tool    string   `json:"tool"`
	CallID  string   `json:"call_id"`
	Command string   `json:"command"`
	Tenant  string   `json:"tenant"`
}

// String is the entry g for people, in one line: "w1 (holder of k1, owner
// build-7:4242, command make)", or with "tool edit, call id c1" in place
// of the command for an entry that is not a lock, and ", tenant T" last
// when it has one.
func (g grantedEntry) String() string {
	parts := make([]string, 0, 5)
	if len(g.Keys) > 0 {
		parts = append(parts, "holder of "+cell(strings.Join(g.Keys, ", ")))
	}
	if g.Host != "" || g.PID != 0 {
		parts = append(parts, "owner "+owner(g.Host, g.PID))
	}
	switch {
	case g.Command != "":
		parts = append(parts, "command "+cell(g.Command))
	case g.Tool != "" || g.CallID != "":
		if g.Tool != "" {
			parts = append(parts, "tool "+cell(g.Tool))
		}
		if g.CallID != "" {
			parts = append(parts, "call id "+cell(g.CallID))
		}
	}
	if g.Tenant != "" {
		parts = append(parts, "tenant "+cell(g.Tenant))
	}
	if len(parts) == 0 {
		return ident(g.Entry)
	}
	return ident(g.Entry) + " (" + strings.Join(parts, ", ") + ")"
}

type releasedEntry struct {
	Entry string   `json:"entry"`
	Was   string   `json:"was"` // held, waiting or gone
	Keys  []string `json:"keys"`
	// Ended: the entry was a holder whose own lease had ended, kept for
	// the leases borrowed from it (told to stop, maybe still finishing);
	// its release let the next waiters in without waiting for them.
	Ended bool `json:"ended"`
	// Revoked: of those, a nested lease revoked when the lease it borrowed
	// a key from ended (it lent to nobody).
	Revoked bool `json:"revoked"`
	// Kept: the release ended the entry's lease but not its hold: leases
	// borrowed from it (Borrowers) live on, and it keeps its slot until
	// they end; their owners were told to stop (DESIGN.md invariant 10).
	Kept      bool     `json:"kept"`
	Borrowers []string `json:"borrowers,omitempty"`
	// With: entries not named that left with this one, whose keys passed
	// on too: those nested under it (revoked: their owners were told),
	// and the one it was nested under, kept for it until now.
	With        []string `json:"released_with,omitempty"`
	withNested  []string // of With, those nested under it
	withLenders []string // of With, the one it was nested under
}

// entryInfo is what a snapshot tells of an entry: the keys it asked for,
// in its request's order, whether it holds them, and its owner.
type entryInfo struct {
	keys  []string
	held  bool
	ended bool // a holder kept after its lease ended (lanes.Holder.Ended)
	// lineage is the entry's request's lineage: the entries it borrows
	// from, outermost first.
	lineage []string
	host    string
	pid     int
	// what status shows of it beside: the command of a `lanectl lock`
	// (lockCommand), else its tool and call id; and its tenant
	command, tool, callID, tenant string
}

// entryInfos returns what snap tells of each of its entries.
func entryInfos(snap *lanes.Snapshot) map[string]entryInfo {
	out := map[string]entryInfo{}
	add := func(e lanes.Entry, key string, held, ended bool) {
		if _, ok := out[e.ID]; ok {
			return
		}
		keys := make([]string, 0, len(e.Lanes))
		for _, l := range e.Lanes {
			keys = append(keys, l.Key)
		}
		if len(keys) == 0 {
			keys = append(keys, key)
		}
		info := entryInfo{keys: keys, held: held, ended: ended, lineage: e.Lineage, host: e.Owner.Host, pid: e.Owner.PID,
			command: lockCommand(e), tenant: e.Tenant}
		if info.command == "" {
			info.tool, info.callID = e.Tool, e.CallID
		}
		out[e.ID] = info
	}
	for _, k := range snap.Keys {
		for _, h := range k.Holders {
			add(h.Entry, k.Key, true, h.Ended)
		}
		for _, w := range k.Waiters {
			add(w.Entry, k.Key, false, false)
		}
	}
	return out
}

// confirm asks on w, for each entry of ids that known has, whether to
// evict it, reads the answers from r, and returns the ids to release: those
// confirmed with y or yes, and those unknown (their release says they are
// gone). An entry not confirmed is left alone, and w says so.
func confirm(r io.Reader, w io.Writer, ids []string, known map[string]entryInfo) []string {
	in := bufio.NewReader(r)
	var out []string
	for _, id := range ids {
		e, ok := known[id]
		if !ok {
			out = append(out, id)
			continue
		}
		fmt.Fprintf(w, "%s [y/N] ", evictQuestion(id, e))
		answer, err := in.ReadString('\n')
		if err != nil && answer == "" {
			fmt.Fprintln(w)
		}
		switch strings.ToLower(strings.TrimSpace(answer)) {
		case "y", "yes":
			out = append(out, id)
		default:
			fmt.Fprintf(w, "left %s alone\n", ident(id))
		}
	}
	return out
}

// evictQuestion is what release asks before evicting id: which keys it
// holds or waits for, and whose it is. `lanectl ui` asks it too.
func evictQuestion(id string, e entryInfo) string {
	what := "waiter on"
	if e.held {
		what = "holder of"
	}
	host := e.host
	if host == "" {
		host = "?"
	}
	return fmt.Sprintf("evict %s (%s %s) of %s?", ident(id), what, strings.Join(e.keys, ", "), cell(host)+":"+strconv.Itoa(e.pid))
}

// dedupe returns ids without repeats, in first-seen order.
func dedupe(ids []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
