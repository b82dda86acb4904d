package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// childAttr makes the spawned redis-server die with this program, however
// it ends.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}

// pin restricts every thread of process pid to cpus; threads it starts
// later inherit that.
func pin(pid int, cpus []int) error {
	var mask [16]uint64 // 1024 CPUs
	for _, c := range cpus {
		if c < 0 || c >= 64*len(mask) {
			return fmt.Errorf("cpu %d out of range", c)
		}
		mask[c/64] |= 1 << (c % 64)
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		_, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, uintptr(tid), unsafe.Sizeof(mask), uintptr(unsafe.Pointer(&mask)))
		if errno != 0 && errno != syscall.ESRCH { // a thread that just ended
			return fmt.Errorf("sched_setaffinity %d: %w", tid, errno)
		}
	}
	return nil
}
