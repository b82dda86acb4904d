package chaos

import (
	"fmt"
	"time"
)

// The checkers of nested requests (DESIGN.md invariant 10): a request whose
// lineage names a holder of one of its keys re-enters that key at once,
// with its lender's token and without a slot of its own, and a borrowed
// slot lives no longer than the lease it borrows from.

// CheckReentry checks re-entry where the history proves the parent held
// the key throughout the nested request: the parent (the last entry of its
// lineage) was granted the key in its own right before the nested request
// was invoked, and its release, confirmed by the backend, came after the
// nested request returned, with no loss noticed in between. Then a nested
// request granted must carry the parent's token for that key, and one that
// names only keys the parent held must have been granted at once (by the
// Enqueue step that first answered), never queued or refused.
func CheckReentry(h *History) []Violation {
	var out []Violation
	for _, a := range h.Attempts {
		if len(a.Lineage) == 0 || a.Outcome == Open {
			continue
		}
		p := h.ByID[a.Lineage[len(a.Lineage)-1]]
		if p == nil || p.Outcome != Granted || p.NS != a.NS {
			continue
		}
		first := a.FirstEnq
		if first == 0 {
			first = a.Invoke
		}
		if p.Return >= first || p.Release != Released || p.RelInvoke <= a.Return || (p.Lost != 0 && p.Lost <= a.Return) {
			continue // not proven to hold throughout
		}
		var shared []string
		for _, k := range a.Keys {
			if p.Limit(k) > 0 && p.Borrowed[k] == "" {
				shared = append(shared, k)
			}
		}
		if len(shared) == 0 {
			continue
		}
		if a.Outcome == Granted {
			for _, k := range shared {
				if a.Tokens[k] != p.Tokens[k] {
					out = append(out, Violation{"reentry", fmt.Sprintf(
						"%s key %q: %s (%s), nested under %s (%s) which held the key from %s to %s, got token %d instead of its parent's %d",
						a.NS, k, a.ID, a.Proc, p.ID, p.Proc, stamp(h, p.Return), stamp(h, p.RelInvoke), a.Tokens[k], p.Tokens[k])})
				}
			}
		}
		if len(shared) == len(a.Keys) && (a.Outcome != Granted || !a.EnqReady) {
			what := "was queued"
			if a.Outcome != Granted {
				what = fmt.Sprintf("ended without a grant (%s: %s)", a.Class, a.Err)
			}
			out = append(out, Violation{"reentry", fmt.Sprintf(
				"%s: %s (%s) asked at %s for %v, every one held by its parent %s (%s) from %s to %s, and %s instead of being granted at once",
				a.NS, a.ID, a.Proc, stamp(h, a.Invoke), a.Keys, p.ID, p.Proc, stamp(h, p.Return), stamp(h, p.RelInvoke), what)})
		}
	}
	return out
}

// nextOwnGrant returns the grant of key (limit 1) in its own right with the
// lowest token above tok: the next holder after the one that got tok, by
// the token order the fencing checker vouches for. nil if none.
func nextOwnGrant(h *History, ns, key string, tok uint64) *Attempt {
	var next *Attempt
	for _, g := range h.Attempts {
		if g.Outcome != Granted || g.NS != ns || g.Limit(key) == 0 || g.Borrowed[key] != "" {
			continue
		}
		if t := g.Tokens[key]; t > tok && (next == nil || t < next.Tokens[key]) {
			next = g
		}
	}
	return next
}

// ended describes how a granted attempt's lease ended.
func ended(h *History, a *Attempt) string {
	switch {
	case a.Release == Released:
		return fmt.Sprintf("released by its holder at %s", stamp(h, a.RelInvoke))
	case a.Lost != 0:
		return fmt.Sprintf("lost (noticed at %s)", stamp(h, a.Lost))
	case h.Procs[a.Proc] == "kill" || h.Procs[a.Proc] == "crash":
		return "ended with its killed process"
	}
	return "ended unconfirmed"
}

// CheckBorrowers checks that a borrowed slot never outlives its lender
// (DESIGN.md invariants 6 and 10). An entry that took a key by re-entry is
// removed whole when that key's lender leaves (the keys it holds in its own
// right go too). Once a key (of limit 1) it held was granted to the next
// holder in its own right, the entry may neither find its lease valid
// (Lease.Err nil) nor have its release confirmed. The next holder of a
// borrowed key is the grant with the lowest token above the lender's, of a
// key held in its own right the one above the entry's own token (tokens
// order grants; the fencing checker vouches for that order), so the check
// needs no guess about when the lender's lease ended. With lag above 0
// (Options.BorrowLag), an entry whose lender's lease may have ended before
// that grant and that was told within lag of it is reported as
// "borrow-lag" (the known bug), otherwise as "borrow".
func CheckBorrowers(h *History, lag time.Duration) []Violation {
	var out []Violation
	for _, a := range h.Attempts {
		if len(a.Borrowed) == 0 {
			continue
		}
		for _, k := range a.Keys {
			if a.Limit(k) != 1 {
				continue
			}
			var l, g *Attempt
			how := "re-entered"
			if l = h.Lender(a, k); l != nil {
				g = nextOwnGrant(h, a.NS, k, l.Tokens[k])
			} else {
				how = "held it in its own right"
				g = nextOwnGrant(h, a.NS, k, a.Tokens[k])
				for x := range a.Borrowed {
					if y := h.Lender(a, x); y != nil && g != nil {
						if call, _, _ := leaveWindow(y); call < g.Return {
							l = y
							how += fmt.Sprintf(", revocable with %q", x)
						}
					}
				}
			}
			if g == nil {
				continue
			}
			msg, last := "", int64(0)
			for _, v := range a.Valid {
				if v[0] > g.Return {
					msg, last = fmt.Sprintf("still found its lease valid at %s", stamp(h, v[0])), v[0]
				}
			}
			if a.Release == Released && a.RelInvoke > g.Return {
				msg, last = fmt.Sprintf("had its release at %s confirmed as held until then", stamp(h, a.RelInvoke)), a.RelInvoke
			}
			if msg == "" {
				continue
			}
			late := time.Duration(last - g.Return)
			if l == nil {
				out = append(out, Violation{"borrow", fmt.Sprintf(
					"%s key %q: %s (%s) held it in its own right (token %d) and %s, after %s (%s) was granted the key at %s (token %d), though none of its lenders had ended",
					a.NS, k, a.ID, a.Proc, a.Tokens[k], msg, g.ID, g.Proc, stamp(h, g.Return), g.Tokens[k])})
				continue
			}
			tok := l.Tokens[k]
			if l != h.Lender(a, k) {
				tok = a.Tokens[k]
			}
			checker := "borrow"
			if lag > 0 && late <= lag {
				checker = "borrow-lag"
			}
			out = append(out, Violation{checker, fmt.Sprintf(
				"%s key %q: a borrowed slot outlived its lender by %v: %s (%s) %s (token %d) under %s (%s; %s) and %s, after %s (%s) was granted the key in its own right at %s (token %d)",
				a.NS, k, roundUS(late), a.ID, a.Proc, how, tok, l.ID, l.Proc, ended(h, l), msg,
				g.ID, g.Proc, stamp(h, g.Return), g.Tokens[k])})
		}
	}
	return out
}

// NestStats is what a history's nested requests did.
type NestStats struct {
	Nested    int // requests with a lineage
	Reentered int // granted, with at least one key by re-entry
	Cross     int // of which from a lender in another process
	Cycles    int // refused as closing a lock cycle
	// Orphaned counts borrowers (of a key of limit 1) still holding when
	// their lender's lease ended: they must be told before the next holder
	// of the key in its own right is granted. Notice is, for each one, how
	// long after that grant returned its Lost closed (0: before it, or
	// never told because it released first, or its process was stopped
	// meanwhile and told on waking).
	Orphaned int
	Notice   []time.Duration
}

// Nesting measures the nested requests of h.
func Nesting(h *History) NestStats {
	var st NestStats
	for _, a := range h.Attempts {
		if len(a.Lineage) == 0 {
			continue
		}
		st.Nested++
		if a.Outcome == Ended && a.Class == ClassCycle {
			st.Cycles++
		}
		if len(a.Borrowed) == 0 {
			continue
		}
		st.Reentered++
		cross, orphaned := false, false
		var notice time.Duration
		for k := range a.Borrowed {
			l := h.Lender(a, k)
			cross = cross || l.Proc != a.Proc
			if a.Limit(k) != 1 {
				continue
			}
			g := nextOwnGrant(h, a.NS, k, l.Tokens[k])
			if g == nil {
				continue
			}
			lenderEnd := g.Return // limit 1: the lender ended before the next grant
			if l.Release == Released {
				lenderEnd = min(lenderEnd, l.RelInvoke)
			}
			end := h.End
			if a.RelInvoke != 0 {
				end = a.RelInvoke
			}
			if a.Lost != 0 {
				end = min(end, a.Lost)
			}
			if end <= lenderEnd {
				continue // ended before its lender
			}
			orphaned = true
			if a.Lost != 0 && !stoppedDuring(h, a.Proc, g.Return, a.Lost) {
				notice = max(notice, time.Duration(a.Lost-g.Return))
			}
		}
		if cross {
			st.Cross++
		}
		if orphaned {
			st.Orphaned++
			st.Notice = append(st.Notice, notice)
		}
	}
	return st
}

// roundUS rounds d to the microsecond, unless it is shorter.
func roundUS(d time.Duration) time.Duration {
	if d < time.Microsecond {
		return d
	}
	return d.Round(time.Microsecond)
}

// stoppedDuring reports whether the harness had proc stopped (SIGSTOP) at
// some instant of [from, to].
func stoppedDuring(h *History, proc string, from, to int64) bool {
	var since int64 = -1
	for _, e := range h.Faults {
		if e.ID != proc {
			continue
		}
		switch e.Op {
		case OpPause:
			since = e.Time
		case OpResume:
			if since >= 0 && since <= to && e.Time >= from {
				return true
			}
			since = -1
		}
	}
	return since >= 0 && since <= to
}
