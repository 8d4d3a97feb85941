package herdr

// MinProtocol is the oldest herdr protocol fleetd works with (herdr 0.8.2).
const MinProtocol = 20

// AgentStatus is the status herdr shows for a pane's agent.
type AgentStatus string

// Agent statuses. A headless controller treats idle and done alike: done is
// idle-but-unseen.
const (
	// AgentStatusIdle means the agent waits for a prompt.
	AgentStatusIdle AgentStatus = "idle"
	// AgentStatusWorking means the agent is busy with a turn.
	AgentStatusWorking AgentStatus = "working"
	// AgentStatusBlocked means an approval or question dialog is on screen:
	// typed text would answer it.
	AgentStatusBlocked AgentStatus = "blocked"
	// AgentStatusDone means the agent finished and nobody looked yet.
	AgentStatusDone AgentStatus = "done"
	// AgentStatusUnknown means a plain shell or an unrecognised program.
	AgentStatusUnknown AgentStatus = "unknown"
)

// Valid reports whether s is one of herdr's agent statuses.
func (s AgentStatus) Valid() bool {
	switch s {
	case AgentStatusIdle, AgentStatusWorking, AgentStatusBlocked, AgentStatusDone, AgentStatusUnknown:
		return true
	}
	return false
}

// AgentState is the state an agent reports about itself through
// pane.report_agent. It has no done: herdr derives that.
type AgentState string

// Reportable agent states.
const (
	// AgentStateIdle reports an agent waiting for a prompt.
	AgentStateIdle AgentState = "idle"
	// AgentStateWorking reports an agent busy with a turn.
	AgentStateWorking AgentState = "working"
	// AgentStateBlocked reports an agent waiting on an approval or question.
	AgentStateBlocked AgentState = "blocked"
	// AgentStateUnknown reports an agent whose state is not known.
	AgentStateUnknown AgentState = "unknown"
)

// Valid reports whether s is one of the reportable states.
func (s AgentState) Valid() bool {
	switch s {
	case AgentStateIdle, AgentStateWorking, AgentStateBlocked, AgentStateUnknown:
		return true
	}
	return false
}

// ReadSource selects what pane.read and agent.read return.
type ReadSource string

// Read sources.
const (
	// ReadSourceVisible is the screen as it is now.
	ReadSourceVisible ReadSource = "visible"
	// ReadSourceRecent is the latest scrollback and screen rows, wrapped as
	// they are displayed.
	ReadSourceRecent ReadSource = "recent"
	// ReadSourceRecentUnwrapped is the latest output as logical lines.
	ReadSourceRecentUnwrapped ReadSource = "recent_unwrapped"
	// ReadSourceDetection is the text herdr's status detection looks at.
	ReadSourceDetection ReadSource = "detection"
)

// Valid reports whether s is one of herdr's read sources.
func (s ReadSource) Valid() bool {
	switch s {
	case ReadSourceVisible, ReadSourceRecent, ReadSourceRecentUnwrapped, ReadSourceDetection:
		return true
	}
	return false
}

// ReadFormat selects plain text or text with ANSI styling.
type ReadFormat string

// Read formats.
const (
	// ReadFormatText is plain text.
	ReadFormatText ReadFormat = "text"
	// ReadFormatANSI keeps ANSI styling.
	ReadFormatANSI ReadFormat = "ansi"
)

// Valid reports whether f is one of herdr's read formats.
func (f ReadFormat) Valid() bool {
	return f == ReadFormatText || f == ReadFormatANSI
}

// ServerCapabilities lists optional server features.
type ServerCapabilities struct {
	// LiveHandoff reports whether the server can hand its panes to a new binary.
	LiveHandoff bool `json:"live_handoff"`
	// DetachedServerDaemon reports whether the server runs detached.
	DetachedServerDaemon bool `json:"detached_server_daemon,omitempty"`
}

// Pong is the result of ping.
type Pong struct {
	// Version is the server's version string.
	Version string `json:"version"`
	// Protocol is the API protocol number; fleetd needs at least MinProtocol.
	Protocol int `json:"protocol"`
	// Capabilities lists optional features; older servers send none.
	Capabilities *ServerCapabilities `json:"capabilities,omitempty"`
}

// WorkspaceWorktreeInfo describes the git worktree a workspace was opened on.
type WorkspaceWorktreeInfo struct {
	// RepoKey identifies the repository.
	RepoKey string `json:"repo_key"`
	// RepoName is the repository's display name.
	RepoName string `json:"repo_name"`
	// RepoRoot is the repository's root directory.
	RepoRoot string `json:"repo_root"`
	// CheckoutPath is the worktree's directory.
	CheckoutPath string `json:"checkout_path"`
	// IsLinkedWorktree reports whether this is a linked worktree.
	IsLinkedWorktree bool `json:"is_linked_worktree"`
}

// WorkspaceInfo describes a workspace: a named group of tabs.
type WorkspaceInfo struct {
	// WorkspaceID is the workspace's opaque id, e.g. "w1".
	WorkspaceID string `json:"workspace_id"`
	// Number is the workspace's 1-based position.
	Number int `json:"number"`
	// Label is the workspace's display name.
	Label string `json:"label"`
	// Focused reports whether the workspace is the active one.
	Focused bool `json:"focused"`
	// PaneCount counts the workspace's panes.
	PaneCount int `json:"pane_count"`
	// TabCount counts the workspace's tabs.
	TabCount int `json:"tab_count"`
	// ActiveTabID is the id of the workspace's active tab.
	ActiveTabID string `json:"active_tab_id"`
	// AgentStatus is the most urgent status among the workspace's panes.
	AgentStatus AgentStatus `json:"agent_status"`
	// Tokens holds metadata reported for the workspace.
	Tokens map[string]string `json:"tokens,omitempty"`
	// Worktree is set when the workspace was opened on a git worktree.
	Worktree *WorkspaceWorktreeInfo `json:"worktree,omitempty"`
}

// TabInfo describes a tab: a layout of panes inside a workspace.
type TabInfo struct {
	// TabID is the tab's opaque id, e.g. "w1:t1".
	TabID string `json:"tab_id"`
	// WorkspaceID is the id of the workspace holding the tab.
	WorkspaceID string `json:"workspace_id"`
	// Number is the tab's 1-based position in its workspace.
	Number int `json:"number"`
	// Label is the tab's display name.
	Label string `json:"label"`
	// Focused reports whether the tab is its workspace's active tab.
	Focused bool `json:"focused"`
	// PaneCount counts the tab's panes.
	PaneCount int `json:"pane_count"`
	// AgentStatus is the most urgent status among the tab's panes.
	AgentStatus AgentStatus `json:"agent_status"`
}

// AgentSessionRefKind says how an agent session is referenced.
type AgentSessionRefKind string

// Agent session reference kinds.
const (
	// AgentSessionRefID references a session by the agent's session id.
	AgentSessionRefID AgentSessionRefKind = "id"
	// AgentSessionRefPath references a session by a transcript path.
	AgentSessionRefPath AgentSessionRefKind = "path"
)

// AgentSessionInfo is the agent conversation a pane's agent reported.
type AgentSessionInfo struct {
	// Source is the reporter, e.g. a hook integration's name.
	Source string `json:"source"`
	// Agent is the agent label the session belongs to.
	Agent string `json:"agent"`
	// Kind says whether Value is an id or a path.
	Kind AgentSessionRefKind `json:"kind"`
	// Value is the session id or path.
	Value string `json:"value"`
}

// PaneScrollInfo describes a pane's scroll position.
type PaneScrollInfo struct {
	// OffsetFromBottom is how many rows the view is scrolled up.
	OffsetFromBottom uint64 `json:"offset_from_bottom"`
	// MaxOffsetFromBottom is how far up the view can scroll.
	MaxOffsetFromBottom uint64 `json:"max_offset_from_bottom"`
	// ViewportRows is the height of the view.
	ViewportRows uint64 `json:"viewport_rows"`
}

// PaneInfo describes a pane: one terminal in a tab.
type PaneInfo struct {
	// PaneID is the pane's opaque id, e.g. "w1:p1". A moved pane gets a new id.
	PaneID string `json:"pane_id"`
	// TerminalID is the id of the terminal shown in the pane, e.g. "term_1a2b".
	TerminalID string `json:"terminal_id"`
	// WorkspaceID is the id of the pane's workspace.
	WorkspaceID string `json:"workspace_id"`
	// TabID is the id of the pane's tab.
	TabID string `json:"tab_id"`
	// Focused reports whether the pane has focus.
	Focused bool `json:"focused"`
	// AgentStatus is the status of the pane's agent; unknown for a plain shell.
	AgentStatus AgentStatus `json:"agent_status"`
	// Revision advances when the pane's content changes.
	Revision uint64 `json:"revision"`
	// Agent is the label of the agent in the pane, if any.
	Agent *string `json:"agent,omitempty"`
	// AgentSession is the agent conversation the agent reported, if any.
	AgentSession *AgentSessionInfo `json:"agent_session,omitempty"`
	// Cwd is the working directory of the pane's shell.
	Cwd *string `json:"cwd,omitempty"`
	// DisplayAgent is the agent name shown to people, if it differs.
	DisplayAgent *string `json:"display_agent,omitempty"`
	// ForegroundCwd is the working directory of the foreground program.
	ForegroundCwd *string `json:"foreground_cwd,omitempty"`
	// Label is the pane's manual label.
	Label *string `json:"label,omitempty"`
	// Scroll is the pane's scroll position when scrolled.
	Scroll *PaneScrollInfo `json:"scroll,omitempty"`
	// StateLabels maps statuses to custom display labels.
	StateLabels map[string]string `json:"state_labels,omitempty"`
	// TerminalTitle is the title the program set.
	TerminalTitle *string `json:"terminal_title,omitempty"`
	// TerminalTitleStripped is TerminalTitle without decoration.
	TerminalTitleStripped *string `json:"terminal_title_stripped,omitempty"`
	// Title is the pane's display title.
	Title *string `json:"title,omitempty"`
	// Tokens holds metadata reported for the pane.
	Tokens map[string]string `json:"tokens,omitempty"`
}

// AgentInfo describes a pane that hosts an agent.
type AgentInfo struct {
	// PaneID is the id of the agent's pane.
	PaneID string `json:"pane_id"`
	// TerminalID is the id of the agent's terminal.
	TerminalID string `json:"terminal_id"`
	// WorkspaceID is the id of the agent's workspace.
	WorkspaceID string `json:"workspace_id"`
	// TabID is the id of the agent's tab.
	TabID string `json:"tab_id"`
	// Focused reports whether the agent's pane has focus.
	Focused bool `json:"focused"`
	// AgentStatus is the agent's status.
	AgentStatus AgentStatus `json:"agent_status"`
	// Revision advances when the pane's content changes.
	Revision uint64 `json:"revision"`
	// Name is the name agent.start gave the agent.
	Name *string `json:"name,omitempty"`
	// Agent is the agent's label, e.g. "claude".
	Agent *string `json:"agent,omitempty"`
	// AgentSession is the agent conversation the agent reported, if any.
	AgentSession *AgentSessionInfo `json:"agent_session,omitempty"`
	// Cwd is the working directory of the pane's shell.
	Cwd *string `json:"cwd,omitempty"`
	// DisplayAgent is the agent name shown to people, if it differs.
	DisplayAgent *string `json:"display_agent,omitempty"`
	// ForegroundCwd is the working directory of the foreground program.
	ForegroundCwd *string `json:"foreground_cwd,omitempty"`
	// LaunchPending reports that agent.start typed the command and the agent
	// is not interactive yet.
	LaunchPending bool `json:"launch_pending,omitempty"`
	// InteractiveReady reports that the agent can take a prompt.
	InteractiveReady bool `json:"interactive_ready,omitempty"`
	// ScreenDetectionSkipped reports that hooks, not the screen, decide the status.
	ScreenDetectionSkipped bool `json:"screen_detection_skipped,omitempty"`
	// StateChangeSeq advances on every status change; compare two samples to
	// see a change that happened between them.
	StateChangeSeq uint64 `json:"state_change_seq"`
	// StateLabels maps statuses to custom display labels.
	StateLabels map[string]string `json:"state_labels,omitempty"`
	// TerminalTitle is the title the program set.
	TerminalTitle *string `json:"terminal_title,omitempty"`
	// TerminalTitleStripped is TerminalTitle without decoration.
	TerminalTitleStripped *string `json:"terminal_title_stripped,omitempty"`
	// Title is the pane's display title.
	Title *string `json:"title,omitempty"`
	// Tokens holds metadata reported for the pane.
	Tokens map[string]string `json:"tokens,omitempty"`
}

// PaneRead is text read from a pane.
type PaneRead struct {
	// PaneID is the id of the pane read.
	PaneID string `json:"pane_id"`
	// WorkspaceID is the id of the pane's workspace.
	WorkspaceID string `json:"workspace_id"`
	// TabID is the id of the pane's tab.
	TabID string `json:"tab_id"`
	// Source is what was read.
	Source ReadSource `json:"source"`
	// Format is the format of Text.
	Format ReadFormat `json:"format"`
	// Text is the content, lines separated by "\n".
	Text string `json:"text"`
	// Revision is the pane's revision when it was read.
	Revision uint64 `json:"revision"`
	// Truncated reports that older lines were left out.
	Truncated bool `json:"truncated"`
}

// SplitDirection is the direction of a layout split.
type SplitDirection string

// Split directions.
const (
	// SplitRight places the new pane to the right.
	SplitRight SplitDirection = "right"
	// SplitDown places the new pane below.
	SplitDown SplitDirection = "down"
)

// PaneLayoutRect is a rectangle in terminal cells.
type PaneLayoutRect struct {
	// X is the left column.
	X int `json:"x"`
	// Y is the top row.
	Y int `json:"y"`
	// Width is the width in columns.
	Width int `json:"width"`
	// Height is the height in rows.
	Height int `json:"height"`
}

// PaneLayoutPane places a pane in a tab's layout.
type PaneLayoutPane struct {
	// PaneID is the pane's id.
	PaneID string `json:"pane_id"`
	// Focused reports whether the pane has focus.
	Focused bool `json:"focused"`
	// Rect is the pane's area.
	Rect PaneLayoutRect `json:"rect"`
}

// PaneLayoutSplit is one split of a tab's layout.
type PaneLayoutSplit struct {
	// ID identifies the split.
	ID string `json:"id"`
	// Direction is the split's direction.
	Direction SplitDirection `json:"direction"`
	// Ratio is the share of the first side.
	Ratio float32 `json:"ratio"`
	// Rect is the split's area.
	Rect PaneLayoutRect `json:"rect"`
}

// PaneLayoutSnapshot is the layout of one tab.
type PaneLayoutSnapshot struct {
	// WorkspaceID is the id of the tab's workspace.
	WorkspaceID string `json:"workspace_id"`
	// TabID is the tab's id.
	TabID string `json:"tab_id"`
	// Zoomed reports whether one pane fills the tab.
	Zoomed bool `json:"zoomed"`
	// Area is the tab's area.
	Area PaneLayoutRect `json:"area"`
	// FocusedPaneID is the id of the tab's focused pane.
	FocusedPaneID string `json:"focused_pane_id"`
	// Panes places each pane.
	Panes []PaneLayoutPane `json:"panes"`
	// Splits lists the splits between panes.
	Splits []PaneLayoutSplit `json:"splits"`
}

// SessionSnapshot is everything a herdr session holds, taken at one instant.
type SessionSnapshot struct {
	// Version is the server's version string.
	Version string `json:"version"`
	// Protocol is the API protocol number.
	Protocol int `json:"protocol"`
	// Workspaces lists every workspace.
	Workspaces []WorkspaceInfo `json:"workspaces"`
	// Tabs lists every tab.
	Tabs []TabInfo `json:"tabs"`
	// Panes lists every pane.
	Panes []PaneInfo `json:"panes"`
	// Layouts lists every tab's layout.
	Layouts []PaneLayoutSnapshot `json:"layouts"`
	// Agents lists every pane that hosts an agent.
	Agents []AgentInfo `json:"agents"`
	// FocusedWorkspaceID is the id of the active workspace, if any.
	FocusedWorkspaceID *string `json:"focused_workspace_id,omitempty"`
	// FocusedTabID is the id of the active tab, if any.
	FocusedTabID *string `json:"focused_tab_id,omitempty"`
	// FocusedPaneID is the id of the focused pane, if any.
	FocusedPaneID *string `json:"focused_pane_id,omitempty"`
}
