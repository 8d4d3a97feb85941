package gateway

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
)

// Limits of the process namespace.
const (
	// maxProcessArgs bounds a command line.
	maxProcessArgs = 256
	// processOutputBytes is how much output each process keeps.
	processOutputBytes = 256 << 10
	// maxRunningPerCaller bounds the processes one caller runs at once.
	maxRunningPerCaller = 16
	// maxKeptPerCaller bounds the processes (running or exited) one caller
	// sees; the oldest exited ones are forgotten first.
	maxKeptPerCaller = 64
	// processKillGrace is how long a process gets between SIGTERM and SIGKILL.
	processKillGrace = 3 * time.Second
)

// Process states.
const (
	processRunning = "running"
	processExited  = "exited"
)

// ProcessRunInput is the input of process_run.
type ProcessRunInput struct {
	Command    []string `json:"command" jsonschema:"the program and its arguments, run without a shell"`
	WorkingDir string   `json:"workingDir,omitempty" jsonschema:"absolute directory to run in; default: the gateway's"`
}

// ProcessIDInput names one process.
type ProcessIDInput struct {
	ProcessID string `json:"processId" jsonschema:"the id process_run returned"`
}

// ProcessStatusInput is the input of process_status.
type ProcessStatusInput struct {
	ProcessID string `json:"processId,omitempty" jsonschema:"one process; default: all of yours"`
}

// ProcessLogsInput is the input of process_logs.
type ProcessLogsInput struct {
	ProcessID string `json:"processId" jsonschema:"the id process_run returned"`
	TailBytes *int   `json:"tailBytes,omitempty" jsonschema:"how many of the last bytes to return; default: all kept"`
}

// ProcessView is a process as the process tools show it.
type ProcessView struct {
	ProcessID  string   `json:"processId" jsonschema:"the process id"`
	Command    []string `json:"command" jsonschema:"the program and its arguments"`
	WorkingDir string   `json:"workingDir,omitempty" jsonschema:"the directory it runs in"`
	State      string   `json:"state" jsonschema:"running or exited"`
	PID        int      `json:"pid,omitempty" jsonschema:"the operating-system process id"`
	ExitCode   *int     `json:"exitCode,omitempty" jsonschema:"for exited processes; -1 when killed by a signal"`
	StartedAt  string   `json:"startedAt" jsonschema:"when it started (RFC 3339)"`
	EndedAt    string   `json:"endedAt,omitempty" jsonschema:"when it ended (RFC 3339)"`
}

// ProcessOutput is the result of process_run and process_kill.
type ProcessOutput struct {
	failure
	Process *ProcessView `json:"process,omitempty" jsonschema:"the process"`
}

// ProcessStatusOutput is the result of process_status.
type ProcessStatusOutput struct {
	failure
	Processes []ProcessView `json:"processes" jsonschema:"your processes, oldest first"`
}

// ProcessLogsOutput is the result of process_logs.
type ProcessLogsOutput struct {
	failure
	ProcessID string `json:"processId,omitempty" jsonschema:"the process id"`
	State     string `json:"state,omitempty" jsonschema:"running or exited"`
	Output    string `json:"output" jsonschema:"the kept output, stdout and stderr interleaved"`
	Truncated bool   `json:"truncated,omitempty" jsonschema:"older output was dropped"`
}

// processTable holds the processes the gateway runs, by owner. It is the
// one piece of gateway state that a restart loses, with the processes
// themselves.
type processTable struct {
	mu      sync.Mutex
	byOwner map[string][]*process
}

// process is one command run for one caller.
type process struct {
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

func newProcessTable() *processTable { return &processTable{byOwner: make(map[string][]*process)} }

// owner keys a caller's processes: principals are unique per namespace.
func owner(p *Principal) string { return p.Namespace + "/" + p.key() }

func (p *process) view() ProcessView {
	v := ProcessView{ProcessID: p.id, Command: p.command, WorkingDir: p.dir, State: processRunning, StartedAt: p.started.UTC().Format(time.RFC3339)}
	if p.cmd.Process != nil {
		v.PID = p.cmd.Process.Pid
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ended.IsZero() {
		code := p.exitCode
		v.State, v.ExitCode, v.EndedAt = processExited, &code, p.ended.UTC().Format(time.RFC3339)
	}
	return v
}

func (p *process) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// processEnv is the whole environment of a process: enough to find programs,
// and nothing of the gateway's own (never a credential or ANTHROPIC_*).
func processEnv() []string {
	env := []string{"LANG=C.UTF-8", "TERM=dumb"}
	if path := os.Getenv("PATH"); path != "" {
		env = append(env, "PATH="+path)
	}
	if home, err := os.UserHomeDir(); err == nil {
		env = append(env, "HOME="+home)
	}
	return env
}

// run starts a command for its owner.
func (t *processTable) run(who string, command []string, dir string) (*process, error) {
	switch {
	case len(command) == 0 || command[0] == "":
		return nil, errorf(CodeInvalidArgument, "command must name a program")
	case len(command) > maxProcessArgs:
		return nil, errorf(CodeInvalidArgument, "command has %d arguments; at most %d are allowed", len(command), maxProcessArgs)
	case dir != "" && !filepath.IsAbs(dir):
		return nil, errorf(CodeInvalidArgument, "workingDir must be absolute, got %q", dir)
	}
	for _, a := range command {
		if slices.Contains([]byte(a), 0) {
			return nil, errorf(CodeInvalidArgument, "command arguments must not contain NUL bytes")
		}
	}
	id := make([]byte, 6)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	p := &process{id: "p-" + hex.EncodeToString(id), command: slices.Clone(command), dir: dir, out: newRing(processOutputBytes), done: make(chan struct{})}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, processEnv(), p.out, p.out
	// A group of its own, so that killing it kills what it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd = cmd

	t.mu.Lock()
	defer t.mu.Unlock()
	mine := t.byOwner[who]
	running := 0
	for _, q := range mine {
		if q.running() {
			running++
		}
	}
	if running >= maxRunningPerCaller {
		return nil, errorf(CodeConflict, "you already run %d processes, the most allowed; kill one first", running)
	}
	if err := cmd.Start(); err != nil {
		return nil, errorf(CodeInvalidArgument, "starting %s: %v", command[0], err)
	}
	p.started = time.Now()
	go p.wait()
	mine = append(mine, p)
	for len(mine) > maxKeptPerCaller {
		i := slices.IndexFunc(mine, func(q *process) bool { return !q.running() })
		if i < 0 {
			break
		}
		mine = slices.Delete(mine, i, i+1)
	}
	t.byOwner[who] = mine
	return p, nil
}

// wait records how the process ended.
func (p *process) wait() {
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

// get returns the owner's process id.
func (t *processTable) get(who, id string) (*process, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.byOwner[who] {
		if p.id == id {
			return p, nil
		}
	}
	for _, ps := range t.byOwner {
		if slices.ContainsFunc(ps, func(p *process) bool { return p.id == id }) {
			return nil, errorf(CodeForbidden, "process %q belongs to another caller; only the caller that ran it may see or stop it", id)
		}
	}
	return nil, errorf(CodeNotFound, "you have no process %q", id)
}

// list returns the owner's processes, oldest first.
func (t *processTable) list(who string) []*process {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.byOwner[who])
}

// kill stops a process: SIGTERM to its group, SIGKILL after the grace.
func (p *process) kill(ctx context.Context) {
	if !p.running() {
		return
	}
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	timer := time.NewTimer(processKillGrace)
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

// killAll stops every process, when the gateway stops.
func (t *processTable) killAll(ctx context.Context) {
	t.mu.Lock()
	var all []*process
	for _, ps := range t.byOwner {
		all = append(all, ps...)
	}
	t.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range all {
		wg.Go(func() { p.kill(ctx) })
	}
	wg.Wait()
}

func (g *Gateway) processRun(ctx context.Context, c *call, in ProcessRunInput) (*ProcessOutput, error) {
	if err := g.allow(ctx, c.who, CreateProcesses); err != nil {
		return nil, err
	}
	p, err := g.procs.run(owner(c.who), in.Command, in.WorkingDir)
	if err != nil {
		return nil, err
	}
	v := p.view()
	return &ProcessOutput{Process: &v}, nil
}

func (g *Gateway) processStatus(ctx context.Context, c *call, in ProcessStatusInput) (*ProcessStatusOutput, error) {
	if err := g.allow(ctx, c.who, GetProcesses); err != nil {
		return nil, err
	}
	out := &ProcessStatusOutput{Processes: []ProcessView{}}
	if in.ProcessID != "" {
		p, err := g.procs.get(owner(c.who), in.ProcessID)
		if err != nil {
			return nil, err
		}
		out.Processes = append(out.Processes, p.view())
		return out, nil
	}
	for _, p := range g.procs.list(owner(c.who)) {
		out.Processes = append(out.Processes, p.view())
	}
	return out, nil
}

func (g *Gateway) processLogs(ctx context.Context, c *call, in ProcessLogsInput) (*ProcessLogsOutput, error) {
	if err := g.allow(ctx, c.who, GetProcesses); err != nil {
		return nil, err
	}
	p, err := g.procs.get(owner(c.who), in.ProcessID)
	if err != nil {
		return nil, err
	}
	n := processOutputBytes
	if in.TailBytes != nil {
		if *in.TailBytes < 0 {
			return nil, errorf(CodeInvalidArgument, "tailBytes must not be negative")
		}
		n = min(n, *in.TailBytes)
	}
	data, truncated := p.out.tail(n)
	return &ProcessLogsOutput{ProcessID: p.id, State: p.view().State, Output: string(data), Truncated: truncated}, nil
}

func (g *Gateway) processKill(ctx context.Context, c *call, in ProcessIDInput) (*ProcessOutput, error) {
	if err := g.allow(ctx, c.who, DeleteProcesses); err != nil {
		return nil, err
	}
	p, err := g.procs.get(owner(c.who), in.ProcessID)
	if err != nil {
		return nil, err
	}
	p.kill(ctx)
	v := p.view()
	return &ProcessOutput{Process: &v}, nil
}

// ring keeps the last bytes written to it.
type ring struct {
	mu    sync.Mutex
	buf   []byte
	next  int
	total int64
}

func newRing(size int) *ring { return &ring{buf: make([]byte, size)} }

// Write implements io.Writer; it never fails.
func (r *ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(p)
	r.total += int64(n)
	if len(p) > len(r.buf) {
		p = p[len(p)-len(r.buf):]
	}
	for len(p) > 0 {
		c := copy(r.buf[r.next:], p)
		p = p[c:]
		r.next = (r.next + c) % len(r.buf)
	}
	return n, nil
}

// tail returns the last n bytes written (at most the ring's size), and
// whether older output exists that it does not return.
func (r *ring) tail(n int) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var kept []byte
	if r.total >= int64(len(r.buf)) {
		kept = append(append(make([]byte, 0, len(r.buf)), r.buf[r.next:]...), r.buf[:r.next]...)
	} else {
		kept = append([]byte{}, r.buf[:r.next]...)
	}
	if n < len(kept) {
		kept = kept[len(kept)-n:]
	}
	return kept, r.total > int64(len(kept))
}
