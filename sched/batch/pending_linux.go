//go:build linux

package batch

import (
	"os"

	"golang.org/x/sys/unix"
)

// pending returns how many bytes wait to be read in the pipe f, without
// changing its mode (Fd would make it blocking and lose its deadlines); 0
// when it cannot tell (a closed file).
func pending(f *os.File) int {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = rc.Control(func(fd uintptr) {
		n, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ)
	})
	return n
}
