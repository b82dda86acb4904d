//go:build !linux

package supervise

import "os/exec"

// supervision is always nil here: the supervisor (supervisor_linux.go)
// stands on Linux's child subreapers and /proc, and passes a signal death
// on with Linux's system calls. Elsewhere a command with a group of its own
// is this process's child, and nothing kills it if this process dies.
type supervision struct{}

func supervise(*exec.Cmd) (*supervision, error) { return nil, nil }

func (*supervision) started(err error) (int, error) { return 0, err }

func (*supervision) close() {}

func (*supervision) killAll() {}

func (*supervision) stopAll() {}

func (*supervision) contAll() {}

// Without a supervisor nothing below a runner above this process is left
// stopped for this process to continue.
func enterJobs() uint64 { return 0 }

func addJob(*Child, uint64) {}

func leaveJobs(*Child) {}
