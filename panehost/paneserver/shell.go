package paneserver

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
)

const (
	// inputWriteTimeout bounds a write into a pane whose program stopped
	// reading its input.
	inputWriteTimeout = 5 * time.Second
	// exitGrace is how long terminate waits for the shell to die before it
	// sweeps the session for stragglers a second time.
	exitGrace = 2 * time.Second
)

// shellSpec says how to start a pane's shell.
type shellSpec struct {
	path       string
	dir        string
	env        []string
	cols, rows int
	scrollback int
	// history is shown before the shell's own output.
	history []byte
	// user runs the shell as a Unix user of its own; nil runs it as the
	// server.
	user *workspaceUser
	// hideProcesses shows the shell only its own user's processes.
	hideProcesses bool
	// view, when set, starts the shell in a mount namespace of its own
	// that shows it (identity.go).
	view *paneView
	// outputRate bounds the output bytes taken into the terminal each
	// second, burst more at once; not positive: no bound.
	outputRate, burst int
}

// shell is a pane's process tree: a shell on a pty, leading a session of its
// own, whose output feeds the pane's terminal.
type shell struct {
	cmd    *exec.Cmd
	pid    int
	ptmx   *os.File
	term   *terminal
	exited chan struct{}
	// stopped is closed when the shell is terminated: an output pump
	// held back by the rate stops waiting.
	stopped chan struct{}
	// outputRate and burst hold back the output pump (shellSpec).
	outputRate, burst int

	inputMu  sync.Mutex
	stopOnce sync.Once
	pumps    sync.WaitGroup
}

// startShell starts the shell; onExit runs once it has exited.
func startShell(spec shellSpec, onExit func()) (*shell, error) {
	cmd := exec.Command(spec.path)
	cmd.Dir = spec.dir
	cmd.Env = spec.env
	ptmx, err := startOnPty(cmd, spec)
	if err != nil {
		return nil, fmt.Errorf("starting shell %s in %s: %w", spec.path, spec.dir, err)
	}
	sh := &shell{
		cmd:    cmd,
		pid:    cmd.Process.Pid,
		ptmx:   ptmx,
		term:   newTerminal(spec.cols, spec.rows, spec.scrollback),
		exited: make(chan struct{}),

		stopped:    make(chan struct{}),
		outputRate: spec.outputRate,
		burst:      max(spec.burst, 1),
	}
	if len(spec.history) > 0 {
		sh.term.feed(spec.history)
	}
	sh.pumps.Add(2)
	go sh.pumpOutput()
	go sh.pumpReplies()
	go func() {
		_ = cmd.Wait()
		close(sh.exited)
		onExit()
	}()
	return sh, nil
}

// startOnPty starts cmd as a session leader with a new pty as its
// controlling terminal (its process group id is its pid), confined
// (startConfined): as the workspace's user when it has one, who then owns
// the terminal too, as a login does.
func startOnPty(cmd *exec.Cmd, spec shellSpec) (*os.File, error) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		return nil, err
	}
	defer tty.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Cols: uint16(spec.cols), Rows: uint16(spec.rows)}); err != nil {
		_ = ptmx.Close()
		return nil, err
	}
	if u := spec.user; u != nil {
		if err := tty.Chown(int(u.uid), int(u.uid)); err != nil {
			_ = ptmx.Close()
			return nil, fmt.Errorf("giving the terminal to user %d: %w", u.uid, err)
		}
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	start := func() error { return startConfined(cmd, spec.user, spec.hideProcesses) }
	if spec.view != nil {
		// The launcher is born in the pane's view, and makes its own
		// namespace (for /proc) as a copy of it.
		confined := start
		start = func() error { return inNamespace(spec.view, confined) }
	}
	if err := start(); err != nil {
		_ = ptmx.Close()
		return nil, err
	}
	return ptmx, nil
}

// pumpOutput feeds the program's output to the terminal, no faster than
// the pane's output rate: past it the pump waits before it reads on, the
// pty's buffer fills and the program's writes block until the pump
// catches up, so a program that floods its terminal slows down instead of
// taking the server's processor from every other pane. Nothing is
// dropped, and the program is never stopped.
func (sh *shell) pumpOutput() {
	defer sh.pumps.Done()
	buf := make([]byte, 32<<10)
	if sh.outputRate > 0 {
		buf = buf[:min(len(buf), sh.burst)]
	}
	budget, at := float64(sh.burst), time.Now()
	for {
		n, err := sh.ptmx.Read(buf)
		if n > 0 {
			sh.term.feed(buf[:n])
		}
		if err != nil {
			return
		}
		if sh.outputRate <= 0 {
			continue
		}
		now := time.Now()
		budget = min(budget+now.Sub(at).Seconds()*float64(sh.outputRate), float64(sh.burst)) - float64(n)
		at = now
		if budget < 0 {
			wait := time.NewTimer(time.Duration(-budget / float64(sh.outputRate) * float64(time.Second)))
			select {
			case <-wait.C:
			case <-sh.stopped:
				wait.Stop()
			}
		}
	}
}

// pumpReplies forwards the emulator's answers to the program's queries, as a
// real terminal would.
func (sh *shell) pumpReplies() {
	defer sh.pumps.Done()
	buf := make([]byte, 1024)
	for {
		n, err := sh.term.replies().Read(buf)
		if n > 0 {
			_ = sh.write(string(buf[:n]))
		}
		if err != nil {
			return
		}
	}
}

// write types input into the pane. One write is never interleaved with another.
func (sh *shell) write(input string) error {
	if input == "" {
		return nil
	}
	sh.inputMu.Lock()
	defer sh.inputMu.Unlock()
	_ = sh.ptmx.SetWriteDeadline(time.Now().Add(inputWriteTimeout))
	if _, err := io.WriteString(sh.ptmx, input); err != nil {
		return fmt.Errorf("writing to pane input: %w", err)
	}
	return nil
}

// idleShell reports whether the pane's shell waits at its prompt: it is the
// foreground process group and still a shell (not a program it exec'd).
func (sh *shell) idleShell() (bool, error) {
	pgid, err := foregroundProcessGroup(sh.ptmx)
	if err != nil {
		return false, fmt.Errorf("reading foreground process group: %w", err)
	}
	return pgid == sh.pid && knownShells[processComm(sh.pid)], nil
}

// foreground samples the pane's foreground process group and the command
// name of its leader. When either differs from the last sample, it also
// says which known agent the leader is ("" for none).
func (sh *shell) foreground(lastPgid int, lastComm string) (pgid int, comm, agent string, err error) {
	pgid, err = foregroundProcessGroup(sh.ptmx)
	if err != nil {
		return 0, "", "", fmt.Errorf("reading foreground process group: %w", err)
	}
	comm = processComm(pgid)
	if pgid == lastPgid && comm == lastComm {
		return pgid, comm, "", nil
	}
	if argv, c, env, ok := processIdentity(pgid); ok {
		agent = identifyProcess(argv, c, env)
	}
	return pgid, comm, agent, nil
}

// cwd returns the shell's working directory.
func (sh *shell) cwd() (string, bool) {
	return processCwd(sh.pid)
}

// terminate kills every process of the pane's session and releases the pty.
// It is safe to call more than once and from the exit path.
func (sh *shell) terminate() {
	sh.stopOnce.Do(func() {
		close(sh.stopped)
		killSession(sh.pid)
		select {
		case <-sh.exited:
		case <-time.After(exitGrace):
		}
		// A job may have forked between the first sweep and the shell's death.
		killSession(sh.pid)
		_ = sh.ptmx.Close()
		sh.term.close()
		sh.pumps.Wait()
	})
}
