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
				if a.Limit(k) == 1 {
					keys = append(keys, held{a.NS, k})
				}
			}
		}
		for _, k := range keys {
			next := Never
			for _, b := range h.Attempts {
				if b.Proc != proc && b.Outcome == Granted && b.NS == k.ns && b.Limit(k.key) > 0 &&
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
