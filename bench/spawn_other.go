//go:build !linux

package main

import (
	"errors"
	"syscall"
)

// childAttr: only Linux can tie the child's life to this program's.
func childAttr() *syscall.SysProcAttr { return nil }

// pin: CPU affinity is set only on Linux.
func pin(int, []int) error { return errors.New("CPU pinning needs Linux") }
