package supervise

import "syscall"

// sysProcAttr puts the command in a process group of its own when group is
// set, and has the kernel kill it if the thread that started it (see Start)
// ends, as it does when this process dies.
func sysProcAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group, Pdeathsig: syscall.SIGKILL}
}
