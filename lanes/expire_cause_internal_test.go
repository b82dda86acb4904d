package lanes

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// Whose fault a waiter's lost place is (expireLocked): a break-it review
// stopped a waiting lanectl (SIGSTOP) for 0.92s of its 1s TTL and it
// exited "cannot reach Redis" (ErrUnavailable) while Redis answered: on
// SIGCONT its deadline's timer fired less than the margin late, beside the
// heartbeat it had just sent, on waking, after its deadline. A heartbeat
// that went out only near or after the deadline means this process did
// not run in time (ErrLeaseLost, "stopped or starved"); one sent in time
// and unanswered means the backend (ErrUnavailable). White-box: the
// instants are set by hand, as a stopped process leaves them.
func TestExpiredWaiterBlamesAStopNotTheBackend(t *testing.T) {
	for _, c := range []struct {
		name     string
		sentAgo  time.Duration // the heartbeat in flight, sent this long before now (the TTL is a minute)
		want     error
		wantWord string
	}{
		{"heartbeat sent on waking, after the deadline", time.Millisecond, ErrLeaseLost, "stopped or starved"},
		{"heartbeat sent in time, unanswered", 30 * time.Second, ErrUnavailable, "has no answer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			m := NewMemory()
			s, tk, _ := waiterBehindHolder(t, ctx, m, m)
			e := tk.e
			s.mu.Lock()
			now := time.Now()
			e.deadline = now.Add(-10 * time.Millisecond) // less than the margin (6s) late
			s.inflight = now.Add(-c.sentAgo)
			s.lastErr = nil
			s.expireLocked(e)
			s.inflight = time.Time{}
			s.mu.Unlock()
			_, err := tk.Wait(ctx)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.wantWord) {
				t.Fatalf("Wait() = %v; want %v saying %q", err, c.want, c.wantWord)
			}
		})
	}
}
