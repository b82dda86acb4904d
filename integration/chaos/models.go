package chaos

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// LaneOp is the input of one operation of the lane models: an entry of an
// owner (a process) takes a slot of the key with a fencing token, or leaves
// it (a release, an expiry, a loss), or (Query) its holder finds that its
// lease is still valid: Lease.Err said so, which by DESIGN.md invariant 6
// means the backend still holds it, since the holder is told of a loss
// before the backend can grant the slot to anyone else.
type LaneOp struct {
	Acquire bool
	Query   bool
	Entry   string
	Owner   string
	Token   uint64 // of an Acquire
}

// laneState is the state of one key: its holders as sorted "entry@owner"
// strings joined by commas (comparable, so porcupine can cache states), and
// the highest token granted so far.
type laneState struct {
	holders string
	last    uint64
}

func (s laneState) list() []string {
	if s.holders == "" {
		return nil
	}
	return strings.Split(s.holders, ",")
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
// Every operation of the history passed to it succeeded (a failed acquire
// took no slot the history knows of, and leaving it out only loosens the
// check, never raises a false alarm).
func LaneModel(limit int, fenced bool) porcupine.Model {
	return porcupine.Model{
		Init: func() interface{} { return laneState{} },
		Step: func(state, input, _ interface{}) (bool, interface{}) {
			s, op := state.(laneState), input.(LaneOp)
			hs := s.list()
			me := op.Entry + "@" + op.Owner
			i := slices.Index(hs, me)
			if op.Query {
				return i >= 0, s
			}
			if op.Acquire {
				if i >= 0 || len(hs) >= limit || (fenced && op.Token <= s.last) {
					return false, s
				}
				hs = append(slices.Clone(hs), me)
				slices.Sort(hs)
				return true, laneState{holders: strings.Join(hs, ","), last: max(s.last, op.Token)}
			}
			if i < 0 {
				return false, s
			}
			hs = slices.Delete(slices.Clone(hs), i, i+1)
			return true, laneState{holders: strings.Join(hs, ","), last: s.last}
		},
		Hash: func(state interface{}) uint64 {
			s := state.(laneState)
			h := fnv.New64a()
			fmt.Fprintf(h, "%s|%d", s.holders, s.last)
			return h.Sum64()
		},
		DescribeOperation: func(input, _ interface{}) string {
			op := input.(LaneOp)
			if op.Acquire {
				return fmt.Sprintf("acquire %s (%s) token %d", op.Entry, op.Owner, op.Token)
			}
			if op.Query {
				return fmt.Sprintf("%s (%s) still valid", op.Entry, op.Owner)
			}
			return fmt.Sprintf("leave %s (%s)", op.Entry, op.Owner)
		},
		DescribeState: func(state interface{}) string {
			s := state.(laneState)
			return fmt.Sprintf("holders [%s], last token %d", s.holders, s.last)
		},
	}
}

// LaneOperations turns the granted attempts on key (of namespace ns) into
// porcupine operations: an acquire from its invocation to the return of
// its grant; a confirmed release from its invocation to its return; any
// other end (a lost lease, a release that failed, a process that died
// holding it) from the grant's return to when a confirming release saw it
// gone, or Never when nothing did. With validity, each Lease.Err that said
// the lease held is a Query (leave it out where the backend may lose data:
// a holder cannot be told in time of a loss nobody saw).
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
		ops = append(ops, porcupine.Operation{ClientId: c,
			Input: LaneOp{Acquire: true, Entry: a.ID, Owner: a.Proc, Token: a.Tokens[key]},
			Call:  a.Invoke, Return: a.Return})
		if validity {
			for _, v := range a.Valid {
				ops = append(ops, porcupine.Operation{ClientId: c, Input: LaneOp{Query: true, Entry: a.ID, Owner: a.Proc}, Call: v[0], Return: v[1]})
			}
		}
		leave := LaneOp{Entry: a.ID, Owner: a.Proc}
		if a.Release == Released {
			ops = append(ops, porcupine.Operation{ClientId: c, Input: leave, Call: a.RelInvoke, Return: a.RelReturn})
		} else {
			ops = append(ops, porcupine.Operation{ClientId: c, Input: leave, Call: a.Return, Return: max(a.GoneAt, a.Return+1)})
		}
	}
	return ops, limit
}
