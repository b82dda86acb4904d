package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// connectTimeout bounds the first contact with Redis (PING) and the setup of
// a Session's subscription.
const connectTimeout = 5 * time.Second

// globalOptions are the flags every command shares.
type globalOptions struct {
	redisURL      string
	namespace     string
	json          bool
	allowEviction bool // --allow-eviction: redislane.WithEvictionAllowed

	// urlFile names the file that holds the Redis URL (--redis-url-file or
	// $LANES_REDIS_URL_FILE), read by open; urlFileFrom says which of the
	// two named it, for messages.
	urlFile, urlFileFrom string
	// urlFromEnv: redisURL came from $LANES_REDIS_URL, for messages;
	// urlDefaulted: from nowhere, it is defaultRedisURL; urlFromFlag: from
	// --redis; nsFromFlag: namespace from --namespace; nsFromEnv: from
	// $LANES_NAMESPACE.
	urlFromEnv, urlDefaulted, urlFromFlag, nsFromFlag, nsFromEnv bool
	// caFile names the PEM file of the CAs that a rediss:// server's
	// certificate must chain to (--redis-ca-file or $LANES_REDIS_CA_FILE);
	// caFileFrom says which, for messages.
	caFile, caFileFrom string

	getenv func(string) string
	// telemetry is what the OTEL_* variables set up (otel.go).
	telemetry *telemetry
	// terminal reports whether its argument (stdin, stdout) is a terminal;
	// nil means isTerminal. Tests replace it.
	terminal func(any) bool
}

// resolve fills in what the flags left unset from the environment, then
// the defaults. The server comes from --redis or --redis-url-file (never
// both), else $LANES_REDIS_URL or $LANES_REDIS_URL_FILE (never both), else
// the default; a URL file is read by open, so that commands that do not
// talk to Redis do not need it.
func (g *globalOptions) resolve(flags interface{ Changed(string) bool }) error {
	switch {
	case flags.Changed("redis") && flags.Changed("redis-url-file"):
		return usageErrorf("--redis and --redis-url-file both name the Redis server; give one")
	case flags.Changed("redis"):
		g.urlFromFlag = true
	case flags.Changed("redis-url-file"):
		g.urlFileFrom = "--redis-url-file"
		if g.urlFile == "" {
			return usageErrorf("--redis-url-file needs a file name")
		}
	default:
		url, file := g.getenv("LANES_REDIS_URL"), g.getenv("LANES_REDIS_URL_FILE")
		switch {
		case url != "" && file != "":
			return usageErrorf("LANES_REDIS_URL and LANES_REDIS_URL_FILE are both set; unset one (or give --redis)")
		case file != "":
			g.urlFile, g.urlFileFrom = file, "LANES_REDIS_URL_FILE"
		case url != "":
			g.redisURL, g.urlFromEnv = url, true
		default:
			g.redisURL, g.urlDefaulted = defaultRedisURL, true
		}
	}
	if flags.Changed("redis-ca-file") {
		g.caFileFrom = "--redis-ca-file"
		if g.caFile == "" {
			return usageErrorf("--redis-ca-file needs a file name")
		}
	} else if v := g.getenv("LANES_REDIS_CA_FILE"); v != "" {
		g.caFile, g.caFileFrom = v, "LANES_REDIS_CA_FILE"
	}
	g.nsFromFlag = flags.Changed("namespace")
	if !g.nsFromFlag {
		g.namespace = "default"
		if v := g.getenv("LANES_NAMESPACE"); v != "" {
			g.namespace, g.nsFromEnv = v, true
		}
	}
	return nil
}

// flagArgs returns the global flags that name this command's server and
// namespace, as given on its command line (not those the environment gave,
// which a command run from the same shell gets again), for a command line
// lanectl prints to be run later; and whether the server's URL, which
// holds a password, was left out.
func (g *globalOptions) flagArgs() (args []string, secret bool) {
	switch {
	case g.urlFromFlag && redactURL(g.redisURL) == g.redisURL:
		args = append(args, "--redis", shellWord(g.redisURL))
	case g.urlFromFlag:
		secret = true
	case g.urlFileFrom == "--redis-url-file":
		args = append(args, "--redis-url-file", shellWord(g.urlFile))
	}
	if g.caFileFrom == "--redis-ca-file" {
		args = append(args, "--redis-ca-file", shellWord(g.caFile))
	}
	if g.allowEviction {
		args = append(args, "--allow-eviction")
	}
	if g.nsFromFlag {
		args = append(args, "--namespace", shellWord(g.namespace))
	}
	return args, secret
}

// tty reports whether f, one of the command's standard streams, is a
// terminal.
func (g *globalOptions) tty(f any) bool {
	if g.terminal != nil {
		return g.terminal(f)
	}
	return isTerminal(f)
}

// server names the Redis server the commands read, its password redacted,
// for what they print.
func (g *globalOptions) server() string { return redactURL(g.redisURL) }

// opener connects to the lanes of the namespace the global flags name. The
// returned function closes the connection; call it once done.
type opener func(ctx context.Context) (lanes.Backend, func(), error)

// open is the opener of lanectl: a redislane Backend on the --redis server
// (one server, a Cluster or a Sentinel's master: connect), checked with a
// round trip so that an unreachable server is reported at once.
func (g *globalOptions) open(ctx context.Context) (lanes.Backend, func(), error) {
	return g.openTarget(ctx, false)
}

// openLock is the opener of `lanectl lock`: open's, with a client that
// dials once a try (redisTarget.dialOnce), so that lock's final release
// to a Redis that is gone ends at once instead of redialing for seconds.
func (g *globalOptions) openLock(ctx context.Context) (lanes.Backend, func(), error) {
	return g.openTarget(ctx, true)
}

// openTarget opens the Backend of the --redis server, its client dialing
// once a try when dialOnce.
func (g *globalOptions) openTarget(ctx context.Context, dialOnce bool) (lanes.Backend, func(), error) {
	t, err := g.redisTarget()
	if err != nil {
		return nil, nil, err
	}
	if dialOnce {
		t.dialOnce()
	}
	if err := lanes.ValidateNamespace(g.namespace); err != nil {
		return nil, nil, usageErrorf("%s", describe(err))
	}
	var opts []redislane.Option
	if g.allowEviction || g.getenv("LANES_ALLOW_EVICTION") == "1" {
		opts = append(opts, redislane.WithEvictionAllowed())
	}
	c, err := g.connect(ctx, t, g.namespace)
	if err != nil {
		return nil, nil, err
	}
	b, err := redislane.New(c, g.namespace, opts...)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return &redisBackend{Backend: b, client: c}, func() {
		b.Close()
		c.Close()
	}, nil
}

// redisBackend is the Backend open returns: redislane's, with the client
// it runs on, for the few reads lanectl makes of its own (status's look for
// the namespaces in use, namespaceHint).
type redisBackend struct {
	*redislane.Backend
	client redis.UniversalClient
}

// unavailable names the server in a backend error that says it cannot be
// reached, and returns any other error as it is.
func (g *globalOptions) unavailable(err error) error {
	if errors.Is(err, lanes.ErrUnavailable) && !errors.As(err, new(*unreachableError)) {
		return g.unreachable(err)
	}
	return err
}

// snapshot inspects keys (every key with holders or waiters when none) and
// names the namespace where the backend left it empty.
func (g *globalOptions) snapshot(ctx context.Context, b lanes.Backend, keys []string) (*lanes.Snapshot, error) {
	snap, err := b.Inspect(ctx, keys)
	if err != nil {
		return nil, g.unavailable(err)
	}
	if snap.Namespace == "" {
		snap.Namespace = g.namespace
	}
	return snap, nil
}

// unreachableError reports a Redis server that cannot be reached. It is
// lanes.ErrUnavailable to errors.Is.
type unreachableError struct {
	url       string // redacted
	err       error
	defaulted bool // url is defaultRedisURL: nothing named a server
}

func (e *unreachableError) Error() string {
	if m := misrouted(e.err); m != "" {
		return fmt.Sprintf("Redis at %s %s", e.url, m)
	}
	if noSuchDatabase(e.err) {
		return fmt.Sprintf("Redis at %s has no such database (%v): the number after the URL's last / must be below the server's \"databases\" setting (16 by default)", e.url, e.err)
	}
	if permissionDenied(e.err) {
		return fmt.Sprintf("Redis at %s refused access: %v", e.url, e.err)
	}
	// the cause alone: a step's error repeats the backend's words
	// ("lanes: backend unavailable: redis namespace NS: ...") that lock's
	// first connection does not have
	cause := strings.TrimPrefix(e.err.Error(), lanes.ErrUnavailable.Error()+": ")
	cause = stepWords.ReplaceAllString(cause, "")
	if strings.Contains(cause, "redis: can't parse") || strings.Contains(cause, "redis: invalid reply") {
		return fmt.Sprintf("the server at %s answered, but not in Redis's protocol (is it a Redis server, and the port right?): %s", e.url, cause)
	}
	msg := fmt.Sprintf("cannot reach Redis at %s: %s", e.url, cause)
	if strings.HasPrefix(e.url, "rediss://") && !strings.Contains(msg, "tls:") {
		msg += " (is the server speaking TLS?)"
	}
	if e.defaulted {
		msg += " (no --redis, LANES_REDIS_URL or LANES_REDIS_URL_FILE named a server, so lanectl tried the default: set one, or start lanectl dev-server)"
	}
	return msg
}

// stepWords is the start of redislane's words for a step that could not
// reach the server.
var stepWords = regexp.MustCompile(`^redis namespace \S+: `)

// unreachable is the unreachableError of err for the server g names.
func (g *globalOptions) unreachable(err error) *unreachableError {
	return &unreachableError{url: redactURL(g.redisURL), err: err, defaulted: g.urlDefaulted}
}
func (e *unreachableError) Unwrap() error        { return e.err }
func (e *unreachableError) Is(target error) bool { return target == lanes.ErrUnavailable }

// newRootCommand builds lanectl and its commands on g. relay is the source
// of the signals `lock` passes on to its command; it may be nil.
func newRootCommand(g *globalOptions, relay *signalRelay) *cobra.Command {
	root := &cobra.Command{
		Use:   "lanectl",
		Short: "Inspect and use lanes: cluster-wide FIFO locks and limits on Redis",
		Long: `lanectl inspects and uses lanes, bounded FIFO resources shared through Redis.

The server comes from --redis or --redis-url-file, else $LANES_REDIS_URL or
$LANES_REDIS_URL_FILE, else ` + defaultRedisURL + `: one server, a Redis
Cluster (any node's URL; more seed nodes with addr=HOST:PORT) or the master
that Sentinels name (redis://SENTINEL:26379?master_name=NAME); the namespace from
--namespace, else $LANES_NAMESPACE, else "default". A rediss:// server's
certificate is checked against the system's CAs, or those of --redis-ca-file
($LANES_REDIS_CA_FILE).
Run "lanectl dev-server" for an embedded server to try it without Redis.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &usageError{msg: "no command given", showUsage: true}
			}
			msg := fmt.Sprintf("unknown command %q", args[0])
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += fmt.Sprintf("; did you mean %q?", s[0])
			}
			return &usageError{msg: msg, showUsage: true}
		},
		RunE: func(cmd *cobra.Command, args []string) error { return nil },
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			err := g.resolve(cmd.Flags())
			g.telemetry.command(cmd, g.namespace)
			return err
		},
	}
	root.Version = buildVersion()
	root.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	root.CompletionOptions.HiddenDefaultCmd = false
	root.SuggestionsMinimumDistance = 2
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &usageError{msg: plainFlagError(err), showUsage: true}
	})
	pf := root.PersistentFlags()
	pf.StringVar(&g.redisURL, "redis", "", `Redis URL, redis:// or rediss:// (TLS), user and password in the URL; a Cluster: any node, more with addr=HOST:PORT; Sentinel: a Sentinel's address and master_name=NAME (default $LANES_REDIS_URL, else `+defaultRedisURL+`)`)
	pf.StringVar(&g.urlFile, "redis-url-file", "", `file holding the Redis URL, so that its password is not in the command line (default $LANES_REDIS_URL_FILE)`)
	pf.StringVar(&g.caFile, "redis-ca-file", "", `PEM file of the CA certificates a rediss:// server's certificate must chain to (default $LANES_REDIS_CA_FILE, else the system's)`)
	pf.StringVar(&g.namespace, "namespace", "", `namespace of the lanes (default $LANES_NAMESPACE, else "default")`)
	pf.BoolVar(&g.json, "json", false, "print JSON for scripts instead of tables")
	pf.BoolVar(&g.allowEviction, "allow-eviction", false, "use a Redis whose maxmemory-policy may evict lanes' keys (allkeys-*): an evicted key resets the namespace")

	root.AddCommand(
		newDevServerCommand(&devServerOptions{}),
		newLockCommand(&lockOptions{global: g, open: g.openLock, relay: relay}),
		newStatusCommand(&statusOptions{global: g, open: g.open}),
		newKeysCommand(&keysOptions{global: g, open: g.open}),
		newReleaseCommand(&releaseOptions{global: g, open: g.open}),
		newDoctorCommand(&doctorOptions{global: g, open: g.open}),
		newGCCommand(&doctorOptions{global: g, open: g.open}),
		newWatchCommand(&watchOptions{global: g, open: g.open}),
		newUICommand(&uiOptions{global: g, open: g.open}),
		newBatchCommand(&batchOptions{global: g, open: g.open}),
		newMCPCommand(&mcpServeOptions{global: g, open: g.open}),
		newDemoCommand(&demoOptions{}),
		newDemoToolCommand(),
	)
	for _, c := range root.Commands() {
		c.DisableFlagsInUseLine = true // each Use line shows its flags
	}
	return root
}

// run runs lanectl with args and returns its exit status. Errors are
// printed to stderr as one line, `lanectl: <message>`, after the usage of
// the command when the mistake was in the command line.
func run(ctx context.Context, relay *signalRelay, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	return runWith(ctx, &globalOptions{getenv: getenv}, relay, args, stdin, stdout, stderr)
}

// runWith is run on the global options g, which tests prepare.
func runWith(ctx context.Context, g *globalOptions, relay *signalRelay, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, g.telemetry = startTelemetry(ctx, g.getenv, stderr)
	root := newRootCommand(g, relay)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	addCompletion(root)
	cmd, err := root.ExecuteContextC(ctx)
	code := exitCode(err)
	g.telemetry.end(err, code)
	if err == nil {
		return code
	}
	var exit *exitError
	if errors.As(err, &exit) && exit.err == nil {
		return code // a command's own status: nothing to add
	}
	line := errorLine(err, g.redisURL)
	if g.json || jsonAsked(args) {
		writeJSONError(stderr, line, errorCode(err), code)
		return code
	}
	var usage *usageError
	if errors.As(err, &usage) && usage.showUsage && cmd != nil {
		line += fmt.Sprintf(` (see "%s --help")`, cmd.CommandPath())
	}
	fmt.Fprintln(stderr, line)
	return code
}

// addCompletion adds cobra's `completion bash|zsh|fish|powershell` to root,
// once root's output is set (cobra's scripts go to the output it had then).
// Another word than a shell is a usage error, not the command's help.
func addCompletion(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		c.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("completion: unknown shell %q; give bash, zsh, fish or powershell", args[0])
			}
			return nil
		}
		c.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
	}
}

// jsonError is what lanectl prints on stderr for an error under --json:
// one line, the message (as the line without --json says it, without the
// "lanectl: "), the kind of error (errorCode) and the exit status.
type jsonError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	Exit  int    `json:"exit"`
}

// writeJSONError writes line, the error line lanectl would print, as a
// jsonError.
func writeJSONError(w io.Writer, line, code string, exit int) {
	b, _ := json.Marshal(jsonError{Error: strings.TrimPrefix(line, "lanectl: "), Code: code, Exit: exit}) // strings and an int: cannot fail
	fmt.Fprintf(w, "%s\n", b)
}

// jsonAsked reports whether args ask for --json before "--": for an error
// cobra met before it set the flag (an unknown flag after --json, say).
func jsonAsked(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--json", "--json=true", "--json=1":
			return true
		}
	}
	return false
}

// errorLine formats err as the one line lanectl prints for it, without the
// password of the Redis URL.
func errorLine(err error, rawURL string) string {
	text := err.Error()
	if m := evictableWords.FindStringSubmatch(text); m != nil && errors.Is(err, redislane.ErrEvictable) {
		// redislane's words name its Go option: a CLI user has a flag
		text = fmt.Sprintf("the Redis server's maxmemory-policy is %s, which may evict the keys of namespace %s one at a time; set noeviction (or a volatile-* policy), or pass --allow-eviction knowing what it risks", m[1], m[2])
	}
	msg := strings.Join(strings.Fields(strings.ReplaceAll(text, "\n", "; ")), " ")
	if rawURL != "" {
		msg = redactSecret(msg, rawURL)
	}
	return "lanectl: " + strings.TrimPrefix(msg, "lanectl: ")
}

// evictableWords finds the policy and the namespace in redislane's
// ErrEvictable message.
var evictableWords = regexp.MustCompile(`maxmemory-policy is (\S+), which may evict the keys of namespace (\S+) one at a time`)

// quietRedisLogs stops go-redis from logging to stderr: lanectl reports
// every error itself, in one line.
func quietRedisLogs() { redis.SetLogger(discardLogger{}) }

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// plainFlagError is pflag's message of a flag value it could not parse,
// with Go's parser wording put plainly: `invalid argument "x" for
// "--limit" flag: not a whole number` rather than strconv's `parsing "x":
// invalid syntax`.
func plainFlagError(err error) string {
	var ne *strconv.NumError
	if !errors.As(err, &ne) {
		return err.Error()
	}
	msg := err.Error()
	plain := "not a number"
	switch {
	case errors.Is(ne.Err, strconv.ErrRange):
		plain = "out of range"
	case ne.Func == "ParseInt" || ne.Func == "ParseUint" || ne.Func == "Atoi":
		plain = "not a whole number"
	case ne.Func == "ParseBool":
		plain = "not true or false"
	}
	if i := strings.Index(msg, "strconv."+ne.Func+":"); i >= 0 {
		return msg[:i] + plain
	}
	return msg
}
