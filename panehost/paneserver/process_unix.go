//go:build unix

package paneserver

import (
	"os"

	"golang.org/x/sys/unix"
)

// foregroundProcessGroup returns the process group the terminal delivers
// input to. It goes through SyscallConn so the pty stays non-blocking.
func foregroundProcessGroup(ptmx *os.File) (int, error) {
	rc, err := ptmx.SyscallConn()
	if err != nil {
		return 0, err
	}
	var pgid int
	var ioctlErr error
	if err := rc.Control(func(fd uintptr) {
		pgid, ioctlErr = unix.IoctlGetInt(int(fd), unix.TIOCGPGRP)
	}); err != nil {
		return 0, err
	}
	return pgid, ioctlErr
}
