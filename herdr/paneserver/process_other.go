//go:build unix && !linux

package paneserver

import "golang.org/x/sys/unix"

// processCwd is unknown without /proc.
func processCwd(int) (string, bool) {
	return "", false
}

// killSession kills the session leader's process group. Without /proc the
// groups of the shell's jobs cannot be listed.
func killSession(sid int) {
	_ = unix.Kill(-sid, unix.SIGKILL)
}
