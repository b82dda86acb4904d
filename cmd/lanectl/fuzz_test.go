package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// FuzzArgs feeds lanectl command lines to its parser and argument checks,
// with every command's action replaced, so nothing runs and nothing is
// contacted: no input panics, and every rejection is one line with an exit
// status from the table. The seed corpus is in testdata/fuzz/FuzzArgs.
func FuzzArgs(f *testing.F) {
	known := map[int]bool{exitOK: true, exitNotFound: true, exitUsage: true, exitDataErr: true, exitUnavailable: true,
		exitInternal: true, exitWaitTimeout: true, exitNoPerm: true, exitLeaseLost: true, exitLockCycle: true}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Split(line, "\x1f") // the unit separator splits arguments
		g := &globalOptions{getenv: func(string) string { return "" }}
		root := newRootCommand(g, nil)
		var stub func(c *cobra.Command)
		stub = func(c *cobra.Command) {
			if c.RunE != nil {
				c.RunE = func(*cobra.Command, []string) error { return nil }
			}
			for _, sub := range c.Commands() {
				stub(sub)
			}
		}
		stub(root)
		root.SetArgs(args)
		root.SetIn(strings.NewReader(""))
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		_, err := root.ExecuteContextC(context.Background())
		if err == nil {
			return
		}
		if code := exitCode(err); !known[code] {
			t.Fatalf("lanectl %q: exit %d is not in the table (%v)", args, code, err)
		}
		if line := errorLine(err, ""); strings.ContainsAny(line, "\r\n") {
			t.Fatalf("lanectl %q: error %q is not one line", args, line)
		}
	})
}
