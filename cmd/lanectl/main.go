// Command lanectl inspects and uses lanes: cluster-wide FIFO locks and
// limits kept in Redis. See `lanectl --help` and DESIGN.md section 6.
package main

import (
	"context"
	"os"
)

func main() {
	quietRedisLogs()
	ctx, relay := notifySignals(context.Background())
	code := run(ctx, relay, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	relay.Stop()
	os.Exit(code)
}
