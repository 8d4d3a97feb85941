package paneserver

import (
	"context"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/fleetd/fleetd/herdr"
)

const (
	defaultAgentStartTimeout = 30 * time.Second
	// agentStartSettle is herdr's settle delay: a started agent is ready no
	// sooner than this, and a newly identified agent is not looked at (its
	// status stays unknown) for as long.
	agentStartSettle       = 3 * time.Second
	maxAgentStartTimeout   = 300 * time.Second
	invalidAgentNameReason = "agent name must start with a lowercase letter and contain only lowercase letters, digits, '-' or '_' (1-32 characters)"
	// promptStallLimit is how long agent.prompt with wait gives an agent
	// that is not working to show any state change.
	promptStallLimit  = 5 * time.Second
	maxSessionIDBytes = 512
)

var agentNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// launchPhase is where an agent started by agent.start is.
type launchPhase int

const (
	// launchNone: no agent.start owns the pane's agent.
	launchNone launchPhase = iota
	// launchPending: typed, not ready yet; it has a deadline.
	launchPending
	// launchBlocked: it showed a dialog before it was ever ready. It waits
	// for someone to answer, with no deadline.
	launchBlocked
	// launchActive: ready for prompts.
	launchActive
)

// hookAuthority is the latest report that decides a pane's status.
type hookAuthority struct {
	source  string
	label   string
	state   herdr.AgentState
	message string
	// fullLifecycle reports come from herdr's integrations that replace
	// screen detection altogether.
	fullLifecycle bool
}

// agentState is what a pane knows of the agent in it. Its status comes from
// the hook authority when there is one, else from what the foreground
// process was identified as: herdr would read a known agent's screen, and
// with no screen rules (see doc.go) an identified agent counts as idle once
// its start-up grace is over.
type agentState struct {
	// fgPgid is the foreground process group last sampled, fgComm the
	// command name of the process it was identified from.
	fgPgid int
	fgComm string
	// detected is the known agent the foreground process is, since
	// detectedAt.
	detected   string
	detectedAt time.Time
	authority  *hookAuthority
	reportSeqs map[string]uint64
	// session is the conversation an official herdr integration reported.
	session *herdr.AgentSessionInfo
	// exited lists known agents whose process exited; reports naming them
	// are ignored until a new process of that agent is seen.
	exited map[string]bool

	// name, kind and phase belong to an agent started by agent.start.
	name       string
	kind       string
	phase      launchPhase
	readyAfter time.Time
	deadline   time.Time
	seenKind   bool

	// label and status are what the pane shows; changeSeq is the session's
	// state_change_seq at its last status change.
	label     string
	status    herdr.AgentStatus
	changeSeq uint64
}

func (a *agentState) hosted() bool {
	return a.label != "" || a.name != ""
}

// known is the known agent kind the pane hosts: the reported one when a
// report decides, else the one the process was identified as.
func (a *agentState) known() string {
	if a.authority != nil {
		label, _ := knownAgent(a.authority.label)
		return label
	}
	return a.detected
}

// effective is the label and status the pane shows now.
func (a *agentState) effective(now time.Time, grace time.Duration) (string, herdr.AgentStatus) {
	switch {
	case a.authority != nil:
		return a.authority.label, herdr.AgentStatus(a.authority.state)
	case a.detected != "" && now.Sub(a.detectedAt) >= grace:
		return a.detected, herdr.AgentStatusIdle
	case a.detected != "":
		return a.detected, herdr.AgentStatusUnknown
	case a.name != "":
		return a.kind, herdr.AgentStatusUnknown
	}
	return "", herdr.AgentStatusUnknown
}

// refreshLocked publishes the pane's effective label and status, and moves
// an agent.start launch along.
func (s *session) refreshLocked(p *pane, now time.Time) {
	label, status := p.agent.effective(now, s.opts.AgentSettle)
	s.setAgentLocked(p, label, status)
	s.reconcileLaunchLocked(p, now)
}

// setAgentLocked records an agent's label and status. A status change
// advances the session's state_change_seq; any change is pushed to
// subscribers.
func (s *session) setAgentLocked(p *pane, label string, status herdr.AgentStatus) {
	labelChanged := p.agent.label != label
	statusChanged := p.agent.status != status
	p.agent.label, p.agent.status = label, status
	if statusChanged {
		s.changeSeq++
		p.agent.changeSeq = s.changeSeq
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

// reconcileLaunchLocked applies herdr's launch rules to an agent.start
// agent: another agent taking the pane, or the launch's deadline, drops the
// name; a dialog before readiness parks it with no deadline; it is ready at
// the settle delay once it is the started kind and idle.
func (s *session) reconcileLaunchLocked(p *pane, now time.Time) {
	a := &p.agent
	if a.name == "" {
		return
	}
	known := a.known()
	switch {
	case known != "" && known != a.kind:
		s.dropNameLocked(p)
		return
	case a.phase == launchPending && a.seenKind && known == "":
		s.dropNameLocked(p)
		return
	case a.phase == launchPending && known == a.kind && a.status == herdr.AgentStatusBlocked:
		a.phase = launchBlocked
	case a.phase == launchPending && !now.Before(a.deadline):
		s.dropNameLocked(p)
		return
	}
	if known == a.kind {
		a.seenKind = true
	}
	if (a.phase == launchPending || a.phase == launchBlocked) && !now.Before(a.readyAfter) &&
		known == a.kind && a.status == herdr.AgentStatusIdle {
		a.phase = launchActive
		info := s.paneInfoLocked(p)
		s.hub.publish(lifecycle(herdr.EventPaneUpdated, herdr.EventData{Pane: &info}))
		s.notifyLocked()
	}
}

// dropNameLocked forgets an agent.start agent's name, as herdr does when
// its launch fails or its process goes away.
func (s *session) dropNameLocked(p *pane) {
	a := &p.agent
	a.name, a.kind, a.phase, a.seenKind = "", "", launchNone, false
	s.refreshLocked(p, time.Now())
}

func (s *session) startAgent(p herdr.AgentStartParams) (*herdr.AgentStarted, *herdr.Error) {
	if !agentNamePattern.MatchString(p.Name) {
		return nil, errorf(herdr.CodeInvalidAgentName, invalidAgentNameReason)
	}
	label, ok := knownAgent(p.Kind)
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
			return nil, errorf(herdr.CodeAgentNameTaken, "agent name %s is already used; candidates: terminal_id=%s pane_id=%s workspace_id=%s",
				p.Name, other.terminalID, other.id, other.ws.id)
		}
	}
	pn := s.panes[p.PaneID]
	if pn == nil {
		return nil, errorf(herdr.CodeAgentPaneNotFound, "agent target pane %s not found", p.PaneID)
	}
	if pn.agent.hosted() {
		return nil, errorf(herdr.CodeAgentPaneBusy, "agent target pane %s is not an available shell", p.PaneID)
	}
	idle, err := pn.sh.idleShell()
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
	// herdr types the command and Enter in one write.
	if err := pn.sh.write(encodeText(shellCommand(argv), pn.sh.term.modes()) + enterKey); err != nil {
		return nil, errorf(herdr.CodeAgentStartInputFailed, "%v", err)
	}
	now := time.Now()
	a := &pn.agent
	a.name, a.kind, a.phase, a.seenKind = p.Name, label, launchPending, false
	a.readyAfter, a.deadline = now.Add(s.opts.AgentSettle), now.Add(timeout)
	s.refreshLocked(pn, now)
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

// acceptSeqLocked applies herdr's per-source ordering: once a source sent a
// seq, its reports without one are ignored, and so is a seq not above the
// source's last.
func (a *agentState) acceptSeq(source string, seq *uint64) bool {
	if seq == nil {
		_, sequenced := a.reportSeqs[source]
		return !sequenced
	}
	if last, ok := a.reportSeqs[source]; ok && *seq <= last {
		return false
	}
	if a.reportSeqs == nil {
		a.reportSeqs = map[string]uint64{}
	}
	a.reportSeqs[source] = *seq
	return true
}

// reportAgent applies pane.report_agent. Like herdr, it answers every report
// of a live pane with ok; what the report changes follows herdr's authority
// rules (see doc.go).
func (s *session) reportAgent(p herdr.PaneReportAgentParams) *herdr.Error {
	label := reportedLabel(p.Agent)
	if label == "" {
		return errorf(herdr.CodeInvalidAgent, "agent label must not be empty")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pn := s.panes[p.PaneID]
	if pn == nil {
		return errorf(herdr.CodePaneNotFound, "pane %s not found", p.PaneID)
	}
	a := &pn.agent
	isOfficial := official(p.Source, label)
	if isOfficial {
		if ref := sessionRef(p, label); ref != nil {
			a.session = ref
		}
	}
	if isOfficial && (nativeStateSources[p.Source] || sessionOnlySources[p.Source]) {
		// herdr reads these agents' status from the screen; the report only
		// says which conversation runs.
		return nil
	}
	known, isKnown := knownAgent(label)
	full := fullLifecycleSources[p.Source] && isOfficial
	switch {
	case !full && isKnown && a.exited[known]:
		return nil
	case isKnown && a.detected != "" && known != a.detected:
		return nil
	case a.session != nil && (a.session.Source != p.Source || a.session.Agent != label):
		// Another integration owns the pane's conversation.
		return nil
	case !a.acceptSeq(p.Source, p.Seq):
		return nil
	}
	auth := &hookAuthority{source: p.Source, label: label, state: p.State, fullLifecycle: full}
	if p.Message != nil {
		auth.message = *p.Message
	}
	a.authority = auth
	if a.name != "" && label != a.kind {
		// Another agent took a named pane: herdr drops the name.
		a.name, a.kind, a.phase, a.seenKind = "", "", launchNone, false
	}
	s.refreshLocked(pn, time.Now())
	return nil
}

// sessionRef is the session reference an official report carries, if it is
// one herdr keeps: an id of at most 512 bytes without control characters,
// or for pi and omp an absolute path.
func sessionRef(p herdr.PaneReportAgentParams, label string) *herdr.AgentSessionInfo {
	switch {
	case p.AgentSessionID != nil:
		id := *p.AgentSessionID
		if id == "" || len(id) > maxSessionIDBytes || strings.ContainsFunc(id, unicode.IsControl) {
			return nil
		}
		return &herdr.AgentSessionInfo{Source: p.Source, Agent: label, Kind: herdr.AgentSessionRefID, Value: id}
	case p.AgentSessionPath != nil && (label == "pi" || label == "omp"):
		path := *p.AgentSessionPath
		if !filepath.IsAbs(path) || len(path) > 4096 {
			return nil
		}
		return &herdr.AgentSessionInfo{Source: p.Source, Agent: label, Kind: herdr.AgentSessionRefPath, Value: path}
	}
	return nil
}

// releaseAgent applies pane.release_agent: the reporting source gives up
// the pane's status. When the agent's process is gone too, the pane forgets
// the agent and its name.
func (s *session) releaseAgent(p herdr.PaneReleaseAgentParams) *herdr.Error {
	label := reportedLabel(p.Agent)
	if label == "" {
		return errorf(herdr.CodeInvalidAgent, "agent label must not be empty")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pn := s.panes[p.PaneID]
	if pn == nil {
		return errorf(herdr.CodePaneNotFound, "pane %s not found", p.PaneID)
	}
	a := &pn.agent
	switch {
	case official(p.Source, label):
		return nil
	case a.authority != nil && (a.authority.source != p.Source || a.authority.label != label):
		return nil
	case label != a.label && (a.session == nil || a.session.Agent != label):
		return nil
	case !a.acceptSeq(p.Source, p.Seq):
		return nil
	}
	a.authority = nil
	known, _ := knownAgent(label)
	if a.detected == "" || a.detected != known {
		a.detected = ""
		a.name, a.kind, a.phase, a.seenKind = "", "", launchNone, false
	}
	s.refreshLocked(pn, time.Now())
	return nil
}

// clearAgentAuthority applies pane.clear_agent_authority: the report that
// decides the pane's status, and the session it named, are dropped.
func (s *session) clearAgentAuthority(p herdr.PaneClearAgentAuthorityParams) *herdr.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	pn := s.panes[p.PaneID]
	if pn == nil {
		return errorf(herdr.CodePaneNotFound, "pane %s not found", p.PaneID)
	}
	a := &pn.agent
	if a.authority == nil || (p.Source != nil && *p.Source != a.authority.source) {
		return nil
	}
	if !a.acceptSeq(a.authority.source, p.Seq) {
		return nil
	}
	a.authority, a.session = nil, nil
	s.refreshLocked(pn, time.Now())
	return nil
}

// sampleAgents looks at every pane's foreground process, as herdr's
// detection loop does: a new program is identified as an agent or not, an
// agent returning to its shell has exited, and launches move along.
func (s *session) sampleAgents(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.panes {
		pgid, comm, label, err := p.sh.foreground(p.agent.fgPgid, p.agent.fgComm)
		if err != nil {
			continue
		}
		a := &p.agent
		switch {
		case pgid == a.fgPgid && comm == a.fgComm:
		case pgid == p.sh.pid && knownShells[comm]:
			// Back at the shell's prompt: whatever ran has exited.
			if a.fgPgid != 0 && (a.fgPgid != p.sh.pid || !knownShells[a.fgComm]) {
				s.agentExitedLocked(p)
			}
		default:
			if label != a.detected {
				if a.detected != "" {
					s.agentExitedLocked(p)
				}
				a.detected, a.detectedAt = label, now
				if label != "" {
					delete(a.exited, label)
				}
			}
		}
		a.fgPgid, a.fgComm = pgid, comm
		s.refreshLocked(p, now)
	}
}

// agentExitedLocked applies what herdr does when a pane's program exits:
// the report of that agent lapses, its session is forgotten, and an
// agent.start name is dropped.
func (s *session) agentExitedLocked(p *pane) {
	a := &p.agent
	if gone := a.detected; gone != "" {
		if a.authority != nil {
			if k, _ := knownAgent(a.authority.label); k == gone {
				delete(a.reportSeqs, a.authority.source)
				a.authority = nil
			}
		}
		if a.exited == nil {
			a.exited = map[string]bool{}
		}
		a.exited[gone] = true
		if a.session != nil && a.session.Agent == gone {
			a.session = nil
		}
		a.detected = ""
	}
	if a.name != "" {
		a.name, a.kind, a.phase, a.seenKind = "", "", launchNone, false
	}
}

// resolveAgentLocked finds the agent a target names: the pane id of a pane
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
	a := &p.agent
	return herdr.AgentInfo{
		PaneID:                 pi.PaneID,
		TerminalID:             pi.TerminalID,
		WorkspaceID:            pi.WorkspaceID,
		TabID:                  pi.TabID,
		Focused:                pi.Focused,
		AgentStatus:            pi.AgentStatus,
		Revision:               pi.Revision,
		Name:                   optional(a.name),
		Agent:                  pi.Agent,
		AgentSession:           pi.AgentSession,
		Cwd:                    pi.Cwd,
		LaunchPending:          a.phase == launchPending || a.phase == launchBlocked,
		InteractiveReady:       a.phase == launchActive,
		ScreenDetectionSkipped: a.authority != nil && a.authority.fullLifecycle && a.detected != "",
		StateChangeSeq:         a.changeSeq,
		TerminalTitle:          pi.TerminalTitle,
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
	paneID     string
	terminalID string
	baseline   uint64
	status     herdr.AgentStatus
}

// promptTargetFor checks, in herdr's order, that the agent can take a
// prompt now: a dialog refuses it, and so does anything herdr does not know
// as a running agent of a known kind.
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
	a := &p.agent
	known := a.known()
	switch {
	case a.status == herdr.AgentStatusBlocked:
		return nil, errorf(herdr.CodeAgentBlocked, "agent %s is blocked and requires interactive input", target)
	case known == "", a.phase == launchPending, a.phase == launchBlocked:
		return nil, errorf(herdr.CodeAgentNotReady, "agent %s is not an active named agent", target)
	case a.detected != known:
		return nil, errorf(herdr.CodeAgentNotReady, "agent %s is no longer the pane foreground process", target)
	}
	return &promptTarget{sh: p.sh, paneID: p.id, terminalID: p.terminalID, baseline: a.changeSeq, status: a.status}, nil
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

// renameAgent gives the agent target names a new name, unique among the
// session's agents, or drops its name (name nil).
func (s *session) renameAgent(target string, name *string) (*herdr.AgentInfo, *herdr.Error) {
	if name != nil && !agentNamePattern.MatchString(*name) {
		return nil, errorf(herdr.CodeInvalidAgentName, invalidAgentNameReason)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.resolveAgentLocked(target)
	if err != nil {
		return nil, err
	}
	if name == nil {
		p.agent.name = ""
	} else {
		for _, other := range s.panes {
			if other != p && other.agent.name == *name {
				return nil, errorf(herdr.CodeAgentNameTaken, "agent name %s is already used; candidates: terminal_id=%s pane_id=%s workspace_id=%s",
					*name, other.terminalID, other.id, other.ws.id)
			}
		}
		p.agent.name = *name
	}
	s.refreshLocked(p, time.Now())
	info := s.agentInfoLocked(p)
	return &info, nil
}
