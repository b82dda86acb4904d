package batch

import (
	"sync"
	"time"

	"github.com/lanes-dev/lanes/internal/supervise"
)

// running is every command runCommand started that has not exited, with
// the local deadline of its lease (nil: none), for Suspend.
var running = struct {
	sync.Mutex
	suspended bool
	children  map[*supervise.Child]func() time.Time
}{children: map[*supervise.Child]func() time.Time{}}

// track adds child, whose lease's local deadline is deadline (nil: none),
// to the commands Suspend stops; one that starts while they are stopped
// is stopped at once. The returned function removes it, once it exited.
func track(child *supervise.Child, deadline func() time.Time) (untrack func()) {
	running.Lock()
	defer running.Unlock()
	running.children[child] = deadline
	if running.suspended {
		child.Suspend()
	}
	return func() {
		running.Lock()
		defer running.Unlock()
		delete(running.children, child)
	}
}

// Suspend stops every command the tools of this process run, with what
// each of them started (supervise.Child.Suspend: its process group and,
// under a supervisor, what left it), for a stop of the process itself
// (SIGTSTP, Ctrl-Z): stopped, the process renews no lease, so none of its
// commands may run meanwhile, and a command that starts before resume is
// stopped as it starts. resume continues each command whose lease's local
// deadline has not passed. One whose deadline passed stays stopped: its
// lanes may have passed on, and its lease's guard kills it (SIGKILL ends a
// stopped process) once the Session, running again, marks the lease lost.
// A stop this process did not make itself (a lanectl lock above it stopped
// it with everything it runs) ends with a SIGCONT: each command is then
// continued on the same rule, by supervise (see supervise.Start).
// Suspend and resume are safe for concurrent use with running commands;
// the caller makes one Suspend at a time.
func Suspend() (resume func()) {
	running.Lock()
	defer running.Unlock()
	running.suspended = true
	for c := range running.children {
		c.Suspend()
	}
	return func() {
		running.Lock()
		defer running.Unlock()
		running.suspended = false
		now := time.Now()
		for c, deadline := range running.children {
			if deadline != nil {
				if d := deadline(); !d.IsZero() && !now.Before(d) {
					continue
				}
			}
			c.Resume()
		}
	}
}
