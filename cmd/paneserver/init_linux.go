package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// The pane server runs whatever its panes run, and a pane's program that
// forks and exits leaves its children to the nearest reaper: the PID 1 of
// the container, which is the pane server itself. os/exec waits for the
// shells it started by their pids, and a reaper that waited for any child
// (wait4(-1)) in the same process would take those exit statuses from it.
// So the pane server does not reap in its own process: as PID 1, or asked
// to be a child subreaper, it becomes a small init that starts the real
// server as its only child, reaps every process handed to it, forwards
// signals to the server, and exits as the server does.

// forwardedSignals are passed on to the server; the rest keep their
// default meaning for the init.
var forwardedSignals = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// runInit starts this binary again with args as the server and reaps
// until it exits, with its exit code. Where it is not PID 1 it first
// makes itself a child subreaper, so orphans of the server's panes come
// to it rather than to the machine's init.
func runInit(args []string) (int, error) {
	if os.Getpid() != 1 {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return 0, fmt.Errorf("becoming a child subreaper: %w", err)
		}
	}
	// Notified before the fork, so that no SIGCHLD and no signal to pass
	// on is lost.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGCHLD}, forwardedSignals...)...)
	defer signal.Stop(sigs)

	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("finding this binary: %w", err)
	}
	// syscall.ForkExec rather than os/exec: the init reaps the server with
	// every other child, so nothing else may wait for it.
	server, err := syscall.ForkExec(exe, append([]string{os.Args[0]}, args...), &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{os.Stdin.Fd(), os.Stdout.Fd(), os.Stderr.Fd()},
	})
	if err != nil {
		return 0, fmt.Errorf("starting the pane server: %w", err)
	}
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			_ = unix.Kill(server, sig.(syscall.Signal))
			continue
		}
		if code, done := reap(server); done {
			return code, nil
		}
	}
	return 0, errors.New("signals stopped")
}

// reap collects every child that has exited. done says the server was one
// of them, and code is its exit code (128 plus the signal that killed it).
func reap(server int) (code int, done bool) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return code, done
		}
		if pid != server {
			continue
		}
		done = true
		switch {
		case ws.Exited():
			code = ws.ExitStatus()
		case ws.Signaled():
			code = 128 + int(ws.Signal())
		}
	}
}
