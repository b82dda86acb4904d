package chaos

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// Recovery is how long a key of limit 1 stayed unusable after its holder
// crashed: from the crash (or the harness's kill) to the next grant of the
// key to a request that was already waiting at the crash.
type Recovery struct {
	Proc, Key string
	Took      time.Duration
}

// Recoveries measures every crash of a holder in h. A crash counts when its
// process held a key of limit 1 at that instant (granted, not yet
// released; or, for an Enqueue step it committed just before dying, granted
// by that step) and another request was waiting for the key. A crash with
// a release in flight does not count: the release may have landed.
func Recoveries(h *History) []Recovery {
	type held struct{ ns, key string }
	var out []Recovery
	for _, c := range h.Crashes {
		if c.Op == OpCrash && c.Err == CrashReleasing {
			continue
		}
		proc := c.Proc
		if c.Op == OpKill {
			proc = c.ID
		}
		var keys []held
		if c.Op == OpCrash && c.Err == CrashEnqueue && c.State == "held" {
			for i, k := range c.Keys {
				if c.Limits[i] == 1 {
					keys = append(keys, held{c.NS, k})
				}
			}
		}
		for _, a := range h.Attempts {
			if a.Proc != proc || a.Outcome != Granted || a.Return > c.Time {
				continue
			}
			if a.Release != Abandoned && a.RelReturn <= c.Time || a.RelInvoke != 0 && a.RelInvoke <= c.Time {
				continue // released, or its release in flight
			}
			for _, k := range a.Keys {
				if a.Limit(k) == 1 && a.Borrowed[k] == "" {
					keys = append(keys, held{a.NS, k})
				}
			}
		}
		for _, k := range keys {
			next := Never
			for _, b := range h.Attempts {
				if b.Proc != proc && b.Outcome == Granted && b.NS == k.ns && b.Limit(k.key) > 0 && b.Borrowed[k.key] == "" &&
					b.Invoke < c.Time && b.Return > c.Time && b.Return < next {
					next = b.Return
				}
			}
			if next != Never {
				out = append(out, Recovery{proc, k.ns + "/" + k.key, time.Duration(next - c.Time)})
			}
		}
	}
	return out
}

// Percentile returns the p-th percentile (0 to 100) of ds, nearest rank;
// 0 for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p/100*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Row is one scenario's line of the table in docs/RELIABILITY.md.
type Row struct {
	Scenario   string
	Processes  int // replica processes started (incarnations)
	Requests   int // lane requests made
	Granted    int // of which granted
	Faults     string
	Violations int
	Recovery   []time.Duration
	Took       time.Duration
	Command    string
}

// Markdown renders the row as a table line.
func (r Row) Markdown() string {
	rec := "n/a"
	if len(r.Recovery) > 0 {
		rec = fmt.Sprintf("%v / %v (n=%d)", Percentile(r.Recovery, 50).Round(time.Millisecond),
			Percentile(r.Recovery, 99).Round(time.Millisecond), len(r.Recovery))
	}
	return fmt.Sprintf("| %s | %d | %d (%d granted) | %s | %d | %s | %v | `%s` |",
		r.Scenario, r.Processes, r.Requests, r.Granted, r.Faults, r.Violations, rec, r.Took.Round(100*time.Millisecond), r.Command)
}

// RowHeader is the header of the table Markdown rows belong to.
const RowHeader = "| scenario | processes | lane requests | faults injected | violations | recovery after a holder crash p50 / p99 | run time | reproduce |\n" +
	"|---|---|---|---|---|---|---|---|"

// AppendReport appends row to the file named by $LANES_CHAOS_REPORT, if set.
func AppendReport(row Row) error {
	path := os.Getenv("LANES_CHAOS_REPORT")
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintln(f, strings.TrimSpace(row.Markdown()))
	return err
}

// LossNotice is how the holders of a fault that ended every lease at once
// (FLUSHALL, a restart without persistence) heard of it.
type LossNotice struct {
	// Holders counts the leases held when the fault began, in processes
	// that were neither stopped nor killed, whose release had not begun
	// before the fault ended.
	Holders int
	// Told is, for each holder, how long after the fault ended its
	// Lease.Lost closed (0 if during the fault).
	Told []time.Duration
	// Untold describes the holders that never heard: no Lost, and a
	// release after the fault that the backend confirmed as held, or no
	// end at all.
	Untold []string
	// Overlap is, for each key of limit 1 that a holder held across the
	// fault and that was granted again after it, how long the next holder
	// may have overlapped the old ones: from when its request was invoked
	// (or the fault began, if later) to the last Lost of the old holders.
	// That bounds the real overlap from above (the grant came after the
	// request, the notice before Lost was recorded); 0 when every old
	// holder was told before the new request was even sent.
	Overlap []time.Duration
	// Worst describes the largest overlap.
	Worst string
}

// NoticeOfLoss measures how the holders of h heard of a fault that began
// at from and ended at to and lost every lease; skip names processes to
// leave out (one stopped across the fault cannot hear anything).
func NoticeOfLoss(h *History, from, to time.Time, skip func(proc string) bool) LossNotice {
	var ln LossNotice
	f, t := from.UnixNano(), to.UnixNano()
	type lk struct{ ns, key string }
	old := map[lk][]*Attempt{}
	for _, a := range h.Attempts {
		if a.Outcome != Granted || a.Return >= f || (a.RelInvoke != 0 && a.RelInvoke < t) || skip(a.Proc) {
			continue
		}
		if h.Procs[a.Proc] == "kill" || h.Procs[a.Proc] == "crash" {
			continue
		}
		ln.Holders++
		switch {
		case a.Lost != 0:
			ln.Told = append(ln.Told, time.Duration(max(a.Lost-t, 0)))
		case a.Release == Released:
			ln.Untold = append(ln.Untold, fmt.Sprintf("%s (%s), granted at %s, never told: its release at %s was confirmed as held",
				a.ID, a.Proc, stamp(h, a.Return), stamp(h, a.RelInvoke)))
		case a.RelReturn != 0:
			// Told by its release's error.
			ln.Told = append(ln.Told, time.Duration(max(a.RelReturn-t, 0)))
		default:
			ln.Untold = append(ln.Untold, fmt.Sprintf("%s (%s), granted at %s, never told and never released", a.ID, a.Proc, stamp(h, a.Return)))
		}
		for _, k := range a.Keys {
			if a.Limit(k) == 1 && a.Borrowed[k] == "" {
				old[lk{a.NS, k}] = append(old[lk{a.NS, k}], a)
			}
		}
	}
	worst := time.Duration(-1)
	for k, as := range old {
		var next *Attempt
		for _, g := range h.Attempts {
			if g.Outcome == Granted && g.NS == k.ns && g.Limit(k.key) > 0 && g.Borrowed[k.key] == "" && g.FirstEnq > f &&
				(next == nil || g.Return < next.Return) {
				next = g
			}
		}
		if next == nil {
			continue
		}
		asked := max(next.FirstEnq, f)
		var d time.Duration
		var who *Attempt
		var whoTold int64
		for _, a := range as {
			told := a.Lost
			if told == 0 {
				told = a.RelReturn
			}
			if told == 0 {
				told = h.End
			}
			if x := time.Duration(max(told-asked, 0)); x >= d {
				d, who, whoTold = x, a, told
			}
		}
		ln.Overlap = append(ln.Overlap, d)
		if d > worst {
			worst = d
			ln.Worst = fmt.Sprintf("%s key %q: %s (%s) asked at %s and was granted at %s; the old holder %s (%s) heard of the loss at %s",
				k.ns, k.key, next.ID, next.Proc, stamp(h, next.FirstEnq), stamp(h, next.Return), who.ID, who.Proc, stamp(h, whoTold))
		}
	}
	return ln
}
