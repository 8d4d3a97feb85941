package confine

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// The names the server's binary runs under as the launcher and the
// sweeper (argv[0]).
const (
	LauncherName = "fleetd-pane-launcher"
	SweeperName  = "fleetd-pane-sweeper"
)

// The launcher's file descriptors: the launch comes in on LaunchFD, a
// failure goes out on ErrorFD, which closes unwritten when the shell is
// exec'd.
const (
	LaunchFD = 3
	ErrorFD  = 4
)

// prSetNoNewPrivs is PR_SET_NO_NEW_PRIVS, which package syscall lacks.
const prSetNoNewPrivs = 38

func init() {
	if len(os.Args) == 0 {
		return
	}
	switch os.Args[0] {
	case LauncherName:
		runLauncher()
	case SweeperName:
		runSweeper()
	}
}

// Launch is what the launcher does.
type Launch struct {
	Path string   `json:"path"`
	Args []string `json:"args"`
	Dir  string   `json:"dir,omitempty"`
	Env  []string `json:"env"`
	// User, when set, is the workspace user the shell runs as.
	User *uint32 `json:"user,omitempty"`
	// HideProcesses mounts a /proc that shows the user only its own
	// processes; the launcher is in a mount namespace of its own.
	HideProcesses bool `json:"hideProcesses,omitempty"`
}

// runLauncher is the launcher's whole life: it never returns.
func runLauncher() {
	// no_new_privs is a thread's; the thread that sets it must exec.
	runtime.LockOSThread()
	report := os.NewFile(ErrorFD, "launch errors")
	fail := func(err error) {
		_, _ = io.WriteString(report, err.Error())
		os.Exit(127)
	}
	syscall.CloseOnExec(ErrorFD)
	in := os.NewFile(LaunchFD, "launch")
	var l Launch
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
func (l *Launch) confine() error {
	if l.HideProcesses {
		if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "hidepid=invisible"); err != nil {
			return fmt.Errorf("mounting a /proc that hides other users' processes (Linux 5.8 or later): %w", err)
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
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0); errno != 0 {
		return fmt.Errorf("setting no_new_privs: %w", errno)
	}
	return nil
}

// runSweeper is the sweeper's whole life: it never returns. Run as a
// workspace's user, it sends SIGKILL to every process that user may
// signal (kill(2) with pid -1), which are that user's alone. It refuses to
// run with any capability: as root, kill(-1) would end every process on
// the machine.
func runSweeper() {
	if os.Getuid() == 0 || os.Geteuid() == 0 || hasAnyCapability() {
		fmt.Fprintln(os.Stderr, "the sweeper runs only as a workspace's user, without capabilities")
		os.Exit(2)
	}
	if err := syscall.Kill(-1, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// hasAnyCapability reports whether this process holds any capability in
// its effective set, or cannot tell.
func hasAnyCapability() bool {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return true
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if hex, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			return err != nil || caps != 0
		}
	}
	return true
}
