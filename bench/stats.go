package main

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// samples collects durations; percentiles sort a copy.
type samples struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *samples) add(d time.Duration) {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
}

func (s *samples) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.d)
}

// pct returns the p-th percentile (0 < p <= 100), nearest rank.
func (s *samples) pct(p float64) time.Duration {
	s.mu.Lock()
	d := slices.Clone(s.d)
	s.mu.Unlock()
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(math.Ceil(p/100*float64(len(d)))) - 1
	return d[max(0, min(i, len(d)-1))]
}

// results holds every measured value: kind id -> column id -> value.
// Durations are stored in microseconds.
type results struct {
	order []string
	vals  map[string]map[string]float64
	notes []string
}

func newResults(ks []*kind) *results {
	r := &results{vals: map[string]map[string]float64{}}
	for _, k := range ks {
		r.order = append(r.order, k.id)
		r.vals[k.id] = map[string]float64{}
	}
	return r
}

// set records a value; kind may also name a row that is no contender
// (envRow).
func (r *results) set(kind, col string, v float64) {
	if r.vals[kind] == nil {
		r.vals[kind] = map[string]float64{}
	}
	r.vals[kind][col] = v
}

// envRow is the row of values that belong to no contender: the raw round
// trip measured beside the handoffs, the enqueue step's script time.
const envRow = "env"

func (r *results) get(kind, col string) (float64, bool) {
	m, ok := r.vals[kind]
	if !ok {
		return 0, false
	}
	v, ok := m[col]
	return v, ok
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// fmtUS prints microseconds: "212µs", "3.41ms", "152ms", "1.20s".
func fmtUS(v float64) string {
	switch {
	case v < 1:
		return fmt.Sprintf("%.2fµs", v)
	case v < 10_000:
		return fmt.Sprintf("%.0fµs", v)
	case v < 100_000:
		return fmt.Sprintf("%.1fms", v/1000)
	case v < 1_000_000:
		return fmt.Sprintf("%.0fms", v/1000)
	default:
		return fmt.Sprintf("%.2fs", v/1e6)
	}
}

// fmtCount prints a rate or count with thousands separators.
func fmtCount(v float64) string {
	if v < 10 && v != math.Trunc(v) {
		return fmt.Sprintf("%.1f", v)
	}
	n := int64(math.Round(v))
	s := fmt.Sprint(n)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// ratio prints a/b as "2.3x".
func ratio(a, b float64) string {
	if b == 0 {
		return "∞"
	}
	r := a / b
	if r >= 10 {
		return fmt.Sprintf("%.0fx", r)
	}
	return fmt.Sprintf("%.1fx", r)
}

// note records a line for the details under the table.
func (r *results) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}
