//go:build unix && !linux

package main

import "syscall"

// childAttr puts lock's command in a process group of its own when group is
// set. Only Linux can have the command killed when lanectl dies.
func childAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: group}
}
