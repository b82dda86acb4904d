package lanestest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// testRandomHistory runs random multi-key acquisitions, some cancelled
// mid-wait, from several sessions, and checks the history: never more
// holders than the limit, and on every key, whatever its limit, tokens
// unique and strictly increasing in grant order (DESIGN.md invariant 5);
// nothing is left behind.
//
// Grant order is known where real time gives it: a grant whose Acquire
// returned before another's Acquire was called came first, so its token on
// each key they share is smaller. On a limit-1 key holds never overlap, so
// the order in which grants are seen is their grant order too.
func testRandomHistory(t *testing.T, inst Instance) {
	limits := map[string]int{"k0": 1, "k1": 2, "k2": 3}
	keys := []string{"k0", "k1", "k2"}
	sessions := []*lanes.Session{session(t, inst.Backend), session(t, inst.Backend), session(t, inst.Backend)}

	// A grant seen by a worker; called and returned are ticks of clock,
	// taken before Acquire and after it returned.
	type seen struct {
		id               string
		tokens           map[string]uint64
		called, returned int64
	}
	var clock atomic.Int64
	var mu sync.Mutex
	var grants []seen
	holding := map[string]int{}
	lastToken := map[string]uint64{}
	var wg sync.WaitGroup
	for w := range 9 {
		rng := rand.New(rand.NewPCG(uint64(w), 129))
		wg.Go(func() {
			s := sessions[w%len(sessions)]
			for i := range 15 {
				r := lanes.Request{ID: fmt.Sprintf("w%d-%d", w, i)}
				for _, k := range keys {
					if rng.IntN(2) == 0 {
						r.Lanes = append(r.Lanes, lanes.Lane{Key: k, Limit: limits[k]})
					}
				}
				// One wait in three is cut short (1-30 ms), to put cancelled
				// waiters in the queues; the rest wait as long as it takes, so
				// the history holds grants in a known order however slow the
				// machine is.
				wait := 10 * time.Second
				if rng.IntN(3) == 0 {
					wait = time.Duration(1+rng.IntN(30)) * time.Millisecond
				}
				ctx, cancel := context.WithTimeout(ctxT(t), wait)
				called := clock.Add(1)
				l, err := s.Acquire(ctx, r)
				returned := clock.Add(1)
				cancel()
				if errors.Is(err, lanes.ErrWaitTimeout) {
					continue
				}
				if err != nil {
					t.Errorf("Acquire(%s) = %v", r.ID, err)
					return
				}
				mu.Lock()
				grants = append(grants, seen{r.ID, l.Tokens(), called, returned})
				for k, tok := range l.Tokens() {
					holding[k]++
					if holding[k] > limits[k] {
						t.Errorf("%d holders of %s, limit %d", holding[k], k, limits[k])
					}
					if limits[k] == 1 && tok <= lastToken[k] {
						t.Errorf("token %d of %s after %d: two holders of a limit-1 key overlapped, or a token went back", tok, k, lastToken[k])
					}
					lastToken[k] = max(lastToken[k], tok)
				}
				mu.Unlock()
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
				mu.Lock()
				for k := range l.Tokens() {
					holding[k]--
				}
				mu.Unlock()
				if err := l.Release(ctxT(t)); err != nil {
					t.Errorf("Release(%s) = %v", r.ID, err)
				}
			}
		})
	}
	wg.Wait()

	byToken := map[string]map[uint64]string{}
	for _, g := range grants {
		for k, tok := range g.tokens {
			if byToken[k] == nil {
				byToken[k] = map[uint64]string{}
			}
			if other, dup := byToken[k][tok]; dup {
				t.Errorf("token %d of %s granted to both %s and %s", tok, k, other, g.id)
			}
			byToken[k][tok] = g.id
		}
	}
	ordered := 0
	for _, a := range grants {
		for _, b := range grants {
			if a.returned >= b.called {
				continue
			}
			for k, ta := range a.tokens {
				if tb, ok := b.tokens[k]; ok {
					ordered++
					if tb <= ta {
						t.Errorf("token %d of %s granted to %s, after %s was granted %d: tokens must rise in grant order", tb, k, b.id, a.id, ta)
					}
				}
			}
		}
	}
	if len(grants) == 0 || ordered == 0 {
		t.Errorf("%d grants, %d pairs of known order: the history checks nothing", len(grants), ordered)
	}
}
