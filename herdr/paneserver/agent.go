package paneserver

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/fleetd/fleetd/herdr"
)

const (
	defaultAgentStartTimeout = 30 * time.Second
	// agentStartSettle is herdr's settle delay: a started agent only counts
	// as interactive once it has been the foreground program this long, and
	// a start timeout must exceed it.
	agentStartSettle       = 3 * time.Second
	maxAgentStartTimeout   = 300 * time.Second
	invalidAgentNameReason = "agent name must start with a lowercase letter and contain only lowercase letters, digits, '-' or '_' (1-32 characters)"
)

var agentNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// agentAliases maps every name herdr accepts for an agent kind to its label.
var agentAliases = map[string]string{
	"pi": "pi", "claude": "claude", "claude-code": "claude", "codex": "codex",
	"gemini": "gemini", "cursor": "cursor", "cursor-agent": "cursor",
	"devin": "devin", "devin-cli": "devin", "agy": "agy", "antigravity": "agy",
	"antigravity-cli": "agy", "cline": "cline", "omp": "omp",
	"mastracode": "mastracode", "mastra-code": "mastracode",
	"opencode": "opencode", "opencode2": "opencode", "open-code": "opencode",
	"copilot": "copilot", "github-copilot": "copilot", "ghcs": "copilot",
	"kimi": "kimi", "kimi-code": "kimi", "kiro": "kiro", "kiro-cli": "kiro",
	"droid": "droid", "amp": "amp", "amp-local": "amp", "grok": "grok",
	"grok-build": "grok", "hermes": "hermes", "hermes-agent": "hermes",
	"kilo": "kilo", "kilo-code": "kilo", "qodercli": "qodercli",
	"qoder": "qodercli", "maki": "maki",
}

// agentExecutables lists the labels whose executable is not named after them.
var agentExecutables = map[string]string{
	"cursor": "cursor-agent",
	"kiro":   "kiro-cli",
}

// agentLabel returns the label of a known agent kind.
func agentLabel(kind string) (string, bool) {
	label, ok := agentAliases[strings.ToLower(strings.TrimSpace(kind))]
	return label, ok
}

// agentState is what a pane knows of the agent in it.
type agentState struct {
	// label names the agent, e.g. "claude"; empty for a plain shell.
	label  string
	name   string
	status herdr.AgentStatus
	// managed agents were typed in by agent.start; they are released when
	// their program exits back to the shell.
	managed        bool
	launchPending  bool
	launchStarted  time.Time
	launchDeadline time.Time
	ready          bool
	// hooked agents report their own state; reports are the status authority.
	hooked     bool
	reportSeqs map[string]uint64
	session    *herdr.AgentSessionInfo
	changeSeq  uint64
}

func (a agentState) hosted() bool {
	return a.label != ""
}

// setAgentLocked records an agent's label and status. A status change
// advances state_change_seq; any change is pushed to subscribers.
func (s *session) setAgentLocked(p *pane, label string, status herdr.AgentStatus) {
	labelChanged := p.agent.label != label
	statusChanged := p.agent.status != status
	p.agent.label, p.agent.status = label, status
	if statusChanged {
		p.agent.changeSeq++
	}
	if labelChanged || statusChanged {
		info := s.paneInfoLocked(p)
		s.hub.publish(herdr.Event{Kind: herdr.EventPaneAgentStatusChanged, Data: herdr.EventData{
			PaneID:      p.id,
			WorkspaceID: p.ws.id,
			AgentStatus: status,
			Agent:       optional(label),
		}})
		s.hub.publish(lifecycle(herdr.EventPaneUpdated, herdr.EventData{Pane: &info}))
	}
	if labelChanged {
		s.hub.publish(lifecycle(herdr.EventPaneAgentDetected, herdr.EventData{
			PaneID:      p.id,
			WorkspaceID: p.ws.id,
			Agent:       optional(label),
		}))
	}
	s.notifyLocked()
}

// releaseAgentLocked forgets the pane's agent: its program is gone.
func (s *session) releaseAgentLocked(p *pane) {
	p.agent.name, p.agent.session = "", nil
	p.agent.managed, p.agent.launchPending, p.agent.ready, p.agent.hooked = false, false, false, false
	p.agent.reportSeqs = nil
	s.setAgentLocked(p, "", herdr.AgentStatusUnknown)
}

func (s *session) startAgent(p herdr.AgentStartParams) (*herdr.AgentStarted, *herdr.Error) {
	if !agentNamePattern.MatchString(p.Name) {
		return nil, errorf(herdr.CodeInvalidAgentName, invalidAgentNameReason)
	}
	label, ok := agentLabel(p.Kind)
	if !ok {
		return nil, errorf(herdr.CodeUnsupportedAgentKind, "unsupported interactive agent kind %s", p.Kind)
	}
	for _, arg := range p.Args {
		if strings.ContainsFunc(arg, unicode.IsControl) {
			return nil, errorf(herdr.CodeInvalidAgentArgument, "agent arguments cannot be encoded safely for the target shell")
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	for _, other := range s.panes {
		if other.agent.name == p.Name {
			return nil, errorf(herdr.CodeAgentNameTaken, "agent name %s is already used by pane %s", p.Name, other.id)
		}
	}
	pn := s.panes[p.PaneID]
	if pn == nil {
		return nil, errorf(herdr.CodeAgentPaneNotFound, "agent target pane %s not found", p.PaneID)
	}
	if pn.agent.hosted() {
		return nil, errorf(herdr.CodeAgentPaneBusy, "agent target pane %s is not an available shell", p.PaneID)
	}
	idle, err := pn.sh.atPrompt()
	if err != nil {
		return nil, errorf(herdr.CodeAgentPaneUnavailable, "agent target pane %s has no live terminal: %v", p.PaneID, err)
	}
	if !idle {
		return nil, errorf(herdr.CodeAgentPaneBusy, "agent target pane %s is not an available shell", p.PaneID)
	}
	timeout := defaultAgentStartTimeout
	if p.TimeoutMS != nil {
		timeout = time.Duration(min(*p.TimeoutMS, uint64(maxAgentStartTimeout/time.Millisecond)+1)) * time.Millisecond
	}
	if timeout <= agentStartSettle || timeout > maxAgentStartTimeout {
		return nil, errorf(herdr.CodeInvalidAgentTimeout, "agent start timeout must be greater than 3000ms and at most 300000ms")
	}

	argv := append([]string{s.opts.agentExecutable(label)}, p.Args...)
	modes := pn.sh.term.modes()
	if err := pn.sh.write(encodeText(shellCommand(argv), modes) + enterKey); err != nil {
		return nil, errorf(herdr.CodeAgentStartInputFailed, "%v", err)
	}
	now := time.Now()
	pn.agent.name = p.Name
	pn.agent.managed, pn.agent.launchPending, pn.agent.ready = true, true, false
	pn.agent.launchStarted, pn.agent.launchDeadline = now, now.Add(timeout)
	s.setAgentLocked(pn, label, pn.agent.status)
	return &herdr.AgentStarted{Agent: s.agentInfoLocked(pn), Argv: argv}, nil
}

// shellCommand quotes argv for a POSIX shell.
func shellCommand(argv []string) string {
	quoted := make([]string, len(argv))
	for i, arg := range argv {
		quoted[i] = shellQuote(arg)
	}
	return strings.Join(quoted, " ")
}

func shellQuote(arg string) string {
	safe := arg != "" && !strings.ContainsFunc(arg, func(r rune) bool {
		return !(r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("@%+=:,./_-", r)))
	})
	if safe {
		return arg
	}
	return "'" + strings.ReplaceAll(arg, "'", `'\''`) + "'"
}

func (s *session) reportAgent(p herdr.PaneReportAgentParams) *herdr.Error {
	label := strings.TrimSpace(p.Agent)
	if label == "" {
		return errorf(herdr.CodeInvalidAgent, "agent label must not be empty")
	}
	if known, ok := agentLabel(label); ok {
		label = known
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	pn := s.panes[p.PaneID]
	if pn == nil {
		return errorf(herdr.CodePaneNotFound, "pane %s not found", p.PaneID)
	}
	if p.Seq != nil {
		if last, ok := pn.agent.reportSeqs[p.Source]; ok && *p.Seq <= last {
			// A stale report from a hook that raced a newer one.
			return nil
		}
		if pn.agent.reportSeqs == nil {
			pn.agent.reportSeqs = map[string]uint64{}
		}
		pn.agent.reportSeqs[p.Source] = *p.Seq
	}
	switch {
	case p.AgentSessionID != nil:
		pn.agent.session = &herdr.AgentSessionInfo{Source: p.Source, Agent: label, Kind: herdr.AgentSessionRefID, Value: *p.AgentSessionID}
	case p.AgentSessionPath != nil:
		pn.agent.session = &herdr.AgentSessionInfo{Source: p.Source, Agent: label, Kind: herdr.AgentSessionRefPath, Value: *p.AgentSessionPath}
	}
	pn.agent.hooked, pn.agent.launchPending, pn.agent.ready = true, false, true
	s.setAgentLocked(pn, label, herdr.AgentStatus(p.State))
	return nil
}

// sampleAgents advances agents started by agent.start: a launch becomes
// interactive once the agent has been the foreground program for the settle
// delay, fails at its deadline, and an agent is released when its program
// returns to the shell.
func (s *session) sampleAgents(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.panes {
		if !p.agent.managed {
			continue
		}
		atPrompt, err := p.sh.atPrompt()
		if err != nil {
			continue
		}
		switch {
		case p.agent.launchPending && !atPrompt && now.Sub(p.agent.launchStarted) >= s.opts.AgentSettle:
			p.agent.launchPending, p.agent.ready = false, true
			status := p.agent.status
			if !p.agent.hooked {
				// Without hooks or a screen manifest, a settled agent is
				// taken to wait for its first prompt.
				status = herdr.AgentStatusIdle
			}
			s.setAgentLocked(p, p.agent.label, status)
		case p.agent.launchPending && now.After(p.agent.launchDeadline):
			s.releaseAgentLocked(p)
		case p.agent.ready && atPrompt:
			s.releaseAgentLocked(p)
		}
	}
}

// resolveAgentLocked finds the agent a target names: a pane id of a pane
// hosting an agent, or an agent name.
func (s *session) resolveAgentLocked(target string) (*pane, *herdr.Error) {
	if p := s.panes[target]; p != nil && p.agent.hosted() {
		return p, nil
	}
	var found []*pane
	for _, p := range s.panes {
		if p.agent.name == target && target != "" {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 0:
		return nil, errorf(herdr.CodeAgentNotFound, "agent target %s not found", target)
	case 1:
		return found[0], nil
	default:
		return nil, errorf(herdr.CodeAgentTargetAmbiguous, "agent target %s is ambiguous", target)
	}
}

func (s *session) agentInfoLocked(p *pane) herdr.AgentInfo {
	pi := s.paneInfoLocked(p)
	return herdr.AgentInfo{
		PaneID:                 pi.PaneID,
		TerminalID:             pi.TerminalID,
		WorkspaceID:            pi.WorkspaceID,
		TabID:                  pi.TabID,
		Focused:                pi.Focused,
		AgentStatus:            pi.AgentStatus,
		Revision:               pi.Revision,
		Name:                   optional(p.agent.name),
		Agent:                  pi.Agent,
		AgentSession:           pi.AgentSession,
		Cwd:                    pi.Cwd,
		LaunchPending:          p.agent.launchPending,
		InteractiveReady:       p.agent.ready,
		ScreenDetectionSkipped: p.agent.hooked,
		StateChangeSeq:         p.agent.changeSeq,
		Title:                  pi.Title,
	}
}

func (s *session) agent(target string) (*herdr.AgentInfo, *herdr.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.resolveAgentLocked(target)
	if err != nil {
		return nil, err
	}
	info := s.agentInfoLocked(p)
	return &info, nil
}

func (s *session) agents() []herdr.AgentInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := []herdr.AgentInfo{}
	for _, ws := range s.workspaces {
		for _, t := range ws.tabs {
			for _, p := range t.panes {
				if p.agent.hosted() {
					list = append(list, s.agentInfoLocked(p))
				}
			}
		}
	}
	return list
}

// promptTarget is an agent ready to be typed into.
type promptTarget struct {
	sh         *shell
	terminalID string
	baseline   uint64
}

// promptTargetFor checks that the agent can take a prompt now.
func (s *session) promptTargetFor(target, text string) (*promptTarget, *herdr.Error) {
	if text == "" {
		return nil, errorf(herdr.CodeEmptyAgentPrompt, "agent prompt must not be empty")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.resolveAgentLocked(target)
	if err != nil {
		return nil, err
	}
	if p.agent.status == herdr.AgentStatusBlocked {
		return nil, errorf(herdr.CodeAgentBlocked, "agent %s is blocked and requires interactive input", target)
	}
	if p.agent.launchPending {
		return nil, errorf(herdr.CodeAgentNotReady, "agent %s is not ready for input yet", target)
	}
	return &promptTarget{sh: p.sh, terminalID: p.terminalID, baseline: p.agent.changeSeq}, nil
}

// agentWait describes what a held call waits for.
type agentWait struct {
	target string
	until  []herdr.AgentStatus
	// afterSeq, when set, only accepts a state after that state_change_seq.
	afterSeq *uint64
	// terminalID pins the wait to one agent: another agent taking the name
	// is not the one waited for.
	terminalID string
}

// defaultWaitStatuses are what herdr waits for when until is empty.
var defaultWaitStatuses = []herdr.AgentStatus{herdr.AgentStatusIdle, herdr.AgentStatusDone, herdr.AgentStatusBlocked}

// waitAgent blocks until the agent matches w, the timeout fires, or ctx ends.
// It returns false when ctx ended: the caller went away and gets no answer.
func (s *session) waitAgent(ctx context.Context, w agentWait, timeout <-chan time.Time) (*herdr.AgentInfo, bool, *herdr.Error) {
	until := w.until
	if len(until) == 0 {
		until = defaultWaitStatuses
	}
	for first := true; ; first = false {
		s.mu.Lock()
		p, err := s.resolveAgentLocked(w.target)
		if err == nil && w.terminalID != "" && p.terminalID != w.terminalID {
			err = errorf(herdr.CodeAgentNotFound, "agent target %s now names another agent", w.target)
		}
		if err != nil {
			s.mu.Unlock()
			if first {
				return nil, true, err
			}
			return nil, true, errorf(herdr.CodeAgentNotRunning, "agent is no longer running in the target pane")
		}
		w.terminalID = p.terminalID
		info := s.agentInfoLocked(p)
		changed := s.changed
		s.mu.Unlock()

		if slices.Contains(until, info.AgentStatus) && (w.afterSeq == nil || info.StateChangeSeq > *w.afterSeq) {
			return &info, true, nil
		}
		select {
		case <-changed:
		case <-timeout:
			return nil, true, errorf(herdr.CodeTimeout, "timed out waiting for agent status")
		case <-ctx.Done():
			return nil, false, nil
		}
	}
}
