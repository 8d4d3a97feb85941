package paneserver

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetd/fleetd/herdr"
)

// Environment variables herdr gives every pane process. They win over the
// env a caller passes.
const (
	envSocketPath  = "HERDR_SOCKET_PATH"
	envHerdr       = "HERDR_ENV"
	envWorkspaceID = "HERDR_WORKSPACE_ID"
	envTabID       = "HERDR_TAB_ID"
	envPaneID      = "HERDR_PANE_ID"
	envBinPath     = "HERDR_BIN_PATH"
)

// envCodexThread is removed from every pane's environment, as herdr does,
// so a Codex started in a pane never joins the thread of a Codex that
// started herdr.
const envCodexThread = "CODEX_THREAD_ID"

// session is the server's state: workspaces of tabs of panes, each pane a
// shell on a pty. One mutex guards the layout and every pane's agent state;
// events are published while it is held, so subscribers see them in the
// order the changes happened.
type session struct {
	opts    *Options
	hub     *hub
	started time.Time

	mu            sync.Mutex
	workspaces    []*workspace
	panes         map[string]*pane
	active        *workspace
	lastWorkspace int
	lastTerminal  uint64
	// changeSeq is herdr's state_change_seq: one counter for the whole
	// session, advanced by every pane's status change.
	changeSeq uint64
	closed    bool
	// saveTimer is the pending save of the session, if any.
	saveTimer *time.Timer
	// changed is closed and replaced on every agent change, waking waiters.
	changed chan struct{}
	// users gives each workspace a Unix user of its own; nil runs every
	// workspace as the server's own user.
	users *users
	// starting holds the panes whose shells start outside the lock, not
	// yet in the layout: their users have a pane all the same.
	starting map[*pane]struct{}
}

type workspace struct {
	id    string
	label string
	cwd   string
	// user is who the workspace's processes run as; nil for the server's
	// own user.
	user      *workspaceUser
	tabs      []*tab
	activeTab *tab
	lastTab   int
	lastPane  int
}

type tab struct {
	id    string
	label string
	ws    *workspace
	panes []*pane
}

type pane struct {
	id         string
	terminalID string
	cwd        string
	ws         *workspace
	tab        *tab
	sh         *shell
	agent      agentState
	// gone is set once the pane left the layout, by close or exit, or
	// never entered it.
	gone bool
	// settled is closed once the pane entered the layout or was given
	// up: its shell's exit waits for it.
	settled chan struct{}
}

func newSession(opts *Options, h *hub) *session {
	return &session{
		opts:     opts,
		hub:      h,
		started:  time.Now(),
		panes:    map[string]*pane{},
		starting: map[*pane]struct{}{},
		changed:  make(chan struct{}),
	}
}

// notifyLocked wakes everything waiting for a change, and saves the
// session a while later.
func (s *session) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
	s.scheduleSaveLocked()
}

func (s *session) createWorkspace(p herdr.WorkspaceCreateParams) (*herdr.WorkspaceCreated, *herdr.Error) {
	if err := validateEnv(p.Env); err != nil {
		return nil, err
	}
	cwd := cmp.Or(p.Cwd, s.opts.Cwd)

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errorf(herdr.CodeServerUnavailable, "server is shutting down")
	}
	var user *workspaceUser
	if s.users != nil {
		u, err := s.users.forLabel(p.Label)
		if err != nil {
			s.mu.Unlock()
			return nil, errorf(herdr.CodeWorkspaceCreateFailed, "%v", err)
		}
		user = &u
		if p.Cwd == "" {
			cwd = u.home
		}
	}
	s.lastWorkspace++
	ws := &workspace{
		id:    "w" + publicNumber(s.lastWorkspace),
		label: cmp.Or(p.Label, filepath.Base(cwd)),
		cwd:   cwd,
		user:  user,
	}
	t, pn, spec, err := s.newTabLocked(ws, cwd, p.Env, "")
	s.mu.Unlock()
	if err != nil {
		return nil, errorf(herdr.CodeWorkspaceCreateFailed, "%v", err)
	}
	if err := s.startPane(pn, spec); err != nil {
		return nil, errorf(herdr.CodeWorkspaceCreateFailed, "%v", err)
	}

	s.mu.Lock()
	if s.closed {
		s.giveUpLocked(pn)
		s.mu.Unlock()
		pn.sh.terminate()
		return nil, errorf(herdr.CodeServerUnavailable, "server is shutting down")
	}
	defer s.mu.Unlock()
	s.addTabLocked(t, pn)
	s.workspaces = append(s.workspaces, ws)
	if p.Focus || s.active == nil {
		s.active = ws
	}
	created := &herdr.WorkspaceCreated{
		Workspace: s.workspaceInfoLocked(ws),
		Tab:       s.tabInfoLocked(t),
		RootPane:  s.paneInfoLocked(pn),
	}
	s.hub.publish(lifecycle(herdr.EventWorkspaceCreated, herdr.EventData{Workspace: &created.Workspace}))
	s.publishTabOpenedLocked(created.Tab, created.RootPane)
	return created, nil
}

func (s *session) createTab(p herdr.TabCreateParams) (*herdr.TabCreated, *herdr.Error) {
	if err := validateEnv(p.Env); err != nil {
		return nil, err
	}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errorf(herdr.CodeServerUnavailable, "server is shutting down")
	}
	ws := s.active
	if p.WorkspaceID != "" {
		ws = s.workspaceLocked(p.WorkspaceID)
		if ws == nil {
			s.mu.Unlock()
			return nil, errorf(herdr.CodeWorkspaceNotFound, "workspace %s not found", p.WorkspaceID)
		}
	}
	if ws == nil {
		s.mu.Unlock()
		return nil, errorf(herdr.CodeWorkspaceNotFound, "no active workspace")
	}
	t, pn, spec, err := s.newTabLocked(ws, cmp.Or(p.Cwd, ws.cwd), p.Env, p.Label)
	s.mu.Unlock()
	if err != nil {
		return nil, errorf(herdr.CodeTabCreateFailed, "%v", err)
	}
	if err := s.startPane(pn, spec); err != nil {
		return nil, errorf(herdr.CodeTabCreateFailed, "%v", err)
	}

	s.mu.Lock()
	if s.closed || s.workspaceLocked(ws.id) != ws {
		// Shut down, or the workspace closed, while the shell started.
		closed := s.closed
		s.giveUpLocked(pn)
		s.mu.Unlock()
		pn.sh.terminate()
		if closed {
			return nil, errorf(herdr.CodeServerUnavailable, "server is shutting down")
		}
		return nil, errorf(herdr.CodeWorkspaceNotFound, "workspace %s not found", ws.id)
	}
	defer s.mu.Unlock()
	s.addTabLocked(t, pn)
	if p.Focus {
		s.active, ws.activeTab = ws, t
	}
	created := &herdr.TabCreated{Tab: s.tabInfoLocked(t), RootPane: s.paneInfoLocked(pn)}
	s.publishTabOpenedLocked(created.Tab, created.RootPane)
	return created, nil
}

func (s *session) publishTabOpenedLocked(t herdr.TabInfo, p herdr.PaneInfo) {
	s.hub.publish(lifecycle(herdr.EventTabCreated, herdr.EventData{Tab: &t}))
	s.hub.publish(lifecycle(herdr.EventPaneCreated, herdr.EventData{Pane: &p}))
}

// newTabLocked makes a tab of ws with its root pane, and what the pane's
// shell starts with (startPane); addTabLocked then adds them to ws.
func (s *session) newTabLocked(ws *workspace, cwd string, env map[string]string, label string) (*tab, *pane, shellSpec, error) {
	ws.lastTab++
	t := &tab{id: ws.id + ":t" + publicNumber(ws.lastTab), label: label, ws: ws}
	ws.lastPane++
	p, spec, err := s.newPaneLocked(ws, t, ws.id+":p"+publicNumber(ws.lastPane), cwd, env, "")
	if err != nil {
		return nil, nil, shellSpec{}, err
	}
	return t, p, spec, nil
}

// addTabLocked adds a tab, whose root pane's shell started, to its
// workspace. An unlabelled tab is named for its place, as herdr does.
func (s *session) addTabLocked(t *tab, root *pane) {
	ws := t.ws
	if t.label == "" {
		t.label = strconv.Itoa(len(ws.tabs) + 1)
	}
	s.addPaneLocked(root)
	ws.tabs = append(ws.tabs, t)
	if ws.activeTab == nil {
		ws.activeTab = t
	}
}

// newPaneLocked makes a pane of t, and what its shell starts with, showing
// history first. The pane counts as its user's from now on (starting),
// until addPaneLocked or giveUpLocked.
func (s *session) newPaneLocked(ws *workspace, t *tab, id, cwd string, env map[string]string, history string) (*pane, shellSpec, error) {
	s.lastTerminal++
	p := &pane{
		id:         id,
		terminalID: fmt.Sprintf("term_%x%x", s.started.UnixMicro(), s.lastTerminal),
		cwd:        cwd,
		ws:         ws,
		tab:        t,
		agent:      agentState{status: herdr.AgentStatusUnknown},
		settled:    make(chan struct{}),
	}
	var view *paneView
	if u := ws.user; u != nil {
		// The server's own home, name and temporary directory are not the
		// user's; the caller's env may still say otherwise.
		own := map[string]string{"HOME": u.home, "USER": u.name, "LOGNAME": u.name, "TMPDIR": u.tmp}
		if s.users.namespaces {
			if err := writeUserFiles(*u, s.users.shell); err != nil {
				return nil, shellSpec{}, fmt.Errorf("writing the passwd and group files of user %d: %w", u.uid, err)
			}
			view = &paneView{passwd: filepath.Join(u.etc, "passwd"), group: filepath.Join(u.etc, "group")}
			if !underTmp(cwd, u.home, s.opts.SocketPath, s.opts.BinPath) {
				view.tmp, own["TMPDIR"] = u.tmp, "/tmp"
			}
		}
		env = maps.Clone(env)
		if env == nil {
			env = map[string]string{}
		}
		for k, v := range own {
			if _, set := env[k]; !set {
				env[k] = v
			}
		}
	}
	spec := shellSpec{
		path:       s.opts.Shell,
		dir:        cwd,
		env:        s.paneEnv(env, ws.id, t.id, p.id),
		cols:       s.opts.Columns,
		rows:       s.opts.Rows,
		scrollback: s.opts.ScrollbackLines,
		history:    historyInput(history),
		outputRate: s.opts.OutputRate,
		burst:      s.opts.OutputBurst,
	}
	spec.user, spec.view = ws.user, view
	spec.hideProcesses = s.users != nil && s.users.hideProcesses
	s.starting[p] = struct{}{}
	return p, spec, nil
}

// startPane starts p's shell. It runs without the session's lock: a start
// is a process launch (for a workspace's user, through the launcher), and
// under the lock it would hold up every client's every call. On an error
// the pane is given up.
func (s *session) startPane(p *pane, spec shellSpec) error {
	if err := s.startShellOf(p, spec); err != nil {
		s.mu.Lock()
		s.giveUpLocked(p)
		s.mu.Unlock()
		return err
	}
	return nil
}

// startShellOf starts p's shell, whose exit removes p once p settled.
func (s *session) startShellOf(p *pane, spec shellSpec) error {
	sh, err := startShell(spec, func() {
		<-p.settled
		s.shellExited(p)
	})
	p.sh = sh
	return err
}

// addPaneLocked adds a pane, whose shell started, to its tab.
func (s *session) addPaneLocked(p *pane) {
	delete(s.starting, p)
	p.tab.panes = append(p.tab.panes, p)
	s.panes[p.id] = p
	close(p.settled)
}

// giveUpLocked drops a pane that never entered the layout: the server shut
// down or its workspace closed meanwhile, or its shell did not start. A
// shell that started is the caller's to terminate, after the lock. Its
// user is swept whether or not the shell started: a close that came while
// the pane was starting left the sweep to it.
func (s *session) giveUpLocked(p *pane) {
	delete(s.starting, p)
	p.gone = true
	close(p.settled)
	s.endUsersLocked([]*pane{p})
}

// paneEnv is the environment of a pane's shell, as herdr builds it: the
// server's own environment, TERM and COLORTERM, then the caller's env, then
// herdr's own variables, which nothing overrides.
func (s *session) paneEnv(extra map[string]string, workspaceID, tabID, paneID string) []string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	env["TERM"], env["COLORTERM"] = "xterm-256color", "truecolor"
	delete(env, envCodexThread)
	maps.Copy(env, extra)
	maps.Copy(env, map[string]string{
		envSocketPath:  s.opts.SocketPath,
		envHerdr:       "1",
		envWorkspaceID: workspaceID,
		envTabID:       tabID,
		envPaneID:      paneID,
		envBinPath:     s.opts.BinPath,
	})
	list := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		list = append(list, k+"="+env[k])
	}
	return list
}

// publicDigits are herdr's digits for the numbers in its ids: bijective
// base 32, so 9 is "9", 10 is "A" and 32 is "0".
const publicDigits = "123456789ABCDEFGHJKMNPQRSTVWXYZ0"

// publicNumber spells n (at least 1) as herdr spells it in ids.
func publicNumber(n int) string {
	var b []byte
	for n > 0 {
		n--
		b = append(b, publicDigits[n%len(publicDigits)])
		n /= len(publicDigits)
	}
	slices.Reverse(b)
	return string(b)
}

func validateEnv(env map[string]string) *herdr.Error {
	for k, v := range env {
		switch {
		case k == "":
			return errorf(herdr.CodeInvalidEnv, "env key must not be empty")
		case strings.ContainsRune(k, '='):
			return errorf(herdr.CodeInvalidEnv, "env key %s must not contain '='", k)
		case strings.ContainsRune(k, 0):
			return errorf(herdr.CodeInvalidEnv, "env key must not contain NUL bytes")
		case strings.ContainsRune(v, 0):
			return errorf(herdr.CodeInvalidEnv, "env value for %s must not contain NUL bytes", k)
		}
	}
	return nil
}

func (s *session) closePane(id string) *herdr.Error {
	s.mu.Lock()
	p := s.panes[id]
	if p == nil {
		s.mu.Unlock()
		return errorf(herdr.CodePaneNotFound, "pane %s not found", id)
	}
	s.removePaneLocked(p, herdr.EventPaneClosed)
	s.endUsersLocked([]*pane{p})
	s.mu.Unlock()
	p.sh.terminate()
	return nil
}

// shellExited removes a pane whose shell ended on its own.
func (s *session) shellExited(p *pane) {
	s.mu.Lock()
	if p.gone {
		s.mu.Unlock()
		return
	}
	s.removePaneLocked(p, herdr.EventPaneExited)
	s.endUsersLocked([]*pane{p})
	s.mu.Unlock()
	p.sh.terminate()
}

// endUsersLocked ends every process of the users of panes, gone from the
// session, that no pane runs as any more, nor starts as: a member's
// processes that left its pane's session (setsid, daemons) end with its
// last pane. It runs under the lock, so no pane of such a user starts
// meanwhile (a start is counted under the lock, before it begins), and before
// the panes' shells are terminated, whose terminals a process that left
// would otherwise hold open.
func (s *session) endUsersLocked(panes []*pane) {
	done := map[uint32]bool{}
	for _, p := range panes {
		u := p.ws.user
		if u == nil || done[u.uid] {
			continue
		}
		done[u.uid] = true
		if s.userHasPaneLocked(u.uid) {
			continue
		}
		if err := endUser(u.uid); err != nil && !errors.Is(err, errors.ErrUnsupported) {
			s.opts.Logger.Error("Ending the processes of a workspace's user", "uid", u.uid, "err", err)
		}
	}
}

func (s *session) userHasPaneLocked(uid uint32) bool {
	of := func(p *pane) bool { return p.ws.user != nil && p.ws.user.uid == uid }
	for _, p := range s.panes {
		if of(p) {
			return true
		}
	}
	for p := range s.starting {
		if of(p) {
			return true
		}
	}
	return false
}

// removePaneLocked takes a pane out of the layout, and its tab and workspace
// when they become empty, publishing kind for the pane.
func (s *session) removePaneLocked(p *pane, kind herdr.EventKind) {
	ws, t := p.ws, p.tab
	wsInfo := s.workspaceInfoLocked(ws)
	p.gone = true
	delete(s.panes, p.id)
	t.panes = slices.DeleteFunc(t.panes, func(q *pane) bool { return q == p })
	s.hub.publish(lifecycle(kind, herdr.EventData{PaneID: p.id, WorkspaceID: ws.id}))

	if len(t.panes) == 0 {
		ws.tabs = slices.DeleteFunc(ws.tabs, func(u *tab) bool { return u == t })
		if ws.activeTab == t {
			ws.activeTab = firstOrNil(ws.tabs)
		}
		if len(ws.tabs) == 0 {
			s.removeWorkspaceLocked(ws)
			s.hub.publish(lifecycle(herdr.EventWorkspaceClosed, herdr.EventData{WorkspaceID: ws.id, Workspace: &wsInfo}))
		} else {
			s.hub.publish(lifecycle(herdr.EventTabClosed, herdr.EventData{TabID: t.id, WorkspaceID: ws.id}))
		}
	}
	s.notifyLocked()
}

func (s *session) closeWorkspace(id string) *herdr.Error {
	s.mu.Lock()
	ws := s.workspaceLocked(id)
	if ws == nil {
		s.mu.Unlock()
		return errorf(herdr.CodeWorkspaceNotFound, "workspace %s not found", id)
	}
	info := s.workspaceInfoLocked(ws)
	var doomed []*pane
	for _, t := range ws.tabs {
		for _, p := range t.panes {
			p.gone = true
			delete(s.panes, p.id)
			doomed = append(doomed, p)
		}
	}
	s.removeWorkspaceLocked(ws)
	s.hub.publish(lifecycle(herdr.EventWorkspaceClosed, herdr.EventData{WorkspaceID: ws.id, Workspace: &info}))
	s.notifyLocked()
	s.endUsersLocked(doomed)
	s.mu.Unlock()
	terminateAll(doomed)
	return nil
}

func (s *session) removeWorkspaceLocked(ws *workspace) {
	s.workspaces = slices.DeleteFunc(s.workspaces, func(w *workspace) bool { return w == ws })
	if s.active == ws {
		s.active = firstOrNil(s.workspaces)
	}
}

// shutdown ends every pane; the session takes no new ones.
func (s *session) shutdown() {
	s.mu.Lock()
	if s.saveTimer != nil {
		s.saveTimer.Stop()
		s.saveTimer = nil
	}
	if s.opts.SessionFile != "" {
		if err := writeSession(s.opts.SessionFile, s.savedLocked()); err != nil {
			s.opts.Logger.Error("Saving the session", "err", err)
		}
	}
	s.closed = true
	doomed := slices.Collect(maps.Values(s.panes))
	for _, p := range doomed {
		p.gone = true
	}
	clear(s.panes)
	s.workspaces, s.active = nil, nil
	s.notifyLocked()
	s.endUsersLocked(doomed)
	s.mu.Unlock()
	terminateAll(doomed)
}

func terminateAll(panes []*pane) {
	var wg sync.WaitGroup
	for _, p := range panes {
		wg.Go(p.sh.terminate)
	}
	wg.Wait()
}

func (s *session) workspaceLocked(id string) *workspace {
	for _, ws := range s.workspaces {
		if ws.id == id {
			return ws
		}
	}
	return nil
}

// readPane reads a pane's terminal.
func (s *session) readPane(id string, source herdr.ReadSource, lines *int) (*herdr.PaneRead, *herdr.Error) {
	s.mu.Lock()
	p := s.panes[id]
	if p == nil {
		s.mu.Unlock()
		return nil, errorf(herdr.CodePaneNotFound, "pane %s not found", id)
	}
	read := herdr.PaneRead{PaneID: p.id, WorkspaceID: p.ws.id, TabID: p.tab.id, Source: source, Format: herdr.ReadFormatText}
	term := p.sh.term
	s.mu.Unlock()

	snap := term.read(source, lines)
	// herdr's pane.read always answers revision 0.
	read.Text, read.Truncated = snap.text, snap.truncated
	return &read, nil
}

// sendInput types text and then keys into a pane.
func (s *session) sendInput(id, text string, keys []string) *herdr.Error {
	s.mu.Lock()
	p := s.panes[id]
	s.mu.Unlock()
	if p == nil {
		return errorf(herdr.CodePaneNotFound, "pane %s not found", id)
	}
	modes := p.sh.term.modes()
	input := encodeText(text, modes)
	for _, k := range keys {
		seq, err := encodeKey(k, modes)
		if err != nil {
			return errorf(herdr.CodeInvalidKey, "%v", err)
		}
		input += seq
	}
	if err := p.sh.write(input); err != nil {
		return errorf(herdr.CodePaneSendFailed, "%v", err)
	}
	return nil
}

func (s *session) snapshot() *herdr.SessionSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := &herdr.SessionSnapshot{
		Version:    s.opts.Version,
		Protocol:   s.opts.Protocol,
		Workspaces: []herdr.WorkspaceInfo{},
		Tabs:       []herdr.TabInfo{},
		Panes:      []herdr.PaneInfo{},
		Layouts:    []herdr.PaneLayoutSnapshot{},
		Agents:     []herdr.AgentInfo{},
	}
	for _, ws := range s.workspaces {
		snap.Workspaces = append(snap.Workspaces, s.workspaceInfoLocked(ws))
		for _, t := range ws.tabs {
			snap.Tabs = append(snap.Tabs, s.tabInfoLocked(t))
			snap.Layouts = append(snap.Layouts, s.layoutLocked(t))
			for _, p := range t.panes {
				snap.Panes = append(snap.Panes, s.paneInfoLocked(p))
				if p.agent.hosted() {
					snap.Agents = append(snap.Agents, s.agentInfoLocked(p))
				}
			}
		}
	}
	if ws := s.active; ws != nil {
		snap.FocusedWorkspaceID = &ws.id
		if t := ws.activeTab; t != nil {
			snap.FocusedTabID = &t.id
			if len(t.panes) > 0 {
				snap.FocusedPaneID = &t.panes[0].id
			}
		}
	}
	return snap
}

func (s *session) tabFocusedLocked(t *tab) bool {
	return t.ws == s.active && t.ws.activeTab == t
}

func (s *session) workspaceInfoLocked(ws *workspace) herdr.WorkspaceInfo {
	info := herdr.WorkspaceInfo{
		WorkspaceID: ws.id,
		Number:      slices.Index(s.workspaces, ws) + 1,
		Label:       ws.label,
		Focused:     ws == s.active,
		TabCount:    len(ws.tabs),
		AgentStatus: herdr.AgentStatusUnknown,
	}
	if ws.activeTab != nil {
		info.ActiveTabID = ws.activeTab.id
	}
	for _, t := range ws.tabs {
		info.PaneCount += len(t.panes)
		info.AgentStatus = mostUrgent(info.AgentStatus, tabStatus(t))
	}
	return info
}

func (s *session) tabInfoLocked(t *tab) herdr.TabInfo {
	return herdr.TabInfo{
		TabID:       t.id,
		WorkspaceID: t.ws.id,
		Number:      slices.Index(t.ws.tabs, t) + 1,
		Label:       t.label,
		Focused:     s.tabFocusedLocked(t),
		PaneCount:   len(t.panes),
		AgentStatus: tabStatus(t),
	}
}

func (s *session) paneInfoLocked(p *pane) herdr.PaneInfo {
	info := herdr.PaneInfo{
		PaneID:       p.id,
		TerminalID:   p.terminalID,
		WorkspaceID:  p.ws.id,
		TabID:        p.tab.id,
		Focused:      s.tabFocusedLocked(p.tab),
		AgentStatus:  p.agent.status,
		Revision:     p.sh.term.currentRevision(),
		Agent:        optional(p.agent.label),
		AgentSession: p.agent.session,
		Cwd:          optional(p.currentCwd()),
		Title:        optional(p.sh.term.currentTitle()),
	}
	info.TerminalTitle = info.Title
	return info
}

func (s *session) layoutLocked(t *tab) herdr.PaneLayoutSnapshot {
	area := herdr.PaneLayoutRect{Width: s.opts.Columns, Height: s.opts.Rows}
	layout := herdr.PaneLayoutSnapshot{
		WorkspaceID: t.ws.id,
		TabID:       t.id,
		Area:        area,
		Panes:       []herdr.PaneLayoutPane{},
		Splits:      []herdr.PaneLayoutSplit{},
	}
	// Tabs here hold one pane: there is no split method.
	for _, p := range t.panes {
		layout.FocusedPaneID = cmp.Or(layout.FocusedPaneID, p.id)
		layout.Panes = append(layout.Panes, herdr.PaneLayoutPane{PaneID: p.id, Focused: s.tabFocusedLocked(t), Rect: area})
	}
	return layout
}

// currentCwd is where the shell is now, or where it started.
func (p *pane) currentCwd() string {
	if cwd, ok := p.sh.cwd(); ok {
		return cwd
	}
	return p.cwd
}

func tabStatus(t *tab) herdr.AgentStatus {
	status := herdr.AgentStatusUnknown
	for _, p := range t.panes {
		status = mostUrgent(status, p.agent.status)
	}
	return status
}

// statusUrgency ranks statuses as herdr ranks a tab's attention.
var statusUrgency = map[herdr.AgentStatus]int{
	herdr.AgentStatusUnknown: 0,
	herdr.AgentStatusIdle:    1,
	herdr.AgentStatusWorking: 2,
	herdr.AgentStatusDone:    3,
	herdr.AgentStatusBlocked: 4,
}

func mostUrgent(a, b herdr.AgentStatus) herdr.AgentStatus {
	if statusUrgency[b] > statusUrgency[a] {
		return b
	}
	return a
}

func lifecycle(kind herdr.EventKind, data herdr.EventData) herdr.Event {
	data.Type = kind
	return herdr.Event{Kind: kind, Data: data}
}

func firstOrNil[T any](list []*T) *T {
	if len(list) == 0 {
		return nil
	}
	return list[0]
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func errorf(code, format string, args ...any) *herdr.Error {
	return &herdr.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// renameWorkspace sets workspace id's label. Where labels pick the Unix
// user a workspace runs as, a label is the workspace's for good: renaming
// would give one user's processes another's label.
func (s *session) renameWorkspace(id, label string) (herdr.WorkspaceInfo, *herdr.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ws := s.workspaceLocked(id)
	if ws == nil {
		return herdr.WorkspaceInfo{}, errorf(herdr.CodeWorkspaceNotFound, "workspace %s not found", id)
	}
	if s.users != nil && label != ws.label {
		return herdr.WorkspaceInfo{}, errorf(herdr.CodeInvalidParams, "workspace labels choose the Unix user here; workspace %s keeps its label", id)
	}
	ws.label = label
	return s.workspaceInfoLocked(ws), nil
}
