package lanes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The heartbeat and hint machinery of a Session: every entry it keeps alive
// has a local deadline and a timer; one loop renews them all each interval,
// and at once for the entries a hint named.

// track starts keeping e alive. s.mu is held.
func (s *Session) track(e *entry, sent time.Time) {
	e.deadline = sent.Add(s.ttl - s.margin)
	e.timer = time.AfterFunc(time.Until(e.deadline), func() { s.expire(e) })
	s.entries[e.id] = e
}

// untrack stops keeping e alive. An entry whose Enqueue step is still in
// flight is marked as settling until that step's outcome is settled
// (settleLater) or known to need none (unpend): until then an Enqueue of
// its id waits (awaitSettles). s.mu is held.
func (s *Session) untrack(e *entry) {
	if e.pending && !e.finished && s.settling[e.id] == nil {
		e.mark = make(chan struct{})
		s.settling[e.id] = e.mark
	}
	e.finished = true
	if e.timer != nil {
		e.timer.Stop()
	}
	if e.pollWake != nil {
		e.pollWake.Stop()
	}
	delete(s.entries, e.id)
	delete(s.hinted, e.id)
}

// applyStatus brings e up to the Status a step sent at sent returned.
// Entries only move forward, so a stale Status (Waiting after Held)
// changes nothing. s.mu is held.
func (s *Session) applyStatus(e *entry, st Status, sent time.Time, polled bool) {
	if e.finished {
		return
	}
	if st.Err != nil {
		s.untrack(e)
		s.endWait(e, st.Err)
		return
	}
	switch st.State {
	case Held:
		if e.lease == nil {
			s.grant(e, st.Tokens, polled)
		}
		s.renew(e, sent)
	case Waiting:
		if e.lease == nil {
			s.renew(e, sent)
			if d := pollDelay(st); d > 0 {
				s.pollAfter(e, d)
			} else if e.pollWake != nil { // an earlier reply's poll is no longer wanted
				e.pollWake.Stop()
				e.pollAt = time.Time{}
			}
		}
	case Gone:
		reset := e.epoch != "" && st.Epoch != e.epoch
		switch {
		case reset && e.lease != nil:
			s.lose(e, entryError(ErrLeaseLost, "entry %s is no longer held by the backend (%s)", e.id, resetWords))
		case e.lease != nil && st.Forced:
			s.lose(e, entryError(ErrLeaseLost, "entry %s %s", e.id, forcedWords))
		case e.lease != nil && len(e.ancestors) > 0:
			s.lose(e, entryError(ErrLeaseLost, "entry %s: %s, or the lease it borrowed a key from ended", e.id, expiredWords))
		case e.lease != nil:
			s.lose(e, entryError(ErrLeaseLost, "entry %s: %s", e.id, expiredWords))
		case reset:
			s.fail(e, entryError(ErrLeaseLost, "entry %s was evicted from its queues (%s)", e.id, resetWords))
		case st.Forced:
			s.fail(e, entryError(ErrLeaseLost, "entry %s was removed from its queues by force (lanectl release --force)", e.id))
		default:
			s.fail(e, entryError(ErrLeaseLost, "entry %s was evicted from its queues (expired, or taken over by another owner)", e.id))
		}
	}
}

// The causes of a lost lease, in the words its holder is told.
const (
	resetWords = "the backend's state was reset: part of it vanished, or Redis lost its data"
	// forcedWords follow the entry's id wherever a holder learns of a
	// forced release: from a Heartbeat (Status.Forced), or from its own
	// Release (Released.Forced).
	forcedWords  = "was released by force (lanectl release --force)"
	expiredWords = "its lease expired (no heartbeat renewed it before its deadline)"
)

// noteEpoch reads the epoch of a step's statuses: when the backend's state
// was reset or lost since, every entry of an earlier epoch is gone, even
// those the step did not name. s.mu is held.
func (s *Session) noteEpoch(sts []Status) {
	if len(sts) == 0 || sts[0].Epoch == "" || sts[0].Epoch == s.epoch {
		return
	}
	now := sts[0].Epoch
	old := s.epoch
	s.epoch = now
	if old == "" {
		return
	}
	for _, e := range s.entries {
		if !e.pending && e.epoch != "" && e.epoch != now {
			s.applyStatus(e, Status{ID: e.id, State: Gone, Epoch: now}, time.Time{}, false)
		}
	}
}

// pollDelay is when, after a step, its waiting entry is polled
// (pollAfter): the earlier of Status.RateWait and Status.HolderTTL that is
// set, or 0 for neither.
func pollDelay(st Status) time.Duration {
	d := st.RateWait
	if t := st.HolderTTL; t > 0 && (d == 0 || t < d) {
		d = t
	}
	return d
}

// pollAfter polls the waiting entry e after d, when a rate that holds it
// back could have room or the first lease of a holder before it runs out:
// no hint comes when a rate's window frees or a dead holder's lease runs
// out, so the entry asks then, instead of at the next heartbeat or by
// polling blindly. d counts from the step's answer, which came after the
// backend's clock read it, so the poll is never early; 1ms more absorbs the
// backend's rounding to whole milliseconds. A live holder renews its lease
// before then, and the poll's answer sets the next time. s.mu is held.
func (s *Session) pollAfter(e *entry, d time.Duration) {
	d += time.Millisecond
	e.pollAt = time.Now().Add(d)
	if e.pollWake != nil {
		e.pollWake.Reset(d) // every waiting reply behind a holder moves it
		return
	}
	e.pollWake = time.AfterFunc(d, func() { _ = s.pollDue(e) })
}

// pollDue polls e when its poll timer fired at or after the time the last
// pollAfter set, and nothing stopped it since: a timer that fired while
// applyStatus held s.mu to move or stop it runs this late, and must not
// poll for the reply that moved it. It reports whether it polled.
func (s *Session) pollDue(e *entry) bool {
	s.mu.Lock()
	poll := !e.finished && e.lease == nil && !e.pollAt.IsZero() && !time.Now().Before(e.pollAt)
	if poll {
		e.pollAt = time.Time{}
		s.hinted[e.id] = true
	}
	s.mu.Unlock()
	if poll {
		s.wake()
	}
	return poll
}

// renew moves e's local deadline to TTL minus margin after sent. s.mu is held.
func (s *Session) renew(e *entry, sent time.Time) {
	if d := sent.Add(s.ttl - s.margin); d.After(e.deadline) {
		e.deadline = d
		e.timer.Reset(time.Until(d))
	}
}

// expire runs when e's local deadline passes without a renewal.
func (s *Session) expire(e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(e)
}

// expireLocked ends e, once its local deadline passed, as expire does.
// s.mu is held.
func (s *Session) expireLocked(e *entry) {
	if e.finished || time.Now().Before(e.deadline) {
		return
	}
	// Whose fault: a heartbeat that failed to reach the backend, or one
	// sent in time and still unanswered while this timer fires on time,
	// means the backend; a timer that fires well after its time, or a
	// heartbeat that went out only near the deadline or after it (sent on
	// waking: heartbeats go out two thirds of a TTL before it), means this
	// process was stopped or starved (a break-it review saw a waiter
	// stopped for 0.92s of its 1s TTL reported as unable to reach Redis).
	why := "no heartbeat reached the backend within the TTL"
	unreachable := e.pending
	switch late := time.Since(e.deadline); {
	case s.lastErr != nil:
		why += "; last heartbeat: " + s.lastErr.Error()
		unreachable = errors.Is(s.lastErr, ErrUnavailable)
	case late > s.margin:
		why += fmt.Sprintf(" (this process was stopped or starved: its lease timer fired %v late)", late.Round(time.Millisecond))
	case e.pending:
		why = "its enqueue step got no answer within the TTL"
	case !s.inflight.IsZero() && s.inflight.After(e.deadline.Add(-s.margin)):
		when := fmt.Sprintf("only %v before", e.deadline.Sub(s.inflight).Round(time.Millisecond))
		if s.inflight.After(e.deadline) {
			when = fmt.Sprintf("%v after", s.inflight.Sub(e.deadline).Round(time.Millisecond))
		}
		why += fmt.Sprintf(" (this process was stopped or starved: its heartbeat went out %s its local deadline)", when)
	case !s.inflight.IsZero():
		why += fmt.Sprintf("; the heartbeat sent %v ago has no answer", time.Since(s.inflight).Round(time.Millisecond))
		unreachable = true
	default:
		why += " (this process did not renew in time)"
	}
	switch {
	case e.lease != nil:
		s.lose(e, entryError(ErrLeaseLost, "entry %s: %s", e.id, why))
	case unreachable:
		s.fail(e, entryError(ErrUnavailable, "entry %s lost its place: %s", e.id, why))
	default:
		s.fail(e, entryError(ErrLeaseLost, "entry %s lost its place: %s", e.id, why))
	}
}

// grant turns the waiting entry e into a lease. polled says the grant was
// found by a periodic heartbeat, not at enqueue or after a hint. s.mu is held.
func (s *Session) grant(e *entry, tokens map[string]uint64, polled bool) {
	endSpan(e.span, "granted", nil)
	s.tel.record(s.tel.waitDur, seconds(time.Since(e.queued)), outcomeGranted)
	s.tel.count(s.tel.grants)
	if polled {
		s.tel.count(s.tel.polls)
	}
	values, span := s.tel.startHold(e.ctx, e.id, tokens, e.span)
	e.lease = newLease(s, e, tokens, values)
	e.lease.span = span
	close(e.ready)
}

// endWait ends the wait of e without a grant, with err. s.mu is held.
func (s *Session) endWait(e *entry, err error) {
	e.err = err
	close(e.ready)
	if e.span == nil {
		return
	}
	outcome := "error"
	switch {
	case errors.Is(err, ErrCanceled):
		outcome = "cancelled"
	case errors.Is(err, ErrWaitTimeout):
		outcome = "timed_out"
	case errors.Is(err, ErrLeaseLost):
		outcome = "evicted"
		s.tel.count(s.tel.evict)
	case errors.Is(err, ErrClosed):
		outcome = "closed"
	}
	endSpan(e.span, outcome, err)
	s.tel.record(s.tel.waitDur, seconds(time.Since(e.queued)), outcomeFailed)
}

// lose ends e's lease as lost and, once what OnLost registered has run,
// gives its slots back in the background, so they pass on before the TTL
// when the backend is reachable. s.mu is held.
func (s *Session) lose(e *entry, cause error) {
	s.untrack(e)
	l := e.lease
	l.markLost(cause)
	s.releaseLater(l.runOnLost, e.id)
}

// fail ends the wait of e with err. An entry whose Enqueue step has not
// answered is settled by that step, never released here: a release could
// reach the backend before the step and be undone by it. s.mu is held.
func (s *Session) fail(e *entry, err error) {
	s.untrack(e)
	s.endWait(e, err)
	if !e.pending {
		s.releaseLater(nil, e.id)
	}
}

// releaseLater runs first (when not nil), then releases ids, in the
// background, best effort: the TTL ends them anyway. s.mu is held. Close
// waits for the release, not for first: first runs a lease's OnLost
// callbacks, which may call Close. ids are untracked already, so Close
// does not release them: the release after first runs even when Close
// came meanwhile (a lost lease's entry may still hold slots, a revoked
// borrower its kept lender's).
//
// From now until the release answered, an Enqueue of one of the ids waits
// (a settling mark, awaitSettles): sent before it, the Enqueue would find
// the old entry, take it for its own, and the release would then remove
// it under the new lease. A release that gets no answer becomes a settle
// (settleLater), which keeps the marks.
func (s *Session) releaseLater(first func(), ids ...string) {
	marks := make([]chan struct{}, len(ids))
	for i, id := range ids {
		if s.settling[id] == nil { // else marked already: its owner clears it
			marks[i] = make(chan struct{})
			s.settling[id] = marks[i]
		}
	}
	s.releaseMarked(first, ids, marks)
}

// releaseMarked is releaseLater once ids are marked. s.mu is held.
func (s *Session) releaseMarked(first func(), ids []string, marks []chan struct{}) {
	if first != nil {
		go func() {
			first()
			s.mu.Lock()
			closed := s.closed
			if !closed {
				s.releaseMarked(nil, ids, marks)
			}
			s.mu.Unlock()
			if closed {
				s.releaseOrSettle(ids, marks) // Close waits for no one here
			}
		}()
		return
	}
	if s.closed {
		go s.releaseOrSettle(ids, marks)
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		s.releaseOrSettle(ids, marks)
	}()
}

// releaseOrSettle releases ids within the release timeout, trying again
// while the backend cannot be reached, then clears their marks; when the
// release got no answer, it settles them instead (settleLater, which takes
// the marks over).
func (s *Session) releaseOrSettle(ids []string, marks []chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), s.releaseTimeout)
	defer cancel()
	err := s.retryRelease(ctx, func(ctx context.Context) error {
		_, err := s.b.Release(ctx, s.owner.ID, ids)
		return err
	})
	if !s.settleUnanswered(ids, releaseTimedOut(err, "a lost lease's release")) {
		s.clearMarks(ids, marks)
	}
}

// release removes r's entry from the backend with step (nil: a Release
// step) on a context detached from ctx's cancellation, bounded by the
// release timeout, trying again while the backend cannot be reached, and
// ends r (endRelease). It first waits for the releases of the entry's
// borrowers begun before it (releasing.after). It reports what the entry
// was, whether an operator had released it by force, and the epoch of the
// backend's state the step saw.
func (s *Session) release(ctx context.Context, r *releasing, step func(context.Context, []string) (Released, error)) (_ releasedOne, err error) {
	defer s.endRelease(r)
	defer func() { s.settleUnanswered([]string{r.e.id}, err) }() // before endRelease: no gap for an Enqueue
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.releaseTimeout)
	defer cancel()
	id := r.e.id
	if err := awaitAll(ctx, r.after); err != nil {
		return releasedOne{was: Gone}, releaseTimedOut(err, "entry "+id)
	}
	if step == nil { // a plain release: merged with other leases' (batch.go)
		var rs []releasedOne
		err = s.retryRelease(ctx, func(ctx context.Context) error {
			var err error
			rs, _, err = s.rel.do(ctx, []releaseItem{{id, r.e.stamp}})
			return err
		})
		if err != nil {
			return releasedOne{was: Gone}, releaseTimedOut(err, "entry "+id)
		}
		return rs[0], nil
	}
	var rel Released
	err = s.retryRelease(ctx, func(ctx context.Context) error {
		var err error
		rel, err = step(ctx, []string{id})
		return err
	})
	if err != nil {
		return releasedOne{was: Gone}, releaseTimedOut(err, "entry "+id)
	}
	if len(rel.Was) != 1 {
		return releasedOne{was: Gone}, fmt.Errorf("%w: backend answered %d states for 1 release", ErrUnavailable, len(rel.Was))
	}
	return releasedAt(rel, 0, 1), nil
}

// hint is the Backend's hint about some entries. A grant of a waiting entry
// whose sequence number it knows is taken at once, provided the entry's
// local deadline has not passed (a process stopped past it may have lost
// the grant meanwhile): the grant did not move the entry's deadline, so the
// local one stays right. A grant of an entry whose Enqueue step has not
// answered yet is kept for that answer to take (takeEarly). Any other hint
// wakes the loop to poll those entries; one with an empty ID, every entry.
func (s *Session) hint(hints []Hint) {
	s.mu.Lock()
	n := 0
	for _, h := range hints {
		if h.ID == "" {
			s.pollAll = true
			n++
			// An entry whose Enqueue step is in flight is asked about once
			// the step answered: the beat pollAll starts skips it.
			for id, e := range s.entries {
				if e.pending {
					s.hinted[id] = true
				}
			}
			continue
		}
		e := s.entries[h.ID]
		switch {
		case e == nil, h.Tokens != nil && e.lease != nil:
		case grantable(e, h):
			s.grantHinted(e, h)
		case h.Tokens != nil && e.pending && e.early == nil:
			// Its Enqueue step has not answered yet: the answer gives the
			// sequence number the grant must name (takeEarly).
			e.early, e.earlyIn = &h, s.epoch
		default:
			s.hinted[h.ID] = true
			n++
		}
	}
	s.mu.Unlock()
	if n > 0 {
		s.wake()
	}
}

// grantable reports whether the grant hint h is one the waiting entry e
// may take: it names e's sequence number, known once e's Enqueue step
// answered, and e's local deadline has not passed. s.mu is held.
func grantable(e *entry, h Hint) bool {
	return h.Tokens != nil && !e.pending && e.seq != 0 && e.seq == h.Seq && time.Now().Before(e.deadline)
}

// grantHinted takes the grant hint h of the waiting entry e. s.mu is held.
func (s *Session) grantHinted(e *entry, h Hint) {
	s.grant(e, h.Tokens, false)
	if !h.Granted.IsZero() {
		s.tel.record(s.tel.handoff, seconds(max(time.Since(h.Granted), 0)), outcomeGranted)
	}
}

// takeEarly takes the grant hint that came while e's Enqueue step was in
// flight, now that the step answered st, as hint would have taken it had
// it come after the answer: when the step left e waiting under the
// sequence number the grant names, e's local deadline has not passed, no
// other hint named e while the step was in flight, and the step answered
// from the epoch of the backend's state the Session knew when the grant
// came. Else e is polled, as any hint about a pending entry makes it. s.mu
// is held.
func (s *Session) takeEarly(e *entry, st Status) {
	h := e.early
	if h == nil {
		return
	}
	e.early = nil
	switch {
	case e.finished:
	case s.hinted[e.id]:
		// Another hint named e after the grant (it was released by force,
		// revoked, taken over, or the namespace's state was reset): the
		// grant may be gone, so e is polled (apply wakes the loop).
	case e.earlyIn != "" && st.Epoch == e.earlyIn && e.lease == nil && st.Err == nil && st.State == Waiting && grantable(e, *h):
		// (An answer from another epoch than the Session knew when the
		// grant came, or a grant that came before the Session knew any,
		// its first step, is polled: the state may have been reset or lost
		// meanwhile, a step sent again after a lost reply, and after a loss
		// sequence numbers start again, so the grant may be of an entry
		// that no longer exists.)
		s.grantHinted(e, *h)
	default:
		s.hinted[e.id] = true
	}
}

// wake asks the loop to poll the hinted entries.
func (s *Session) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// loop renews every entry each interval, and polls hinted ones at once.
func (s *Session) loop() {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.beat(false)
		case <-s.kick:
			s.beat(true)
		}
	}
}

// beat runs Heartbeat steps for every entry, or for the hinted ones, in
// pieces of beatPiece ids.
func (s *Session) beat(hintedOnly bool) {
	s.mu.Lock()
	if s.pollAll {
		hintedOnly, s.pollAll = false, false
	}
	var es []*entry
	for id, e := range s.entries {
		if !e.pending && (!hintedOnly || s.hinted[id]) {
			es = append(es, e)
		}
	}
	for id := range s.hinted {
		if e := s.entries[id]; e == nil || !e.pending {
			delete(s.hinted, id)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(es, func(a, b *entry) int { return strings.Compare(a.id, b.id) })
	for piece := range slices.Chunk(es, beatPiece) {
		s.beatStep(piece, hintedOnly)
	}
}

// beatStep runs one Heartbeat step for the entries es, hinted ones or
// every one. Its answer applies to those entries only: an id released and
// enqueued again while the step was in flight names a new entry, which a
// status of the old one must not grant or fail.
func (s *Session) beatStep(es []*entry, hinted bool) {
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.id
	}
	sent := time.Now()
	s.mu.Lock()
	s.inflight = sent
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.ttl-s.margin)
	sts, err := s.b.Heartbeat(ctx, s.owner.ID, s.ttl, ids)
	cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight = time.Time{}
	if err == nil && len(sts) != len(ids) {
		err = fmt.Errorf("%w: backend answered %d statuses for %d entries", ErrUnavailable, len(sts), len(ids))
	}
	s.lastErr = err
	s.noteStep(err)
	if err != nil {
		s.tel.count(s.tel.beatFails)
		return // the entries' timers report what this costs
	}
	backlog := false
	for i, st := range sts {
		e := es[i]
		if st.ID != e.id || s.entries[e.id] != e {
			continue // answered out of order, or e ended meanwhile
		}
		s.applyStatus(e, st, sent, !hinted)
		backlog = backlog || s.pollAgain(e, st)
	}
	s.noteEpoch(sts)
	if backlog {
		s.wake()
	}
}

// pollAgain marks e to be polled at once when the step that answered st
// left a backlog of expired entries that may stand in its way, and
// reports whether it did. s.mu is held.
func (s *Session) pollAgain(e *entry, st Status) bool {
	if !st.Backlog || st.State != Waiting || e.lease != nil || e.finished {
		return false
	}
	s.hinted[e.id] = true
	return true
}
