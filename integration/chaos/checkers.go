package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/redislane"
)

// Violation is one broken invariant found in a history.
type Violation struct {
	Checker string // mutex, semaphore, fencing, fifo, liveness, resource, probe, errors, progress, leak
	Msg     string
}

func (v Violation) String() string { return v.Checker + ": " + v.Msg }

// Options tunes Check.
type Options struct {
	// Final is the value of each resource (Resource(ns, key)) read after the
	// run; a resource absent from it is not checked for its final value.
	Final map[string]int64
	// Forbidden are substrings that no error of the history may contain
	// (e.g. "CROSSSLOT" on a cluster).
	Forbidden []string
	// Timeout bounds porcupine on each key; default one minute.
	Timeout time.Duration
	// DataLoss says that the backend may have lost state (a restart without
	// persistence, a failover to a lagging replica): a holder may then
	// believe its lease valid while another holds the key (the known limit
	// that fencing tokens cover), so Lease.Err answers are not checked.
	DataLoss bool
	// VisualizeDir, when set, receives a porcupine visualization (HTML) of
	// every key whose history is not linearizable.
	VisualizeDir string
	// BorrowLag, when above 0, tolerates a known bug: a borrower whose
	// lender's lease ended (released, lost, expired) hears of it only from
	// a hint or its next heartbeat, after the step that removed it may
	// already have granted the key to the next holder. The lane models then
	// let an orphaned borrower find its lease valid whoever holds the key,
	// and CheckBorrowers reports a borrower that found its lease valid (or
	// had its release confirmed) at most BorrowLag after the next holder's
	// grant as "borrow-lag", later than that as "borrow".
	BorrowLag time.Duration
	// MinGrants is the least number of grants the whole history must
	// have, and MinGrantsPerProc the least each process that exited
	// cleanly must have: a fleet that granted nothing passes every other
	// checker. Zero checks nothing.
	MinGrants, MinGrantsPerProc int
}

// Check runs every history checker: Lanes (limit and fencing, porcupine),
// FIFO, Liveness, Resources, Probes, Errors, Progress, Reentry and (unless
// the backend may lose data) Borrowers.
func Check(h *History, o Options) []Violation {
	var out []Violation
	out = append(out, CheckLanes(h, o)...)
	out = append(out, CheckFIFO(h)...)
	out = append(out, CheckLiveness(h)...)
	out = append(out, CheckResources(h, o.Final)...)
	out = append(out, CheckProbes(h)...)
	out = append(out, CheckErrors(h, o.Forbidden...)...)
	out = append(out, CheckProgress(h, o.MinGrants, o.MinGrantsPerProc)...)
	out = append(out, CheckReentry(h)...)
	if !o.DataLoss {
		out = append(out, CheckBorrowers(h, o.BorrowLag)...)
	}
	return out
}

// CheckProgress checks that the history made progress: at least minTotal
// grants in all, and at least minPerProc in every process that exited
// cleanly (a process killed, or that crashed, is not held to it).
func CheckProgress(h *History, minTotal, minPerProc int) []Violation {
	var out []Violation
	total := 0
	per := map[string]int{}
	for _, a := range h.Attempts {
		if a.Outcome == Granted {
			total++
			per[a.Proc]++
		}
	}
	if total < minTotal {
		out = append(out, Violation{"progress", fmt.Sprintf("%d grants in %d requests; want at least %d", total, len(h.Attempts), minTotal)})
	}
	if minPerProc > 0 {
		procs := make([]string, 0, len(h.Procs))
		for p, end := range h.Procs {
			if end == "exit" && p != "harness" {
				procs = append(procs, p)
			}
		}
		sort.Strings(procs)
		for _, p := range procs {
			if per[p] < minPerProc {
				out = append(out, Violation{"progress", fmt.Sprintf("process %s exited cleanly after %d grants; want at least %d", p, per[p], minPerProc)})
			}
		}
	}
	return out
}

// laneKey is one key of one namespace.
type laneKey struct{ ns, key string }

// keysOf returns every key a granted attempt named, sorted.
func keysOf(h *History) []laneKey {
	seen := map[laneKey]bool{}
	var out []laneKey
	for _, a := range h.Attempts {
		for _, k := range a.Keys {
			lk := laneKey{a.NS, k}
			if !seen[lk] {
				seen[lk] = true
				out = append(out, lk)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ns != out[j].ns {
			return out[i].ns < out[j].ns
		}
		return out[i].key < out[j].key
	})
	return out
}

// CheckLanes checks each key's grants and releases with porcupine: first
// against the owner-aware mutex (limit 1) or the semaphore with per-owner
// permits (limit > 1), which catches an over-limit overlap, and a holder
// that still found its lease valid after the backend could have given its
// slot away; then against the fenced model, which also wants each grant's
// token above every earlier one, and catches a token repeated or out of
// grant order.
func CheckLanes(h *History, o Options) []Violation {
	timeout := o.Timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	var out []Violation
	for _, lk := range keysOf(h) {
		ops, limit := LaneOperations(h, lk.ns, lk.key, !o.DataLoss)
		if len(ops) == 0 {
			continue
		}
		name := "mutex"
		if limit > 1 {
			name = "semaphore"
		}
		lag := o.BorrowLag > 0
		res, info := porcupine.CheckOperationsVerbose(laneModel(limit, false, lag), ops, timeout)
		if res != porcupine.Ok {
			out = append(out, Violation{name, describeLimit(h, lk, limit, res)})
			visualize(o, lk, name, laneModel(limit, false, lag), info)
			continue
		}
		res, info = porcupine.CheckOperationsVerbose(laneModel(limit, true, lag), ops, timeout)
		if res != porcupine.Ok {
			out = append(out, Violation{"fencing", describeTokens(h, lk, res)})
			visualize(o, lk, "fencing", laneModel(limit, true, lag), info)
		}
	}
	return out
}

func visualize(o Options, lk laneKey, name string, m porcupine.Model, info porcupine.LinearizationInfo) {
	if o.VisualizeDir == "" {
		return
	}
	file := strings.NewReplacer("/", "_", " ", "_").Replace(fmt.Sprintf("%s-%s-%s.html", name, lk.ns, lk.key))
	_ = porcupine.VisualizePath(m, info, filepath.Join(o.VisualizeDir, file))
}

// describeLimit explains a limit violation: the first instant when more than
// limit entries certainly held the key (granted, and released later with
// the backend's confirmation that they still held it), if there is one.
func describeLimit(h *History, lk laneKey, limit int, res porcupine.CheckResult) string {
	if res == porcupine.Unknown {
		return fmt.Sprintf("%s key %q: porcupine ran out of time (inconclusive)", lk.ns, lk.key)
	}
	type iv struct {
		a          *Attempt
		start, end int64
	}
	var ivs []iv
	for _, a := range h.Attempts {
		if a.Outcome == Granted && a.NS == lk.ns && a.Limit(lk.key) > 0 && a.Release == Released && a.Borrowed[lk.key] == "" {
			ivs = append(ivs, iv{a, a.Return, a.RelInvoke})
		}
	}
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].start < ivs[j].start })
	for i, x := range ivs {
		var with []string
		for _, y := range ivs[:i] {
			if y.end > x.start {
				with = append(with, fmt.Sprintf("%s (%s, granted %s, released %s)", y.a.ID, y.a.Proc, stamp(h, y.start), stamp(h, y.end)))
			}
		}
		if len(with)+1 > limit {
			return fmt.Sprintf("%s key %q (limit %d): over-limit overlap: %s (%s) was granted at %s while %s still held it",
				lk.ns, lk.key, limit, x.a.ID, x.a.Proc, stamp(h, x.start), strings.Join(with, ", "))
		}
	}
	if limit == 1 {
		for _, a := range h.Attempts {
			if a.Outcome != Granted || a.NS != lk.ns || a.Limit(lk.key) == 0 {
				continue
			}
			for _, v := range a.Valid {
				for _, b := range h.Attempts {
					if b != a && b.Outcome == Granted && b.NS == lk.ns && b.Limit(lk.key) > 0 && b.Borrowed[lk.key] == "" &&
						b.ID != a.Borrowed[lk.key] && b.Invoke > a.Return && b.Return < v[0] {
						return fmt.Sprintf("%s key %q: %s (%s) still found its lease valid at %s, after %s (%s) asking at %s was granted at %s: the holder was not told of its loss in time (invariant 6)",
							lk.ns, lk.key, a.ID, a.Proc, stamp(h, v[0]), b.ID, b.Proc, stamp(h, b.Invoke), stamp(h, b.Return))
					}
				}
			}
		}
	}
	return fmt.Sprintf("%s key %q (limit %d): no order of its grants and releases keeps at most %d holders", lk.ns, lk.key, limit, limit)
}

// describeTokens explains a fencing violation: a token granted twice, or a
// grant that returned before another was invoked yet has the higher token.
func describeTokens(h *History, lk laneKey, res porcupine.CheckResult) string {
	if res == porcupine.Unknown {
		return fmt.Sprintf("%s key %q: porcupine ran out of time (inconclusive)", lk.ns, lk.key)
	}
	var gs []*Attempt
	by := map[uint64]*Attempt{}
	for _, a := range h.Granted() {
		if a.NS != lk.ns || a.Limit(lk.key) == 0 || a.Borrowed[lk.key] != "" {
			continue
		}
		t := a.Tokens[lk.key]
		if b := by[t]; b != nil {
			return fmt.Sprintf("%s key %q: repeated token %d: granted to %s (%s) and to %s (%s)", lk.ns, lk.key, t, b.ID, b.Proc, a.ID, a.Proc)
		}
		by[t] = a
		gs = append(gs, a)
	}
	for _, a := range gs {
		for _, b := range gs {
			if a.Return < b.Invoke && a.Tokens[lk.key] >= b.Tokens[lk.key] {
				return fmt.Sprintf("%s key %q: token out of grant order: %s (%s) was granted token %d at %s, before %s (%s) asked at %s and got the lower token %d",
					lk.ns, lk.key, a.ID, a.Proc, a.Tokens[lk.key], stamp(h, a.Return), b.ID, b.Proc, stamp(h, b.Invoke), b.Tokens[lk.key])
			}
		}
	}
	return fmt.Sprintf("%s key %q: no order of its grants has strictly increasing tokens", lk.ns, lk.key)
}

// stamp prints a time relative to the history's first event.
func stamp(h *History, t int64) string {
	if t >= Never {
		return "never"
	}
	if len(h.Events) == 0 {
		return fmt.Sprint(t)
	}
	d := time.Duration(t - h.Events[0].Time)
	if d > time.Millisecond {
		d = d.Round(time.Microsecond)
	}
	return "+" + d.String()
}

// CheckFIFO checks invariant 2 for every key: when A's Enqueue returned
// before B's first Enqueue was invoked, A was queued before B (its place is
// fixed when its step commits), so if both were granted, A was granted
// first and has the lower token. Grants by re-entry queue for nothing and
// are left out. Pairs whose enqueues overlap have no known
// order and are not checked. One exception is allowed by the invariant
// itself: an A that also waits on other keys may let a B behind it through
// on a key whose limit is above 1.
func CheckFIFO(h *History) []Violation {
	var out []Violation
	for _, lk := range keysOf(h) {
		var gs []*Attempt
		for _, a := range h.Attempts {
			// A grant by re-entry takes no place in the queue: its token is
			// its lender's.
			if a.Outcome == Granted && a.NS == lk.ns && a.Limit(lk.key) > 0 && a.EnqOK > 0 && a.Borrowed[lk.key] == "" {
				gs = append(gs, a)
			}
		}
		// Earlier: candidates for A, by the return of their enqueue.
		earlier := make([]*Attempt, 0, len(gs))
		for _, a := range gs {
			if len(a.Keys) > 1 && a.Limit(lk.key) > 1 {
				continue
			}
			earlier = append(earlier, a)
		}
		sort.Slice(earlier, func(i, j int) bool { return earlier[i].EnqOK < earlier[j].EnqOK })
		later := append([]*Attempt(nil), gs...)
		sort.Slice(later, func(i, j int) bool { return later[i].FirstEnq < later[j].FirstEnq })
		var top *Attempt // the highest token among the earlier ones seen so far
		i := 0
		for _, b := range later {
			for i < len(earlier) && earlier[i].EnqOK < b.FirstEnq {
				if a := earlier[i]; top == nil || a.Tokens[lk.key] > top.Tokens[lk.key] {
					top = a
				}
				i++
			}
			if top != nil && top != b && top.Tokens[lk.key] > b.Tokens[lk.key] {
				out = append(out, Violation{"fifo", fmt.Sprintf(
					"%s key %q: out-of-order grant: %s (%s) was enqueued (returned %s) before %s (%s) asked (%s), yet %s was granted first: tokens %d and %d",
					lk.ns, lk.key, top.ID, top.Proc, stamp(h, top.EnqOK), b.ID, b.Proc, stamp(h, b.FirstEnq), b.ID,
					top.Tokens[lk.key], b.Tokens[lk.key])})
				break // one per key is enough to explain it
			}
		}
	}
	return out
}

// CheckLiveness checks that every request ended: granted, cancelled, or with
// an error. In a process that exited cleanly, a request that never ended is
// a lost waiter, and a wait that ran to its bound (generous, so never
// reached by a healthy lane) is a stuck queue or a lost wake-up. A process
// that neither exited nor was killed died on its own. Errors of an
// unexpected kind (invalid request, limit mismatch) are reported too.
func CheckLiveness(h *History) []Violation {
	var out []Violation
	procs := make([]string, 0, len(h.Procs))
	for p := range h.Procs {
		procs = append(procs, p)
	}
	sort.Strings(procs)
	for _, p := range procs {
		if h.Procs[p] == "" {
			out = append(out, Violation{"liveness", fmt.Sprintf("process %s died without a clean exit and without being killed", p)})
		}
	}
	for _, a := range h.Attempts {
		switch {
		case a.Outcome == Open && a.ProcExited:
			out = append(out, Violation{"liveness", fmt.Sprintf("lost waiter: %s (%s) asked for %v at %s and never got an answer though its process went on to exit",
				a.ID, a.Proc, a.Keys, stamp(h, a.Invoke))})
		case a.Outcome == Ended && a.Class == ClassTimeout:
			out = append(out, Violation{"liveness", fmt.Sprintf("stuck: %s (%s) waited for %v from %s to %s, its whole bound, without a grant (stuck queue or lost wake-up): %s",
				a.ID, a.Proc, a.Keys, stamp(h, a.Invoke), stamp(h, a.Return), a.Err)})
		case a.Outcome == Ended && a.Class == ClassOther:
			out = append(out, Violation{"liveness", fmt.Sprintf("%s (%s) failed with an unexpected error: %s", a.ID, a.Proc, a.Err)})
		case a.Outcome == Granted && a.Release == Abandoned && a.ProcExited:
			out = append(out, Violation{"liveness", fmt.Sprintf("%s (%s) was granted and never released though its process exited", a.ID, a.Proc)})
		}
	}
	return out
}

// CheckResources checks the protected resource, a counter that each holder
// reads and then writes one higher: no two accepted writes wrote the same
// value (two holders read the same value: a lost update); accepted writes
// that followed one another in real time carry non-decreasing tokens (the
// guard's job); and, when final holds the counter's value after the run, it
// is the number of accepted writes, give or take the writes whose process
// died before they returned.
func CheckResources(h *History, final map[string]int64) []Violation {
	var out []Violation
	type acc struct {
		ok, unsure int
		byValue    map[int64]ResourceOp
		writes     []ResourceOp
	}
	per := map[string]*acc{}
	for _, r := range h.Resources {
		if r.Op != OpWrite {
			continue
		}
		a := per[r.Resource]
		if a == nil {
			a = &acc{byValue: map[int64]ResourceOp{}}
			per[r.Resource] = a
		}
		switch r.Phase {
		case Ok:
			a.ok++
			a.writes = append(a.writes, r)
			if prev, dup := a.byValue[r.Value]; dup {
				out = append(out, Violation{"resource", fmt.Sprintf(
					"%s: lost update: %s (%s, token %d) and %s (%s, token %d) both read %d and wrote %d",
					r.Resource, prev.ID, prev.Proc, prev.Token, r.ID, r.Proc, r.Token, r.Value-1, r.Value)})
			}
			a.byValue[r.Value] = r
		case Invoke, Info:
			a.unsure++
		}
	}
	names := make([]string, 0, len(per))
	for n := range per {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		a := per[n]
		for i, x := range a.writes {
			for _, y := range a.writes[i+1:] {
				if x.Return < y.Invoke && x.Token > y.Token {
					out = append(out, Violation{"resource", fmt.Sprintf("%s: %s wrote with token %d, then %s was accepted with the lower token %d",
						n, x.ID, x.Token, y.ID, y.Token)})
				}
			}
		}
		if v, ok := final[n]; ok && (v < int64(a.ok) || v > int64(a.ok+a.unsure)) {
			out = append(out, Violation{"resource", fmt.Sprintf("%s: final value %d after %d accepted writes (and %d unconfirmed): updates were lost",
				n, v, a.ok, a.unsure)})
		}
	}
	return out
}

// CheckProbes checks that an entry is never renewed after its release: a
// heartbeat its owner sent after a confirmed release must find it gone.
func CheckProbes(h *History) []Violation {
	var out []Violation
	for _, a := range h.Attempts {
		if a.Probe != "" && a.Probe != "gone" {
			out = append(out, Violation{"probe", fmt.Sprintf("renewal after unlock: a heartbeat for %s (%s) after its release found it %s", a.ID, a.Proc, a.Probe)})
		}
	}
	return out
}

// CheckErrors reports every event whose error contains one of forbidden.
func CheckErrors(h *History, forbidden ...string) []Violation {
	var out []Violation
	for _, e := range h.Events {
		for _, f := range forbidden {
			if e.Err != "" && strings.Contains(e.Err, f) {
				out = append(out, Violation{"errors", fmt.Sprintf("%s %s %s of %s: %s", e.Proc, e.Op, e.Phase, e.ID, e.Err)})
			}
		}
	}
	return out
}

// CheckLostAcross checks a fault that ended every lease (Redis paused past
// the TTL, restarted without its data): no lease granted before from may
// have been released, with the backend's confirmation that it still held,
// by a release invoked after to.
func CheckLostAcross(h *History, from, to time.Time) []Violation {
	var out []Violation
	for _, a := range h.Attempts {
		if a.Outcome == Granted && a.Return < from.UnixNano() && a.Release == Released && a.RelInvoke > to.UnixNano() {
			out = append(out, Violation{"lease", fmt.Sprintf("%s (%s) was granted at %s, before the fault, and its release at %s, after it, still found it held",
				a.ID, a.Proc, stamp(h, a.Return), stamp(h, a.RelInvoke))})
		}
	}
	return out
}

// NoLeak checks that namespace b holds nothing: Inspect shows no key, and
// its state keys hold no entry, holder, waiter, deadline or nested link
// (redislane.Backend.Leftovers).
func NoLeak(ctx context.Context, b *redislane.Backend, c redis.UniversalClient) error {
	snap, err := b.Inspect(ctx, nil)
	if err != nil {
		return err
	}
	if len(snap.Keys) != 0 {
		var ks []string
		for _, k := range snap.Keys {
			ks = append(ks, fmt.Sprintf("%s (%d holders, %d waiters)", k.Key, len(k.Holders), len(k.Waiters)))
		}
		return fmt.Errorf("leak: namespace %s still has %s", b.Namespace(), strings.Join(ks, ", "))
	}
	left, err := b.Leftovers(ctx)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("leak: namespace %s still holds %s", b.Namespace(), strings.Join(left, ", "))
	}
	return nil
}

// WaitNoLeak runs NoLeak until it passes or within has passed (entries of
// killed processes leave only when their TTL ends), and returns its last
// error.
func WaitNoLeak(ctx context.Context, b *redislane.Backend, c redis.UniversalClient, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		err := NoLeak(ctx, b, c)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
