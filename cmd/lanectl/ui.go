package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lanes-dev/lanes/internal/ui"
	"github.com/lanes-dev/lanes/lanes"
)

// uiOptions are the flags of `lanectl ui`.
type uiOptions struct {
	global       *globalOptions
	open         opener // opens global.namespace: ui sets it to each namespace in turn
	addr         string
	namespaces   []string
	token        string
	tokenFile    string
	allowRelease bool
	interval     time.Duration
	history      time.Duration
}

// minTokenLen bounds a --token from below: the page is the lanes' remote
// control once it listens beyond this machine.
const minTokenLen = 16

func newUICommand(o *uiOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ui [--addr HOST:PORT] [--namespace NS]... [--token T | --token-file F] [--allow-release]",
		Short: "Serve a live web page of the lanes, with a timeline of each key",
		Long: `ui serves a web page (assets built in) that shows every key with holders or
waiters, busiest first: per holder its entry, owner, tool, call id, tenant,
fencing token, how long held and the lease left; per waiter its position and
how long it waited; keys filtered by prefix or class. It updates live
(server-sent events) and says so when Redis cannot be reached. A key's
timeline draws the grants, holds and waits of the last minutes.

It looks at each namespace every --interval (one inspect step) and keeps
what it sees in memory: the timeline starts when ui starts, and an entry
granted and released between two looks is not seen. The same data is JSON
at /api/state (and /api/events, /api/timeline?ns=NS&key=KEY).

It listens on 127.0.0.1:8080 by default, and answers only requests for
localhost there. To listen on another address it needs --token or
--token-file (the page asks for the token; scripts send "Authorization:
Bearer TOKEN"); the page is plain HTTP, so put TLS in front of it beyond a
trusted network. --namespace may be repeated. --allow-release adds a
"release" button that evicts an entry by force, as "lanectl release --force"
does, after a confirmation naming the entry, its owner and who would be
granted next. It runs until SIGINT or SIGTERM, then exits 0; it exits 69 if
Redis cannot be reached at the start.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.addr, "addr", "127.0.0.1:8080", "address to listen on; beyond loopback it needs --token; port 0 picks a free one")
	f.StringArrayVar(&o.namespaces, "namespace", nil, `namespace to show; repeat for several (default $LANES_NAMESPACE, else "default")`)
	f.StringVar(&o.token, "token", "", "token the page asks for (at least 16 characters); needed to listen beyond loopback")
	f.StringVar(&o.tokenFile, "token-file", "", "file holding the token, so that it is not in the command line")
	f.BoolVar(&o.allowRelease, "allow-release", false, "let the page release entries by force, after a confirmation")
	f.DurationVar(&o.interval, "interval", ui.DefaultInterval, "how often to look at each namespace; a hold shorter than this may be missed")
	f.DurationVar(&o.history, "history", ui.DefaultHistory, "how long the timeline keeps an entry after it left")
	return cmd
}

// check validates the flags and reads the token file.
func (o *uiOptions) check() error {
	switch {
	case o.interval < ui.MinInterval:
		return usageErrorf("--interval %v is under %v", o.interval, ui.MinInterval)
	case o.history <= 0:
		return usageErrorf("--history must be positive, got %v", o.history)
	case o.token != "" && o.tokenFile != "":
		return usageErrorf("--token and --token-file both give the token; give one")
	}
	if _, _, err := net.SplitHostPort(o.addr); err != nil {
		return usageErrorf("bad --addr %q: %v", o.addr, err)
	}
	if o.tokenFile != "" {
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return usageErrorf("--token-file: %v", err)
		}
		if o.token = strings.TrimSpace(string(b)); o.token == "" {
			return usageErrorf("--token-file %s is empty", o.tokenFile)
		}
	}
	if o.token != "" && len(o.token) < minTokenLen {
		return usageErrorf("the token must be at least %d characters (e.g. the output of: openssl rand -hex 16)", minTokenLen)
	}
	if len(o.namespaces) == 0 {
		o.namespaces = []string{o.global.namespace} // resolved: $LANES_NAMESPACE or "default"
	}
	for _, ns := range o.namespaces {
		if err := lanes.ValidateNamespace(ns); err != nil {
			return usageErrorf("%s", describe(err))
		}
	}
	o.namespaces = dedupe(o.namespaces) // --namespace before and after "ui" are one list
	return nil
}

func (o *uiOptions) run(cmd *cobra.Command) error {
	if err := o.check(); err != nil {
		return err
	}
	ctx := cmd.Context()
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return &exitError{code: exitCannotListen, err: fmt.Errorf("ui cannot listen on %s: %w", o.addr, err)}
	}
	defer ln.Close()
	if tcp, ok := ln.Addr().(*net.TCPAddr); o.token == "" && (!ok || !tcp.IP.IsLoopback()) {
		return usageErrorf("--addr %s listens beyond this machine: give --token or --token-file (the page asks for it), or listen on 127.0.0.1", o.addr)
	}

	backends := map[string]lanes.Backend{}
	var sources []ui.Source
	for _, ns := range o.namespaces {
		o.global.namespace = ns
		b, closeBackend, err := o.open(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted while connecting
			}
			return err
		}
		defer closeBackend()
		backends[ns] = b
		sources = append(sources, ui.Source{Namespace: ns, Lanes: b})
	}
	cfg := ui.Config{Sources: sources, Interval: o.interval, History: o.history, Token: o.token,
		ErrorText: func(err error) string {
			return strings.TrimPrefix(errorLine(o.global.unavailable(err), o.global.redisURL), "lanectl: ")
		}}
	if o.allowRelease {
		cfg.Releaser = &uiReleaser{backends: backends, log: cmd.ErrOrStderr()}
	}
	srv, err := ui.New(cfg)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	ran := make(chan struct{})
	go func() {
		_ = srv.Run(runCtx)
		close(ran)
	}()

	url := "http://" + announced(o.addr, ln.Addr()) + "/"
	out := cmd.OutOrStdout()
	fmt.Fprintln(out, url)
	flush(out)
	fmt.Fprintf(cmd.ErrOrStderr(), "ui: serving %s for namespace%s %s on %s; looks every %v%s%s. Stop it with Ctrl-C.\n",
		url, map[bool]string{true: "s", false: ""}[len(o.namespaces) > 1], strings.Join(o.namespaces, ", "), redactURL(o.global.redisURL),
		o.interval, map[bool]string{true: "; token required", false: ""}[o.token != ""],
		map[bool]string{true: "; force release allowed", false: ""}[o.allowRelease])

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	stopRun()
	<-ran // the event streams end with Run
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("ui stopped serving: %w", serveErr)
	}
	return nil
}

// uiReleaser releases entries for the page as `lanectl release --force`
// does, and says so on stderr.
type uiReleaser struct {
	backends map[string]lanes.Backend
	log      io.Writer
}

// Preview implements ui.Releaser: release's question, and the waiters the
// release should grant.
func (r *uiReleaser) Preview(ctx context.Context, ns, entry string) (*ui.Preview, error) {
	snap, err := r.backends[ns].Inspect(ctx, nil)
	if err != nil {
		return nil, err
	}
	p := &ui.Preview{Namespace: ns, Entry: entry, Next: []ui.NextEntry{}}
	e, ok := entryInfos(snap)[entry]
	if !ok {
		return p, nil
	}
	p.Found, p.Held, p.Question = true, e.held, evictQuestion(entry, e)
	for _, n := range ui.NextGranted(snap, entry) {
		keys := make([]string, 0, len(n.Lanes))
		for _, l := range n.Lanes {
			keys = append(keys, l.Key)
		}
		p.Next = append(p.Next, ui.NextEntry{Entry: n.ID, Host: n.Owner.Host, PID: n.Owner.PID, Tool: n.Tool, CallID: n.CallID, Keys: keys})
	}
	return p, nil
}

// Release implements ui.Releaser with release's code: a look to tell what
// the entry held, then an operator's release.
func (r *uiReleaser) Release(ctx context.Context, ns, entry string) (*ui.Released, error) {
	b := r.backends[ns]
	snap, err := b.Inspect(ctx, nil)
	if err != nil {
		return nil, err
	}
	v, _, err := forceRelease(ctx, b, []string{entry}, entryInfos(snap))
	if err != nil {
		return nil, err
	}
	rel := v.Released[0]
	if len(rel.Keys) == 0 { // it ended before the release came
		fmt.Fprintf(r.log, "ui: release of %s of namespace %s by force from the page: it was gone already\n", cell(entry), ns)
	} else {
		next := "granted nobody next"
		if len(v.Next) > 0 {
			names := make([]string, len(v.Next))
			for i, g := range v.Next {
				names[i] = g.String()
			}
			next = "granted next: " + strings.Join(names, "; ")
		}
		fmt.Fprintf(r.log, "ui: released %s of namespace %s by force from the page (was %s on %s); %s\n",
			cell(entry), ns, rel.Was, cell(strings.Join(rel.Keys, ", ")), next)
	}
	return &ui.Released{Namespace: ns, Entry: entry, Was: rel.Was, Keys: rel.Keys, Granted: v.Granted}, nil
}

// announced is the address the page is announced at: the one the listener
// got (the port 0 picked), with the host --addr gave when it names every
// address of the machine (0.0.0.0 listens on [::] too, and "http://[::]:
// 8097/" read oddly to a README trial).
func announced(asked string, got net.Addr) string {
	host, _, err := net.SplitHostPort(asked)
	_, port, err2 := net.SplitHostPort(got.String())
	if ip := net.ParseIP(host); err != nil || err2 != nil || host != "" && (ip == nil || !ip.IsUnspecified()) {
		return got.String()
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return net.JoinHostPort(host, port)
}
