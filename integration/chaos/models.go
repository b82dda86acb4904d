package chaos

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// LaneOp is the input of one operation of the lane models: an entry of an
// owner (a process) takes a slot of the key with a fencing token (or, by
// re-entry, shares the slot of a lender, an ancestor in its lineage that
// holds the key), or leaves it (a release, an expiry, a loss), or (Query)
// its holder finds that its lease is still valid: Lease.Err said so, which
// by DESIGN.md invariant 6 means the backend still holds it, since the
// holder is told of a loss before the backend can grant the slot to anyone
// else. Revoke says that the lender of another key of the entry left: the
// backend removes the entry (and so its slot of this key) with it.
type LaneOp struct {
	Acquire bool
	Query   bool
	Revoke  bool
	Entry   string
	Owner   string
	Token   uint64 // of an Acquire
	// Lender is "entry@owner" of the holder whose slot an Acquire takes by
	// re-entry (DESIGN.md invariant 10); "" for a slot of its own.
	Lender string
	// Revocable marks every operation of an entry that took some key by
	// re-entry: the backend removes it, without a leave of its own, when
	// that key's lender leaves.
	Revocable bool
	// Unsure marks a leave the backend did not confirm: the entry ended
	// somewhere in the operation's window (or was revoked before).
	Unsure bool
}

// laneState is the state of one key, as sorted strings joined by commas
// (comparable, so porcupine can cache states): its holders in their own
// right ("entry@owner#token"), its borrowers ("entry@owner>lender@owner"),
// the orphans (entries the backend revoked with a lender, who may not
// have been told yet, until the next holder in its own right takes the
// slot), and the highest token granted so far.
type laneState struct {
	holders   string
	borrowers string
	orphans   string
	last      uint64
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func join(l []string) string {
	l = slices.Clone(l)
	slices.Sort(l)
	return strings.Join(l, ",")
}

// find returns the index of the member of l that is me followed by sep.
func find(l []string, me string, sep byte) int {
	return slices.IndexFunc(l, func(x string) bool { return len(x) > len(me) && x[len(me)] == sep && x[:len(me)] == me })
}

// LaneModel is the sequential specification of one key as porcupine
// checks it:
//
//   - limit 1, fenced false: an owner-aware mutex. Acquire is legal when
//     nobody holds the key; only the holder (that entry, of that owner)
//     may leave.
//   - limit 1, fenced true: a fenced mutex. Besides, each Acquire carries a
//     token strictly greater than every token granted before it.
//   - limit > 1: a semaphore with per-owner permits. At most limit entries
//     hold the key at once, an owner may hold several, and a permit is
//     given back only by the entry and owner that took it.
//
// Re-entry (DESIGN.md invariant 10): an Acquire with a Lender is legal
// only while the lender holds the key in its own right, takes no slot, and
// (fenced) carries the lender's token. When the lender leaves, the backend
// removes its borrowers with it, and revokes every entry that borrowed any
// key from it (Revoke, placed within the lender's leave). On a key of limit
// 1, what it removed become orphans: they may not know yet, but once a
// holder in its own right takes the slot, an orphan that still finds its
// lease valid, or whose release the backend confirms, held a slot that
// outlived its lender. (Limit > 1: the next holder may take another
// permit, so the entries removed are simply gone, and their later queries
// and releases are not checked: looser, never a false alarm.)
//
// Every operation of the history passed to it succeeded (a failed acquire
// took no slot the history knows of, and leaving it out only loosens the
// check, never raises a false alarm).
func LaneModel(limit int, fenced bool) porcupine.Model { return laneModel(limit, fenced, false) }

// laneModel is LaneModel; with lag (the known lag of a revoked entry,
// Options.BorrowLag), keys of limit 1 are treated as the others: what a
// lender's leave removed is gone, unchecked (CheckBorrowers bounds the lag
// instead).
func laneModel(limit int, fenced, lag bool) porcupine.Model {
	orphans := limit == 1 && !lag
	return porcupine.Model{
		Init: func() interface{} { return laneState{} },
		Step: func(state, input, _ interface{}) (bool, interface{}) {
			s, op := state.(laneState), input.(LaneOp)
			hs, bs, os := split(s.holders), split(s.borrowers), split(s.orphans)
			me := op.Entry + "@" + op.Owner
			i, j, o := find(hs, me, '#'), find(bs, me, '>'), slices.Index(os, me)
			present := i >= 0 || j >= 0 || o >= 0
			// gone: an entry the backend may have revoked unseen, whose
			// answers after that are not checked
			gone := op.Revocable && !present && !orphans
			switch {
			case op.Query:
				return present || gone, s
			case op.Acquire && op.Lender != "":
				l := find(hs, op.Lender, '#')
				if present || l < 0 || (fenced && hs[l] != fmt.Sprintf("%s#%d", op.Lender, op.Token)) {
					return false, s
				}
				s.borrowers = join(append(bs, me+">"+op.Lender))
				return true, s
			case op.Acquire:
				if present || len(hs) >= limit || (fenced && op.Token <= s.last) {
					return false, s
				}
				s.holders = join(append(hs, fmt.Sprintf("%s#%d", me, op.Token)))
				s.last = max(s.last, op.Token)
				s.orphans = ""
				return true, s
			case i >= 0: // a holder in its own right leaves, or is revoked
				hs = slices.Delete(slices.Clone(hs), i, i+1)
				var keep []string
				for _, b := range bs {
					if c, l, _ := strings.Cut(b, ">"); l == me {
						if orphans {
							os = append(os, c)
						}
					} else {
						keep = append(keep, b)
					}
				}
				if op.Revoke && orphans {
					os = append(os, me)
				}
				s.holders, s.borrowers, s.orphans = join(hs), join(keep), join(os)
			case op.Revoke:
				// not (or no longer) holding here in its own right
			case j >= 0:
				s.borrowers = join(slices.Delete(slices.Clone(bs), j, j+1))
			case o >= 0:
				s.orphans = join(slices.Delete(slices.Clone(os), o, o+1))
			case gone, op.Revocable && op.Unsure:
				// revoked, and its slot taken since
			default:
				return false, s
			}
			return true, s
		},
		Hash: func(state interface{}) uint64 {
			s := state.(laneState)
			h := fnv.New64a()
			fmt.Fprintf(h, "%s|%s|%s|%d", s.holders, s.borrowers, s.orphans, s.last)
			return h.Sum64()
		},
		DescribeOperation: func(input, _ interface{}) string {
			op := input.(LaneOp)
			switch {
			case op.Acquire && op.Lender != "":
				return fmt.Sprintf("re-enter %s (%s) under %s, token %d", op.Entry, op.Owner, op.Lender, op.Token)
			case op.Acquire:
				return fmt.Sprintf("acquire %s (%s) token %d", op.Entry, op.Owner, op.Token)
			case op.Query:
				return fmt.Sprintf("%s (%s) still valid", op.Entry, op.Owner)
			case op.Revoke:
				return fmt.Sprintf("revoke %s (%s) with a lender", op.Entry, op.Owner)
			}
			return fmt.Sprintf("leave %s (%s)", op.Entry, op.Owner)
		},
		DescribeState: func(state interface{}) string {
			s := state.(laneState)
			return fmt.Sprintf("holders [%s], borrowers [%s], orphans [%s], last token %d", s.holders, s.borrowers, s.orphans, s.last)
		},
	}
}

// leaveWindow is when a granted attempt's hold certainly ended: its
// confirmed release, or else from its grant to when a confirming release
// saw it gone (Never when nothing did).
func leaveWindow(a *Attempt) (call, ret int64, unsure bool) {
	if a.Release == Released {
		return a.RelInvoke, a.RelReturn, false
	}
	return a.Return, max(a.GoneAt, a.Return+1), true
}

// LaneOperations turns the granted attempts on key (of namespace ns) into
// porcupine operations: an acquire from its invocation to the return of
// its grant; a confirmed release from its invocation to its return; any
// other end (a lost lease, a release that failed, a process that died
// holding it) from the grant's return to when a confirming release saw it
// gone, or Never when nothing did. With validity, each Lease.Err that said
// the lease held is a Query (leave it out where the backend may lose data:
// a holder cannot be told in time of a loss nobody saw). An attempt that
// took key by re-entry acquires with its lender named; one that holds key
// in its own right but borrowed another key is revoked within the leave of
// that key's lender.
func LaneOperations(h *History, ns, key string, validity bool) (ops []porcupine.Operation, limit int) {
	clients := map[string]int{}
	client := func(a *Attempt) int {
		k := fmt.Sprintf("%s/%d", a.Proc, a.Client)
		if _, ok := clients[k]; !ok {
			clients[k] = len(clients)
		}
		return clients[k]
	}
	for _, a := range h.Attempts {
		if a.Outcome != Granted || a.NS != ns || a.Limit(key) == 0 {
			continue
		}
		limit = max(limit, a.Limit(key))
		c := client(a)
		revocable := len(a.Borrowed) > 0
		acq := LaneOp{Acquire: true, Entry: a.ID, Owner: a.Proc, Token: a.Tokens[key], Revocable: revocable}
		if l := h.Lender(a, key); l != nil {
			acq.Lender = l.ID + "@" + l.Proc
		} else if revocable {
			seen := map[string]bool{}
			for k := range a.Borrowed {
				l := h.Lender(a, k)
				if l == nil || seen[l.ID] {
					continue
				}
				seen[l.ID] = true
				call, ret, _ := leaveWindow(l)
				ops = append(ops, porcupine.Operation{ClientId: c, Input: LaneOp{Revoke: true, Entry: a.ID, Owner: a.Proc, Revocable: true},
					Call: max(call, a.Invoke), Return: max(ret, a.Invoke+1)})
			}
		}
		ops = append(ops, porcupine.Operation{ClientId: c, Input: acq, Call: a.Invoke, Return: a.Return})
		if validity {
			for _, v := range a.Valid {
				ops = append(ops, porcupine.Operation{ClientId: c, Input: LaneOp{Query: true, Entry: a.ID, Owner: a.Proc, Revocable: revocable}, Call: v[0], Return: v[1]})
			}
		}
		call, ret, unsure := leaveWindow(a)
		ops = append(ops, porcupine.Operation{ClientId: c, Input: LaneOp{Entry: a.ID, Owner: a.Proc, Revocable: revocable, Unsure: unsure}, Call: call, Return: ret})
	}
	return ops, limit
}
