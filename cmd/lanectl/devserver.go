package main

import (
	"fmt"
	"io"
	"net"

	"github.com/alicebob/miniredis/v2"
	"github.com/spf13/cobra"
)

// devServerOptions are the flags of `lanectl dev-server`.
type devServerOptions struct {
	addr string
}

func newDevServerCommand(o *devServerOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dev-server [--addr HOST:PORT]",
		Short: "Run an embedded Redis-protocol server (miniredis) for trying lanes",
		Long: `dev-server runs miniredis, an in-memory Redis-protocol server, until SIGINT or
SIGTERM. The first line of its output is the URL to pass to --redis (or
LANES_REDIS_URL). Data lives in memory only and is gone when it stops.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd)
		},
	}
	cmd.Flags().StringVar(&o.addr, "addr", "127.0.0.1:0", "address to listen on; port 0 picks a free one")
	return cmd
}

func (o *devServerOptions) run(cmd *cobra.Command) error {
	if _, _, err := net.SplitHostPort(o.addr); err != nil {
		return usageErrorf("bad --addr %q: %v", o.addr, err)
	}
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr(o.addr); err != nil {
		return &exitError{code: exitCannotListen, err: fmt.Errorf("dev-server cannot listen on %s: %w", o.addr, err)}
	}
	defer m.Close()

	url := "redis://" + m.Addr()
	out := cmd.OutOrStdout()
	fmt.Fprintln(out, url)
	flush(out)
	fmt.Fprintf(cmd.ErrOrStderr(), "dev-server: miniredis listening on %s; data lives in memory only.\n"+
		"  export LANES_REDIS_URL=%s\n"+
		"  lanectl lock demo -- echo hello\n"+
		"Stop it with Ctrl-C (SIGINT) or SIGTERM.\n", m.Addr(), url)

	<-cmd.Context().Done()
	return nil
}

// flush pushes out what w buffers, for writers that buffer.
func flush(w io.Writer) {
	switch f := w.(type) {
	case interface{ Flush() error }:
		_ = f.Flush()
	case interface{ Flush() }:
		f.Flush()
	}
}

// noArgs is cobra.NoArgs as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("%s takes no arguments, got %q", cmd.CommandPath(), args[0])
	}
	return nil
}
