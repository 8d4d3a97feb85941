package paneserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// A pane's shell starts through a launcher: the server's own binary again,
// run as launcherName. Go starts a child with no way to set no_new_privs or
// to mount between its fork and its exec, and the launcher does both:
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
// comes in as JSON on fd 3. A failure goes back as text on fd 4, which
// closes unwritten when the shell is exec'd.
const (
	launcherName = "fleetd-pane-launcher"
	// sweeperName is the server's binary run as a workspace's user to end
	// every process of that user (endUser).
	sweeperName = "fleetd-pane-sweeper"
	launchFD    = 3
	launchErrFD = 4
)

func init() {
	if len(os.Args) == 0 {
		return
	}
	switch os.Args[0] {
	case launcherName:
		runLauncher()
	case sweeperName:
		runSweeper()
	}
}

// launch is what the launcher does.
type launch struct {
	Path string   `json:"path"`
	Args []string `json:"args"`
	Dir  string   `json:"dir,omitempty"`
	Env  []string `json:"env"`
	// User, when set, is the workspace user the shell runs as.
	User *uint32 `json:"user,omitempty"`
	// HideProcesses mounts the /proc that shows the user only its own
	// processes; the launcher is in a mount namespace of its own.
	HideProcesses bool `json:"hideProcesses,omitempty"`
}

// startConfined starts cmd, set up as the pane's shell, through the
// launcher: as user when it is not nil, with no_new_privs, and with other
// users' processes hidden when hideProcesses is set. It returns once the
// shell is exec'd, or with the launcher's error.
func startConfined(cmd *exec.Cmd, user *workspaceUser, hideProcesses bool) error {
	if cmd.Err != nil {
		return cmd.Err
	}
	l := launch{Path: cmd.Path, Args: cmd.Args, Dir: cmd.Dir, Env: cmd.Env, HideProcesses: hideProcesses}
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

	cmd.Path, cmd.Args, cmd.Dir, cmd.Env = "/proc/self/exe", []string{launcherName}, "", []string{}
	cmd.ExtraFiles = []*os.File{launchFD - 3: in, launchErrFD - 3: errW}
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

// runLauncher is the launcher's whole life: it never returns.
func runLauncher() {
	// no_new_privs is a thread's; the thread that sets it must exec.
	runtime.LockOSThread()
	report := os.NewFile(launchErrFD, "launch errors")
	fail := func(err error) {
		_, _ = io.WriteString(report, err.Error())
		os.Exit(127)
	}
	syscall.CloseOnExec(launchErrFD)
	in := os.NewFile(launchFD, "launch")
	var l launch
	if err := json.NewDecoder(in).Decode(&l); err != nil {
		fail(fmt.Errorf("reading the launch: %w", err))
	}
	_ = in.Close()
	if err := l.confine(); err != nil {
		fail(err)
	}
	fail(fmt.Errorf("starting %s: %w", l.Path, syscall.Exec(l.Path, l.Args, l.Env)))
}

// confine does everything but the exec, in this order: what needs the
// server's privileges first, then the user, then what the user does.
func (l *launch) confine() error {
	if l.HideProcesses {
		if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "hidepid=invisible"); err != nil {
			return fmt.Errorf("mounting a /proc that hides other users' processes: %w", err)
		}
	}
	if u := l.User; u != nil {
		if *u == 0 {
			return errors.New("a workspace's shell never runs as root")
		}
		if err := syscall.Setgroups([]int{}); err != nil {
			return fmt.Errorf("dropping supplementary groups: %w", err)
		}
		if err := syscall.Setgid(int(*u)); err != nil {
			return fmt.Errorf("becoming group %d: %w", *u, err)
		}
		if err := syscall.Setuid(int(*u)); err != nil {
			return fmt.Errorf("becoming user %d: %w", *u, err)
		}
	}
	if l.Dir != "" {
		if err := os.Chdir(l.Dir); err != nil {
			return fmt.Errorf("entering %s: %w", l.Dir, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no_new_privs: %w", err)
	}
	return nil
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
	cmd.Args, cmd.Env = []string{sweeperName}, []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ending the processes of user %d: %w: %s", uid, err, out)
	}
	return nil
}

// runSweeper is the sweeper's whole life: it never returns. It refuses to
// run with any capability (as root, kill(-1) would end every process on
// the machine).
func runSweeper() {
	if os.Getuid() == 0 || os.Geteuid() == 0 || hasAnyCapability() {
		fmt.Fprintln(os.Stderr, "the sweeper runs only as a workspace's user, without capabilities")
		os.Exit(2)
	}
	if err := unix.Kill(-1, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}
