package lanes

import (
	"context"
	"testing"
	"time"
)

// The poll timer of a waiting entry follows the latest reply: a waiting
// reply without a poll time (RateWait and HolderTTL 0) stops the one an
// earlier reply set, and a timer that fires late, after a reply moved or
// stopped it (it waited on s.mu while applyStatus held it), polls nothing.
// A break-it review of the holder TTL found both costing one needless
// poll. White-box: the replies and the late firing are made by hand.
func TestPollTimerFollowsTheLatestReply(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := NewMemory()
	s, tk, h := waiterBehindHolder(t, ctx, m, m)
	defer h.Release(ctx)
	e := tk.e
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.pollWake == nil || e.pollAt.IsZero() {
		t.Fatal("w behind a holder has no poll timer after its Enqueue; want one at the holder's deadline")
	}
	s.applyStatus(e, Status{ID: "w", State: Waiting}, time.Now(), false)
	if e.pollWake.Stop() || !e.pollAt.IsZero() {
		t.Error("a waiting reply with neither RateWait nor HolderTTL left the earlier poll timer running")
	}
	// (what pollDue reports: the Session's own loop, woken by a poll,
	// changes s.hinted and pollAt meanwhile)
	s.applyStatus(e, Status{ID: "w", State: Waiting, HolderTTL: time.Hour}, time.Now(), false)
	s.mu.Unlock()
	polled := s.pollDue(e) // the firing of a timer set before the reply that moved it an hour on
	s.mu.Lock()
	if polled {
		t.Error("a poll timer firing before the time the latest reply set polled the entry")
	}
	e.pollAt = time.Now().Add(-time.Millisecond) // now due
	s.mu.Unlock()
	polled = s.pollDue(e)
	s.mu.Lock()
	if !polled {
		t.Error("a poll timer firing at its time did not poll the entry")
	}
}
