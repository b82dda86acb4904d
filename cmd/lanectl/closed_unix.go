//go:build unix

package main

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// readerGone reports whether w is a pipe or socket whose reader went away
// (`lanectl watch | head` after head exited): a watch that prints nothing
// until the next change would otherwise never notice.
func readerGone(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLOUT}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0
}
