package sched

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// Rate lanes (issue 15; RFD 129 names time-based lanes as its extension).

// Rate bounds how many units the calls of the tools naming Key spend per
// window, across every process of the namespace: at most Limit per Per
// (lanes.Rate). The calls take Key's lane (ConcurrencyPrefix + Key, the
// same lane as a concurrency key of that name) in its FIFO order, with its
// concurrency limit when the tool's Concurrency names the same key, else
// bounded by the rate alone. TOML: rate = { key = "partner", limit = 60,
// per = "1m" }.
type Rate struct {
	Key   string
	Limit int
	Per   time.Duration // a whole number of ms from 1ms to lanes.MaxRatePer
}

// rate is r as package lanes takes it.
func (r Rate) rate() lanes.Rate { return lanes.Rate{Limit: r.Limit, Per: r.Per} }

// CostFunc tells what one call of a tool with a Rate spends of it, from the
// call's arguments: a whole number from 1 to the rate's limit. An error (or
// a panic) fails that call alone, never dispatched, with code CodeCost.
type CostFunc func(ctx context.Context, args json.RawMessage) (int, error)

// CostOf returns the CostFunc of a fixed cost n.
func CostOf(n int) CostFunc {
	return func(context.Context, json.RawMessage) (int, error) { return n, nil }
}

// CostFromArgument returns the CostFunc that reads the whole number in the
// top-level argument name of the call (TOML: cost = "{max_tokens}"). A
// missing argument, or one that is not a whole number (a JSON number or a
// string of digits), is an error naming it.
func CostFromArgument(name string) CostFunc {
	return func(_ context.Context, args json.RawMessage) (int, error) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(args, &m); err != nil {
			return 0, fmt.Errorf("arguments are not a JSON object: %w", err)
		}
		raw, ok := m[name]
		if !ok {
			return 0, fmt.Errorf("argument %q is missing", name)
		}
		var f float64
		text := strings.TrimSpace(string(raw)) // as the call wrote it, for an error
		if text == "null" {
			return 0, fmt.Errorf("argument %q is null, not a number", name)
		}
		if err := json.Unmarshal(raw, &f); err != nil {
			var s string
			if json.Unmarshal(raw, &s) != nil || json.Unmarshal([]byte(strings.TrimSpace(s)), &f) != nil {
				return 0, fmt.Errorf("argument %q is %.40s, not a number", name, raw)
			}
			text = strings.TrimSpace(s)
		}
		if f != math.Trunc(f) || f < 1 || f > lanes.MaxLimit {
			return 0, fmt.Errorf("argument %q is %.40s, not a whole number from 1 to %d", name, text, lanes.MaxLimit)
		}
		return int(f), nil
	}
}

// errCost marks the error of a CostFunc.
var errCost = errors.New("could not tell what the call costs")

// rateLane returns the lane of t's Rate for args, with its cost; ok false
// when t has none. A cost the rate could never grant (above its limit) is
// an error too.
func rateLane(ctx context.Context, t Tool, name string, args json.RawMessage) (l lanes.Lane, ok bool, err error) {
	if t.Rate == nil {
		return lanes.Lane{}, false, nil
	}
	cost := 1
	if t.Cost != nil {
		if cost, err = safeCost(t.Cost, ctx, args); err != nil {
			return lanes.Lane{}, true, fmt.Errorf("%w: %w", errCost, err)
		}
		if cost < 1 || cost > t.Rate.Limit {
			return lanes.Lane{}, true, fmt.Errorf("%w: cost %d is out of range 1..%d (the rate %s of key %q)", errCost, cost, t.Rate.Limit, t.Rate.rate(), t.Rate.Key)
		}
	}
	return lanes.Lane{Key: ConcurrencyPrefix + t.Rate.Key, Rate: t.Rate.rate(), Cost: cost}, true, nil
}

// safeCost runs a CostFunc, a panic its error.
func safeCost(f CostFunc, ctx context.Context, args json.RawMessage) (n int, err error) {
	defer func() {
		if p := recover(); p != nil {
			n, err = 0, fmt.Errorf("panicked: %v", p)
		}
	}()
	return f(ctx, args)
}

// claim is what one tool says of a key: its concurrency limit (0: none)
// or its rate (zero: none).
type claim[T comparable] struct {
	tool string
	v    T
}

// rateClaims checks t's Rate and Cost and adds what t (named n) says of
// the rates of the keys it names: its concurrency key has no rate unless
// its Rate names the same key; a rate key of its own is bounded by the
// rate alone (concurrency limit 0).
func (t Tool) rateClaims(n string, claims map[string][]claim[int], rates map[string][]claim[lanes.Rate], add func(string, ...any)) (map[string][]claim[int], map[string][]claim[lanes.Rate]) {
	ck, _ := t.Concurrency.key(n)
	if ck == "" {
		ck = t.Concurrency.Key
	}
	if t.Rate == nil {
		if t.Cost != nil {
			add("tool %s: a cost without a rate", n)
		}
		if ck != "" {
			rates[ck] = append(rates[ck], claim[lanes.Rate]{n, lanes.Rate{}})
		}
		return claims, rates
	}
	rk, r := t.Rate.Key, t.Rate.rate()
	if rk == "" {
		add("tool %s: a rate needs a key", n)
		return claims, rates
	}
	if err := lanes.ValidateKey(ConcurrencyPrefix + rk); err != nil {
		add("tool %s: rate key %q: %v", n, rk, err)
	}
	if err := r.Validate(); err != nil {
		add("tool %s: rate of key %q: %s", n, rk, strings.TrimPrefix(err.Error(), "lanes: invalid rate: "))
	}
	rates[rk] = append(rates[rk], claim[lanes.Rate]{n, r})
	if ck != rk {
		if ck != "" {
			rates[ck] = append(rates[ck], claim[lanes.Rate]{n, lanes.Rate{}})
		}
		claims[rk] = append(claims[rk], claim[int]{n, 0})
	}
	return claims, rates
}

// agree adds a problem for each key whose tools say different things of
// it (one key, one limit and one rate: RFD 129, DESIGN.md invariant 15),
// naming every tool and what it says (words); format takes the key and
// that list.
func agree[T comparable](claims map[string][]claim[T], format string, words func(T) string, add func(string, ...any)) {
	for _, k := range slices.Sorted(maps.Keys(claims)) {
		cs := claims[k]
		for _, c := range cs[1:] {
			if c.v != cs[0].v {
				var desc []string
				for _, c := range cs {
					desc = append(desc, c.tool+" says "+words(c.v))
				}
				add(format, k, strings.Join(desc, ", "))
				break
			}
		}
	}
}

// limitWords is a concurrency limit in a configuration error: 0 is none
// (unbounded, or a tool whose rate alone bounds the key).
func limitWords(n int) string {
	if n == 0 {
		return "0 (no concurrency limit)"
	}
	return strconv.Itoa(n)
}

// rateWords is a rate in a configuration error.
func rateWords(r lanes.Rate) string {
	if r.IsZero() {
		return "no rate"
	}
	return r.String()
}
