// Package process runs the commands of the gateway's process tools: one
// table of processes per gateway, each process owned by the caller that ran
// it, with its recent output kept in a ring. It is the one piece of gateway
// state that a restart loses, with the processes themselves.
package process

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/fleetd/fleetd/gateway/toolerr"
)

// Limits of the process namespace.
const (
	// MaxArgs bounds a command line.
	MaxArgs = 256
	// OutputBytes is how much output each process keeps.
	OutputBytes = 256 << 10
	// maxRunningPerOwner bounds the processes one owner runs at once.
	maxRunningPerOwner = 16
	// maxKeptPerOwner bounds the processes (running or exited) one owner
	// sees; the oldest exited ones are forgotten first.
	maxKeptPerOwner = 64
	// killGrace is how long a process gets between SIGTERM and SIGKILL.
	killGrace = 3 * time.Second
)

// States of a process.
const (
	Running = "running"
	Exited  = "exited"
)

// Table holds the processes the gateway runs, by owner.
type Table struct {
	mu      sync.Mutex
	byOwner map[string][]*Process
}

// NewTable returns an empty Table.
func NewTable() *Table { return &Table{byOwner: make(map[string][]*Process)} }

// Process is one command run for one owner.
type Process struct {
	id      string
	command []string
	dir     string
	cmd     *exec.Cmd
	out     *ring
	started time.Time
	done    chan struct{}

	mu       sync.Mutex
	ended    time.Time
	exitCode int
}

// Status is what a process is doing: running, or exited with a code.
type Status struct {
	ID       string
	Command  []string
	Dir      string
	State    string
	PID      int
	ExitCode *int
	Started  time.Time
	// Ended is zero while it runs.
	Ended time.Time
}

// Status says how the process is.
func (p *Process) Status() Status {
	s := Status{ID: p.id, Command: p.command, Dir: p.dir, State: Running, Started: p.started}
	if p.cmd.Process != nil {
		s.PID = p.cmd.Process.Pid
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ended.IsZero() {
		code := p.exitCode
		s.State, s.ExitCode, s.Ended = Exited, &code, p.ended
	}
	return s
}

// ID is the process's id, as process_run returned it.
func (p *Process) ID() string { return p.id }

// Output is the last n bytes of the process's output (at most OutputBytes),
// and whether older output was dropped.
func (p *Process) Output(n int) ([]byte, bool) { return p.out.tail(n) }

func (p *Process) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// env is the whole environment of a process: enough to find programs, and
// nothing of the gateway's own (never a credential or ANTHROPIC_*).
func env() []string {
	env := []string{"LANG=C.UTF-8", "TERM=dumb"}
	if path := os.Getenv("PATH"); path != "" {
		env = append(env, "PATH="+path)
	}
	if home, err := os.UserHomeDir(); err == nil {
		env = append(env, "HOME="+home)
	}
	return env
}

// Run starts a command for its owner, without a shell.
func (t *Table) Run(owner string, command []string, dir string) (*Process, error) {
	switch {
	case len(command) == 0 || command[0] == "":
		return nil, toolerr.New(toolerr.InvalidArgument, "command must name a program")
	case len(command) > MaxArgs:
		return nil, toolerr.New(toolerr.InvalidArgument, "command has %d arguments; at most %d are allowed", len(command), MaxArgs)
	case dir != "" && !filepath.IsAbs(dir):
		return nil, toolerr.New(toolerr.InvalidArgument, "workingDir must be absolute, got %q", dir)
	}
	for _, a := range command {
		if slices.Contains([]byte(a), 0) {
			return nil, toolerr.New(toolerr.InvalidArgument, "command arguments must not contain NUL bytes")
		}
	}
	id := make([]byte, 6)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	p := &Process{id: "p-" + hex.EncodeToString(id), command: slices.Clone(command), dir: dir, out: newRing(OutputBytes), done: make(chan struct{})}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env(), p.out, p.out
	// A group of its own, so that killing it kills what it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd = cmd

	t.mu.Lock()
	defer t.mu.Unlock()
	mine := t.byOwner[owner]
	running := 0
	for _, q := range mine {
		if q.running() {
			running++
		}
	}
	if running >= maxRunningPerOwner {
		return nil, toolerr.New(toolerr.Conflict, "you already run %d processes, the most allowed; kill one first", running)
	}
	if err := cmd.Start(); err != nil {
		return nil, toolerr.New(toolerr.InvalidArgument, "starting %s: %v", command[0], err)
	}
	p.started = time.Now()
	go p.wait()
	mine = append(mine, p)
	for len(mine) > maxKeptPerOwner {
		i := slices.IndexFunc(mine, func(q *Process) bool { return !q.running() })
		if i < 0 {
			break
		}
		mine = slices.Delete(mine, i, i+1)
	}
	t.byOwner[owner] = mine
	return p, nil
}

// wait records how the process ended.
func (p *Process) wait() {
	err := p.cmd.Wait()
	code := 0
	if err != nil {
		code = -1
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		}
	}
	p.mu.Lock()
	p.ended, p.exitCode = time.Now(), code
	p.mu.Unlock()
	close(p.done)
}

// Get returns the owner's process id: not_found when the owner has none
// of that id, forbidden when another owner has it.
func (t *Table) Get(owner, id string) (*Process, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.byOwner[owner] {
		if p.id == id {
			return p, nil
		}
	}
	for _, ps := range t.byOwner {
		if slices.ContainsFunc(ps, func(p *Process) bool { return p.id == id }) {
			return nil, toolerr.New(toolerr.Forbidden, "process %q belongs to another caller; only the caller that ran it may see or stop it", id)
		}
	}
	return nil, toolerr.New(toolerr.NotFound, "you have no process %q", id)
}

// List returns the owner's processes, oldest first.
func (t *Table) List(owner string) []*Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.byOwner[owner])
}

// Kill stops a process: SIGTERM to its group, SIGKILL after the grace.
func (p *Process) Kill(ctx context.Context) {
	if !p.running() {
		return
	}
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	timer := time.NewTimer(killGrace)
	defer timer.Stop()
	select {
	case <-p.done:
		return
	case <-timer.C:
	case <-ctx.Done():
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(time.Second):
	}
}

// KillAll stops every process, when the gateway stops.
func (t *Table) KillAll(ctx context.Context) {
	t.mu.Lock()
	var all []*Process
	for _, ps := range t.byOwner {
		all = append(all, ps...)
	}
	t.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range all {
		wg.Go(func() { p.Kill(ctx) })
	}
	wg.Wait()
}
