//go:build unix && !linux

package supervise

import "syscall"

// sysProcAttr puts the command in a process group of its own when group is
// set. Only Linux can have the command killed when this process dies.
func sysProcAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group}
}
