package paneserver

import (
	"context"
	"time"

	"github.com/fleetd/fleetd/herdr"
)

// typed is a result with nothing but its type, such as "ok".
type typed struct {
	Type string `json:"type"`
}

var okResult = typed{Type: herdr.ResultOK}

type pongResult struct {
	Type string `json:"type"`
	herdr.Pong
}

type workspaceCreatedResult struct {
	Type string `json:"type"`
	*herdr.WorkspaceCreated
}

type tabCreatedResult struct {
	Type string `json:"type"`
	*herdr.TabCreated
}

type agentStartedResult struct {
	Type string `json:"type"`
	*herdr.AgentStarted
}

type agentResult struct {
	Type  string           `json:"type"`
	Agent *herdr.AgentInfo `json:"agent"`
}

type agentListResult struct {
	Type   string            `json:"type"`
	Agents []herdr.AgentInfo `json:"agents"`
}

type paneReadResult struct {
	Type string          `json:"type"`
	Read *herdr.PaneRead `json:"read"`
}

type sessionSnapshotResult struct {
	Type     string                 `json:"type"`
	Snapshot *herdr.SessionSnapshot `json:"snapshot"`
}

func (s *Server) ping(context.Context, herdr.EmptyParams) (any, *herdr.Error) {
	return pongResult{Type: herdr.ResultPong, Pong: herdr.Pong{
		Version:      s.opts.Version,
		Protocol:     s.opts.Protocol,
		Capabilities: &herdr.ServerCapabilities{},
	}}, nil
}

func (s *Server) sessionSnapshot(context.Context, herdr.EmptyParams) (any, *herdr.Error) {
	return sessionSnapshotResult{Type: herdr.ResultSessionSnapshot, Snapshot: s.sess.snapshot()}, nil
}

func (s *Server) workspaceCreate(_ context.Context, p herdr.WorkspaceCreateParams) (any, *herdr.Error) {
	created, err := s.sess.createWorkspace(p)
	if err != nil {
		return nil, err
	}
	return workspaceCreatedResult{Type: herdr.ResultWorkspaceCreated, WorkspaceCreated: created}, nil
}

func (s *Server) workspaceClose(_ context.Context, p herdr.WorkspaceTarget) (any, *herdr.Error) {
	if err := s.sess.closeWorkspace(p.WorkspaceID); err != nil {
		return nil, err
	}
	return okResult, nil
}

type workspaceInfoResult struct {
	Type      string              `json:"type"`
	Workspace herdr.WorkspaceInfo `json:"workspace"`
}

func (s *Server) workspaceRename(_ context.Context, p herdr.WorkspaceRenameParams) (any, *herdr.Error) {
	info, err := s.sess.renameWorkspace(p.WorkspaceID, p.Label)
	if err != nil {
		return nil, err
	}
	return workspaceInfoResult{Type: herdr.ResultWorkspaceInfo, Workspace: info}, nil
}

func (s *Server) agentRename(_ context.Context, p herdr.AgentRenameParams) (any, *herdr.Error) {
	agent, err := s.sess.renameAgent(p.Target, p.Name)
	if err != nil {
		return nil, err
	}
	return agentResult{Type: herdr.ResultAgentInfo, Agent: agent}, nil
}

func (s *Server) tabCreate(_ context.Context, p herdr.TabCreateParams) (any, *herdr.Error) {
	created, err := s.sess.createTab(p)
	if err != nil {
		return nil, err
	}
	return tabCreatedResult{Type: herdr.ResultTabCreated, TabCreated: created}, nil
}

func (s *Server) agentStart(_ context.Context, p herdr.AgentStartParams) (any, *herdr.Error) {
	started, err := s.sess.startAgent(p)
	if err != nil {
		return nil, err
	}
	return agentStartedResult{Type: herdr.ResultAgentStarted, AgentStarted: started}, nil
}

func (s *Server) agentGet(_ context.Context, p herdr.AgentTarget) (any, *herdr.Error) {
	agent, err := s.sess.agent(p.Target)
	if err != nil {
		return nil, err
	}
	return agentResult{Type: herdr.ResultAgentInfo, Agent: agent}, nil
}

func (s *Server) agentList(context.Context, herdr.EmptyParams) (any, *herdr.Error) {
	return agentListResult{Type: herdr.ResultAgentList, Agents: s.sess.agents()}, nil
}

func (s *Server) agentRead(_ context.Context, p herdr.ReadParams) (any, *herdr.Error) {
	agent, err := s.sess.agent(p.Target)
	if err != nil {
		return nil, err
	}
	return s.read(agent.PaneID, p)
}

func (s *Server) paneRead(_ context.Context, p herdr.ReadParams) (any, *herdr.Error) {
	return s.read(p.PaneID, p)
}

func (s *Server) read(paneID string, p herdr.ReadParams) (any, *herdr.Error) {
	read, err := s.sess.readPane(paneID, p.Source, p.Lines)
	if err != nil {
		return nil, err
	}
	return paneReadResult{Type: herdr.ResultPaneRead, Read: read}, nil
}

// agentPrompt types the prompt and answers; Enter follows after the submit
// delay, as herdr sends it: an agent that reads a burst of input as a paste
// would otherwise take the Enter as part of it. With wait, it holds until
// the agent reaches a wanted status after the prompt, and gives up early
// with agent_prompt_stalled when an agent that was not working shows no
// change at all.
func (s *Server) agentPrompt(ctx context.Context, p herdr.AgentPromptParams) (any, *herdr.Error) {
	target, err := s.sess.promptTargetFor(p.Target, p.Text)
	if err != nil {
		return nil, err
	}
	if err := target.sh.write(encodeText(p.Text, target.sh.term.modes())); err != nil {
		return nil, errorf(herdr.CodeAgentPromptFailed, "%v", err)
	}
	s.wg.Go(func() {
		select {
		case <-time.After(s.opts.PromptSubmitDelay):
			_ = target.sh.write(enterKey)
		case <-s.ctx.Done():
		}
	})

	if p.Wait == nil {
		agent, err := s.sess.agent(p.Target)
		if err != nil {
			return nil, err
		}
		return agentResult{Type: herdr.ResultAgentPrompted, Agent: agent}, nil
	}
	timeout := timeoutAfter(p.Wait.TimeoutMS)
	if target.status != herdr.AgentStatusWorking {
		stall := promptStallLimit
		if ms := p.Wait.TimeoutMS; ms != nil && time.Duration(*ms)*time.Millisecond <= stall {
			stall = time.Duration(*ms) * time.Millisecond
		}
		any := []herdr.AgentStatus{herdr.AgentStatusIdle, herdr.AgentStatusDone, herdr.AgentStatusWorking, herdr.AgentStatusBlocked, herdr.AgentStatusUnknown}
		_, answered, err := s.sess.waitAgent(ctx, agentWait{target: p.Target, until: any, afterSeq: &target.baseline, terminalID: target.terminalID}, time.After(stall))
		switch {
		case !answered:
			return nil, nil
		case err != nil && err.Code == herdr.CodeTimeout && stall == promptStallLimit:
			return nil, errorf(herdr.CodeAgentPromptStalled, "agent prompt produced no observed state change within %d ms; status is %s and state_change_seq remained %d",
				stall.Milliseconds(), target.status, target.baseline)
		case err != nil:
			return nil, err
		}
	}
	agent, answered, err := s.sess.waitAgent(ctx, agentWait{
		target:     p.Target,
		until:      p.Wait.Until,
		afterSeq:   &target.baseline,
		terminalID: target.terminalID,
	}, timeout)
	if !answered {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return agentResult{Type: herdr.ResultAgentPrompted, Agent: agent}, nil
}

func (s *Server) agentWaitCall(ctx context.Context, p herdr.AgentWaitParams) (any, *herdr.Error) {
	agent, answered, err := s.sess.waitAgent(ctx, agentWait{target: p.Target, until: p.Until}, timeoutAfter(p.TimeoutMS))
	if !answered {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return agentResult{Type: herdr.ResultAgentInfo, Agent: agent}, nil
}

// timeoutAfter fires after ms milliseconds, or never when ms is nil.
func timeoutAfter(ms *uint64) <-chan time.Time {
	if ms == nil {
		return nil
	}
	return time.After(time.Duration(min(*ms, uint64(time.Duration(1<<62)/time.Millisecond))) * time.Millisecond)
}

func (s *Server) paneSendInput(_ context.Context, p herdr.PaneSendInputParams) (any, *herdr.Error) {
	if err := s.sess.sendInput(p.PaneID, p.Text, p.Keys); err != nil {
		return nil, err
	}
	return okResult, nil
}

func (s *Server) paneSendKeys(_ context.Context, p herdr.PaneSendKeysParams) (any, *herdr.Error) {
	if err := s.sess.sendInput(p.PaneID, "", p.Keys); err != nil {
		return nil, err
	}
	return okResult, nil
}

// maxReportAhead is how far in the future a report's seq may lie. fleetd's
// reporters number their reports by the time in microseconds; one from
// minutes ahead would have every honest report after it dropped as stale.
const maxReportAhead = 10 * time.Second

func (s *Server) paneReportAgent(_ context.Context, p herdr.PaneReportAgentParams) (any, *herdr.Error) {
	if p.Seq != nil && *p.Seq > uint64(time.Now().Add(maxReportAhead).UnixMicro()) {
		return nil, errorf(herdr.CodeInvalidParams, "seq %d is from the future (it would be %s from now, in microseconds since the epoch); reports are numbered by the time they are made",
			*p.Seq, time.Until(time.UnixMicro(int64(*p.Seq))).Round(time.Second))
	}
	if err := s.sess.reportAgent(p); err != nil {
		return nil, err
	}
	return okResult, nil
}

func (s *Server) paneReleaseAgent(_ context.Context, p herdr.PaneReleaseAgentParams) (any, *herdr.Error) {
	if err := s.sess.releaseAgent(p); err != nil {
		return nil, err
	}
	return okResult, nil
}

func (s *Server) paneClearAgentAuthority(_ context.Context, p herdr.PaneClearAgentAuthorityParams) (any, *herdr.Error) {
	if err := s.sess.clearAgentAuthority(p); err != nil {
		return nil, err
	}
	return okResult, nil
}

func (s *Server) paneClose(_ context.Context, p herdr.PaneTarget) (any, *herdr.Error) {
	if err := s.sess.closePane(p.PaneID); err != nil {
		return nil, err
	}
	return okResult, nil
}
