//go:build !unix

package supervise

import (
	"os"
	"syscall"
)

const groupsWork = false

// sysProcAttr leaves the command to the defaults: no process groups, no
// parent-death signal.
func sysProcAttr(bool) *syscall.SysProcAttr { return nil }

// signal kills the command's process for SIGKILL, and interrupts it for
// any other signal where the system can.
func signal(c *Child, sig syscall.Signal) error {
	if c.Cmd.Process == nil {
		return nil
	}
	var err error
	if sig == syscall.SIGKILL {
		err = c.Cmd.Process.Kill()
	} else {
		err = c.Cmd.Process.Signal(os.Interrupt)
	}
	if err == os.ErrProcessDone {
		return nil
	}
	return err
}
