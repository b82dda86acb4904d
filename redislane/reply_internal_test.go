package redislane

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/lanes-dev/lanes/lanes"
)

// The parsers of protocol 4's flat replies (docs/PROTOCOL.md, Flat
// replies) refuse, as ErrUnavailable, every reply that is not of the
// documented shape, never reading it as something else: a break-it
// review found a position that was no integer read as 0, a key that was
// no string as "", a "g" with values, more 7, a message that was no
// string and a granted id "" accepted.
func TestReplyParsersRefuseMalformed(t *testing.T) {
	for _, c := range []struct {
		name string
		v    []any
	}{
		{"w position not an integer", []any{"ep", int64(0), "a", "w", int64(1), int64(0), int64(0), int64(2), "K", "notanumber"}},
		{"w position 0", []any{"ep", int64(0), "a", "w", int64(1), int64(0), int64(0), int64(2), "K", int64(0)}},
		{"w key not a string", []any{"ep", int64(0), "a", "w", int64(1), int64(0), int64(0), int64(2), int64(5), int64(1)}},
		{"h key not a string", []any{"ep", int64(0), "a", "h", int64(0), int64(0), int64(0), int64(2), nil, "12"}},
		{"h token not a number", []any{"ep", int64(0), "a", "h", int64(0), int64(0), int64(0), int64(2), "K", "x"}},
		{"g with values", []any{"ep", int64(0), "a", "g", int64(0), int64(0), int64(0), int64(2), "K", "12"}},
		{"more 7", []any{"ep", int64(7), "a", "g", int64(0), int64(0), int64(0), int64(0)}},
		{"e message not a string", []any{"ep", int64(0), "a", "e", int64(0), int64(0), int64(0), int64(1), int64(3)}},
		{"seq below 0", []any{"ep", int64(0), "a", "w", int64(-5), int64(0), int64(0), int64(0)}},
		{"wait below 0", []any{"ep", int64(0), "a", "w", int64(5), int64(-1), int64(0), int64(0)}},
		{"holder TTL below 0", []any{"ep", int64(0), "a", "w", int64(5), int64(0), int64(-1), int64(0)}},
		{"holder TTL not an integer", []any{"ep", int64(0), "a", "w", int64(5), int64(0), "9", int64(0)}},
		{"a protocol 3 status (no holder TTL)", []any{"ep", int64(0), "a", "w", int64(5), int64(0), int64(2), "K", int64(1)}},
		{"fewer values than counted", []any{"ep", int64(0), "a", "h", int64(0), int64(0), int64(0), int64(4), "K", "1"}},
		{"a status too many", []any{"ep", int64(0), "a", "g", int64(0), int64(0), int64(0), int64(0), "b", "g", int64(0), int64(0), int64(0), int64(0)}},
		{"a state unknown", []any{"ep", int64(0), "a", "q", int64(0), int64(0), int64(0), int64(0)}},
		{"f with values", []any{"ep", int64(0), "a", "f", int64(0), int64(0), int64(0), int64(1), "K"}},
	} {
		if st, err := parseStatuses(c.v, 1); !errors.Is(err, lanes.ErrUnavailable) {
			t.Errorf("%s: parseStatuses(%v) = %+v, %v; want ErrUnavailable", c.name, c.v, st, err)
		}
	}
	for _, v := range [][]any{{"ep", "h", nil}, {"ep", "h", ""}, {"ep", "z"}, {"ep"}, {int64(1), "h"}} {
		if r, err := parseReleased(v, 1); !errors.Is(err, lanes.ErrUnavailable) {
			t.Errorf("parseReleased(%v) = %+v, %v; want ErrUnavailable", v, r, err)
		}
	}
	// and what they are for: the documented example of PROTOCOL.md
	st, err := parseStatuses([]any{"1796061103629244", int64(0), "e1", "h", int64(0), int64(0), int64(0), int64(2), "k", "1839166570116346"}, 1)
	if err != nil || st[0].State != lanes.Held || st[0].Tokens["k"] != 1839166570116346 || st[0].Epoch != "1796061103629244" {
		t.Errorf("parseStatuses of an uncontended grant = %+v, %v", st, err)
	}
	st, err = parseStatuses([]any{"ep", int64(1), "a", "w", int64(7), int64(30), int64(450), int64(2), "K", int64(3), "b", "g", int64(0), int64(0), int64(0), int64(0)}, 2)
	if err != nil || st[0].State != lanes.Waiting || st[0].Positions["K"] != 3 || st[0].Seq != 7 || !st[0].Backlog ||
		st[0].RateWait.Milliseconds() != 30 || st[0].HolderTTL.Milliseconds() != 450 || st[1].State != lanes.Gone {
		t.Errorf("parseStatuses of a waiter and a gone entry = %+v, %v", st, err)
	}
	// A heartbeat's "f" is gone, released by force; the "g" the scripts
	// before it sent there (and send for every other gone entry) is gone
	// without it, as it always read.
	st, err = parseStatuses([]any{"ep", int64(0), "a", "f", int64(0), int64(0), int64(0), int64(0), "b", "g", int64(0), int64(0), int64(0), int64(0)}, 2)
	if err != nil || st[0].State != lanes.Gone || !st[0].Forced || st[1].State != lanes.Gone || st[1].Forced {
		t.Errorf("parseStatuses of a forced and a gone entry = %+v, %v; want both gone, the first forced", st, err)
	}
	r, err := parseReleased([]any{"ep", "h", "w2"}, 1)
	if err != nil || r.Was[0] != lanes.Held || len(r.Granted) != 1 || r.Granted[0] != "w2" {
		t.Errorf("parseReleased of a hand-off = %+v, %v", r, err)
	}
}

// Random replies near the documented shape never make the parsers panic.
func TestReplyParsersNeverPanic(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var value func(depth int) any
	value = func(depth int) any {
		switch r.IntN(9) {
		case 0:
			return nil
		case 1, 2:
			return int64(r.IntN(7) - 2)
		case 3:
			return []int64{-1 << 62, 1 << 62, -1, 0, 1 << 40}[r.IntN(5)]
		case 4, 5:
			return []string{"h", "w", "g", "e", "x", "t", "b", "c", "f", "l", "", "k", "123", "18446744073709551616"}[r.IntN(14)]
		case 6:
			if depth > 2 {
				return "d"
			}
			l := make([]any, r.IntN(4))
			for i := range l {
				l[i] = value(depth + 1)
			}
			return l
		case 7:
			return fmt.Errorf("e")
		default:
			return 3.5
		}
	}
	for i := range 50_000 {
		n := r.IntN(4)
		var v any
		if r.IntN(10) == 0 {
			v = value(0)
		} else {
			l := []any{"ep", int64(r.IntN(2))}
			for range r.IntN(20) {
				l = append(l, value(1))
			}
			v = l
		}
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("reply %d: a parser panicked on %#v (n %d): %v", i, v, n, p)
				}
			}()
			parseStatuses(v, n)
			parseReleased(v, n)
		}()
	}
}
