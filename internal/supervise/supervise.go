// Package supervise starts the commands lanes runs under a lease (`lanectl
// lock`'s command, `lanectl batch`'s tools) and stops them in time: in a
// process group of their own, killed with every process they started if
// the process that started them dies (Linux, see Start), and sent SIGTERM
// and SIGKILL on the schedule of the lease they run under (Guard).
package supervise

import (
	"fmt"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Child is a started command. Its methods are safe for concurrent use.
type Child struct {
	Cmd    *exec.Cmd
	sup    *supervision // nil without a supervisor
	group  bool
	pgid   int // the command's process group, when group is set
	exited chan struct{}
	err    error // Cmd.Wait's, once exited is closed

	mu       sync.Mutex
	guarded  string           // what Guard did, if anything
	lost     <-chan struct{}  // Guard's lease: lost is closed when it is lost
	deadline func() time.Time // and its local deadline (nil: none)

	// jc orders Suspend, Resume and continued; suspended is set from a
	// Suspend until the Resume that undoes it.
	jc        sync.Mutex
	suspended bool
}

// Start starts cmd, in a process group of its own when group is set, and
// waits for it in the background. It overwrites cmd.SysProcAttr. The error
// is cmd.Start's, or the same error for a command the supervisor (below)
// could not start.
//
// On Linux, a command with a group of its own runs under a supervisor: this
// program's own executable, run again, in a process group of its own. It
// starts the command, leader of the group that Signal and KillGroup reach,
// adopts the orphans of the command's descendants (a child subreaper), and
// exits as the command did: the same exit code, or death by the same
// signal, once the command is reaped. If this process dies, even by
// SIGKILL and with its whole process group, the supervisor sends SIGKILL
// to the command's group and to every process the command started, in the
// group or not (setsid, a daemon that forked twice), then exits. When the
// command exits, the supervisor stops what the command left running:
// SIGTERM, a second's grace to exit (a nested `lanectl lock` releases its
// lease in it), then SIGKILL the same way, before it passes the status on
// (two seconds at most); a SIGKILL sent with Signal (a lost lease) reaches
// them all at once, without that grace. The
// signals sent to the command's group do not reach the supervisor; those
// sent to the supervisor alone are ignored. Child.Cmd.Process is the
// supervisor, and Child.Cmd.ProcessState the command's status. A program
// that imports this package needs nothing more: the supervisor starts in
// this package's init. It costs a start of this program (about 2ms).
//
// Job control crosses nested runners (a lanectl lock or batch that the
// command runs, with its own supervisor and lease): a runner's Suspend
// stops everything below it, nested runners' commands too, but its Resume
// continues the nested runners and not their commands. Each runner
// continues its own: while a supervised command runs, this process watches
// for its own SIGCONT, and when one comes it continues every command that
// it did not stop itself (Suspend) and that may run, that is whose
// lease (Guard) is not lost and whose local deadline has not passed. One
// whose deadline passed stays stopped until Guard's SIGKILL ends it: its
// lanes may have passed on meanwhile.
//
// Without a group of its own (and where there is no supervisor), the
// command is this process's child. On Linux the kernel then sends it SIGKILL
// if this process dies first (a parent-death signal: the command itself, not
// the processes it started).
func Start(cmd *exec.Cmd, group bool) (*Child, error) {
	var sup *supervision
	if group {
		var err error
		if sup, err = supervise(cmd); err != nil {
			return nil, err
		}
	}
	if sup == nil {
		cmd.SysProcAttr = sysProcAttr(group)
	}
	c := &Child{Cmd: cmd, sup: sup, group: group && groupsWork, exited: make(chan struct{})}
	var since uint64
	if sup != nil {
		since = enterJobs() // from now on a SIGCONT of this process is seen
	}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal follows the thread that started the
		// child, not the process: keep this goroutine, and so the thread,
		// until the child is gone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		if sup != nil {
			c.pgid, err = sup.started(err)
		} else if err == nil {
			c.pgid = cmd.Process.Pid
		}
		if err != nil {
			if sup != nil {
				leaveJobs(nil)
			}
			started <- err
			return
		}
		if sup != nil {
			addJob(c, since)
		}
		started <- nil
		c.err = cmd.Wait()
		if sup != nil {
			sup.close()
			leaveJobs(c)
		}
		close(c.exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return c, nil
}

// Exited is closed once the command has exited and Wait would not block.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// Wait blocks until the command exits and returns cmd.Wait's error.
func (c *Child) Wait() error {
	<-c.exited
	return c.err
}

// Signal sends sig to the command's process group, or to its process alone
// when it has no group of its own. A command that is gone is no error.
// SIGKILL also reaches, under a supervisor, every process the command
// started outside its group, at once (without the grace they get when the
// command exits by itself).
func (c *Child) Signal(sig syscall.Signal) error {
	err := signal(c, sig)
	if sig == syscall.SIGKILL && c.sup != nil {
		c.sup.killAll()
	}
	return err
}

// Suspend stops the command's process group (SIGSTOP) and, under a
// supervisor, every process the command started outside it, nested
// runners' commands too: the runner is about to stop too (job control) and
// cannot renew the lease meanwhile. Under a supervisor it returns once the
// supervisor has stopped them all (a second at most).
func (c *Child) Suspend() {
	c.jc.Lock()
	defer c.jc.Unlock()
	c.suspended = true
	_ = signal(c, syscall.SIGSTOP)
	if c.sup != nil {
		c.sup.stopAll()
	}
}

// Resume continues what Suspend stopped, but for the commands of nested
// runners (a lanectl lock or batch the command started): each nested
// runner, once continued, continues its own commands if their leases did
// not lapse meanwhile (see Start).
func (c *Child) Resume() {
	c.jc.Lock()
	defer c.jc.Unlock()
	c.suspended = false
	c.resume()
}

func (c *Child) resume() {
	if c.sup != nil {
		c.sup.contAll()
	}
	_ = signal(c, syscall.SIGCONT)
}

// continued is what this process does for c once it is continued (SIGCONT)
// after a stop it did not make itself: a runner above it stopped it with
// everything it started (Suspend there reaches c's command) and continued
// it, but not c's command, whose lease that runner knows nothing of. c's
// command is continued now, unless it may not run: Guard's lease was lost
// or its local deadline passed meanwhile (Guard's SIGKILL ends the command
// still stopped), or this process stopped it itself (Suspend), and its
// Resume decides.
func (c *Child) continued() {
	c.jc.Lock()
	defer c.jc.Unlock()
	if c.suspended || !c.mayRun() {
		return
	}
	c.resume()
}

// mayRun reports whether the command may run: Guard watches no lease, or
// its lease is not lost and its local deadline has not passed.
func (c *Child) mayRun() bool {
	c.mu.Lock()
	lost, deadline := c.lost, c.deadline
	c.mu.Unlock()
	select {
	case <-lost: // nil: never
		return false
	default:
	}
	if deadline != nil {
		if d := deadline(); !d.IsZero() && !time.Now().Before(d) {
			return false
		}
	}
	return true
}

// KillGroup sends SIGKILL to whatever is left of the command's process
// group: once the command exited, the processes it left behind (under a
// supervisor, gone already). It does nothing for a command without a group
// of its own.
func (c *Child) KillGroup() {
	if c.group {
		_ = c.Signal(syscall.SIGKILL)
	}
}

// Guarded says what Guard did to the command, in a few words ("" if
// nothing): "SIGTERM: ..." or "SIGKILL: ...".
func (c *Child) Guarded() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.guarded
}

func (c *Child) guardSignal(sig syscall.Signal, why string) {
	c.mu.Lock()
	c.guarded = why
	c.mu.Unlock()
	_ = c.Signal(sig)
}

// Guard stops a command in time for the lease it runs under: SIGTERM once
// the lease's local deadline is less than grace away (a chance to stop
// cleanly), SIGKILL as soon as the lease is lost. The local deadline lies a
// margin (a tenth of the TTL) before the backend could grant the lease's
// slots to anyone else, so the command is gone before another holder
// starts. deadline returns the lease's current local deadline (it moves
// with each renewal; the zero time means none); lost is closed when the
// lease is lost, and may be nil for a lease that is never lost. onLost,
// when not nil, is the lease's OnLost (lanes.Lease.OnLost): the SIGKILL is
// then sent before the Session gives the lost lease's slots back, not
// merely as soon as this goroutine sees lost closed. lost and deadline
// also decide whether a SIGCONT of this process continues the command
// (see Start).
//
// Guard returns at once; its goroutine ends when the command exits, after
// the SIGKILL, or when stop is called.
func (c *Child) Guard(lost <-chan struct{}, onLost func(func()) func() bool, deadline func() time.Time, grace time.Duration) (stop func()) {
	c.mu.Lock()
	c.lost, c.deadline = lost, deadline
	c.mu.Unlock()
	done := make(chan struct{})
	unregister := func() bool { return false }
	if onLost != nil {
		unregister = onLost(func() {
			select {
			case <-c.exited:
			default:
				c.guardSignal(syscall.SIGKILL, "SIGKILL: its lease was lost")
			}
		})
	}
	go c.guard(lost, deadline, grace, done)
	var once sync.Once
	return func() {
		once.Do(func() {
			unregister()
			close(done)
		})
	}
}

func (c *Child) guard(lost <-chan struct{}, deadline func() time.Time, grace time.Duration, done <-chan struct{}) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	termed := false
	for {
		var wake <-chan time.Time
		if !termed && deadline != nil {
			if d := deadline(); !d.IsZero() {
				if left := time.Until(d.Add(-grace)); left > 0 {
					timer.Reset(left)
					wake = timer.C
				} else {
					termed = true
					c.guardSignal(syscall.SIGTERM, fmt.Sprintf("SIGTERM: its lease's local deadline was less than %v away (renewals did not reach the backend)", grace))
				}
			}
		}
		select {
		case <-c.exited:
			return
		case <-done:
			return
		case <-lost:
			c.guardSignal(syscall.SIGKILL, "SIGKILL: its lease was lost")
			return
		case <-wake:
			// The deadline may have moved on with a renewal: look again.
		}
	}
}
