package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/lanes-dev/lanes/internal/laneenv"
	"github.com/lanes-dev/lanes/internal/supervise"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
)

// Bounds and defaults of `lanectl lock`.
const (
	defaultLockTTL = 10 * time.Second
	minLockTTL     = 30 * time.Millisecond
	maxCallID      = 200 // bytes of the command name recorded as the call id
	// maxReleaseWait bounds the release step before lock exits; an entry
	// not released expires within its TTL.
	maxReleaseWait = 2 * time.Second
)

// lockOptions are the flags and arguments of `lanectl lock`.
type lockOptions struct {
	global *globalOptions
	open   opener
	relay  *signalRelay // signals after the first, for the command; may be nil
	// releaseErr is the error of the lease's release when it failed
	// (ErrUnavailable): closeAndWarn says so if the Session's Close could
	// not release it either
	releaseErr error

	limit int
	// rate lanes: --rate N/s|N/m|N/h (zero: none) and --cost; limitSet:
	// --limit was given (with --rate alone, the rate is the only bound);
	// costSet: --cost was given
	rate     lanes.Rate
	rateFlag string
	cost     int
	limitSet bool
	costSet  bool
	ttl      time.Duration
	wait     time.Duration
	id       string
	files    []string // --file: paths whose lock keys to hold too
	// try fails at once when the keys cannot all be granted now (--try).
	try bool
	// conflictCode is the exit status when --try meets taken keys or
	// --wait runs out (--conflict-exit-code).
	conflictCode int
	quiet        bool   // --quiet: no status line while waiting, no line when not granted
	waitedFor    string // after --wait ran out: who held the keys, for the message
	idEnds       string // --id held by another owner: when its lease ends, for the message

	keys []string
	argv []string

	// lineage is the chain of entries this lock is nested under, from the
	// environment a lanectl parent gave it (laneenv.Inherited).
	lineage []string
}

func newLockCommand(o *lockOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lock [--limit N] [--rate N/s|N/m|N/h [--cost N]] [--ttl D] [--wait D | --try] [--conflict-exit-code N] [--quiet] [--id ENTRY] [--file PATH]... KEY... -- CMD [ARG...]",
		Short: "Run a command while holding keys: the cluster's flock",
		Long: `lock waits its turn for every KEY at once (FIFO, at most --limit holders per
key), runs CMD while it holds them and exits with CMD's status. --file PATH
adds the lock key lanectl batch gives that file (lock:file: and the path the
kernel would open), so lock shares the file's lane with batch tools.

While it waits with a terminal on standard error, one line there says, for
each key, its place in the queue, who holds the key, for how long and how
much of their lease is left; it is cleared once the keys are granted
(--quiet: no line). --wait D gives up after D, --try at once when the keys
cannot all be granted now (as flock -n); either leaves no place in the
queue, says who holds the keys, and exits 75, or N with
--conflict-exit-code N (as flock -E); with --quiet it says nothing, so
--try --quiet --conflict-exit-code 0 is a silent success for cron.

The lease is renewed every TTL/3. Its local deadline lies a tenth of the
TTL (the margin) before Redis could grant the keys to anyone else: once
renewals have not reached Redis for so long that the deadline is less than
the margin away, CMD gets SIGTERM; at the deadline the lease is lost, CMD
gets SIGKILL and lock exits 79 (79 too when CMD obeyed the SIGTERM, whatever
its own status). So CMD is gone before another holder can start.

CMD's environment carries LANES_ENTRY (the entry id), LANES_TOKENS
(key=token,... in the order of the keys, a key's "%", "," and "=" written
%25, %2C and %3D: fencing tokens that only grow), LANES_TOKEN (the token,
when there is one key), LANES_LINEAGE (the entries lock is nested under and
its own, outermost first, comma-separated, escaped the same way) and
LANES_NAMESPACE. A lanectl lock or batch that CMD runs in the same namespace
takes that lineage as its own: it re-enters a key this lock holds at once,
with its token, and a request that would close a wait-for cycle fails at
once (exit 80).

Unless its standard input is a terminal, CMD runs in a process group of its
own, and every signal lock sends reaches the whole group, so the commands CMD
starts stop with it; when CMD exits, what it left running in its group gets
SIGTERM, a second to exit (a nested lock releases its keys then), then SIGKILL,
before the keys are released. On Linux, so does what CMD started out
of its group (setsid), and if lock itself dies, even by SIGKILL, CMD and
every process it started die with it: a supervisor (lanectl run again,
"lanes-supervisor") stands between lock and CMD. With a terminal on standard
input, CMD shares lock's process group and has no supervisor: on Linux, CMD
itself is killed if lock dies, not what it started.

SIGINT, SIGTERM, SIGHUP or SIGQUIT while waiting leaves the queue and exits
128+signal; while CMD runs, the signal is passed on to CMD and lock exits
with CMD's status.`,
		Args: func(cmd *cobra.Command, args []string) error {
			o.limitSet = cmd.Flags().Changed("limit")
			o.costSet = cmd.Flags().Changed("cost")
			return o.complete(args, cmd.ArgsLenAtDash())
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.limit, "limit", 1, "holders each key allows at once (1, or unbounded with --rate and no --limit); every user of a key must name the same limit")
	f.StringVar(&o.rateFlag, "rate", "", "at most N grants per window for each key, across every process: N/s, N/m, N/h or N/<duration>; without --limit, the rate is the only bound")
	f.IntVar(&o.cost, "cost", 0, "units of --rate this lock spends (default 1; at most the rate's N)")
	f.DurationVar(&o.ttl, "ttl", defaultLockTTL, "lease TTL: how long the keys stay held after the last heartbeat (30ms to 1h)")
	f.DurationVar(&o.wait, "wait", 0, "give up (exit 75) if not granted within this long; 0 waits forever")
	f.BoolVar(&o.try, "try", false, "give up (exit 75) at once if the keys cannot all be granted now, leaving the queue (as flock -n)")
	f.IntVar(&o.conflictCode, "conflict-exit-code", exitWaitTimeout, "exit status when --try finds the keys taken or --wait runs out, 0 to 255 (as flock -E)")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "no status line on a terminal while waiting, and no message when --wait or --try gives up (the exit status says it)")
	f.StringVar(&o.id, "id", "", "entry id (default: a random one); re-running with the same id while it waits takes its place over; while another process holds it, exits 75")
	f.StringArrayVar(&o.files, "file", nil, "hold the lock key batch's file: lock keys give this file (lock:file: and the path the kernel opens); repeatable")
	return cmd
}

// complete splits args at "--" into keys and command and checks every
// value, before anything reaches Redis.
func (o *lockOptions) complete(args []string, dash int) error {
	switch {
	case dash < 0:
		return usageErrorf(`lock needs "--" between the keys and the command: lanectl lock KEY... -- CMD [ARG...]`)
	case dash == 0 && len(o.files) == 0:
		return usageErrorf("lock needs at least one KEY (or --file) before --")
	case dash == len(args):
		return usageErrorf("lock needs a command after --")
	}
	o.keys, o.argv = slices.Clip(args[:dash]), args[dash:]
	for i, k := range o.keys {
		if slices.Contains(o.keys[:i], k) {
			return usageErrorf("lock names key %q twice", k)
		}
	}
	if err := o.fileKeys(); err != nil {
		return err
	}
	switch {
	case o.argv[0] == "":
		return usageErrorf("lock needs a command after --, got an empty name")
	case o.limit < 1:
		return usageErrorf("--limit must be at least 1, got %d", o.limit)
	case o.limit > lanes.MaxLimit:
		return usageErrorf("--limit must be at most %d, got %d", lanes.MaxLimit, o.limit)
	case ttlError(o.ttl) != nil:
		return ttlError(o.ttl)
	case o.wait < 0:
		return usageErrorf("--wait must not be negative, got %v (0 waits forever)", o.wait)
	case o.try && o.wait > 0:
		return usageErrorf("--try gives up at once and --wait %v after a while: give one", o.wait)
	case o.conflictCode < 0 || o.conflictCode > 255:
		return usageErrorf("--conflict-exit-code must be 0 to 255, got %d", o.conflictCode)
	}
	if err := o.completeRate(); err != nil {
		return err
	}
	if o.id != "" {
		if err := lanes.ValidateEntryID(o.id); err != nil {
			return usageErrorf("--id: %s", describe(err))
		}
	}
	req := o.request()
	if req.ID == "" {
		req.ID = lanes.NewID() // the Session names it; the rest is checked here
	}
	if err := req.Validate(); err != nil {
		return usageErrorf("%s", describe(err))
	}
	return nil
}

// fileKeys adds the lock key of each --file to the keys, as `lanectl batch`
// names it for a file: lock key template: "lock:file:" and the path the
// kernel would open (sched.FileKey), so lock and batch tools share the
// file's lane. A lock key allows one holder.
func (o *lockOptions) fileKeys() error {
	if len(o.files) > 0 && o.limit != 1 {
		return usageErrorf("--file takes a file's lock key, which allows one holder: --limit must be 1, got %d", o.limit)
	}
	for _, f := range o.files {
		k, err := sched.FileKey("", f)
		if err != nil {
			return usageErrorf("--file %q: %v", f, err)
		}
		if k = sched.LockPrefix + k; !slices.Contains(o.keys, k) {
			o.keys = append(o.keys, k)
		}
	}
	return nil
}

// lockTool is the tool name `lanectl lock` records with its entries; their
// call id is the command's name (callID).
const lockTool = "lanectl lock"

// lockCommand returns the command of an entry `lanectl lock` made, "" for
// any other entry.
func lockCommand(e lanes.Entry) string {
	if e.Tool != lockTool {
		return ""
	}
	return e.CallID
}

// request is the one request lock makes: every key at once.
func (o *lockOptions) request() lanes.Request {
	req := lanes.Request{ID: o.id, Tool: lockTool, CallID: callID(o.argv), Lineage: o.lineage}
	limit := o.limit
	if !o.rate.IsZero() && !o.limitSet {
		limit = 0 // bounded by the rate alone
	}
	for _, k := range o.keys {
		req.Lanes = append(req.Lanes, lanes.Lane{Key: k, Limit: limit, Rate: o.rate, Cost: o.cost})
	}
	return req
}

// completeRate reads --rate and checks --cost against it.
func (o *lockOptions) completeRate() error {
	switch {
	case o.rateFlag == "" && (o.cost != 0 || o.costSet):
		return usageErrorf("--cost %d needs --rate", o.cost)
	case o.rateFlag == "":
		return nil
	}
	r, err := lanes.ParseRate(o.rateFlag)
	if err != nil {
		return usageErrorf("--rate: %s", describe(err))
	}
	if o.cost < 0 || o.cost > r.Limit || (o.costSet && o.cost == 0) {
		return usageErrorf("--cost must be 1 to %d (the rate's limit), got %d", r.Limit, o.cost)
	}
	o.rate = r
	return nil
}

func (o *lockOptions) run(cmd *cobra.Command) error {
	ctx := cmd.Context()
	lineage, err := inheritedLineage(o.global)
	if err != nil {
		return err
	}
	o.lineage = lineage
	b, closeBackend, err := o.open(ctx)
	if err != nil {
		return o.waitError(ctx, err)
	}
	defer closeBackend()

	sctx, cancel := context.WithTimeout(ctx, connectTimeout)
	sess, err := lanes.NewSession(sctx, b, lanes.WithTTL(o.ttl), lanes.WithReleaseTimeout(min(o.ttl, maxReleaseWait)))
	cancel()
	if err != nil {
		return o.waitError(ctx, err)
	}
	// Deferred after closeBackend, so it runs first: every entry of the
	// session leaves Redis before the connection closes.
	defer o.closeAndWarn(sess, cmd.ErrOrStderr())

	wctx := ctx
	if o.wait > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, o.wait)
		defer cancel()
	}
	lease, err := o.acquire(ctx, wctx, cmd.ErrOrStderr(), b, sess)
	if err != nil {
		return o.waitError(ctx, err)
	}
	if sig, ok := interruption(ctx); ok { // granted as the signal came
		_ = lease.Release(context.WithoutCancel(ctx))
		return o.interrupted(sig)
	}
	return o.runHolding(ctx, cmd, lease)
}

// acquire enqueues lock's request and waits for its grant until wctx ends,
// with the status line on stderr if it is a terminal; with --try it gives
// up at once, leaving the queue, unless the enqueue step granted it.
func (o *lockOptions) acquire(ctx, wctx context.Context, stderr io.Writer, b lanes.Backend, sess *lanes.Session) (*lanes.Lease, error) {
	tickets, err := sess.Enqueue(wctx, o.request())
	if err != nil {
		return nil, err
	}
	t := tickets[0]
	select {
	case <-t.Ready(): // granted at once, or refused
		l, err := t.Wait(wctx)
		if errors.Is(err, lanes.ErrNotHolder) {
			o.idEnds = o.idLeaseEnds(ctx, b)
		}
		return l, err
	default:
	}
	if o.try {
		return nil, o.giveUp(ctx, b, t)
	}
	if !o.quiet && o.global.tty(stderr) {
		l := &waitLine{w: stderr, id: t.ID(), keys: o.keys,
			width: func() int { w, _, _ := terminalSize(stderr); return w },
			look:  func(ctx context.Context) (*lanes.Snapshot, error) { return b.Inspect(ctx, o.keys) }}
		l.start(ctx)
		defer l.stop() // cleared before anything else is written
	}
	l, err := t.Wait(wctx)
	if errors.Is(err, lanes.ErrWaitTimeout) {
		o.waitedFor = o.taken(ctx, b, t.ID())
	}
	return l, err
}

// idLeaseEnds says when the lease of the holder named o.id ends unless its
// owner renews it, after a "; ", or "" when the backend does not answer in
// time or no key shows that holder.
func (o *lockOptions) idLeaseEnds(ctx context.Context, b lanes.Backend) string {
	snap, err := o.inspect(ctx, b)
	if err != nil {
		return ""
	}
	for _, k := range snap.Keys {
		for _, h := range k.Holders {
			if h.ID == o.id {
				return fmt.Sprintf("; its lease ends in %s unless that owner renews it (a process that was killed does not)", humanDuration(max(h.Expires.Sub(snap.Time), 0)))
			}
		}
	}
	return ""
}

// taken says who holds the keys and who waits ahead of entry id, after a
// ": ", or "" when the backend does not answer in time.
func (o *lockOptions) taken(ctx context.Context, b lanes.Backend, id string) string {
	snap, err := o.inspect(ctx, b)
	if err != nil {
		return ""
	}
	if text := takenText(snap, id, o.keys); text != "" {
		return ": " + text
	}
	return ""
}

// inspect reads the state of lock's keys for a message, within
// connectTimeout, even after ctx ended.
func (o *lockOptions) inspect(ctx context.Context, b lanes.Backend) (*lanes.Snapshot, error) {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), connectTimeout)
	defer cancel()
	return b.Inspect(ictx, o.keys)
}

// giveUp ends a --try whose request was not granted at once: it says who
// holds the keys, and leaves every queue.
func (o *lockOptions) giveUp(ctx context.Context, b lanes.Backend, t *lanes.Ticket) error {
	why := o.taken(ctx, b, t.ID())
	// On failure the Session's Close releases it, or it expires within
	// the TTL.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), maxReleaseWait)
	_ = t.Cancel(rctx)
	cancel()
	if o.quiet {
		return &exitError{code: o.conflictCode, kind: "conflict"} // the status says it
	}
	return &exitError{code: o.conflictCode, kind: "conflict", err: fmt.Errorf("%s not granted at once (--try)%s", o.keyList(), why)}
}

// waitError turns an error met before the grant into lock's answer.
func (o *lockOptions) waitError(ctx context.Context, err error) error {
	if sig, ok := interruption(ctx); ok {
		return o.interrupted(sig)
	}
	if errors.Is(err, lanes.ErrWaitTimeout) {
		if o.quiet {
			return &exitError{code: o.conflictCode, kind: "wait_timeout"} // the status says it
		}
		return &exitError{code: o.conflictCode, kind: "wait_timeout", err: fmt.Errorf("waited %v for %s: not granted%s", o.wait, o.keyList(), o.waitedFor)}
	}
	if errors.Is(err, lanes.ErrIDRetired) {
		return &exitError{code: exitWaitTimeout, kind: "id_retired", err: fmt.Errorf("--id %s cannot be used now: %s (an earlier lock of that id ended without Redis answering, and the id is refused for up to %v so that a late step cannot touch the new one); run again later, or with another --id", o.id, reason(err), 2*o.ttl)}
	}
	if errors.Is(err, lanes.ErrLeaseLost) {
		return &exitError{code: exitLeaseLost, err: fmt.Errorf("removed from the queue of %s before the grant: %s", o.keyList(), reason(err))}
	}
	if errors.Is(err, lanes.ErrLockCycle) {
		return &exitError{code: exitLockCycle, err: fmt.Errorf("refused %s: %s", o.keyList(), describe(err))}
	}
	if errors.Is(err, lanes.ErrIDConflict) || errors.Is(err, lanes.ErrInvalid) || errors.Is(err, lanes.ErrLimitMismatch) {
		return usageErrorf("%s", describe(err))
	}
	if errors.Is(err, lanes.ErrNotHolder) {
		// Busy, not misused: the other owner may be a killed lanectl whose
		// lease has not run out yet, so a retry loop waits and runs again.
		return &exitError{code: exitWaitTimeout, kind: "id_held", err: fmt.Errorf("--id %s: %s%s; run again once it ends, or with another --id", o.id, reason(err), o.idEnds)}
	}
	return o.global.unavailable(err)
}

func (o *lockOptions) interrupted(sig syscall.Signal) error {
	return &interruptError{sig: sig, msg: fmt.Sprintf("interrupted by %s while waiting for %s; left the queue", signalName(sig), o.keyList())}
}

func (o *lockOptions) keyList() string { return strings.Join(o.keys, ", ") }

// runHolding runs the command while lease holds the keys and returns its
// status. It passes signals on to the command, stops the command in time
// for the lease (supervise.Guard: SIGTERM once the local deadline is less than
// the margin away, SIGKILL when the lease is lost), and releases the lease
// once the command exits.
func (o *lockOptions) runHolding(ctx context.Context, cmd *cobra.Command, lease *lanes.Lease) error {
	child := exec.Command(o.argv[0], o.argv[1:]...)
	child.Stdin, child.Stdout, child.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	child.Env = laneenv.WithTrace(lease.Context(), childEnv(os.Environ(), lease, o.keys, o.lineage, o.global.namespace))
	child.WaitDelay = time.Second // output copying, when stdout is not a file
	group := !isTerminal(child.Stdin)
	c, err := supervise.Start(child, group)
	if err != nil {
		_ = lease.Release(context.WithoutCancel(ctx))
		return startError(o.argv[0], err)
	}
	defer c.Guard(lease.Lost(), lease.OnLost, lease.Deadline, lease.Margin())()
	var jobCtl chan os.Signal
	if group {
		// Ctrl-Z, or SIGTSTP sent to lanectl, does not reach a command in
		// a group of its own: lanectl stops it along with itself. SIGCONT
		// comes on the same channel.
		jobCtl = make(chan os.Signal, 8)
		signal.Notify(jobCtl, syscall.SIGTSTP, syscall.SIGCONT)
		defer signal.Stop(jobCtl)
	}
	defer o.relay.Forward(func(s os.Signal) {
		if sig, ok := s.(syscall.Signal); ok {
			_ = c.Signal(sig)
		}
	})()
	interrupted := ctx.Done()
	var lastCont time.Time // the last SIGCONT jobCtl brought
	for {
		select {
		case <-interrupted:
			interrupted = nil
			sig, ok := interruption(ctx)
			if !ok {
				sig = syscall.SIGTERM
			}
			_ = c.Signal(sig)
		case sig := <-jobCtl:
			// Signals that come together reach jobCtl in no set order: a
			// SIGCONT just before a SIGTSTP may have been sent after it.
			if sig == syscall.SIGCONT {
				lastCont = time.Now()
			} else if time.Since(lastCont) >= contWindow {
				suspendWith(c, lease, jobCtl)
			}
		case <-c.Exited():
			// What CMD left running in its group would run on without the
			// keys: it goes before they are released.
			c.KillGroup()
			return o.finish(ctx, cmd.ErrOrStderr(), lease, child, c.Wait(), c.Guarded())
		}
	}
}

// contWindow is how close a SIGCONT must come to a SIGTSTP, before or
// after it on jobCtl, to undo it before lanectl stops anything (kill
// -TSTP; kill -CONT sent together arrive in no set order).
const contWindow = 20 * time.Millisecond

// suspendWith stops lanectl and its command c together (SIGTSTP to
// lanectl, whose command runs in a group of its own): stopped, lanectl
// cannot renew the lease, so nothing the command started may run
// meanwhile (Child.Suspend: its group, and under a supervisor what left
// it, a nested lanectl's command too). Once lanectl is continued, so is
// the command, unless the lease's local deadline passed in between: the
// lease is then lost, and the guard kills the command (SIGKILL ends a
// stopped process too) before it runs again. A nested lanectl's command
// is continued by that lanectl, under the same rule for its own lease
// (Child.Resume). jobCtl brings SIGTSTP and SIGCONT (stopTogether).
func suspendWith(c *supervise.Child, lease *lanes.Lease, jobCtl <-chan os.Signal) {
	stopTogether(jobCtl, func() func() {
		c.Suspend()
		return func() {
			if lease.Err() != nil {
				<-c.Exited() // the guard's SIGKILL
				return
			}
			c.Resume()
		}
	})
}

// stopTogether stops lanectl with what suspend stops (the commands it runs
// in process groups of their own, which a terminal's stop does not reach),
// and once lanectl is continued calls the resume suspend returned. jobCtl
// brings SIGTSTP and SIGCONT: a SIGCONT that comes within contWindow means
// the stop is over before it began, and nothing is stopped.
func stopTogether(jobCtl <-chan os.Signal, suspend func() (resume func())) {
	// A SIGCONT sent right behind the SIGTSTP (kill -TSTP; kill -CONT)
	// reaches jobCtl a moment after it: one that comes within contWindow
	// ends the stop before it began. (One that came later, before the
	// SIGSTOP below took effect, would leave lanectl stopped until the
	// next SIGCONT.)
	window := time.NewTimer(contWindow)
	defer window.Stop()
	for waiting := true; waiting; {
		select {
		case sig := <-jobCtl:
			if sig == syscall.SIGCONT {
				return
			}
			// another SIGTSTP: one stop
		case <-window.C:
			waiting = false
		}
	}
	resume := suspend()
	// The stop of this process takes effect some time after kill returns:
	// wait for the SIGCONT that ends it.
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	for sig := range jobCtl {
		if sig == syscall.SIGCONT {
			break
		}
	}
	resume()
}

// inheritedLineage returns the lineage a lanectl command takes from the
// environment its parent (a `lanectl lock` command, a `lanectl batch`
// tool) gave it: the parent's chain and entry. A malformed one is a usage
// error.
func inheritedLineage(g *globalOptions) ([]string, error) {
	lineage, err := laneenv.Inherited(g.getenv, g.namespace)
	if err != nil {
		return nil, usageErrorf("%v", err)
	}
	if len(lineage) > lanes.MaxLineage {
		return nil, usageErrorf("%s: %d entries, more than %d: too deeply nested", laneenv.Lineage, len(lineage), lanes.MaxLineage)
	}
	for _, id := range lineage {
		if err := lanes.ValidateEntryID(id); err != nil {
			return nil, usageErrorf("%s: %s", laneenv.Lineage, describe(err))
		}
	}
	return lineage, nil
}

// finish releases the lease after the command exited and returns lock's
// answer: the command's status, or exit 79 when the lease was lost (its
// release found it released by force counts too: the hint that would have
// killed the command came after it exited). guarded
// is what the guard did to the command (supervise.Child.Guarded): a
// command it stopped with SIGTERM, as the lease's local deadline drew near
// without a renewal, was stopped for the lease, and exits 79 too, whatever
// status it exited with once stopped.
func (o *lockOptions) finish(ctx context.Context, stderr io.Writer, lease *lanes.Lease, child *exec.Cmd, waitErr error, guarded string) error {
	status, desc := childStatus(child, waitErr)
	stopped := strings.HasPrefix(guarded, "SIGTERM")
	if stopped {
		awaitLoss(lease)
		desc = stoppedStatus(child, waitErr, lease.Margin())
	} else {
		desc = "the command had " + desc
	}
	if err := lease.Err(); err != nil && errors.Is(err, lanes.ErrLeaseLost) {
		return &exitError{code: exitLeaseLost, err: fmt.Errorf("lease lost on %s: %v; %s", o.keyList(), reason(err), desc)}
	}
	rerr := lease.Release(context.WithoutCancel(ctx))
	if stopped {
		// A renewal reached Redis within the margin: too late for the
		// command, stopped for the lease all the same.
		return &exitError{code: exitLeaseLost, err: fmt.Errorf("lease nearly lost on %s: renewals did not reach Redis until its local deadline was less than %v away; %s", o.keyList(), lease.Margin(), desc)}
	}
	if errors.Is(rerr, lanes.ErrNotHolder) || errors.Is(rerr, lanes.ErrLeaseLost) {
		// Released by force while the command ran, or lost with the
		// backend's state (reset, a Redis restarted empty), and the
		// heartbeat had not said so yet: the command may have run beside
		// another holder (a review saw lock exit 0, silent, after a state
		// key was deleted while its command ran).
		return &exitError{code: exitLeaseLost, err: fmt.Errorf("lease lost on %s: %v; %s", o.keyList(), reason(rerr), desc)}
	}
	if rerr != nil {
		// The command ran under the lease; the keys pass on within the
		// TTL. Said once the Session's Close is over, and only if its
		// release in the background gave up too (closeAndWarn).
		o.releaseErr = rerr
	}
	if status == 0 {
		return nil
	}
	return &exitError{code: status}
}

// closeAndWarn closes sess and, when the lease's release had failed
// (releaseErr) and the Session's release of it in the background failed
// too, says in one line that the lease stays until its deadline. A
// release that had failed and then went through in the background (Redis
// paused, or slow for a while) says nothing: a review saw the warning
// printed for a lease that was released after all.
func (o *lockOptions) closeAndWarn(sess *lanes.Session, stderr io.Writer) {
	closeErr := sess.Close()
	if o.releaseErr == nil || closeErr == nil {
		return
	}
	fmt.Fprintln(stderr, errorLine(fmt.Errorf("warning: could not release %s: %w; the lease expires at its deadline, within %v", o.keyList(), o.global.unavailable(o.releaseErr), o.ttl), o.global.redisURL))
}

// awaitLoss waits, once the guard stopped the command as the lease's local
// deadline drew near, until the lease is lost or a renewal moves the
// deadline on: a margin at most.
func awaitLoss(lease *lanes.Lease) {
	for lease.Err() == nil {
		d := lease.Deadline()
		left := time.Until(d)
		if d.IsZero() || left > lease.Margin() {
			return // renewed: held on
		}
		t := time.NewTimer(max(left, 0) + time.Millisecond)
		select {
		case <-lease.Lost():
		case <-t.C:
		}
		t.Stop()
	}
}

// reason is what err says happened to the entry (lanes.EntryError's
// Reason: the words after the sentinel's), else its message.
func reason(err error) string {
	if ee := (*lanes.EntryError)(nil); errors.As(err, &ee) {
		return ee.Reason
	}
	return err.Error()
}

// childStatus returns the exit status lanectl passes on for the command,
// 128+N when a signal killed it, and a few words for messages.
func childStatus(child *exec.Cmd, waitErr error) (int, string) {
	ps := child.ProcessState
	if ps == nil {
		return exitInternal, fmt.Sprintf("failed: %v", waitErr)
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignal + int(ws.Signal()), "been killed by " + signalName(ws.Signal())
	}
	return ps.ExitCode(), "already exited with status " + strconv.Itoa(ps.ExitCode())
}

// stoppedStatus says, for messages, that lanectl stopped the command with
// SIGTERM a margin before the lease's local deadline, and how it ended.
func stoppedStatus(child *exec.Cmd, waitErr error, margin time.Duration) string {
	how := "it exited with status "
	if ps := child.ProcessState; ps == nil {
		how = fmt.Sprintf("it failed: %v", waitErr)
	} else if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		how = "it was killed by " + signalName(ws.Signal())
	} else {
		how += strconv.Itoa(ps.ExitCode())
	}
	return fmt.Sprintf("lanectl had stopped the command with SIGTERM %v before the lease's local deadline, and %s", margin, how)
}

// startError maps a failure to start the command to 126 or 127.
func startError(name string, err error) error {
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return &exitError{code: exitCommandNotFound, err: fmt.Errorf("%s: command not found", name)}
	default:
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		var ee *exec.Error
		if errors.As(err, &ee) {
			err = ee.Err
		}
		return &exitError{code: exitCannotRun, err: fmt.Errorf("%s: cannot run: %v", name, err)}
	}
}

// childEnv is the command's environment: lanectl's own, with the LANES_*
// variables of this lease in place of any inherited ones. LANES_LINEAGE is
// the lease's lineage and its own entry, so that a lanectl the command
// starts is nested under it.
func childEnv(base []string, lease *lanes.Lease, keys, lineage []string, ns string) []string {
	env := make([]string, 0, len(base)+5)
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case laneenv.Entry, laneenv.Token, laneenv.Tokens, laneenv.Lineage, laneenv.Namespace:
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		laneenv.Entry+"="+lease.ID(),
		laneenv.Tokens+"="+laneenv.FormatTokens(keys, lease.Tokens()),
		laneenv.Lineage+"="+laneenv.FormatLineage(append(slices.Clip(lineage), lease.ID())),
		laneenv.Namespace+"="+ns)
	if len(keys) == 1 {
		env = append(env, laneenv.Token+"="+strconv.FormatUint(lease.Token(keys[0]), 10))
	}
	return env
}

// callID is the command's name as the call id `status` shows (its
// arguments may hold secrets and stay out of Redis): printable, at most
// maxCallID bytes, cut on a rune boundary.
func callID(argv []string) string {
	s := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(filepath.Base(argv[0]), "?"))
	if len(s) <= maxCallID {
		return s
	}
	cut := maxCallID
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// ttlError is the usage error of a --ttl outside 30ms (minLockTTL) to an
// hour (lanes.MaxTTL), or not a whole number of milliseconds; nil for a
// good one. lock, batch and mcp serve say it in the same words.
func ttlError(ttl time.Duration) error {
	if ttl < minLockTTL || ttl > lanes.MaxTTL || ttl%time.Millisecond != 0 {
		return usageErrorf("--ttl must be a whole number of milliseconds from %v to %v, got %v", minLockTTL, lanes.MaxTTL, ttl)
	}
	return nil
}
