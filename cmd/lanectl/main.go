// Command lanectl inspects and uses lanes: cluster-wide FIFO locks and
// limits kept in Redis. See `lanectl --help` and DESIGN.md section 6.
package main

import (
	"context"
	"os"
)

// SIGUSR1 (which pauses a batch) is registered before main runs, by the
// init of internal/pausesignal, imported by checkpoint.go: Go drops a
// SIGUSR1 that comes before a signal.Notify of it.
func main() {
	quietRedisLogs()
	ctx, relay := notifySignals(context.Background())
	code := run(ctx, relay, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	relay.Stop()
	os.Exit(code)
}
