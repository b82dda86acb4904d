package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
	"github.com/lanes-dev/lanes/sched/batch"
)

// Bounds of `lanectl batch`.
const (
	maxOutputLines = 10  // lines of one call's output the table shows
	maxRunID       = 128 // bytes of --run-id: an entry id is RUN-ID/CALL-ID
)

// batchOptions are the flags of `lanectl batch`.
type batchOptions struct {
	global *globalOptions
	open   opener

	tools      string
	calls      string
	tenant     string
	runID      string
	ttl        time.Duration
	deadline   time.Duration
	checkpoint string
	resume     string
	local      bool
	noLanes    bool
	events     bool
	reply      bool

	response *batch.Response // the response read from --calls, for --reply
}

func newBatchCommand(o *batchOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "batch --tools FILE (--calls FILE | --resume FILE) [--tenant T] [--run-id ID] [--ttl D] [--deadline D] [--checkpoint FILE] [--local] [--no-lanes] [--events] [--reply] [--json]",
		Short: "Run the tool calls of one model response through the scheduler",
		Long: `batch runs the tool calls of one model response (--calls: Anthropic Messages,
OpenAI Chat Completions or OpenAI Responses JSON; - for standard input)
through the batch scheduler, each tool an external command declared in the
TOML file --tools, or a tool of an MCP server its [mcp_servers] name, and
prints the calls' outcomes in call order.

A tool's command reads the call's arguments, JSON, on its standard input and
writes its result on its standard output; its environment carries
LANES_CALL_ID, LANES_TOOL, LANES_TENANT, LANES_ENTRY, LANES_OPERATION,
LANES_TOKENS (key=token,... by lane key, such as concurrency:rfd=7, a key's
"%", "," and "=" written %25, %2C and %3D), LANES_LINEAGE (the entries the
call is nested under and its own, outermost first, escaped the same way) and
LANES_NAMESPACE. A lanectl batch or lock that a tool runs takes that lineage
as its own: its calls re-enter the lanes the tool's call holds at once, and
a request that would close a wait-for cycle fails at once.

A call's status follows its command's own exit: what the command leaves
running in its process group is killed when it exits, and its output is what
it wrote until then. A command runs in a process group of its own; on Linux
it is killed if batch dies. It gets SIGTERM once its lease's local deadline
is less than a tenth of --ttl away (renewals are not reaching Redis) and
SIGKILL when the lease is lost, a tenth of --ttl before Redis could grant its
lanes to anyone else.

The lanes live in Redis (--redis), shared with every other batch of the
namespace, or with --local in this process only. --events prints the
scheduler's timeline to standard error.

Each call's outcome is kept by run id and call id as it settles (for the
runner's retention, default 24h): batch started again with the same
--run-id prints the settled calls' outcomes ("stored": true) without running
them again, runs the calls that never started, and reports a call that was in
flight when its process died as safe_to_retry or indeterminate, never running
it again.

--deadline D ends the whole run D after it starts: queued calls end
never_dispatched, running ones are cancelled. SIGUSR1 pauses the batch:
running calls finish, none starts, and the rest is written as a checkpoint
(JSON) to --checkpoint FILE; batch --resume FILE goes on from it, with the
same run id, where it paused: on the same Redis server, in the same
namespace, or --local when it ran --local (--calls is not needed then;
a --namespace, LANES_NAMESPACE or server that names another is
refused). SIGUSR1 is heard from lanectl's
first milliseconds: one that comes before the first call starts pauses the
batch before any call; one that comes when no call is left to start pauses
nothing, and a line on stderr says so. Only in the first moments after
exec (about a millisecond, longer under load) does SIGUSR1 kill lanectl
(status 138) or go unheard: wait for the first line of --events to be sure.

--reply prints, in place of the outcomes, the message that answers the
response, in its own form, to append to the conversation: a JSON array
holding one Anthropic user message of tool_result blocks, or one OpenAI Chat
tool message or Responses function_call_output item per call, in call order;
[] for a response without tool calls (printed without reaching Redis). A
call that did not end ok is answered with a text for the model (the
[reply] table of --tools replaces it); with --json, batch prints
{"reply": [...], "outcomes": [...]}. With --resume, --calls names the
response the checkpoint came from.

batch exits 0 once the batch ran or paused, whatever its calls' outcomes; 65
when the --tools, --calls or --resume file cannot be read or is not valid;
128+N when signal N cancelled the batch (its outcomes are printed first).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("batch takes no arguments, got %q; name the files with --tools and --calls", args[0])
			}
			return o.complete()
		},
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd) },
	}
	f := cmd.Flags()
	f.StringVar(&o.tools, "tools", "", "TOML file declaring the tools and the runner's limits")
	f.StringVar(&o.calls, "calls", "", "JSON model response whose tool calls to run; - for standard input")
	f.StringVar(&o.tenant, "tenant", "", "tenant the calls run for (the runner's per_tenant lane)")
	f.DurationVar(&o.ttl, "ttl", lanes.DefaultTTL, "lease TTL of the batch's entries (30ms to 1h); a tool is killed a tenth of it before its lanes could pass on")
	f.StringVar(&o.runID, "run-id", "", "id of the batch's entries and records (default: a random one); re-running with the same id keeps the calls' places and runs no settled call again")
	f.DurationVar(&o.deadline, "deadline", 0, "end the whole run this long after it starts (queued calls never dispatched, running ones cancelled); 0: none")
	f.StringVar(&o.checkpoint, "checkpoint", "", "where SIGUSR1 writes the checkpoint of the paused batch (JSON), for --resume")
	f.StringVar(&o.resume, "resume", "", "go on from the checkpoint a SIGUSR1 wrote to this file, in place of --calls")
	f.BoolVar(&o.local, "local", false, "keep the lanes in this process instead of Redis")
	f.BoolVar(&o.events, "events", false, "print each scheduler event (queued, granted, started, finished) to standard error")
	f.BoolVar(&o.reply, "reply", false, "print the message that answers the response, in its own form, in place of the outcomes (with --json: both)")
	f.BoolVar(&o.noLanes, "no-lanes", false, "run every call at once, without lanes, in this process: to see what the lanes prevent")
	return cmd
}

// complete checks the flags before any file is read.
func (o *batchOptions) complete() error {
	switch {
	case o.tools == "":
		return usageErrorf("batch needs --tools FILE")
	case o.calls == "" && o.resume == "":
		return usageErrorf("batch needs --calls FILE (- for standard input), or --resume FILE")
	case o.calls != "" && o.resume != "" && !o.reply:
		return usageErrorf("give --calls or --resume, not both: a checkpoint holds its calls")
	case ttlError(o.ttl) != nil:
		return ttlError(o.ttl)
	case o.deadline < 0:
		return usageErrorf("--deadline must not be negative, got %v", o.deadline)
	case o.noLanes && o.resume != "":
		return usageErrorf("--no-lanes runs a batch without lanes; it cannot resume one")
	case o.noLanes && o.local:
		return usageErrorf("give --local (the lanes in this process) or --no-lanes (no lanes at all), not both")
	}
	if err := o.completeReply(); err != nil {
		return err
	}
	if o.runID != "" && (len(o.runID) > maxRunID || lanes.ValidateEntryID(o.runID) != nil) {
		return usageErrorf("bad --run-id %q: it must be printable, without spaces, at most %d bytes", o.runID, maxRunID)
	}
	if o.tenant != "" && lanes.ValidateField("tenant", o.tenant) != nil { // then its lane key is valid too
		return usageErrorf("bad --tenant %q: it must be printable, at most %d bytes", o.tenant, lanes.MaxFieldLen)
	}
	return nil
}

func (o *batchOptions) run(cmd *cobra.Command) (err error) {
	ctx := cmd.Context()
	// SIGUSR1 is heard from lanectl's start (pausesignal), also while the
	// tools load and Redis answers: one that came before the run pauses it
	// before any call. One that came when no call was left to start, up to
	// the outcomes' printing, pauses nothing: stderr says so.
	pause, pauseAsked := pauseOnSIGUSR1(pauseSignals)
	paused := false // the run made a checkpoint
	defer func() {
		if pauseAsked() && !paused && err == nil {
			fmt.Fprintln(cmd.ErrOrStderr(), nothingToPause)
		}
	}()
	defer stopWithTools()()
	// A batch started by a tool or a lock command runs nested under it
	// (DESIGN.md invariant 10): its calls re-enter the lanes their parent
	// holds, and a cycle fails at once.
	lineage, err := inheritedLineage(o.global)
	if err != nil {
		return err
	}
	if len(lineage) > 0 {
		ctx = lanes.WithLineage(ctx, lineage)
	}
	var (
		cp  *sched.Checkpoint
		was checkpointFile // where the resumed batch ran
	)
	if o.resume != "" {
		if was, err = readCheckpoint(o.resume); err != nil {
			return &exitError{code: exitDataErr, err: err}
		}
		cp = was.Checkpoint
		if err := o.resumeTarget(was); err != nil {
			return err
		}
	}
	if !o.local {
		ctx = batch.WithNamespace(ctx, o.global.namespace)
	}
	file, err := batch.Load(o.tools)
	if err != nil {
		return &exitError{code: exitDataErr, err: err}
	}
	if len(file.Config.Tools) == 0 && len(file.Servers) == 0 {
		// Valid TOML that declares nothing (an empty file, /dev/null, a
		// wrong path to a file of other settings): every call would end
		// TOOL_UNKNOWN, and exit 0 (found by a README trial).
		return &exitError{code: exitDataErr, err: fmt.Errorf("%s declares no tool: no [tools.NAME] with a command and no [mcp_servers]; every call would fail as an unknown tool", o.tools)}
	}
	var (
		calls  []sched.Call
		format batch.Format
		source = o.calls
	)
	if cp != nil {
		if o.runID != "" && o.runID != cp.RunID {
			return usageErrorf("--run-id %q is not the checkpoint's run id %q", o.runID, cp.RunID)
		}
		calls, format, source = cp.Calls, "checkpoint", o.resume
	} else if calls, format, err = o.readCalls(cmd.InOrStdin()); err != nil {
		return &exitError{code: exitDataErr, err: err}
	}
	wording, err := o.prepareReply(cmd, cp)
	if err != nil {
		return err
	}
	if o.reply && len(calls) == 0 { // nothing to run: no lanes needed
		return o.printReply(cmd, wording, calls, &sched.Result{})
	}
	tools, err := resolveTools(ctx, file, o.tools, cmd.ErrOrStderr()) // starts its MCP servers, if any
	if err != nil {
		return err
	}
	defer tools.Close()
	cfg := tools.ConfigFor(calls)
	if o.noLanes {
		cfg, o.local = withoutLanes(cfg), true
	}

	b, closeBackend, err := o.backend(ctx)
	if err != nil {
		return o.setupError(ctx, err)
	}
	defer closeBackend()
	server := redisServer(b)
	if was.Server != "" && server != "" && was.Server != server {
		return usageErrorf("the checkpoint's batch ran on the Redis at %s, not %s: a batch resumes where it paused, beside the other runners of its lanes (give --redis, or LANES_REDIS_URL, for that server)", was.Server, server)
	}
	sctx, cancel := context.WithTimeout(ctx, connectTimeout)
	sess, err := lanes.NewSession(sctx, b, lanes.WithTTL(o.ttl), lanes.WithReleaseTimeout(min(o.ttl, maxReleaseWait)))
	cancel()
	if err != nil {
		return o.setupError(ctx, err)
	}
	defer sess.Close() // runs before closeBackend; a no-op once closed below
	s, err := sched.New(cfg, sess)
	if err != nil {
		return &exitError{code: exitDataErr, err: fmt.Errorf("%s: %w", o.tools, err)}
	}

	opts := sched.Options{RunID: o.runID, Tenant: o.tenant, Pause: pause}
	start := time.Now()
	if o.events {
		stderr := cmd.ErrOrStderr()
		fmt.Fprintf(stderr, "%8s  read %d tool calls (%s) from %s\n", "+0ms", len(calls), format, source)
		opts.OnEvent = func(e sched.Event) { printEvent(stderr, start, e) }
	}
	runCtx := ctx
	if o.deadline > 0 {
		var cancelRun context.CancelFunc
		runCtx, cancelRun = context.WithTimeoutCause(ctx, o.deadline, fmt.Errorf("the run's --deadline of %v passed", o.deadline))
		defer cancelRun()
	}
	var res *sched.Result
	var runErr error
	if cp != nil {
		res, runErr = s.Resume(runCtx, cp, "", opts)
	} else {
		res, runErr = s.Run(runCtx, calls, opts)
	}
	s.Wait() // bodies cut off by a timeout or the cancellation: their lanes stay held until they return
	closeErr := sess.Close()
	if runErr != nil {
		if errors.Is(runErr, sched.ErrConfig) {
			return &exitError{code: exitDataErr, err: fmt.Errorf("%s: %w", source, runErr)}
		}
		return o.global.unavailable(runErr)
	}
	if res.Checkpoint != nil {
		paused = true
		if o.checkpoint == "" {
			how := "nothing can run its rest (no --run-id either)"
			if o.runID != "" {
				how = "the same batch again with --run-id " + o.runID + " runs its rest"
			}
			fmt.Fprintln(cmd.ErrOrStderr(), "lanectl: warning: the batch paused without --checkpoint FILE: "+how)
		} else if err := writeCheckpoint(o.checkpoint, o.checkpointFile(res.Checkpoint, server)); err != nil {
			return err
		}
	}
	view := newBatchView(calls, res, o.pausedText())
	if o.reply {
		err = o.printReply(cmd, wording, calls, res)
	} else if o.global.json {
		err = printBatchJSON(cmd.OutOrStdout(), view)
	} else {
		err = printBatchTable(cmd.OutOrStdout(), view)
	}
	if err != nil {
		return err
	}
	if closeErr != nil && !o.local {
		fmt.Fprintln(cmd.ErrOrStderr(), errorLine(fmt.Errorf("warning: could not release the batch's entries (they expire within %v): %w", sess.TTL(), o.global.unavailable(closeErr)), o.global.redisURL))
	}
	if sig, ok := interruption(ctx); ok {
		return &interruptError{sig: sig, msg: fmt.Sprintf("interrupted by %s: the batch was cancelled; its outcomes are above", signalName(sig))}
	}
	return nil
}

// nothingToPause is batch's line on stderr for a SIGUSR1 that came when no
// call was left to start: every call had started or settled.
const nothingToPause = "lanectl: SIGUSR1 came when no call was left to start: nothing to pause; the batch ran to its end and wrote no checkpoint"

// stopWithTools makes Ctrl-Z (SIGTSTP) stop the batch's tool commands with
// lanectl: they run in process groups of their own, which a terminal's
// stop does not reach, and would run on while lanectl, stopped, renews no
// lease, into the turn of the lanes' next holders. Once lanectl is
// continued, each command whose lease is still held continues; one whose
// lease's deadline passed is killed before it runs again (batch.Suspend),
// and its call ends as a lost lease does. The returned function ends the
// handling (SIGTSTP stops lanectl alone again).
func stopWithTools() (stop func()) {
	jobCtl := make(chan os.Signal, 8)
	signal.Notify(jobCtl, syscall.SIGTSTP, syscall.SIGCONT)
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		var lastCont time.Time // the last SIGCONT jobCtl brought
		for {
			select {
			case <-done:
				return
			case sig := <-jobCtl:
				// Signals that come together reach jobCtl in no set
				// order: a SIGCONT just before a SIGTSTP may have been
				// sent after it.
				if sig == syscall.SIGCONT {
					lastCont = time.Now()
				} else if time.Since(lastCont) >= contWindow {
					stopTogether(jobCtl, batch.Suspend)
				}
			}
		}
	}()
	return func() {
		signal.Stop(jobCtl)
		close(done)
		<-finished
	}
}

// withoutLanes returns cfg as a runtime without lanes runs it: every call
// safe, at once, with no concurrency key, lock key, tool or tenant lane.
func withoutLanes(cfg sched.Config) sched.Config {
	out := sched.Config{Runner: sched.DefaultRunner(), Tools: map[string]sched.Tool{}}
	out.Runner.MaxConcurrentTools = lanes.MaxLimit
	for name, t := range cfg.Tools {
		t.Concurrency, t.LockKeys, t.Safe = sched.Concurrency{}, nil, sched.Always(true)
		if t.FanOut != nil {
			t.FanOut = &sched.FanOut{OnError: sched.Continue}
		}
		out.Tools[name] = t
	}
	return out
}

// readCalls reads the --calls file (or standard input) and its tool calls.
func (o *batchOptions) readCalls(stdin io.Reader) ([]sched.Call, batch.Format, error) {
	var (
		data []byte
		err  error
	)
	name := o.calls
	if o.calls == "-" {
		name = "standard input"
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(o.calls)
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, "", fmt.Errorf("cannot read %s: %w", name, err)
	}
	resp, err := batch.ReadResponse(data)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	o.response = resp
	return resp.Calls, resp.Format, nil
}

// backend opens the lanes: Redis, or an in-process backend with --local.
func (o *batchOptions) backend(ctx context.Context) (lanes.Backend, func(), error) {
	if o.local {
		return lanes.NewMemory(), func() {}, nil
	}
	return o.open(ctx)
}

// setupError is batch's answer to a failure to reach its lanes.
func (o *batchOptions) setupError(ctx context.Context, err error) error {
	if sig, ok := interruption(ctx); ok {
		return &interruptError{sig: sig, msg: fmt.Sprintf("interrupted by %s before the batch started", signalName(sig))}
	}
	return o.global.unavailable(err)
}

// batchOutcome is one call's outcome as `batch --json` prints it: the
// contract of its output. Code is "" for ok; Operations is there only for
// a call that fanned out, one outcome per operation in written order.
type batchOutcome struct {
	ID         string            `json:"id"`
	Tool       string            `json:"tool"`
	Status     string            `json:"status"`
	Code       string            `json:"code"`
	Output     string            `json:"output"`
	Error      string            `json:"error"`
	QueuedMS   int64             `json:"queued_ms"`
	RanMS      int64             `json:"ran_ms"`
	Tokens     map[string]uint64 `json:"tokens"`
	Stored     bool              `json:"stored"`
	Operations []batchOutcome    `json:"operations,omitempty"`
}

// newBatchView returns the outcomes of calls in call order, as printed. A
// call left for a checkpoint is "interrupted".
func newBatchView(calls []sched.Call, res *sched.Result, paused string) []batchOutcome {
	view := make([]batchOutcome, len(calls))
	for i, oc := range callOutcomes(calls, res, paused) {
		view[i] = outcomeView(oc)
	}
	return view
}

// pausedText is what an interrupted call's outcome says: how its run can go
// on, given the flags of this batch.
func (o *batchOptions) pausedText() string {
	switch {
	case o.checkpoint != "":
		cmd, secret := o.resumeCommand()
		if secret {
			return "not run yet: the batch paused; " + cmd + ", with this batch's --redis URL (not printed: it holds a password), runs it"
		}
		return "not run yet: the batch paused; " + cmd + " runs it"
	case o.runID != "":
		return "not run yet: the batch paused without --checkpoint; the same batch again with --run-id " + o.runID + " runs it (and no settled call again)"
	}
	return "not run: the batch paused without --checkpoint or --run-id, so nothing can resume it"
}

// checkpointFile is the checkpoint file of cp, a checkpoint of this
// batch, whose lanes were on server (redisServer).
func (o *batchOptions) checkpointFile(cp *sched.Checkpoint, server string) checkpointFile {
	if o.local {
		return checkpointFile{Checkpoint: cp, Local: true}
	}
	return checkpointFile{Checkpoint: cp, Namespace: o.global.namespace, Server: server}
}

// resumeTarget makes a resumed batch run where its checkpoint's ran
// (was): with --local when that one did, without it when not, and in its
// namespace, so that its calls queue with the other runners of the lanes
// it paused in, whatever the resuming shell's LANES_NAMESPACE. A
// namespace given by --namespace or $LANES_NAMESPACE must be the
// checkpoint's (a usage error otherwise). Its server is checked once the
// backend is open (run). A checkpoint of a lanectl before these were
// recorded names none, and is resumed as told.
func (o *batchOptions) resumeTarget(was checkpointFile) error {
	g, ns := o.global, was.Namespace
	switch {
	case was.Local && !o.local:
		return usageErrorf("the checkpoint is of a --local batch, whose lanes were in its own process: resume it with --local")
	case !was.Local && ns != "" && o.local:
		return usageErrorf("the checkpoint's batch ran on Redis, in namespace %q: resume it without --local", ns)
	case ns == "" || ns == g.namespace:
	case g.nsFromFlag:
		return usageErrorf("--namespace %q is not the checkpoint's namespace %q: a batch resumes in the namespace it paused in", g.namespace, ns)
	case g.nsFromEnv:
		return usageErrorf("LANES_NAMESPACE %q is not the checkpoint's namespace %q: a batch resumes in the namespace it paused in (unset it, or give --namespace %s)", g.namespace, ns, shellWord(ns))
	default:
		g.namespace = ns
	}
	return nil
}

// redisServer names the Redis server of b, "host:port/db", without the
// password; "" for the lanes of --local, and for a Cluster (whose seed
// addresses may differ from run to run).
func redisServer(b lanes.Backend) string {
	rb, ok := b.(*redisBackend)
	if !ok {
		return ""
	}
	c, ok := rb.client.(*redis.Client)
	if !ok {
		return ""
	}
	opt := c.Options()
	return fmt.Sprintf("%s/%d", opt.Addr, opt.DB)
}

// resumeCommand is the command line that resumes this batch from its
// checkpoint: the global flags this batch was given that name its server
// and namespace (the environment's, LANES_REDIS_URL and LANES_NAMESPACE,
// the same shell gives again), --tools and --resume, and the flags of this
// batch that a resumed run needs again (--local, --reply with its --calls;
// a batch run with --no-lanes resumes with lanes, which --no-lanes
// cannot). secret: the --redis URL, which holds a password, is left out.
func (o *batchOptions) resumeCommand() (cmd string, secret bool) {
	args := []string{"lanectl"}
	if !o.local {
		var g []string
		g, secret = o.global.flagArgs()
		args = append(args, g...)
	} else if o.global.nsFromFlag {
		args = append(args, "--namespace", shellWord(o.global.namespace))
	}
	args = append(args, "batch", "--tools", shellWord(absPath(o.tools)), "--resume", shellWord(absPath(o.checkpoint)))
	if o.local {
		args = append(args, "--local")
	}
	if o.reply {
		args = append(args, "--reply", "--calls", shellWord(absPath(o.calls)))
	}
	return strings.Join(args, " "), secret
}

// absPath is the file p names, made absolute, so that a command line
// printed for later runs from any directory; p itself when it is "-"
// (standard input) or cannot be made absolute.
func absPath(p string) string {
	if p == "-" || p == "" {
		return p
	}
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// shellWord quotes s for a POSIX shell when it holds a byte outside the
// ones a path or flag value is commonly made of.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:=@%+,-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// callOutcomes returns one outcome per call in call order, each with its
// call id, tool and a status: a call left for a checkpoint is
// "interrupted" with the error paused, one without an outcome
// "never_dispatched".
func callOutcomes(calls []sched.Call, res *sched.Result, paused string) []sched.Outcome {
	out := make([]sched.Outcome, len(calls))
	for i, c := range calls {
		var oc sched.Outcome
		if i < len(res.Outcomes) {
			oc = res.Outcomes[i]
		}
		oc.CallID, oc.Tool = c.ID, c.Tool
		switch {
		case oc.Status == "" && res.Checkpoint != nil:
			oc.Status, oc.Code = sched.Interrupted, sched.CodeInterrupted
			oc.Err = errors.New(paused)
		case oc.Status == "":
			oc.Status, oc.Code = sched.NeverDispatched, sched.CodeNeverStarted
		}
		out[i] = oc
	}
	return out
}

// outcomeView is one outcome as printed.
func outcomeView(oc sched.Outcome) batchOutcome {
	v := batchOutcome{ID: oc.CallID, Tool: oc.Tool, Status: string(oc.Status), Code: string(oc.Code), Output: oc.Output,
		QueuedMS: oc.Queued.Milliseconds(), RanMS: oc.Ran.Milliseconds(), Tokens: map[string]uint64{}, Stored: oc.Stored}
	if oc.Err != nil {
		v.Error = oc.Err.Error()
	}
	for k, t := range oc.Tokens {
		v.Tokens[k] = t
	}
	if v.Status != string(sched.OK) && v.Error == "" {
		v.Error = "not run"
	}
	for op, o := range oc.Operations {
		o.CallID, o.Tool = fmt.Sprintf("%s#%d", oc.CallID, op), oc.Tool
		if o.Status == "" {
			o.Status = sched.NeverDispatched
		}
		v.Operations = append(v.Operations, outcomeView(o))
	}
	return v
}

func printBatchJSON(w io.Writer, view []batchOutcome) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // a tool's output keeps its <, > and &
	return enc.Encode(view)
}

// printBatchTable writes one line per call, its columns aligned, and under
// it the call's output and error, indented.
func printBatchTable(w io.Writer, view []batchOutcome) error {
	if len(view) == 0 {
		_, err := fmt.Fprintln(w, "no tool calls")
		return err
	}
	var wid, wtool, wstatus int
	for _, v := range view {
		wid = max(wid, utf8.RuneCountInString(cell(v.ID)))
		wtool = max(wtool, utf8.RuneCountInString(cell(v.Tool)))
		wstatus = max(wstatus, len(v.Status))
	}
	var b strings.Builder
	for _, v := range view {
		line := pad(cell(v.ID), wid) + "  " + pad(cell(v.Tool), wtool) + "  " + pad(v.Status, wstatus)
		if !v.Stored || v.QueuedMS != 0 || v.RanMS != 0 {
			// a call an earlier run left in flight has no times to show
			line += "  queued " + humanDuration(time.Duration(v.QueuedMS)*time.Millisecond) +
				"  ran " + humanDuration(time.Duration(v.RanMS)*time.Millisecond)
		}
		if len(v.Tokens) > 0 {
			line += "  tokens " + tokenList(v.Tokens)
		}
		if v.Code != "" {
			line += "  " + v.Code
		}
		if v.Stored {
			line += "  (stored: not run again)"
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
		if v.Output != "" {
			lines := strings.Split(v.Output, "\n")
			more := len(lines) - maxOutputLines
			if more > 0 {
				lines = lines[:maxOutputLines]
			}
			for _, l := range lines {
				b.WriteString("    " + printable(l) + "\n")
			}
			if more > 0 {
				fmt.Fprintf(&b, "    … %d more lines (--json prints the whole output)\n", more)
			}
		}
		if v.Error != "" {
			b.WriteString("    error: " + printable(strings.ReplaceAll(v.Error, "\n", " ")) + "\n")
		}
		for _, op := range v.Operations {
			line := "    operation " + cell(op.ID) + "  " + op.Status
			if op.Code != "" {
				line += "  " + op.Code
			}
			if op.Error != "" && op.Status != string(sched.OK) {
				line += ": " + strings.ReplaceAll(op.Error, "\n", " ")
			}
			b.WriteString(printable(line) + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// tokenList writes tokens as key=token,... sorted by key.
func tokenList(tokens map[string]uint64) string {
	keys := make([]string, 0, len(tokens))
	for k := range tokens {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + strconv.FormatUint(tokens[k], 10)
	}
	return strings.Join(keys, ",")
}

// printEvent writes one scheduler event as one line: time since the start,
// kind, call (and operation), tool, and what the event says.
func printEvent(w io.Writer, start time.Time, e sched.Event) {
	call := cell(e.CallID)
	if strings.Contains(e.Entry, "#") {
		call += "#" + strconv.Itoa(e.Operation)
	}
	line := fmt.Sprintf("%8s  %-8s  %s  %s", "+"+humanDuration(e.Time.Sub(start)), e.Kind, call, cell(e.Tool))
	switch {
	case len(e.Positions) > 0:
		pos := make(map[string]uint64, len(e.Positions))
		for k, p := range e.Positions {
			pos[k] = uint64(p)
		}
		line += "  positions " + tokenList(pos)
	case len(e.Tokens) > 0:
		line += "  tokens " + tokenList(e.Tokens)
	}
	if e.Status != "" {
		line += "  " + string(e.Status)
	}
	if e.Why != "" {
		line += ": " + e.Why
	}
	fmt.Fprintln(w, printable(strings.ReplaceAll(line, "\n", " ")))
}

// pad right-pads s with spaces to width runes.
func pad(s string, width int) string {
	if n := utf8.RuneCountInString(s); n < width {
		return s + strings.Repeat(" ", width-n)
	}
	return s
}

// printable replaces the control characters of s but tabs, so a tool's
// output cannot move the terminal's cursor.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if (unicode.IsControl(r) && r != '\t') || unicode.Is(unicode.Cf, r) {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}
