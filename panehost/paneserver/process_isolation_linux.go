package paneserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"

	"github.com/fleetd/fleetd/panehost/paneserver/internal/confine"
)

// A pane's shell starts through a launcher: the server's own binary run
// again (package confine). Go starts a child with no way to set
// no_new_privs or to mount between its fork and its exec, and the launcher
// does both:
//
//  1. With hideProcesses, it is in a mount namespace of the pane's own (Go
//     unshares it and makes every mount in it private) and mounts a /proc
//     of its own there with hidepid=invisible: the member sees only its
//     own user's processes, not another member's command lines.
//  2. It becomes the workspace's user, enters the pane's directory as that
//     user, and sets no_new_privs, so no set-user-id program on the
//     machine (mount, su, newgrp ...) runs with more than the member's
//     own rights, in the shell or anything it starts.
//  3. It execs the shell.
//
// The launcher runs as the server's user until step 2, so it starts with an
// empty environment (the pane's, which the caller chooses, could name a
// library for the loader to preload) and its argv names nothing: the launch
// comes in as JSON on a pipe, and a failure goes back on another.

// startConfined starts cmd, set up as the pane's shell, through the
// launcher: as user when it is not nil, with no_new_privs, and with other
// users' processes hidden when hideProcesses is set. It returns once the
// shell is exec'd, or with the launcher's error.
func startConfined(cmd *exec.Cmd, user *workspaceUser, hideProcesses bool) error {
	if cmd.Err != nil {
		return cmd.Err
	}
	l := confine.Launch{Path: cmd.Path, Args: cmd.Args, Dir: cmd.Dir, Env: cmd.Env, HideProcesses: hideProcesses}
	if l.Env == nil {
		l.Env = os.Environ()
	}
	if user != nil {
		l.User = &user.uid
	}
	in, inW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer in.Close()
	defer inW.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer errR.Close()
	defer errW.Close()

	cmd.Path, cmd.Args, cmd.Dir, cmd.Env = "/proc/self/exe", []string{confine.LauncherName}, "", []string{}
	cmd.ExtraFiles = []*os.File{confine.LaunchFD - 3: in, confine.ErrorFD - 3: errW}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if hideProcesses {
		cmd.SysProcAttr.Unshareflags |= syscall.CLONE_NEWNS
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	_ = in.Close()
	_ = errW.Close()
	writeErr := json.NewEncoder(inW).Encode(l)
	_ = inW.Close()
	failure, _ := io.ReadAll(errR)
	if len(failure) == 0 && writeErr == nil {
		return nil
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if len(failure) > 0 {
		return errors.New(string(failure))
	}
	return fmt.Errorf("handing the launch to the launcher: %w", writeErr)
}

// endUser ends every process of a workspace's user, whatever session or
// process group it left for: a sweeper running as that user sends SIGKILL
// to every process the user may signal (kill(2) with pid -1), which are
// that user's alone. The kernel signals them in one pass that no fork
// slips through.
func endUser(uid uint32) error {
	if uid == 0 {
		return errors.New("ending the processes of root: refused")
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Args, cmd.Env = []string{confine.SweeperName}, []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ending the processes of user %d: %w: %s", uid, err, out)
	}
	return nil
}
