package redislane

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/scripts/lua"
)

var doctorScript = redis.NewScript(lua.Source("doctor.lua"))

// Report is what Doctor found in a namespace.
type Report struct {
	Namespace string
	Epoch     string   // "" when the namespace has no state
	Missing   []string // state keys missing (or without their marker) while others exist: the next step resets the namespace
	Legacy    []string // keys of protocol 1 (lanes before protocol 2), which later protocols do not read; where they are the namespace's only keys, its entries, queue and deadlines too
	Problems  []string // one line each: an entry or member and what is wrong
	Repairs   []string // what Doctor changed (with repair set)
	Reaped    int      // expired entries removed (with repair set)
	// Resets counts the resets of the namespace's state since it was made
	// (a state key vanished, or a repair reset it): each ended every lease
	// and waiter. Frozen is how long after Doctor's check grants are still
	// held back by the last reset (docs/PROTOCOL.md, "Reset and freeze");
	// 0 when they are not. Neither is a problem: OK does not look at them.
	Resets int64
	Frozen time.Duration
	// Expired counts the entries whose deadline had passed at the end of
	// Doctor and that are not yet removed (a crash of many holders leaves
	// a backlog: every step removes up to 100, and lanectl's views show
	// them until then). Like Resets, it is not a problem.
	Expired int64
}

// OK reports whether Doctor found nothing wrong.
func (r *Report) OK() bool { return len(r.Missing)+len(r.Legacy)+len(r.Problems) == 0 }

// legacyKeys are the names of protocol 1's keys that protocol 2 does not
// use; a namespace where they exist was used by an older lanes.
var legacyKeys = []string{"holds", "limits", "tokens", "seq", "stats"}

// Doctor checks the namespace's state for inconsistencies between its keys,
// one bounded page at a time (doctor.lua), and reports them. With repair,
// it also fixes them: stray members are removed, key records mended (a
// holder that is none dropped, the waiter count taken from the queue),
// expired entries reaped, a namespace missing some of its keys
// or whose entries disagree with their index is reset (every entry ends;
// see DESIGN.md invariant 13), and protocol 1's leftover keys are deleted
// when no protocol 1 entry is alive in them. It does not stop other steps
// meanwhile. Its error wraps lanes.ErrUnavailable when Redis cannot be
// reached.
func (b *Backend) Doctor(ctx context.Context, repair bool) (*Report, error) {
	r := &Report{Namespace: b.ns}
	base := b.keys[0][:strings.LastIndex(b.keys[0], ":")+1]
	protocol1 := false // the namespace holds protocol 1's keys alone
	n, err := b.c.Exists(ctx, b.keys[:6]...).Result()
	if err != nil {
		return nil, b.mapErr(err)
	}
	if n > 0 {
		// A state key counts as missing without its marker: it vanished and
		// a write made it again (docs/PROTOCOL.md, "Markers").
		for i, k := range b.keys[:6] {
			var marked bool
			switch i {
			case 0, 1, 5: // entries, lanes, meta: hashes
				marked, err = b.c.HExists(ctx, k, "\x00").Result()
			default: // queue, deadlines, nested: sorted sets
				err = b.c.ZScore(ctx, k, "\x00").Err()
				marked = err == nil
				if err == redis.Nil {
					err = nil
				}
			}
			if err != nil {
				return nil, b.mapErr(err)
			}
			if !marked {
				r.Missing = append(r.Missing, k)
			}
		}
		if len(r.Missing) == 6 {
			// No marker at all and no meta: protocol 1's keys (Legacy),
			// among them its entries, queue and deadlines, which the
			// scripts refuse (LANES_VERSION data:1) and doctor.lua too.
			if m, err := b.c.Exists(ctx, b.keys[5]).Result(); err != nil {
				return nil, b.mapErr(err)
			} else if m == 0 {
				protocol1 = true
				for _, k := range r.Missing {
					if e, _ := b.c.Exists(ctx, k).Result(); e == 1 {
						r.Legacy = append(r.Legacy, k)
					}
				}
				r.Missing = nil
			}
		}
	}
	for _, name := range legacyKeys {
		if e, _ := b.c.Exists(ctx, base+name).Result(); e == 1 {
			r.Legacy = append(r.Legacy, base+name)
		}
	}
	mode := "check"
	if repair {
		mode = "repair"
	}
	walks := []string{"entries", "queue", "deadlines", "nested", "lanes"}
	if !repair && len(r.Missing) > 0 {
		// doctor.lua's first look at such a namespace resets it; a check
		// changes nothing: the next step (or a repair) resets it.
		walks = nil
	}
	if protocol1 {
		walks = nil // nothing of a later protocol to walk; its keys are Legacy
	} else if repair {
		walks = append([]string{"reap"}, walks...)
		if len(r.Missing) > 0 {
			r.Repairs = append(r.Repairs, "reset the namespace: some of its keys were missing (every entry ended)")
		}
	}
	for _, what := range walks {
		for cursor, pages := "0", 0; ; pages++ {
			v, err := b.run(ctx, doctorScript, "doctor", Protocol, b.wake, what, mode, cursor, 200)
			if err != nil {
				return nil, b.mapErr(err)
			}
			f, ok := v.([]any)
			if !ok || len(f) != 5 {
				return nil, malformed("doctor", v)
			}
			r.Epoch, _ = f[0].(string)
			cursor, _ = f[1].(string)
			r.Problems = append(r.Problems, stringList(f[2])...)
			r.Repairs = append(r.Repairs, stringList(f[3])...)
			reaped, _ := f[4].(int64)
			r.Reaped += int(reaped)
			if cursor == "0" || cursor == "" || r.Epoch == "" || pages > 100000 {
				break
			}
		}
		if r.Epoch == "" {
			break
		}
	}
	if r.Epoch != "" {
		if err := b.resetState(ctx, r); err != nil {
			return nil, err
		}
	}
	if repair && len(r.Legacy) > 0 {
		// Protocol 1 kept each entry's deadline in the deadlines key; where
		// protocol 2's state is there, those of protocol 1 are gone.
		var live int64
		if r.Epoch == "" {
			live, err = b.c.ZCount(ctx, base+"deadlines", fmt.Sprint(b.now(ctx)), "+inf").Result()
			if err != nil {
				return nil, b.mapErr(err)
			}
		}
		if live > 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("%d entries of protocol 1 are still alive: stop the older lanectl and runners first", live))
		} else {
			if err := b.c.Del(ctx, r.Legacy...).Err(); err != nil {
				return nil, b.mapErr(err)
			}
			r.Repairs = append(r.Repairs, "deleted protocol 1's keys "+strings.Join(r.Legacy, ", "))
		}
	}
	return r, nil
}

// resetState reads into r the namespace's count of resets (meta's
// "resets"), the freeze its marker holds (docs/PROTOCOL.md, "Markers") and
// the expired entries not yet removed.
func (b *Backend) resetState(ctx context.Context, r *Report) error {
	resets := b.c.HGet(ctx, b.keys[5], "resets")
	marker := b.c.HGet(ctx, b.keys[1], "\x00")
	now := b.c.Time(ctx)
	for _, err := range []error{resets.Err(), marker.Err(), now.Err()} {
		if err != nil && err != redis.Nil {
			return b.mapErr(err)
		}
	}
	r.Resets, _ = strconv.ParseInt(resets.Val(), 10, 64)
	// A lender kept for its borrowers has its deadline raised to theirs;
	// the deadlines key's marker, scored -inf, is no entry (miniredis
	// counts it in "(-inf": it is subtracted instead).
	expired, err := b.c.ZCount(ctx, b.keys[3], "-inf", strconv.FormatInt(now.Val().UnixMilli(), 10)).Result()
	if err != nil {
		return b.mapErr(err)
	}
	switch err := b.c.ZScore(ctx, b.keys[3], "\x00").Err(); err {
	case nil:
		expired--
	case redis.Nil:
	default:
		return b.mapErr(err)
	}
	r.Expired = max(expired, 0)
	// "<protocol> <epoch> <frozen> <maxttl> <tombs>": frozen in ms of the
	// Redis clock.
	if f := strings.Fields(marker.Val()); len(f) >= 3 {
		frozen, _ := strconv.ParseInt(f[2], 10, 64)
		if left := frozen - now.Val().UnixMilli(); left > 0 {
			r.Frozen = time.Duration(left) * time.Millisecond
		}
	}
	return nil
}

// now returns the Redis clock in ms, or 0 when it cannot be read.
func (b *Backend) now(ctx context.Context) int64 {
	t, err := b.c.Time(ctx).Result()
	if err != nil {
		return 0
	}
	return t.UnixMilli()
}

// Reap removes every entry whose deadline passed (held and waiting alike),
// in bounded steps, grants what that frees, and returns how many it
// removed. Every step reaps some anyway; Reap clears a backlog at once
// (`lanectl gc`).
func (b *Backend) Reap(ctx context.Context) (int, error) {
	total := 0
	for {
		v, err := b.run(ctx, doctorScript, "doctor", Protocol, b.wake, "reap", "repair", "0", 1)
		if err != nil {
			return total, b.mapErr(err)
		}
		f, ok := v.([]any)
		if !ok || len(f) != 5 {
			return total, malformed("doctor", v)
		}
		n, _ := f[4].(int64)
		total += int(n)
		if done, _ := f[1].(string); done == "0" {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("%w: %w", lanes.ErrUnavailable, err)
		}
	}
}

func stringList(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// Leftovers lists what the namespace's state holds besides its markers and
// idle key records (each keeps its fencing token): entries,
// holders, waiters, deadlines and nested links, one line each. A namespace
// whose users all released what they took has none. It reads the keys
// directly (HGETALL, ZRANGE), for tests and tools, not atomically.
func (b *Backend) Leftovers(ctx context.Context) ([]string, error) {
	var out []string
	ents, err := b.c.HGetAll(ctx, b.keys[0]).Result()
	if err != nil {
		return nil, b.mapErr(err)
	}
	for id := range ents {
		if id != "\x00" {
			out = append(out, "entry "+id)
		}
	}
	recs, err := b.c.HGetAll(ctx, b.keys[1]).Result()
	if err != nil {
		return nil, b.mapErr(err)
	}
	if f := strings.Fields(recs["\x00"]); len(f) >= 2 {
		for key, rec := range recs {
			if key != "\x00" && activeRecord(rec, f[1]) {
				out = append(out, fmt.Sprintf("key %q: %s", key, rec))
			}
		}
	}
	for i, name := range []string{"queue", "deadlines", "nested"} {
		ms, err := b.c.ZRange(ctx, b.keys[2+i], 0, -1).Result()
		if err != nil {
			return nil, b.mapErr(err)
		}
		for _, m := range ms {
			if m != "\x00" {
				out = append(out, fmt.Sprintf("%s member %q", name, m))
			}
		}
	}
	return out, nil
}
