//go:build !linux

package paneserver

import (
	"errors"
	"os/exec"
	"syscall"
)

// startConfined starts cmd as user when it is not nil. Without Linux there
// is no no_new_privs and no /proc to hide.
func startConfined(cmd *exec.Cmd, user *workspaceUser, _ bool) error {
	if user != nil {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: user.uid, Gid: user.uid, Groups: []uint32{}}
	}
	return cmd.Start()
}

// endUser cannot end a user's processes without Linux's sweeper; the
// pane's session ends as before.
func endUser(uint32) error {
	return errors.ErrUnsupported
}
