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

// processIdentity is unknown without /proc: no process is identified as an
// agent.
func processIdentity(int) (argv []string, comm string, environ []string, ok bool) {
	return nil, "", nil, false
}

// processComm is unknown without /proc; a pane's shell counts as a shell.
func processComm(int) string {
	return "sh"
}

// killUser cannot find a user's processes without /proc.
func killUser(uint32) int { return 0 }
