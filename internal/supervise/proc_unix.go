//go:build unix

package supervise

import (
	"errors"
	"os"
	"syscall"
)

const groupsWork = true

func signal(c *Child, sig syscall.Signal) error {
	if c.Cmd.Process == nil {
		return nil
	}
	var err error
	if c.group {
		err = syscall.Kill(-c.pgid, sig)
	} else {
		err = c.Cmd.Process.Signal(sig)
	}
	if errors.Is(err, syscall.ESRCH) || errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}
