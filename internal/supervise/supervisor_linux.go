package supervise

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	ossignal "os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The supervisor of a command is this program run again: from selfExe,
// with supervisorArg0 as its argv[0], then the command's program path and
// argv, and supervisorEnv in its environment (the command's). It holds one
// end of the lifeline, a socket pair whose other end only this process
// holds: it reads end of file there once this process is gone, however it
// died, and a byte when this process asks it to kill everything at once
// (killAll). supervisorEnv's value is the number of its descriptor, the first
// after the command's ExtraFiles. Over the lifeline, the supervisor reports
// once whether it started the command: 8 bytes, little-endian, the errno of
// the failure or 0, then the command's pid, which is also the number of its
// process group. After that, this process sends it one byte per request:
// 'S' (stop every process the command started), 'C' (continue them) or 'k'
// (kill them all at once), and it answers each 'S' and 'C' with 's' or 'c'
// once it has signalled every process.
const (
	supervisorArg0 = "lanes-supervisor"
	supervisorEnv  = "LANES_SUPERVISOR_FD"
	selfExe        = "/proc/self/exe"
)

// useSupervisor turns the supervisor off, for tests that compare.
var useSupervisor = true

// canSupervise reports whether this program can run itself again as a
// supervisor: /proc is mounted, and it is a program of its own, not a
// library that another program loaded (whose /proc/self/exe is that
// program).
var canSupervise = sync.OnceValue(func() bool {
	if _, err := os.Stat(selfExe); err != nil {
		return false
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "-buildmode" && s.Value != "exe" && s.Value != "pie" {
				return false
			}
		}
	}
	return true
})

// supervision is what Start keeps of a supervised command: the fields of
// its Cmd that it rewrote to start the supervisor, and this process's end
// of the lifeline.
type supervision struct {
	cmd   *exec.Cmd
	path  string
	args  []string
	env   []string
	extra []*os.File

	ours, theirs *os.File

	mu           sync.Mutex // one stop or continue at a time (ask)
	asked, acked int        // the stops and continues asked for, and answered
}

// ackWait bounds how long Suspend and Resume wait for the supervisor to
// answer that it has stopped, or continued, what the command started: a
// supervisor stopped itself (by a job control of a runner above this one)
// answers once it is continued.
const ackWait = time.Second

// supervise rewrites cmd to start a supervisor that runs it, or returns nil
// to start it as it is.
func supervise(cmd *exec.Cmd) (*supervision, error) {
	if !useSupervisor || cmd.Err != nil || cmd.Process != nil || !canSupervise() {
		return nil, nil // cmd.Start's own error, if any, is the one to give
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "fork/exec", Path: cmd.Path, Err: err}
	}
	// This end is nonblocking, so that reading the supervisor's answers
	// (ask) can time out.
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, &fs.PathError{Op: "fork/exec", Path: cmd.Path, Err: err}
	}
	s := &supervision{
		cmd: cmd, path: cmd.Path, args: cmd.Args, env: cmd.Env, extra: cmd.ExtraFiles,
		ours: os.NewFile(uintptr(fds[0]), "lifeline"), theirs: os.NewFile(uintptr(fds[1]), "lifeline"),
	}
	args := cmd.Args
	if len(args) == 0 {
		args = []string{cmd.Path} // as exec.Cmd does
	}
	cmd.Env = append(cmd.Environ(), supervisorEnv+"="+strconv.Itoa(3+len(cmd.ExtraFiles)))
	cmd.Path = selfExe
	cmd.Args = append([]string{supervisorArg0, s.path}, args...)
	cmd.ExtraFiles = append(slices.Clip(cmd.ExtraFiles), s.theirs)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return s, nil
}

// started takes cmd.Start's error, puts cmd's fields back, and returns the
// command's process group, or the error of starting the command: cmd.Start's,
// or the supervisor's report.
func (s *supervision) started(err error) (int, error) {
	cmd := s.cmd
	cmd.Path, cmd.Args, cmd.Env, cmd.ExtraFiles = s.path, s.args, s.env, s.extra
	s.theirs.Close()
	if err != nil {
		s.ours.Close()
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) && pe.Path == selfExe {
			pe.Path = s.path
		}
		return 0, err
	}
	var report [8]byte
	if _, err := io.ReadFull(s.ours, report[:]); err != nil {
		s.ours.Close()
		_ = cmd.Wait()
		return 0, &fs.PathError{Op: "fork/exec", Path: s.path, Err: fmt.Errorf("its supervisor ended before starting it: %v", cmd.ProcessState)}
	}
	if errno := syscall.Errno(binary.LittleEndian.Uint32(report[:4])); errno != 0 {
		s.ours.Close()
		_ = cmd.Wait()
		return 0, &fs.PathError{Op: "fork/exec", Path: s.path, Err: errno}
	}
	return int(binary.LittleEndian.Uint32(report[4:])), nil
}

// close closes the lifeline once the supervisor has exited.
func (s *supervision) close() { s.ours.Close() }

// killAll asks the supervisor to send SIGKILL at once to the command's
// group and to every process the command started (its lease was lost: no
// grace for what it left, which would run on while another holder has
// its lanes). A supervisor gone already is no error.
func (s *supervision) killAll() { _, _ = s.ours.Write([]byte{'k'}) }

// stopAll asks the supervisor to send SIGSTOP to every process the
// command started, in its group or not: the runner stops with its command
// (job control), so nothing it started runs on while the runner cannot
// renew its lease. contAll asks it to send SIGCONT to them, but for what a
// nested supervisor runs (signalTree): that runs under a nested runner's
// lease, and only that runner can tell whether it may run again
// (Child.continued). Both return once the supervisor has answered that it
// signalled them all, or after ackWait, or once it is gone: so the runner
// stops itself only once what it started is stopped, and it sends the
// command's group its SIGCONT once the rest is continued.
func (s *supervision) stopAll() { s.ask('S') }
func (s *supervision) contAll() { s.ask('C') }

// ask sends the supervisor request b and waits for its answer (see
// stopAll). Answers that came too late for an earlier ask are counted
// against it, not taken for this one's.
func (s *supervision) ask(b byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.ours.Write([]byte{b}); err != nil {
		return // the supervisor is gone, or its lifeline closed
	}
	s.asked++
	if s.ours.SetReadDeadline(time.Now().Add(ackWait)) != nil {
		return // not pollable: do not wait
	}
	var buf [16]byte
	for s.acked < s.asked {
		n, err := s.ours.Read(buf[:])
		s.acked += n
		if err != nil {
			return // timed out, or the supervisor is gone
		}
	}
}

func init() {
	if len(os.Args) < 3 || os.Args[0] != supervisorArg0 {
		return
	}
	v, ok := os.LookupEnv(supervisorEnv)
	if !ok {
		return
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return
	}
	supervisor(fd, os.Args[1], os.Args[2:])
}

// What the command left running when it exited first gets SIGTERM and
// leftoverGrace to exit (a nested `lanectl lock` releases its own lease
// then), then SIGKILL; leftoverLimit bounds the whole stop before the
// supervisor passes the command's status on. The runner still holds the
// lease meanwhile: nothing the command started outlives it.
// If the runner dies during the grace (its lifeline closes), the grace
// ends at once: SIGKILL, as when it dies while the command runs, since
// nothing holds the lease any more.
const (
	leftoverGrace = time.Second
	leftoverLimit = 2 * time.Second
)

// graceEnv, when set to a duration, replaces leftoverGrace (and grows
// leftoverLimit with it): for the tests, which need a grace longer than
// anything they wait for, to tell "ended at once" from "ended with the
// grace".
const graceEnv = "LANES_SUPERVISOR_GRACE"

// supervisor is the supervisor's whole life: it runs the command at path
// with argv, the lifeline at fd, and exits as the command did. It never
// returns.
//
// The supervisor leads a process group of its own (the runner made it);
// the command leads another, which the runner signals. So the signals the
// runner sends the command's group never reach the supervisor: it neither
// passes them on a second time nor dies of them, not even of SIGKILL, and
// it reaps the command, which no longer runs once the runner sees the
// supervisor exit.
func supervisor(fd int, path string, argv []string) {
	// The command's parent-death signal (below) follows the thread that
	// starts it: init runs on the main thread, which lives as long as
	// this process.
	runtime.LockOSThread()
	syscall.CloseOnExec(fd)
	// Processes whose parent dies are handed to this one, not to init:
	// the command's descendants stay within reach, even those that left
	// its group.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

	files := make([]uintptr, fd) // standard streams and ExtraFiles, where they are
	for i := range files {
		files[i] = uintptr(i)
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, supervisorEnv+"=") })
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env: env, Files: files,
		Sys: &syscall.SysProcAttr{
			Setpgid:   true,
			Pdeathsig: syscall.SIGKILL, // if this process is killed
		},
	})
	var report [8]byte
	if err != nil {
		errno := syscall.EINVAL
		errors.As(err, &errno)
		binary.LittleEndian.PutUint32(report[:4], uint32(errno))
		_, _ = syscall.Write(fd, report[:])
		syscall.Exit(127)
	}
	binary.LittleEndian.PutUint32(report[4:], uint32(pid))
	// A signal sent to this process alone (a kill of its pid) is ignored:
	// the command's is its group. Ignored only now, after the command
	// started, a signal is not ignored in the command; the command's
	// dispositions are those it would have had started by the runner: Go's
	// handlers go back to the default at exec, and a signal ignored from the
	// start (SIGHUP under nohup) stays ignored.
	ossignal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGABRT,
		syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	_, _ = syscall.Write(fd, report[:])

	// orphaned is closed when the runner is gone; now when it is gone or
	// asked to kill everything at once (killAll): either way no lease
	// covers what the command started any more.
	orphaned, now := make(chan struct{}), make(chan struct{})
	go func() {
		var b [64]byte
		asked := false
		for {
			n, err := syscall.Read(fd, b[:])
			switch {
			case n > 0:
				for _, c := range b[:n] {
					switch {
					case c == 'S':
						signalTree(syscall.SIGSTOP)
						_, _ = syscall.Write(fd, []byte{'s'})
					case c == 'C':
						signalTree(syscall.SIGCONT)
						_, _ = syscall.Write(fd, []byte{'c'})
					case !asked:
						asked = true
						close(now)
					}
				}
			case err != syscall.EINTR:
				close(orphaned)
				if !asked {
					close(now)
				}
				return
			}
		}
	}()
	r := &reaper{command: pid, exited: make(chan syscall.WaitStatus, 1), woke: make(chan struct{}, 1), none: make(chan struct{})}
	go r.run()

	select {
	case <-now:
		// The runner is gone, or its lease was lost: so goes everything
		// the command started, at once.
		r.killGroup()
		sweep(r, time.Minute)
		select {
		case <-orphaned:
			syscall.Exit(1)
		default:
		}
		select {
		case ws := <-r.exited: // killed, most likely
			passOn(ws)
		case <-time.After(time.Second):
			die(syscall.SIGKILL)
		}
	case ws := <-r.exited:
		grace, limit := leftoverGrace, leftoverLimit
		if d, err := time.ParseDuration(os.Getenv(graceEnv)); err == nil && d > 0 {
			grace, limit = d, d+leftoverLimit-leftoverGrace
		}
		if !terminate(r, grace, now) {
			sweep(r, limit-grace)
		}
		passOn(ws)
	}
}

// reaper waits for the supervisor's children: the command, whose status
// it passes on, and the orphans the supervisor adopted.
type reaper struct {
	command int
	exited  chan syscall.WaitStatus // the command's status
	woke    chan struct{}           // a child was reaped
	none    chan struct{}           // closed once no child is left

	mu     sync.Mutex
	reaped bool // the command was: its pid, the number of its group, may be reused
}

func (r *reaper) run() {
	for {
		// Wait until a child has exited, without reaping it yet.
		var info unix.Siginfo
		err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil { // ECHILD: no child left, and so no descendant
			close(r.none)
			return
		}
		r.mu.Lock()
		// The command: what it left in its group is told to stop while its
		// pid still holds the group's number (terminate and sweep below
		// reach the rest).
		if !r.reaped {
			var ci unix.Siginfo
			if unix.Waitid(unix.P_PID, r.command, &ci, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil) == nil && ci.Signo == int32(syscall.SIGCHLD) {
				_ = syscall.Kill(-r.command, syscall.SIGTERM)
			}
		}
		var command *syscall.WaitStatus
		left := true
		for {
			var ws syscall.WaitStatus
			p, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.ECHILD {
				left = false
				break
			}
			if p <= 0 || err != nil {
				break
			}
			if p == r.command {
				r.reaped, command = true, &ws
			}
		}
		r.mu.Unlock()
		// Most often the command leaves nothing: none is closed before
		// its status is told, and the sweep has nothing to look for.
		if !left {
			close(r.none)
		}
		if command != nil {
			r.exited <- *command
		}
		if !left {
			return
		}
		select {
		case r.woke <- struct{}{}:
		default:
		}
	}
}

// killGroup sends SIGKILL to the command's process group, unless the
// command was reaped (and its group's number may name another group).
func (r *reaper) killGroup() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.reaped {
		_ = syscall.Kill(-r.command, syscall.SIGKILL)
	}
}

// terminate sends SIGTERM to the supervisor's children (what the command
// left running, adopted, in its group or not) and waits up to grace for
// them to exit, or until now closes (the runner died, or its lease was
// lost: no lease covers them now). It reports whether none is left.
func terminate(r *reaper, grace time.Duration, now <-chan struct{}) bool {
	select {
	case <-r.none:
		return true
	default:
	}
	for _, p := range children() {
		_ = syscall.Kill(p, syscall.SIGTERM)
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	select {
	case <-r.none:
		return true
	case <-deadline.C:
		return false
	case <-now:
		return false
	}
}

// sweep kills the supervisor's children with SIGKILL until it has none:
// the children of each one killed become its own (it is their subreaper),
// so every descendant goes, whatever its process group or session. It gives
// up after limit.
func sweep(r *reaper, limit time.Duration) {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		select {
		case <-r.none:
			return
		default:
		}
		for _, p := range children() {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		select {
		case <-r.none:
			return
		case <-r.woke:
		case <-time.After(5 * time.Millisecond): // a child not seen in /proc
		case <-deadline.C:
			return
		}
	}
}

// signalTree sends sig to every descendant of the supervisor: the
// command, what it started (in its group or not: a setsid child, a nested
// lanectl lock and its own command), and the orphans it adopted. Twice, so
// that a child forked during the first pass is reached too.
//
// SIGCONT stops short of what a nested supervisor runs: it reaches the
// nested supervisor (which must read its lifeline) but none of its
// descendants. They run under the lease of the nested runner (a lanectl
// lock or batch that the command started), which this process's runner
// knows nothing of: once continued itself, the nested runner continues
// them only if its own lease has not lapsed while it was stopped
// (Child.continued), and otherwise its guard kills them, still stopped.
// Continued from here, they would run on, for the moment the nested runner
// takes to see its lease lost, beside the lease's next holder.
func signalTree(sig syscall.Signal) {
	for range 2 {
		seen := map[int]bool{}
		next := children()
		for len(next) > 0 {
			p := next[0]
			next = next[1:]
			if seen[p] {
				continue
			}
			seen[p] = true
			_ = syscall.Kill(p, sig)
			if sig == syscall.SIGCONT && isSupervisor(p) {
				continue
			}
			next = append(next, childrenOf(p)...)
		}
	}
}

// isSupervisor reports whether process p is a supervisor: its argv[0] is
// supervisorArg0.
func isSupervisor(p int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
	return err == nil && strings.HasPrefix(string(b), supervisorArg0+"\x00")
}

// childrenOf returns the pids of process p's children.
func childrenOf(p int) []int {
	var pids []int
	if childrenFiles() {
		tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(p) + "/task")
		for _, t := range tasks {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/task/" + t.Name() + "/children")
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					pids = append(pids, c)
				}
			}
		}
		return pids
	}
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		c, err := strconv.Atoi(e.Name())
		if err == nil && parent(c) == p {
			pids = append(pids, c)
		}
	}
	return pids
}

// childrenFiles reports whether the kernel lists a task's children in
// /proc/self/task/TID/children (CONFIG_PROC_CHILDREN).
var childrenFiles = sync.OnceValue(func() bool {
	_, err := os.Stat("/proc/self/task/" + strconv.Itoa(os.Getpid()) + "/children")
	return err == nil
})

// children returns the pids of the supervisor's children.
func children() []int {
	var pids []int
	if childrenFiles() {
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, t := range tasks {
			b, _ := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
			for _, f := range strings.Fields(string(b)) {
				if p, err := strconv.Atoi(f); err == nil {
					pids = append(pids, p)
				}
			}
		}
		return pids
	}
	self := os.Getpid()
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if parent(p) == self {
			pids = append(pids, p)
		}
	}
	return pids
}

// parent returns the parent of process p, from /proc/p/stat, or 0.
func parent(p int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// passOn exits as the command did: with its exit code, or killed by the
// same signal (without a core dump of its own).
func passOn(ws syscall.WaitStatus) {
	if ws.Signaled() {
		die(ws.Signal())
	}
	syscall.Exit(ws.ExitStatus())
}

// die kills this process with sig: back to its default action, which the
// Go runtime would not take for every signal (SIGQUIT prints goroutines and
// exits 2), unblocked, and raised on this thread.
func die(sig syscall.Signal) {
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) // no core of its own
	// A kernel struct sigaction of zeros is SIG_DFL, whatever the
	// architecture's layout; the size of its signal set is 8 bytes but on
	// MIPS (16).
	var act [64]byte
	for _, size := range []uintptr{8, 16} {
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, size, 0, 0); e == 0 {
			break
		}
	}
	var set unix.Sigset_t
	bits := uint(unsafe.Sizeof(set.Val[0]) * 8)
	set.Val[uint(sig-1)/bits] |= 1 << (uint(sig-1) % bits)
	_ = unix.PthreadSigmask(unix.SIG_UNBLOCK, &set, nil)
	_ = unix.Tgkill(unix.Getpid(), unix.Gettid(), sig)
	syscall.Exit(128 + int(sig)) // a signal whose default does not end a process
}
