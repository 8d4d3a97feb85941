package devenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Process is a child process with its output in a log file. It dies with
// its parent (Pdeathsig), so a killed `fleetd dev` leaves nothing behind.
type Process struct {
	Name string
	Path string
	Args []string
	Env  []string
	// Log is the file stdout and stderr go to.
	Log string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts the process.
func (p *Process) Start() error {
	if err := os.MkdirAll(filepath.Dir(p.Log), 0o755); err != nil {
		return err
	}
	log, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.cmd = exec.Command(p.Path, p.Args...)
	p.cmd.Env = p.Env
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	p.done = make(chan struct{})
	go func() {
		p.err = p.cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed when the process has ended.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Err is how the process ended, once Exited is closed.
func (p *Process) Err() error { return p.err }

// Stop sends SIGTERM to the process group and SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Kill sends SIGKILL to the process group and waits for it to end.
func (p *Process) Kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// errPortTaken says a port the environment needs is in use.
var errPortTaken = errors.New("port taken")

// checkPort fails with a clear message when something listens on addr.
func checkPort(what, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%w: %s needs %s, which is in use (another `fleetd dev` running? pick another with the port flags): %v", errPortTaken, what, addr, err)
	}
	return ln.Close()
}

// waitFor polls check until it succeeds, the process dies, or ctx ends.
func waitFor(ctx context.Context, p *Process, what string, timeout time.Duration, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if last = check(); last == nil {
			return nil
		}
		select {
		case <-p.Exited():
			return fmt.Errorf("%s exited while starting (%v); see %s", p.Name, p.Err(), p.Log)
		case <-ctx.Done():
			return fmt.Errorf("%s not %s after %s: %v; see %s", p.Name, what, timeout, last, p.Log)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
