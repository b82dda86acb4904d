package lanes_test

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/lanes/lanestest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is the real clock plus an offset that tests move forward.
type clock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// TestRateMemoryRealClock runs the rate lane tests on a Memory that reads
// the real clock, as the Session's wake-up timers do.
func TestRateMemoryRealClock(t *testing.T) {
	lanestest.RunRate(t, lanestest.Harness{New: func(t *testing.T) lanestest.Instance {
		return lanestest.Instance{Backend: lanes.NewMemory()}
	}})
}

func TestConformanceMemory(t *testing.T) {
	lanestest.Run(t, lanestest.Harness{New: func(t *testing.T) lanestest.Instance {
		c := &clock{}
		return lanestest.Instance{Backend: lanes.NewMemory(lanes.WithClock(c.now)), Advance: c.advance}
	}})
}
