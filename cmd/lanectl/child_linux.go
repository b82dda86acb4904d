package main

import "syscall"

// childAttr puts lock's command in a process group of its own when group is
// set, and has the kernel kill it if lanectl dies first.
func childAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group, Pdeathsig: syscall.SIGKILL}
}
