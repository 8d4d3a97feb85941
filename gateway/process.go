package gateway

import (
	"context"
	"time"

	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/process"
	"github.com/fleetd/fleetd/gateway/toolerr"
)

// The process tools: thin handlers over package process, each behind the
// caller's RBAC verb on processes.

// processOwner keys a caller's processes: principals are unique per
// namespace.
func processOwner(p *identity.Principal) string { return p.Namespace + "/" + p.Key() }

// processView shows a process.
func processView(p *process.Process) ProcessView {
	s := p.Status()
	v := ProcessView{ProcessID: s.ID, Command: s.Command, WorkingDir: s.Dir, State: s.State, PID: s.PID, ExitCode: s.ExitCode, StartedAt: s.Started.UTC().Format(time.RFC3339)}
	if !s.Ended.IsZero() {
		v.EndedAt = s.Ended.UTC().Format(time.RFC3339)
	}
	return v
}

func (s *service) processRun(ctx context.Context, c *call, in ProcessRunInput) (*ProcessOutput, error) {
	if err := s.allow(ctx, c.who, identity.CreateProcesses); err != nil {
		return nil, err
	}
	p, err := s.procs.Run(processOwner(c.who), in.Command, in.WorkingDir)
	if err != nil {
		return nil, err
	}
	v := processView(p)
	return &ProcessOutput{Process: &v}, nil
}

func (s *service) processStatus(ctx context.Context, c *call, in ProcessStatusInput) (*ProcessStatusOutput, error) {
	if err := s.allow(ctx, c.who, identity.GetProcesses); err != nil {
		return nil, err
	}
	out := &ProcessStatusOutput{Processes: []ProcessView{}}
	if in.ProcessID != "" {
		p, err := s.procs.Get(processOwner(c.who), in.ProcessID)
		if err != nil {
			return nil, err
		}
		out.Processes = append(out.Processes, processView(p))
		return out, nil
	}
	for _, p := range s.procs.List(processOwner(c.who)) {
		out.Processes = append(out.Processes, processView(p))
	}
	return out, nil
}

func (s *service) processLogs(ctx context.Context, c *call, in ProcessLogsInput) (*ProcessLogsOutput, error) {
	if err := s.allow(ctx, c.who, identity.GetProcesses); err != nil {
		return nil, err
	}
	p, err := s.procs.Get(processOwner(c.who), in.ProcessID)
	if err != nil {
		return nil, err
	}
	n := process.OutputBytes
	if in.TailBytes != nil {
		if *in.TailBytes < 0 {
			return nil, toolerr.New(toolerr.InvalidArgument, "tailBytes must not be negative")
		}
		n = min(n, *in.TailBytes)
	}
	data, truncated := p.Output(n)
	return &ProcessLogsOutput{ProcessID: p.ID(), State: p.Status().State, Output: string(data), Truncated: truncated}, nil
}

func (s *service) processKill(ctx context.Context, c *call, in ProcessIDInput) (*ProcessOutput, error) {
	if err := s.allow(ctx, c.who, identity.DeleteProcesses); err != nil {
		return nil, err
	}
	p, err := s.procs.Get(processOwner(c.who), in.ProcessID)
	if err != nil {
		return nil, err
	}
	p.Kill(ctx)
	v := processView(p)
	return &ProcessOutput{Process: &v}, nil
}
