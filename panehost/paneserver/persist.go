package paneserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/memberfs"
)

// defaultSaveDelay is herdr's debounce before it saves its session.
const defaultSaveDelay = 5 * time.Second

// historyLines is how much of a pane's output is saved, to show again in
// the fresh shell that replaces it after a restart.
const historyLines = 200

// savedSession is what the server keeps across restarts, as herdr keeps
// session.json: the layout with its ids, each pane's recent output, and the
// agents whose official integration reported a session, so they can be
// resumed.
type savedSession struct {
	LastWorkspace int              `json:"last_workspace"`
	Workspaces    []savedWorkspace `json:"workspaces"`
	// Users are the workspace labels' Unix users, for a person to read. A
	// restored workspace's user derives from its label again, never from
	// here: a file that names a user outside the workspaces' range is
	// refused whole.
	Users   map[string]uint32 `json:"users,omitempty"`
	NextUID uint32            `json:"next_uid,omitempty"`
}

type savedWorkspace struct {
	ID       string     `json:"id"`
	Label    string     `json:"label"`
	Cwd      string     `json:"cwd"`
	LastTab  int        `json:"last_tab"`
	LastPane int        `json:"last_pane"`
	Tabs     []savedTab `json:"tabs"`
}

type savedTab struct {
	ID    string      `json:"id"`
	Label string      `json:"label"`
	Panes []savedPane `json:"panes"`
}

type savedPane struct {
	ID      string      `json:"id"`
	Cwd     string      `json:"cwd"`
	History string      `json:"history,omitempty"`
	Agent   *savedAgent `json:"agent,omitempty"`
}

// savedAgent is an agent herdr can resume: its official integration
// reported the session it runs.
type savedAgent struct {
	Name      string `json:"name,omitempty"`
	Kind      string `json:"kind"`
	Source    string `json:"source"`
	SessionID string `json:"session_id"`
}

// resumeArgs is the command line that resumes an agent's session, as herdr
// types it after a restart; nil when herdr does not resume that agent.
func resumeArgs(kind, id string) []string {
	switch kind {
	case "claude", "devin", "droid", "hermes", "qodercli", "qwen", "grok":
		return []string{"--resume", id}
	case "cursor":
		return []string{"--resume", id}
	case "codex":
		return []string{"resume", id}
	case "copilot", "omp":
		return []string{"--resume=" + id}
	case "kimi", "pi", "opencode", "kilo":
		return []string{"--session", id}
	case "mastracode":
		return []string{"--thread", id}
	case "agy":
		return []string{"--conversation", id}
	}
	return nil
}

// scheduleSaveLocked saves the session after the save delay, once for a
// burst of changes.
func (s *session) scheduleSaveLocked() {
	if s.opts.SessionFile == "" || s.closed || s.saveTimer != nil {
		return
	}
	s.saveTimer = time.AfterFunc(s.opts.SaveDelay, func() {
		s.mu.Lock()
		s.saveTimer = nil
		saved := s.savedLocked()
		s.mu.Unlock()
		if err := writeSession(s.opts.SessionFile, saved); err != nil {
			s.opts.Logger.Error("Saving the session", "err", err)
		}
	})
}

// savedLocked is the session as it would be restored.
func (s *session) savedLocked() savedSession {
	saved := savedSession{LastWorkspace: s.lastWorkspace, Workspaces: []savedWorkspace{}}
	if s.users != nil {
		saved.Users, saved.NextUID = maps.Clone(s.users.byLabel), s.users.next
	}
	for _, ws := range s.workspaces {
		sw := savedWorkspace{ID: ws.id, Label: ws.label, Cwd: ws.cwd, LastTab: ws.lastTab, LastPane: ws.lastPane}
		for _, t := range ws.tabs {
			st := savedTab{ID: t.id, Label: t.label}
			for _, p := range t.panes {
				lines := historyLines
				sp := savedPane{ID: p.id, Cwd: p.currentCwd(), History: p.sh.term.read(herdr.ReadSourceRecent, &lines).text}
				if a := p.agent.session; a != nil && a.Kind == herdr.AgentSessionRefID && resumeArgs(a.Agent, a.Value) != nil {
					sp.Agent = &savedAgent{Name: p.agent.name, Kind: a.Agent, Source: a.Source, SessionID: a.Value}
				}
				st.Panes = append(st.Panes, sp)
			}
			sw.Tabs = append(sw.Tabs, st)
		}
		saved.Workspaces = append(saved.Workspaces, sw)
	}
	return saved
}

// maxSessionFile bounds the saved session that is read back: every pane's
// recent output is in it.
const maxSessionFile = 256 << 20

// writeSession saves the session in a file of the server's own, mode 0600,
// written in full under a fresh name and then renamed over path, so no
// name anyone else left in the directory is written through.
func writeSession(path string, saved savedSession) error {
	raw, err := json.Marshal(saved)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(raw)
	if err := tmp.Close(); werr == nil {
		werr = err
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
	}
	return werr
}

// restore brings back a saved session, as herdr does after a restart: the
// same workspace, tab and pane ids, each pane a fresh shell in its old
// directory showing its old output, and agents with an official session
// resumed under their old names, ready at once. Other agents are gone.
//
// The file decides which user each pane's shell runs as only through its
// workspace's label: the user derives from the label, as for a new
// workspace. Before a byte is read, the file must be the server's own, mode
// 0600, a regular file and no link; a file that names a user outside the
// workspaces' range is refused.
func (s *session) restore() error {
	raw, err := memberfs.ReadPrivateFile(s.opts.SessionFile, maxSessionFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the saved session: %w", err)
	}
	var saved savedSession
	if err := json.Unmarshal(raw, &saved); err != nil {
		return fmt.Errorf("decoding the saved session %s: %w", s.opts.SessionFile, err)
	}
	if s.users != nil {
		for label, uid := range saved.Users {
			if !s.users.inRange(uid) {
				return fmt.Errorf("the saved session %s gives workspace %q user %d, outside the workspaces' users (%d to %d): refused", s.opts.SessionFile, label, uid, s.users.opts.FirstUID, s.users.opts.FirstUID+2*labelUIDs-1)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastWorkspace = max(s.lastWorkspace, saved.LastWorkspace)
	now := time.Now()
	for _, sw := range saved.Workspaces {
		ws := &workspace{id: sw.ID, label: sw.Label, cwd: sw.Cwd, lastTab: sw.LastTab, lastPane: sw.LastPane}
		if s.users != nil {
			u, err := s.users.forLabel(sw.Label)
			if err != nil {
				return fmt.Errorf("restoring workspace %s: %w", sw.ID, err)
			}
			ws.user = &u
		}
		for _, st := range sw.Tabs {
			t := &tab{id: st.ID, label: st.Label, ws: ws}
			for _, sp := range st.Panes {
				// The server does not serve yet: the shell starts under the
				// lock, which no one waits for.
				p, spec, err := s.newPaneLocked(ws, t, sp.ID, existingDir(sp.Cwd), nil, sp.History)
				if err != nil {
					return fmt.Errorf("restoring pane %s: %w", sp.ID, err)
				}
				if err := s.startShellOf(p, spec); err != nil {
					s.giveUpLocked(p)
					return fmt.Errorf("restoring pane %s: %w", sp.ID, err)
				}
				s.addPaneLocked(p)
				if ag := sp.Agent; ag != nil {
					s.resumeLocked(p, ag, now)
				}
			}
			if len(t.panes) > 0 {
				ws.tabs = append(ws.tabs, t)
			}
		}
		if len(ws.tabs) == 0 {
			continue
		}
		ws.activeTab = ws.tabs[0]
		s.workspaces = append(s.workspaces, ws)
		if s.active == nil {
			s.active = ws
		}
	}
	return nil
}

// resumeLocked types the command that resumes a saved agent's session and
// gives the agent back its name, ready, as herdr does.
func (s *session) resumeLocked(p *pane, ag *savedAgent, now time.Time) {
	argv := append([]string{s.opts.agentExecutable(ag.Kind)}, resumeArgs(ag.Kind, ag.SessionID)...)
	if err := p.sh.write(shellCommand(argv) + enterKey); err != nil {
		return
	}
	a := &p.agent
	a.session = &herdr.AgentSessionInfo{Source: ag.Source, Agent: ag.Kind, Kind: herdr.AgentSessionRefID, Value: ag.SessionID}
	a.detected, a.detectedAt = ag.Kind, now.Add(-s.opts.AgentSettle)
	if ag.Name != "" {
		a.name, a.kind, a.phase, a.seenKind = ag.Name, ag.Kind, launchActive, true
	}
	s.refreshLocked(p, now)
}

// existingDir is dir if it exists, else $HOME, else /.
func existingDir(dir string) string {
	for _, d := range []string{dir, os.Getenv("HOME")} {
		if st, err := os.Stat(d); d != "" && err == nil && st.IsDir() {
			return d
		}
	}
	return "/"
}

// historyInput is saved output as terminal input: lines ended with CRLF.
func historyInput(history string) []byte {
	if history == "" {
		return nil
	}
	return []byte(strings.ReplaceAll(history, "\n", "\r\n") + "\r\n")
}
