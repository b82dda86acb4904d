package batch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lanes-dev/lanes/internal/laneenv"
	"github.com/lanes-dev/lanes/internal/supervise"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
)

// Bounds of a Command body.
const (
	// MaxOutput bounds the standard output kept as a call's result; a
	// command that writes more fails.
	MaxOutput = 16 << 20
	// StderrTail is how much of the end of standard error a failure
	// reports.
	StderrTail = 1 << 10
	// KillAfter is how long a command has to exit after the SIGTERM that
	// follows the end of its context, before its process group gets
	// SIGKILL. A lost lease does not wait for it: see Command.
	KillAfter = 5 * time.Second
	// OutputDrain bounds how long, once the command exited and what it
	// left in its process group was killed, its output is still read: only
	// a process out of reach can keep the pipes open so long (one that left
	// the group, where there is no supervisor; one that another process
	// started on the command's request), and what it writes after the
	// command's exit is not the command's result.
	OutputDrain = 250 * time.Millisecond
)

// The environment variables a Command body sets for its command, in place
// of any it inherits.
var commandEnv = []string{
	"LANES_CALL_ID", "LANES_TOOL", "LANES_TENANT", laneenv.Entry, laneenv.Tokens, "LANES_OPERATION",
	laneenv.Token, laneenv.Lineage,
}

type namespaceKey struct{}

// WithNamespace returns a context under which the Command bodies of a run
// put ns in their commands' LANES_NAMESPACE: the namespace of the lanes
// the run takes, so that a lanectl a tool starts finds its parent's entries
// there. Without it, a command inherits LANES_NAMESPACE from this process.
func WithNamespace(ctx context.Context, ns string) context.Context {
	return context.WithValue(ctx, namespaceKey{}, ns)
}

// Command returns a Body that runs argv in dir ("" means the working
// directory) for each execution: a call, or one operation of a fanned-out
// call. A relative program path with a slash is taken against dir; a bare
// name is looked up in PATH.
//
// The command reads the execution's arguments, JSON, on its standard input.
// Its environment is this process's with LANES_CALL_ID, LANES_TOOL,
// LANES_TENANT, LANES_ENTRY, LANES_OPERATION (the operation's index, 0 for a
// call that does not fan out), LANES_TOKENS (key=token,... sorted by lane
// key, such as concurrency:rfd=7: fencing tokens that only grow; a key's
// "%", "," and "=" written %25, %2C and %3D), LANES_LINEAGE (the entries
// the execution is nested under and its own, outermost first, escaped the
// same way) and, under WithNamespace, LANES_NAMESPACE.
//
// The command runs in a process group of its own. Its status is its own
// exit's: its standard output, without one trailing newline, is the result;
// more than MaxOutput bytes is an error. A non-zero exit is an error naming
// the exit status with the last StderrTail bytes of standard error on one
// line. A program that does not exist is the error "command not found:
// PATH". When the command exits, whatever it left running in its process
// group (a child sent to the background) gets SIGKILL, and the output is
// what was written until then (OutputDrain bounds the read), so nothing of
// it runs after the body returns and its lanes pass on, and a child that
// kept the output open changes neither the status nor the time it ends.
//
// When ctx ends, the command's process group gets SIGTERM, and SIGKILL
// KillAfter later if the command has not exited; the error then wraps
// ctx's. Under a lease (Invocation.Lost, Deadline, Margin) the group also
// gets SIGTERM once the lease's local deadline is less than Margin away,
// and SIGKILL as soon as the lease is lost: a margin before the backend
// could grant its lanes to another holder. On Linux the command runs under
// a supervisor (this program run again; see internal/supervise): if this
// process dies, even by SIGKILL, the command and every process it started,
// in its group or not (setsid), are killed at once, and when the command
// exits, so is what it left running out of its group.
func Command(argv []string, dir string) sched.Body {
	argv = slices.Clone(argv)
	return func(ctx context.Context, inv sched.Invocation) (string, error) {
		return runCommand(ctx, argv, dir, inv)
	}
}

func runCommand(ctx context.Context, argv []string, dir string, inv sched.Invocation) (string, error) {
	if len(argv) == 0 || argv[0] == "" {
		return "", errors.New("no command to run")
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("%w: not started (%v)", err, context.Cause(ctx))
	}
	path := argv[0]
	if !filepath.IsAbs(path) && strings.ContainsRune(path, filepath.Separator) && dir != "" {
		path = filepath.Join(dir, path)
	}
	stdout := &capped{max: MaxOutput}
	stderr := &tail{max: StderrTail}
	outR, outW, err := os.Pipe()
	if err != nil {
		return "", fmt.Errorf("cannot run %s: %v", path, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return "", fmt.Errorf("cannot run %s: %v", path, err)
	}
	child, err := start(func() *exec.Cmd {
		cmd := exec.Command(path, argv[1:]...)
		cmd.Dir = dir
		cmd.Env = environ(ctx, os.Environ(), inv)
		cmd.Stdin = bytes.NewReader(inv.Args)
		cmd.Stdout, cmd.Stderr = outW, errW
		cmd.WaitDelay = OutputDrain // the copy to its standard input, if a child holds that open
		return cmd
	})
	outW.Close() // the command's copies stay open in it
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return "", startError(ctx, path, dir, err)
	}
	untrack := track(child, inv.Deadline)
	copied := make(chan struct{}, 2)
	go drain(stdout, outR, copied)
	go drain(stderr, errR, copied)

	stopped := watch(ctx, child, inv)
	waitErr := child.Wait()
	untrack()
	stop := stopped()
	// The rule for what the command leaves behind: it ends with the
	// command. Whatever still runs in its group would run on after its
	// lanes pass on, and would hold its output open.
	child.KillGroup()
	readOutput(ctx, copied, outR, errR)
	if errors.Is(waitErr, exec.ErrWaitDelay) {
		waitErr = nil // exited; a child held its standard input open
	}

	out := strings.TrimSuffix(stdout.String(), "\n")
	switch {
	case stdout.Over():
		return "", fmt.Errorf("the command wrote more than %d MiB to its standard output", MaxOutput>>20)
	case stop != nil && !exitedZero(child.Cmd):
		return out, fmt.Errorf("%w: %s", stop, failure(child.Cmd, waitErr, stderr))
	case waitErr != nil:
		return out, errors.New(failure(child.Cmd, waitErr, stderr))
	}
	return out, nil
}

// watch sends the command the signals that stop it: SIGTERM when ctx ends
// and SIGKILL KillAfter later, and on a lease's schedule (supervise.Guard).
// The returned function says why the command was sent a signal, nil if it
// was not; it waits for the command to exit.
func watch(ctx context.Context, child *supervise.Child, inv sched.Invocation) (why func() error) {
	stopGuard := child.Guard(inv.Lost, inv.OnLost, inv.Deadline, inv.Margin)
	stopped := make(chan error, 1)
	go func() {
		defer stopGuard()
		select {
		case <-child.Exited():
			stopped <- nil
			return
		case <-ctx.Done():
		}
		select {
		case <-child.Exited(): // it exited as ctx ended: its own exit
			stopped <- nil
			return
		default:
		}
		stopped <- fmt.Errorf("%w: stopped (%v)", ctx.Err(), context.Cause(ctx))
		_ = child.Signal(syscall.SIGTERM)
		if errors.Is(context.Cause(ctx), lanes.ErrLeaseLost) {
			_ = child.Signal(syscall.SIGKILL) // its lanes may pass on a margin from now
			return
		}
		kill := time.NewTimer(KillAfter)
		defer kill.Stop()
		select {
		case <-child.Exited():
		case <-kill.C:
			_ = child.Signal(syscall.SIGKILL)
		}
	}()
	return func() error {
		<-child.Exited()
		if err := <-stopped; err != nil {
			return err
		}
		if g := child.Guarded(); g != "" {
			return errors.New("stopped: " + g)
		}
		return nil
	}
}

// exitedZero reports whether the command exited with status 0: whatever
// stopped it, it finished its work.
func exitedZero(cmd *exec.Cmd) bool { return cmd.ProcessState != nil && cmd.ProcessState.Success() }

// drain copies what r yields to w until r ends or w refuses more, then
// closes r: a command that writes on gets SIGPIPE. It sends on done.
func drain(w io.Writer, r *os.File, done chan<- struct{}) {
	_, _ = io.Copy(w, r)
	r.Close()
	done <- struct{}{}
}

// readOutput waits, once the command exited and its group was killed, for
// both drains to end: at once unless a process outside the group holds the
// pipes. Once OutputDrain has passed, or half the time left before ctx's
// deadline (a timeout that has not passed must not be reported as passed),
// it ends the drains, as soon as no written byte waits in the pipes: what
// the command wrote before its exit is never cut, only what an escaped
// process writes after it (within another OutputDrain at most).
func readOutput(ctx context.Context, copied <-chan struct{}, pipes ...*os.File) {
	bound := OutputDrain
	if d, ok := ctx.Deadline(); ok {
		bound = min(bound, time.Until(d)/2)
	}
	timer := time.NewTimer(max(bound, 0))
	defer timer.Stop()
	cutoff := time.Now().Add(max(bound, 0) + OutputDrain)
	for n := 0; n < len(pipes); {
		select {
		case <-copied:
			n++
			continue
		case <-timer.C:
		}
		waiting := 0
		for _, p := range pipes {
			waiting += pending(p)
		}
		if waiting > 0 && time.Now().Before(cutoff) {
			timer.Reset(time.Millisecond) // let the drains take what was written
			continue
		}
		for _, p := range pipes {
			if p.SetReadDeadline(time.Now()) != nil { // ends the drains
				p.Close() // where pipes have no deadlines
			}
		}
		for ; n < len(pipes); n++ {
			<-copied
		}
	}
}

// environ returns base with the LANES_* variables of inv, and of ctx's
// lineage and namespace, and ctx's trace context (TRACEPARENT: the
// execute_tool span), in place of any inherited ones.
func environ(ctx context.Context, base []string, inv sched.Invocation) []string {
	ns, hasNS := ctx.Value(namespaceKey{}).(string)
	env := make([]string, 0, len(base)+len(commandEnv)+1)
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(commandEnv, name) && (!hasNS || name != laneenv.Namespace) {
			env = append(env, kv)
		}
	}
	lineage := lanes.LineageFrom(ctx)
	if len(lineage) == 0 || lineage[len(lineage)-1] != inv.Entry {
		lineage = append(lineage, inv.Entry) // a body run outside a scheduler
	}
	env = append(env,
		"LANES_CALL_ID="+inv.CallID,
		"LANES_TOOL="+inv.Tool,
		"LANES_TENANT="+inv.Tenant,
		laneenv.Entry+"="+inv.Entry,
		laneenv.Tokens+"="+laneenv.FormatTokens(laneenv.SortedKeys(inv.Tokens), inv.Tokens),
		"LANES_OPERATION="+strconv.Itoa(inv.Operation),
		laneenv.Lineage+"="+laneenv.FormatLineage(lineage),
	)
	if hasNS {
		env = append(env, laneenv.Namespace+"="+ns)
	}
	return laneenv.WithTrace(ctx, env)
}

// startError says why the command did not start.
func startError(ctx context.Context, path, dir string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w: not started (%v)", ctx.Err(), context.Cause(ctx))
	}
	if dir != "" {
		if _, serr := os.Stat(dir); serr != nil {
			return fmt.Errorf("cannot run %s: working directory: %v", path, serr)
		}
	}
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("command not found: %s", path)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var ee *exec.Error
	if errors.As(err, &ee) {
		err = ee.Err
	}
	return fmt.Errorf("cannot run %s: %v", path, err)
}

// failure describes how the command ended (err, when it did not run to
// its exit), with the end of its standard error, on one line.
func failure(cmd *exec.Cmd, err error, stderr *tail) string {
	desc := "failed"
	if err != nil {
		desc = err.Error()
	}
	if ps := cmd.ProcessState; ps != nil {
		desc = "exit status " + strconv.Itoa(ps.ExitCode())
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			desc = "killed by " + signalName(ws.Signal())
		}
	}
	if s := stderr.String(); s != "" {
		desc += ": " + s
	}
	return desc
}

// signalName returns SIGTERM, SIGKILL...
func signalName(sig syscall.Signal) string {
	names := map[syscall.Signal]string{
		syscall.SIGTERM: "SIGTERM", syscall.SIGKILL: "SIGKILL", syscall.SIGINT: "SIGINT",
		syscall.SIGHUP: "SIGHUP", syscall.SIGQUIT: "SIGQUIT", syscall.SIGABRT: "SIGABRT",
		syscall.SIGSEGV: "SIGSEGV", syscall.SIGPIPE: "SIGPIPE",
	}
	if n, ok := names[sig]; ok {
		return n
	}
	return fmt.Sprintf("signal %d (%v)", int(sig), sig)
}

// errOutputTooLong stops the copy of a command's standard output past
// MaxOutput: the command then gets EPIPE or SIGPIPE.
var errOutputTooLong = errors.New("output too long")

// capped keeps up to max bytes and fails the write that would pass them.
// Read it once the copy into it ended.
type capped struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if c.buf.Len()+len(p) > c.max {
		c.over = true
		return 0, errOutputTooLong
	}
	return c.buf.Write(p)
}

func (c *capped) String() string { return c.buf.String() }

// Over reports whether a write was refused.
func (c *capped) Over() bool { return c.over }

// tail keeps the last max bytes written to it.
type tail struct {
	buf  []byte
	max  int
	lost bool // bytes before the kept ones were dropped
}

func (t *tail) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
		t.lost = true
	}
	return len(p), nil
}

// String returns the kept bytes on one line, "…" first when some were lost.
func (t *tail) String() string {
	b := t.buf
	lost := t.lost
	if len(b) > t.max {
		b, lost = b[len(b)-t.max:], true
	}
	s := oneLine(strings.TrimSpace(strings.ToValidUTF8(string(b), "")))
	if lost && s != "" {
		s = "…" + s
	}
	return s
}

// start starts a command that build makes, in a process group of its own
// (supervise.Start), making a new one while its program file is "busy" for
// a moment: an executable just written stays busy while any process forked
// meanwhile (here or elsewhere) still holds the writer's descriptor
// (go.dev/issue/22315).
func start(build func() *exec.Cmd) (*supervise.Child, error) {
	for wait := time.Millisecond; ; wait *= 2 {
		child, err := supervise.Start(build(), true)
		if !errors.Is(err, syscall.ETXTBSY) || wait > 256*time.Millisecond {
			return child, err
		}
		time.Sleep(wait)
	}
}
