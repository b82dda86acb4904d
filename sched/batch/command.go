package batch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

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
	// follows the end of its context, before it gets SIGKILL.
	KillAfter = 5 * time.Second
)

// The environment variables a Command body sets for its command, in place
// of any it inherits.
var commandEnv = []string{"LANES_CALL_ID", "LANES_TOOL", "LANES_TENANT", "LANES_ENTRY", "LANES_TOKENS", "LANES_OPERATION", "LANES_TOKEN"}

// Command returns a Body that runs argv in dir ("" means the working
// directory) for each execution: a call, or one operation of a fanned-out
// call. A relative program path with a slash is taken against dir; a bare
// name is looked up in PATH.
//
// The command reads the execution's arguments, JSON, on its standard input.
// Its environment is this process's with LANES_CALL_ID, LANES_TOOL,
// LANES_TENANT, LANES_ENTRY, LANES_OPERATION (the operation's index, 0 for a
// call that does not fan out) and LANES_TOKENS (key=token,... sorted by lane
// key, such as concurrency:rfd=7: fencing tokens that only grow).
//
// Its standard output, without one trailing newline, is the result; more
// than MaxOutput bytes is an error. A non-zero exit is an error naming the
// exit status with the last StderrTail bytes of standard error on one line.
// A program that does not exist is the error "command not found: PATH".
//
// When ctx ends, the command's process group gets SIGTERM, and its process
// SIGKILL KillAfter later if it has not exited; once it has, whatever is
// left of its group gets SIGKILL, so nothing of it runs after the body
// returns and its lanes pass on.
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
	cmd, err := start(func() *exec.Cmd {
		cmd := exec.CommandContext(ctx, path, argv[1:]...)
		cmd.Dir = dir
		cmd.Env = environ(os.Environ(), inv)
		cmd.Stdin = bytes.NewReader(inv.Args)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.WaitDelay = KillAfter
		ownGroup(cmd)
		return cmd
	})
	if err != nil {
		return "", startError(ctx, path, dir, err)
	}
	err = cmd.Wait()
	stopped := ctx.Err() != nil
	leftover := errors.Is(err, exec.ErrWaitDelay) // exited, but a child kept its output open
	// Whatever the command left running in its group (a child sent to the
	// background) would run on after its lanes pass on: it goes too.
	killGroup(cmd)
	out := strings.TrimSuffix(stdout.buf.String(), "\n")
	switch {
	case stdout.over:
		return "", fmt.Errorf("the command wrote more than %d MiB to its standard output", MaxOutput>>20)
	case err != nil && stopped:
		return out, fmt.Errorf("%w: stopped (%v): %s", ctx.Err(), context.Cause(ctx), failure(cmd, err, stderr))
	case leftover:
		return out, fmt.Errorf("%s, but a process it started still held its output %v later and was killed", failure(cmd, nil, stderr), KillAfter)
	case err != nil:
		return out, errors.New(failure(cmd, err, stderr))
	}
	return out, nil
}

// environ returns base with the LANES_* variables of inv in place of any
// inherited ones.
func environ(base []string, inv sched.Invocation) []string {
	env := make([]string, 0, len(base)+len(commandEnv))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(commandEnv, name) {
			env = append(env, kv)
		}
	}
	keys := make([]string, 0, len(inv.Tokens))
	for k := range inv.Tokens {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	tokens := make([]string, len(keys))
	for i, k := range keys {
		tokens[i] = k + "=" + strconv.FormatUint(inv.Tokens[k], 10)
	}
	return append(env,
		"LANES_CALL_ID="+inv.CallID,
		"LANES_TOOL="+inv.Tool,
		"LANES_TENANT="+inv.Tenant,
		"LANES_ENTRY="+inv.Entry,
		"LANES_TOKENS="+strings.Join(tokens, ","),
		"LANES_OPERATION="+strconv.Itoa(inv.Operation),
	)
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

// start starts a command that build makes, making a new one while its
// program file is "busy" for a moment: an executable just written stays
// busy while any process forked meanwhile (here or elsewhere) still holds
// the writer's descriptor (go.dev/issue/22315).
func start(build func() *exec.Cmd) (*exec.Cmd, error) {
	for wait := time.Millisecond; ; wait *= 2 {
		cmd := build()
		err := cmd.Start()
		if !errors.Is(err, syscall.ETXTBSY) || wait > 256*time.Millisecond {
			return cmd, err
		}
		time.Sleep(wait)
	}
}
