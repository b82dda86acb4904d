package lanes

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Rate lanes (issue 15). A lane may carry a Rate besides its Limit: the
// grants of its key spend at most Rate.Limit units in any window of length
// Rate.Per, across every process of the namespace. Each grant spends its
// lane's Cost (1 unless it says more) at the instant of the grant, on the
// backend's clock. The backends keep a sliding log of (grant time, cost) per
// rate key, which is exact for "at most Limit units in any window of length
// Per": a unit leaves the window Per after the grant that spent it.
//
// On a key with a rate, grants follow the key's FIFO order strictly: an
// entry is granted the key only at the head of its queue, so a later
// request never overtakes an earlier one, whatever the earlier one waits
// for (the rate, another key, or the concurrency limit).

// MaxRatePer bounds a rate's window.
const MaxRatePer = 24 * time.Hour

// MaxRateLog bounds the (time, cost) pairs a backend keeps per rate key
// within a window. A grant in the same slice of the window (its
// MaxRateLog-th part: 1ms of a 1s window) as the key's last grant joins
// that grant's pair, at the later time: its units leave the window at
// most a slice late, so the bound is still kept, only more strictly
// (never less), and a window holds at most MaxRateLog + 1 pairs. Past
// that (pairs kept under an earlier rate's shorter window), the two oldest
// pairs within the window are merged into one at the later time.
const MaxRateLog = 1000

// Rate is a rate limit on a key: at most Limit units per window of Per.
// The zero Rate means none.
type Rate struct {
	Limit int           // units per window, 1 to MaxLimit
	Per   time.Duration // the window: a whole number of ms from 1ms to MaxRatePer
}

// IsZero reports whether r is no rate.
func (r Rate) IsZero() bool { return r == Rate{} }

// String formats r as ParseRate reads it: "10/s", "60/m", "5/h", or
// "100/250ms" for other windows.
func (r Rate) String() string {
	switch r.Per {
	case time.Second:
		return fmt.Sprintf("%d/s", r.Limit)
	case time.Minute:
		return fmt.Sprintf("%d/m", r.Limit)
	case time.Hour:
		return fmt.Sprintf("%d/h", r.Limit)
	}
	return fmt.Sprintf("%d/%v", r.Limit, r.Per)
}

// Validate reports whether r is a rate a lane may carry. Its error is an
// *InvalidError.
func (r Rate) Validate() error {
	if r.Limit < 1 || r.Limit > MaxLimit {
		return invalid("rate", "rate limit %d is out of range 1..%d", r.Limit, MaxLimit)
	}
	if r.Per < time.Millisecond || r.Per > MaxRatePer || r.Per%time.Millisecond != 0 {
		return invalid("rate", "rate window %v must be a whole number of milliseconds from 1ms to %v", r.Per, MaxRatePer)
	}
	return nil
}

// ParseRate reads "N/s", "N/m", "N/h" or "N/D" with D a Go duration
// ("100/250ms", "60/1m"). Its error is an *InvalidError.
func ParseRate(s string) (Rate, error) {
	n, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Rate{}, invalid("rate", "rate %q must be N/s, N/m, N/h or N/<duration>", s)
	}
	limit, err := strconv.Atoi(n)
	if err != nil {
		return Rate{}, invalid("rate", "rate %q: %q is not a whole number", s, n)
	}
	var d time.Duration
	switch per {
	case "s":
		d = time.Second
	case "m":
		d = time.Minute
	case "h":
		d = time.Hour
	default:
		if d, err = time.ParseDuration(per); err != nil {
			return Rate{}, invalid("rate", "rate %q: window %q is neither s, m, h nor a duration", s, per)
		}
	}
	r := Rate{Limit: limit, Per: d}
	return r, r.Validate()
}

// cost is the units a grant of l spends on its rate: Cost, or 1 when 0.
func (l Lane) cost() int { return max(l.Cost, 1) }

// validateRate checks the rate and cost of l.
func (l Lane) validateRate() error {
	if l.Rate.IsZero() {
		if l.Cost != 0 {
			return invalid("cost", "key %q: cost %d without a rate", l.Key, l.Cost)
		}
		return nil
	}
	if err := l.Rate.Validate(); err != nil {
		return invalid("rate", "key %q: %s", l.Key, err.(*InvalidError).Detail)
	}
	if l.Cost < 0 || l.Cost > l.Rate.Limit {
		return invalid("cost", "key %q: cost %d is out of range 1..%d (the rate's limit: a larger cost could never be granted)", l.Key, l.Cost, l.Rate.Limit)
	}
	return nil
}

// RateWindow is a rate key's window as Inspect saw it.
type RateWindow struct {
	Rate  Rate
	Spent int // units granted within the window that ends at the snapshot's time
	// NextFree is when the oldest units still counted leave the window;
	// zero when none are.
	NextFree time.Time
}

// rateUse is one grant's spending: cost units at an instant.
type rateUse struct {
	at   time.Time
	cost int
}

// rateLog is the sliding log of one rate key, oldest first.
type rateLog struct {
	rate  Rate
	uses  []rateUse
	spent int
}

// prune drops the uses that left the window at now.
func (l *rateLog) prune(now time.Time) {
	n := 0
	for n < len(l.uses) && !l.uses[n].at.Add(l.rate.Per).After(now) {
		l.spent -= l.uses[n].cost
		n++
	}
	l.uses = l.uses[n:]
}

// within returns the units of l granted within the window of length per
// that ends at now, whatever rate l was kept under.
func (l *rateLog) within(now time.Time, per time.Duration) int {
	n := 0
	for i := len(l.uses) - 1; i >= 0 && l.uses[i].at.Add(per).After(now); i-- {
		n += l.uses[i].cost
	}
	return n
}

// spend records cost units spent at now, under l.rate, on a log pruned at
// now: in the last use when it fell in the same slice of l.rate's window
// (MaxRateLog), else as a use of its own; past MaxRateLog + 1 uses, the two
// oldest merge. (A break-it review found the old rule, the two oldest
// merged past MaxRateLog, carrying units forward for as long as more than
// MaxRateLog grants came per window: a rate used at 30% stalled.)
func (l *rateLog) spend(now time.Time, cost int) {
	l.spent += cost
	if n := len(l.uses); n > 0 && sameSlice(l.uses[n-1].at, now, l.rate.Per) {
		last := &l.uses[n-1]
		if now.After(last.at) {
			last.at = now
		}
		last.cost += cost
		return
	}
	l.uses = append(l.uses, rateUse{now, cost})
	if len(l.uses) > MaxRateLog+1 {
		l.uses[1].cost += l.uses[0].cost
		l.uses = l.uses[1:]
	}
}

// sameSlice reports whether a and b fall in the same MaxRateLog-th part of
// a window of length per, counted from the Unix epoch in µs as the Redis
// backend's clock counts (docs/PROTOCOL.md, Rate records).
func sameSlice(a, b time.Time, per time.Duration) bool {
	slice := float64(per.Microseconds()) / MaxRateLog
	return math.Floor(float64(a.UnixMicro())/slice) == math.Floor(float64(b.UnixMicro())/slice)
}

// freeAt returns when enough units leave the window of r for cost more
// to fit under r; now when they fit already.
func (l *rateLog) freeAt(now time.Time, r Rate, cost int) time.Time {
	over := l.within(now, r.Per) + cost - r.Limit
	for _, u := range l.uses {
		if over <= 0 {
			break
		}
		if !u.at.Add(r.Per).After(now) {
			continue // left the window of r already
		}
		over -= u.cost
		if over <= 0 {
			return u.at.Add(r.Per)
		}
	}
	return now
}

// nextFree returns when the oldest units within the window of length per
// leave it, and false when none are within it.
func (l *rateLog) nextFree(now time.Time, per time.Duration) (time.Time, bool) {
	for _, u := range l.uses {
		if at := u.at.Add(per); at.After(now) {
			return at, true
		}
	}
	return time.Time{}, false
}

// window is l as Inspect shows it.
func (l *rateLog) window() *RateWindow {
	w := &RateWindow{Rate: l.rate, Spent: l.spent}
	if len(l.uses) > 0 {
		w.NextFree = l.uses[0].at.Add(l.rate.Per)
	}
	return w
}
