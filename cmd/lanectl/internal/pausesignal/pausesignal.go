// Package pausesignal hears SIGUSR1, which pauses `lanectl batch`, from the
// start of the process: its init registers it, before main runs and before
// the packages that take longest to start (the Redis client, telemetry).
//
// The Go runtime catches SIGUSR1 from its own start, and drops one that
// comes before any signal.Notify of it: it neither kills the process nor
// queues the signal for a later Notify. So SIGUSR1 is registered here,
// once, and never unregistered; the batch reads what came (C). This
// package imports nothing but os/signal and what it needs, so that Go
// initializes it among the first (packages are initialized in import-path
// order as soon as their imports are).
package pausesignal

import (
	"os"
	"os/signal"
	"syscall"
)

// ch holds a SIGUSR1 that came and was not read yet: one at most, since
// more before it is read ask the same (signal.Notify drops a signal for a
// full channel).
var ch = make(chan os.Signal, 1)

func init() { signal.Notify(ch, syscall.SIGUSR1) }

// C returns the channel of the SIGUSR1s lanectl received since it started
// (one waits there at most), to read from.
func C() <-chan os.Signal { return ch }
