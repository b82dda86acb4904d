package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// waitLineEvery is how often `lock` looks at its keys to redraw its status
// line: one inspect step of its keys each time.
const waitLineEvery = 500 * time.Millisecond

// ansiLineStart takes the cursor back to the start of the line; the wait
// line then clears what is left of it (ansiClearLine).
const ansiLineStart = "\r"

// waitLine keeps one status line on a terminal up to date while `lock`
// waits: for each key, the entry's place in the queue, who holds the key,
// for how long and how much of their lease is left. It writes only to its
// terminal, redraws the line in place, and clears it when it stops.
type waitLine struct {
	w     io.Writer
	width func() int // the terminal's width; 0 when unknown
	look  func(context.Context) (*lanes.Snapshot, error)
	id    string // the waiting entry
	keys  []string

	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
}

// start draws the line at once and then every waitLineEvery, until stop.
func (l *waitLine) start(ctx context.Context) {
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	begin := time.Now()
	go func() {
		defer close(l.done)
		drawn := false
		defer func() {
			if drawn {
				_, _ = io.WriteString(l.w, ansiLineStart+ansiClearLine)
			}
		}()
		tick := time.NewTicker(waitLineEvery)
		defer tick.Stop()
		for {
			lctx, cancel := context.WithTimeout(ctx, connectTimeout)
			snap, err := l.look(lctx)
			cancel()
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				line := waitText(snap, l.id, l.keys, time.Since(begin))
				if w := l.width(); w > 1 {
					line = clip(line, w-1) // the last column would wrap on some terminals
				}
				if _, err := io.WriteString(l.w, ansiLineStart+line+ansiClearLine); err == nil {
					drawn = true
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// stop ends the redraws and clears the line; once it returns, nothing more
// is written. A waitLine never started stops at once.
func (l *waitLine) stop() {
	if l == nil || l.cancel == nil {
		return
	}
	l.stopOnce.Do(func() {
		l.cancel()
		<-l.done
	})
}

// waitText says where entry id stands on keys in snap, after waiting for
// waited:
//
//	lanectl: waiting 3.2s for report: 2nd in line, held by build-7:4242 (make) for 1m3s, lease left 8.2s
//
// with one such part per key, separated by "; ".
func waitText(snap *lanes.Snapshot, id string, keys []string, waited time.Duration) string {
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, cell(k)+": "+keyWaitText(snap, id, k))
	}
	return fmt.Sprintf("lanectl: waiting %s for %s", humanDuration(waited), strings.Join(parts, "; "))
}

// keyWaitText says where entry id stands on key in snap, and who holds it.
func keyWaitText(snap *lanes.Snapshot, id, key string) string {
	ks := keyState(snap, key)
	if ks == nil {
		return "free"
	}
	place := "not in line"
	for _, w := range ks.Waiters {
		if w.ID == id {
			place = ordinal(w.Position) + " in line"
			break
		}
	}
	for _, h := range ks.Holders {
		if h.ID == id {
			return "granted"
		}
	}
	return place + ", " + holdText(snap, ks, ownRate(ks, id))
}

// takenText says why a request for keys cannot be granted now, for `lock
// --try`: who holds each key and how many wait before entry id.
func takenText(snap *lanes.Snapshot, id string, keys []string) string {
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		ks := keyState(snap, k)
		if ks == nil {
			// Nobody holds or waits for it (the wait left the queue
			// already): only a freeze still says why.
			if snap.Frozen.After(snap.Time) {
				parts = append(parts, cell(k)+": "+holdText(snap, &lanes.KeyState{Key: k}, lanes.Rate{}))
			}
			continue
		}
		text := holdText(snap, ks, ownRate(ks, id))
		ahead := 0
		for _, w := range ks.Waiters {
			if w.ID == id {
				break
			}
			ahead++
		}
		if ahead > 0 {
			text += fmt.Sprintf(", %s before", plural(ahead, "waiter"))
		}
		parts = append(parts, cell(k)+": "+text)
	}
	return strings.Join(parts, "; ")
}

// keyState returns key's state in snap, nil when it has no holder and no
// waiter.
func keyState(snap *lanes.Snapshot, key string) *lanes.KeyState {
	for i := range snap.Keys {
		if snap.Keys[i].Key == key {
			return &snap.Keys[i]
		}
	}
	return nil
}

// holdText says who holds a key (its first holder, when the limit allows
// more), for how long, and how much of the lease is left.
func holdText(snap *lanes.Snapshot, ks *lanes.KeyState, own lanes.Rate) string {
	rate := rateText(snap, ks, own)
	if len(ks.Holders) == 0 {
		if snap.Frozen.After(snap.Time) {
			return fmt.Sprintf("no holder, no grant for %s more: the namespace's state was lost and reset, and leases of the lost state may still run", humanDuration(snap.Frozen.Sub(snap.Time)))
		}
		if rate != "" {
			return "no holder, held back by the " + rate
		}
		return "no holder yet"
	}
	if rate != "" {
		rate = ", " + rate
	}
	h := ks.Holders[0] // the longest held
	who := owner(h.Owner.Host, h.Owner.PID)
	if what := entryWhat(h.Entry); what != "" {
		who += " (" + what + ")"
	}
	held := "held by " + who
	if ks.Limit > 1 || len(ks.Holders) > 1 {
		held = fmt.Sprintf("held by %d of %d, the longest by %s", len(ks.Holders), ks.Limit, who)
	}
	return fmt.Sprintf("%s for %s, lease left %s%s", held, humanDuration(snap.Time.Sub(h.Granted)), humanDuration(h.Expires.Sub(snap.Time)), rate)
}

// rateText says what a key's rate has spent and when its next unit frees,
// "" when it has no rate or nothing spent. own is the rate the waiting
// entry names: on an idle key it may differ from the one the key's last
// grants spent under, which the window is counted by.
func rateText(snap *lanes.Snapshot, ks *lanes.KeyState, own lanes.Rate) string {
	w := ks.Rate
	if w == nil || w.Spent == 0 || w.NextFree.IsZero() {
		return ""
	}
	if !own.IsZero() && own != w.Rate {
		// The window is counted by w.Rate: its times say nothing of own's.
		return fmt.Sprintf("rate %s (the units the key's last grants spent under %s count within its window)", own, w.Rate)
	}
	return fmt.Sprintf("rate %s: %d of %d units spent, the next frees in %s", w.Rate, w.Spent, w.Rate.Limit, humanDuration(w.NextFree.Sub(snap.Time)))
}

// ownRate returns the rate entry id names for ks's key, zero when it
// names none or does not wait there.
func ownRate(ks *lanes.KeyState, id string) lanes.Rate {
	for _, w := range ks.Waiters {
		if w.ID != id {
			continue
		}
		for _, l := range w.Lanes {
			if l.Key == ks.Key {
				return l.Rate
			}
		}
	}
	return lanes.Rate{}
}

// entryWhat names what an entry runs, for people: the command of a `lanectl
// lock`, else its tool and call id.
func entryWhat(e lanes.Entry) string {
	if c := lockCommand(e); c != "" {
		return cell(c)
	}
	switch {
	case e.Tool != "" && e.CallID != "":
		return cell(e.Tool) + " " + cell(e.CallID)
	case e.Tool != "":
		return cell(e.Tool)
	case e.CallID != "":
		return cell(e.CallID)
	}
	return ""
}

// ordinal writes n as 1st, 2nd, 3rd, 4th, 11th, 21st...
func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return strconv.Itoa(n) + suffix
}
