package lanes

import (
	"context"
	"testing"
	"time"
)

// A grant hint that reaches a waiter after its local deadline (its process
// was stopped past it, and the grant may have expired meanwhile and gone
// to someone else) is not taken: the waiter asks the backend (issue 10,
// "stale hint": Wait returned a lease after SIGCONT in 2 of 5 runs).
// White-box: the race between the hint and the deadline's timer is set up
// by hand, the timer held back as a stopped process holds it.
func TestStaleGrantHintIsNotTaken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := &askedBackend{Memory: NewMemory(), asked: make(chan string, 16)}
	s, tk, h := waiterBehindHolder(t, ctx, m.Memory, m)
	e := tk.e
	s.mu.Lock()
	e.deadline = time.Now().Add(-time.Millisecond)
	seq := e.seq
	s.mu.Unlock()

	s.hint([]Hint{{ID: "w", Seq: seq, Tokens: map[string]uint64{"K": 99}, Granted: time.Now()}})
	s.mu.Lock()
	took := e.lease != nil
	s.mu.Unlock()
	if took {
		t.Fatal("a grant hint past the waiter's local deadline was taken as a grant")
	}
	// It asks the backend instead: a Heartbeat step naming w (the
	// Session's own interval is 20 s away).
	for asked := false; !asked; {
		select {
		case id := <-m.asked:
			asked = id == "w"
		case <-ctx.Done():
			t.Fatal("a stale grant hint did not make the waiter ask the backend")
		}
	}
	// Within the deadline, the same hint is a grant.
	s.mu.Lock()
	e.deadline = time.Now().Add(time.Minute)
	s.mu.Unlock()
	s.hint([]Hint{{ID: "w", Seq: seq, Tokens: map[string]uint64{"K": 99}, Granted: time.Now()}})
	l, err := tk.Wait(ctx)
	if err != nil || l.Token("K") != 99 {
		t.Fatalf("Wait() after a fresh grant hint = %v, %v; want the hinted grant", l, err)
	}
	_ = h.Release(ctx)
	_ = l.Release(ctx)
}

// waiterBehindHolder starts a Session on holderB whose lease h holds K,
// and one on b (TTL a minute: no heartbeat of its own within a test) whose
// entry w waits behind it, w's deadline timer stopped as a stopped process
// leaves it. Both Sessions close with the test.
func waiterBehindHolder(t *testing.T, ctx context.Context, holderB, b Backend) (*Session, *Ticket, *Lease) {
	t.Helper()
	holder, err := NewSession(ctx, holderB)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close() })
	h, err := holder.Acquire(ctx, Request{ID: "h", Lanes: []Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSession(ctx, b, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	tk, err := s.Enqueue(ctx, Request{ID: "w", Lanes: []Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	tk[0].e.timer.Stop() // stopped: the timer has not run yet
	s.mu.Unlock()
	return s, tk[0], h
}

// askedBackend is a Memory backend that reports every id a Heartbeat step
// names.
type askedBackend struct {
	*Memory
	asked chan string
}

func (b *askedBackend) Heartbeat(ctx context.Context, owner string, ttl time.Duration, ids []string) ([]Status, error) {
	for _, id := range ids {
		select {
		case b.asked <- id:
		default:
		}
	}
	return b.Memory.Heartbeat(ctx, owner, ttl, ids)
}

// earlyBackend is a Memory backend that runs after once an Enqueue step
// has changed the backend and before its answer reaches the Session: a
// hint sent meanwhile finds the entry pending.
type earlyBackend struct {
	*Memory
	after func(sts []Status)
	asked chan string
}

func (b *earlyBackend) Enqueue(ctx context.Context, o Owner, ttl time.Duration, reqs []Request) ([]Status, error) {
	sts, err := b.Memory.Enqueue(ctx, o, ttl, reqs)
	if err == nil && b.after != nil {
		b.after(sts)
	}
	return sts, err
}

func (b *earlyBackend) Heartbeat(ctx context.Context, owner string, ttl time.Duration, ids []string) ([]Status, error) {
	for _, id := range ids {
		select {
		case b.asked <- id:
		default:
		}
	}
	return b.Memory.Heartbeat(ctx, owner, ttl, ids)
}

// earlyScene is the scene of the early grant hint tests: an earlyBackend;
// a holder Session whose Lease h holds K (limit 1); and the Session s
// under test, with a TTL of a minute (no heartbeat of its own within a
// test). When warm, s took one step already, so it knows the epoch of the
// backend's state: an early grant is taken only from an answer of the
// epoch it came in, never on a Session's first step. Both Sessions close
// when the test ends.
func earlyScene(ctx context.Context, t *testing.T, warm bool) (m *earlyBackend, s *Session, h *Lease) {
	t.Helper()
	m = &earlyBackend{Memory: NewMemory(), asked: make(chan string, 16)}
	holder, err := NewSession(ctx, m.Memory)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close() })
	s, err = NewSession(ctx, m, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if warm {
		l, err := s.Acquire(ctx, Request{Lanes: []Lane{{Key: "warm", Limit: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	h, err = holder.Acquire(ctx, Request{ID: "h", Lanes: []Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	return m, s, h
}

// A grant hint that comes while the entry's Enqueue step is in flight is
// taken once the step answers Waiting under the sequence number the grant
// names, as it would be had it come after the answer: the Session does not
// ask the backend again. One that names another sequence number is not
// taken: the Session asks.
func TestGrantHintBeforeEnqueueAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, s, h := earlyScene(ctx, t, true)
	m.after = func([]Status) {
		m.after = nil
		if err := h.Release(ctx); err != nil { // grants w, whose step has not answered
			t.Error(err)
		}
	}
	tk, err := s.Enqueue(ctx, Request{ID: "w", Lanes: []Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-tk[0].Ready():
	default:
		t.Fatal("a grant hint that came before the Enqueue step's answer was not taken with the answer")
	}
	s.mu.Lock()
	polled := s.hinted["w"]
	s.mu.Unlock()
	if polled {
		t.Error("the entry is to be polled though its grant hint was taken")
	}
	l, err := tk[0].Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap, err := m.Inspect(ctx, []string{"K"}); err != nil || len(snap.Keys) != 1 || len(snap.Keys[0].Holders) != 1 ||
		snap.Keys[0].Holders[0].ID != "w" || snap.Keys[0].Holders[0].Token != l.Token("K") {
		t.Fatalf("the backend's holders of K = %+v, %v; want w with token %d", snap, err, l.Token("K"))
	}

	// A grant hint of another sequence number: not taken, the entry asked about.
	m.after = func(sts []Status) {
		m.after = nil
		s.hint([]Hint{{ID: "v", Seq: sts[0].Seq + 1, Tokens: map[string]uint64{"K": 99}}})
	}
	tk, err = s.Enqueue(ctx, Request{ID: "v", Lanes: []Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	for asked := false; !asked; {
		select {
		case id := <-m.asked:
			asked = id == "v"
		case <-ctx.Done():
			t.Fatal("a grant hint of another sequence number did not make the waiter ask the backend")
		}
	}
	select {
	case <-tk[0].Ready():
		t.Fatal("a grant hint of another sequence number was taken")
	default:
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err = tk[0].Wait(ctx); err != nil || l.Token("K") == 99 {
		t.Fatalf("Wait() = %v, %v; want the backend's grant", l, err)
	}
	_ = l.Release(ctx)
}

// A grant hint that comes while a Session's first Enqueue step is in
// flight is not taken with the answer: the Session knew no epoch of the
// backend's state when it came, so it cannot tell the grant from one of a
// state lost since (a step sent again after a lost reply, where sequence
// numbers start again). The Session asks, and gets the grant from the
// backend.
func TestGrantHintOnTheFirstStepIsAskedAbout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, s, h := earlyScene(ctx, t, false)
	m.after = func([]Status) {
		m.after = nil
		if err := h.Release(ctx); err != nil { // grants w, whose step has not answered
			t.Error(err)
		}
	}
	tk, err := s.Enqueue(ctx, Request{ID: "w", Lanes: []Lane{{Key: "K", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	for asked := false; !asked; {
		select {
		case id := <-m.asked:
			asked = id == "w"
		case <-ctx.Done():
			t.Fatal("a grant hint of the Session's first step was not asked about")
		}
	}
	l, err := tk[0].Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap, err := m.Inspect(ctx, []string{"K"}); err != nil || len(snap.Keys) != 1 || len(snap.Keys[0].Holders) != 1 ||
		snap.Keys[0].Holders[0].ID != "w" || snap.Keys[0].Holders[0].Token != l.Token("K") {
		t.Fatalf("the backend's holders of K = %+v, %v; want w with token %d", snap, err, l.Token("K"))
	}
	_ = l.Release(ctx)
}
