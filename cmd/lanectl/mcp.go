package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
	"github.com/lanes-dev/lanes/sched/batch"
	"github.com/lanes-dev/lanes/sched/mcptools"
)

// Defaults of `lanectl mcp serve`.
const (
	defaultMCPWait   = 30 * time.Second // a call's wait for its lanes, before an isError result
	mcpShutdownGrace = 10 * time.Second // HTTP requests in flight at a signal
)

// mcpServeOptions are the flags of `lanectl mcp serve`.
type mcpServeOptions struct {
	global *globalOptions
	open   opener

	tools  string
	http   string
	tenant string
	wait   time.Duration
	ttl    time.Duration
	local  bool
	events bool
}

func newMCPCommand(o *mcpServeOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mcp serve --tools FILE [--http ADDR] [--tenant T] [--wait D] [--ttl D] [--local] [--events]",
		Short: "Serve the tools of a TOML file over MCP, every call through the lanes",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &usageError{msg: `mcp needs a command: "lanectl mcp serve --tools FILE"`, showUsage: true}
			}
			return &usageError{msg: fmt.Sprintf("unknown command %q for mcp; the command is serve", args[0]), showUsage: true}
		},
		RunE: func(cmd *cobra.Command, args []string) error { return nil },
	}
	serve := &cobra.Command{
		Use:   "serve --tools FILE [--http ADDR] [--tenant T] [--wait D] [--ttl D] [--local] [--events]",
		Short: "Serve the tools of a TOML file over MCP, every call through the lanes",
		Long: `serve is an MCP server (the Model Context Protocol) that offers the tools of the
TOML file --tools: the tools of its [mcp_servers] and its commands. Every
tools/call it receives runs through the lanes of the namespace, shared with
every other replica of the proxy, every lanectl batch and lock: the tool's
concurrency key, its lock keys from the arguments, the per_tool and
per_tenant lanes. An MCP server's tool receives the call's fencing tokens
in the request's _meta ("lanes/tokens": lane key to token).

It speaks MCP on its standard input and output (a client starts it), or
with --http ADDR serves streamable HTTP at http://ADDR/mcp. The tenant of a
call is the Lanes-Tenant header of its HTTP session, else --tenant.

A call the lanes refuse gets an isError result saying why: one that waited
longer than --wait for its lanes (0: as long as the client waits), a lock
cycle, a limit another replica's configuration disagrees with. A call that
fails, times out or is cut off is an isError result too, with "lanes/code"
in its _meta. lanectl status shows each call being served: entry
mcp-RUN/REQUEST-ID, its tool, and the MCP request id as its call id.

On standard input each message is one line. A line that is not JSON gets
a JSON-RPC error reply, code -32700 ("parse error: input line N is not
JSON: ..."); -32600 goes to one that is JSON but no JSON-RPC message, a
batch (MCP 2025-06-18 dropped batching), a request id that is neither a
string nor a whole number of at most 2^53 either way, and a line over
4 MiB (the message says which field is wrong); -32602 to a request whose
params are not an object, or whose fields are not of the kind the method
takes; serve goes on with the next line.

serve runs until its standard input ends (stdio; the requests read before
are answered first) or SIGINT or SIGTERM (the calls in flight are
cancelled), then exits 0; it exits 65 when --tools cannot be used, 69 when
Redis cannot be reached at the start.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("mcp serve takes no arguments, got %q; name the tools file with --tools", args[0])
			}
			return o.complete()
		},
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd) },
	}
	f := serve.Flags()
	f.StringVar(&o.tools, "tools", "", "TOML file declaring the tools, their MCP servers and the runner's limits")
	f.StringVar(&o.http, "http", "", "serve streamable HTTP on this address (host:port) instead of standard input and output")
	f.StringVar(&o.tenant, "tenant", "", "tenant of the calls whose session names none (the runner's per_tenant lane)")
	f.DurationVar(&o.wait, "wait", defaultMCPWait, "how long a call may wait for its lanes before its client gets an isError result; 0: as long as the client waits")
	f.DurationVar(&o.ttl, "ttl", lanes.DefaultTTL, "lease TTL of the calls' entries (30ms to 1h)")
	f.BoolVar(&o.local, "local", false, "keep the lanes in this process instead of Redis")
	f.BoolVar(&o.events, "events", false, "print one line per call served to standard error")
	serve.DisableFlagsInUseLine = true
	cmd.AddCommand(serve)
	return cmd
}

// complete checks the flags before any file is read.
func (o *mcpServeOptions) complete() error {
	switch {
	case o.tools == "":
		return usageErrorf("mcp serve needs --tools FILE")
	case ttlError(o.ttl) != nil:
		return ttlError(o.ttl)
	case o.wait < 0:
		return usageErrorf("--wait must not be negative, got %v", o.wait)
	}
	if o.http != "" {
		if _, _, err := net.SplitHostPort(o.http); err != nil {
			return usageErrorf("bad --http %q: want host:port, such as 127.0.0.1:8931", o.http)
		}
	}
	if o.tenant != "" && lanes.ValidateField("tenant", o.tenant) != nil { // then its lane key is valid too
		return usageErrorf("bad --tenant %q: it must be printable, at most %d bytes", o.tenant, lanes.MaxFieldLen)
	}
	return nil
}

func (o *mcpServeOptions) run(cmd *cobra.Command) error {
	ctx := cmd.Context()
	stderr := cmd.ErrOrStderr()
	file, err := batch.Load(o.tools)
	if err != nil {
		return &exitError{code: exitDataErr, err: err}
	}
	var b lanes.Backend = lanes.NewMemory()
	closeBackend := func() {}
	if !o.local {
		if b, closeBackend, err = o.open(ctx); err != nil {
			return o.global.unavailable(err)
		}
	}
	defer closeBackend()
	sctx, cancel := context.WithTimeout(ctx, connectTimeout)
	sess, err := lanes.NewSession(sctx, mcptools.WithoutRecords(b), lanes.WithTTL(o.ttl), lanes.WithReleaseTimeout(min(o.ttl, maxReleaseWait)))
	cancel()
	if err != nil {
		return o.global.unavailable(err)
	}
	defer sess.Close()
	res, err := resolveTools(ctx, file, o.tools, stderr)
	if err != nil {
		return err
	}
	defer res.Close()
	po := mcptools.ProxyOptions{Tenant: o.tenant, Wait: o.wait, Version: plainVersion()}
	if !o.local {
		ns := o.global.namespace
		po.CallContext = func(ctx context.Context) context.Context { return batch.WithNamespace(ctx, ns) }
	}
	if o.events {
		start := time.Now()
		var mu sync.Mutex // calls settle at once on their own goroutines
		po.OnCall = func(c mcptools.CallOutcome) {
			mu.Lock()
			defer mu.Unlock()
			oc := c.Outcome
			printEvent(stderr, start, sched.Event{Kind: sched.EventFinished, Time: time.Now(), CallID: c.RequestID, Tool: oc.Tool, Status: oc.Status, Why: errWhy(oc)})
		}
	}
	p, err := mcptools.NewProxy(res, sess, po)
	if err != nil {
		return &exitError{code: exitDataErr, err: fmt.Errorf("%s: %w", o.tools, err)}
	}
	for _, s := range p.Skipped() {
		fmt.Fprintln(stderr, "lanectl: warning: "+s)
	}
	if o.http == "" {
		err = p.ServeStdio(ctx, io.NopCloser(cmd.InOrStdin()), nopWriteCloser{cmd.OutOrStdout()})
	} else {
		err = o.serveHTTP(ctx, p, stderr)
	}
	if ctx.Err() != nil {
		p.Close() // a signal: the calls in flight end now, their lanes released
	}
	p.Wait()
	if err != nil && ctx.Err() == nil {
		return err
	}
	return nil // the end of the input, or a signal: the way a server stops
}

// serveHTTP serves p's streamable HTTP handler at /mcp on --http until ctx
// ends, then lets the requests in flight finish, for mcpShutdownGrace at
// most.
func (o *mcpServeOptions) serveHTTP(ctx context.Context, p *mcptools.Proxy, stderr io.Writer) error {
	ln, err := net.Listen("tcp", o.http)
	if err != nil {
		return usageErrorf("cannot serve on --http %s: %v", o.http, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", p.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stderr, "lanectl: serving MCP at http://%s/mcp (%d tools)\n", ln.Addr(), len(p.Tools()))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), mcpShutdownGrace)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// resolveTools starts or reaches file's MCP servers, names on stderr each
// that failed (its tools' calls fail, the others run) and each tool left
// out, and returns the configuration with their tools. Its error is a
// configuration error (exit 65) naming path.
func resolveTools(ctx context.Context, file *batch.File, path string, stderr io.Writer) (*batch.Resolved, error) {
	connect := mcptools.Connector{Stderr: stderr, Version: plainVersion()}
	res, err := file.Resolve(ctx, connect.Connect)
	if err != nil {
		var ce *batch.ConfigError
		if errors.As(err, &ce) {
			ce.File = path
		}
		return nil, &exitError{code: exitDataErr, err: err}
	}
	for _, f := range res.Failed {
		fmt.Fprintln(stderr, "lanectl: warning: "+f.Error()+"; the calls of its tools fail")
	}
	for _, s := range res.Skipped {
		fmt.Fprintln(stderr, "lanectl: warning: "+s)
	}
	return res, nil
}

// errWhy is the text of an outcome's error, "" for none.
func errWhy(o sched.Outcome) string {
	if o.Err == nil {
		return ""
	}
	return o.Err.Error()
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
