package ui

import (
	"context"
	"encoding/json"
	"sync"
	"time"
)

// watcher looks at one namespace every interval and keeps what it saw.
type watcher struct {
	src  Source
	s    *Server
	hist *history

	mu          sync.Mutex
	keys        []KeyView // of the last good look
	seenAt      time.Time // the Redis clock of the last good look
	lookedAt    time.Time // the local clock at its end
	look        time.Duration
	epoch       string
	stats       StatsView
	errText     string    // of the current outage; "" when none
	outageSince time.Time // the local clock
	sig         []byte    // what a change is made of, at the last look
}

func newWatcher(src Source, s *Server) *watcher {
	return &watcher{src: src, s: s, hist: newHistory(s.cfg.MaxSpans, s.cfg.History)}
}

// run looks every interval until ctx ends, or less often when a look takes
// longer than half the interval: it waits at least as long as the last look
// took, so that a large namespace keeps Redis busy half the time at most.
// A look that fails marks an outage and keeps the last good view; the next
// good one ends it.
func (w *watcher) run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		start := time.Now()
		w.lookOnce(ctx)
		took := time.Since(start)
		timer.Reset(max(w.s.cfg.Interval-took, took))
	}
}

// lookOnce takes one snapshot and records it, or the failure.
func (w *watcher) lookOnce(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, w.s.cfg.LookTimeout)
	defer cancel()
	start := time.Now()
	snap, err := w.src.Lanes.Inspect(lctx, nil)
	end := time.Now()
	if ctx.Err() != nil {
		return // shutting down: not an outage
	}
	w.mu.Lock()
	if err != nil {
		if w.errText == "" {
			w.outageSince = start
		}
		w.errText = w.s.cfg.ErrorText(err)
	} else {
		w.hist.observe(snap)
		w.keys = buildKeys(snap, w.hist.leaseMax)
		w.seenAt, w.lookedAt, w.look, w.epoch, w.errText = snap.Time, end, end.Sub(start), snap.Epoch, ""
		w.stats = StatsView{ExpiredHolders: snap.Stats.ExpiredHolders, EvictedWaiters: snap.Stats.EvictedWaiters,
			Revoked: snap.Stats.Revoked, Resets: snap.Stats.Resets}
	}
	sig := w.signature()
	changed := string(sig) != string(w.sig)
	w.sig = sig
	w.mu.Unlock()
	if changed {
		w.s.bump()
	}
}

// signature returns what a change is made of: the view without the times
// that move on every look, nor a lease's renewal by a heartbeat (the event
// streams send those every refresh). Called with w.mu held.
func (w *watcher) signature() []byte {
	keys := make([]KeyView, len(w.keys))
	for i, k := range w.keys {
		k.Holders = append([]HolderView(nil), k.Holders...)
		for j := range k.Holders {
			h := &k.Holders[j]
			h.HeldMS, h.LeaseLeftMS, h.LeaseMS, h.Expires = 0, 0, 0, ""
		}
		k.Waiters = append([]WaiterView(nil), k.Waiters...)
		for j := range k.Waiters {
			k.Waiters[j].WaitingMS = 0
		}
		keys[i] = k
	}
	b, _ := json.Marshal(struct {
		Keys   []KeyView
		Err    string
		Epoch  string
		Stats  StatsView
		Looked bool
	}{keys, w.errText, w.epoch, w.stats, !w.seenAt.IsZero()})
	return b
}

// view returns the namespace's view at now (the local clock).
func (w *watcher) view(now time.Time) NamespaceView {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := NamespaceView{Namespace: w.src.Namespace, OK: w.errText == "" && !w.seenAt.IsZero(), Error: w.errText,
		Epoch: w.epoch, Keys: w.keys, Stats: w.stats, LookMS: float64(w.look.Microseconds()) / 1000}
	if v.Keys == nil {
		v.Keys = []KeyView{}
	}
	if w.errText != "" {
		v.OutageSince = jsonTime(w.outageSince)
	}
	if !w.seenAt.IsZero() {
		v.SeenAt = jsonTime(w.seenAt)
		v.AgeMS = max(now.Sub(w.lookedAt).Milliseconds(), 0)
		v.HistoryFrom = jsonTime(w.hist.start())
	} else if w.errText == "" {
		v.Error = "not looked at yet"
	}
	return v
}
