// Command chaosworker is one replica of the fault-injection suite
// (integration/chaos): it takes lanes through the lanes library and the
// redislane backend, updates a protected counter inside each lease, and
// records every step into a history file for the checkers. The suite's
// harness starts, kills, stops and restarts many of them; see
// docs/RELIABILITY.md.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/lanes-dev/lanes/integration/chaos"
)

func main() {
	var cfg chaos.WorkerConfig
	fs := flag.NewFlagSet("chaosworker", flag.ExitOnError)
	finish := cfg.Flags(fs)
	load := fs.Bool("load-scripts", false, "load the lanes scripts into -redis, print \"name sha\" lines, and exit")
	_ = fs.Parse(os.Args[1:])
	if err := finish(); err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		os.Exit(64)
	}
	if *load {
		shas, err := chaos.LoadScripts(cfg.Redis)
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaosworker:", err)
			os.Exit(1)
		}
		for _, s := range shas {
			fmt.Println(s)
		}
		return
	}
	if cfg.History == "" {
		fmt.Fprintln(os.Stderr, "chaosworker: -history is required")
		os.Exit(64)
	}
	if err := chaos.RunWorker(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		os.Exit(1)
	}
}
