package herdr

// Method names of the calls fleetd makes.
const (
	// MethodPing checks that herdr answers and reports its protocol.
	MethodPing = "ping"
	// MethodWorkspaceCreate creates a workspace with a fresh shell.
	MethodWorkspaceCreate = "workspace.create"
	// MethodWorkspaceClose closes a workspace and its panes.
	MethodWorkspaceClose = "workspace.close"
	// MethodWorkspaceRename sets a workspace's label.
	MethodWorkspaceRename = "workspace.rename"
	// MethodAgentRename sets (or, with no name, drops) an agent's name.
	MethodAgentRename = "agent.rename"
	// MethodTabCreate adds a tab with a fresh shell to a workspace.
	MethodTabCreate = "tab.create"
	// MethodAgentStart types an agent's command into an idle shell.
	MethodAgentStart = "agent.start"
	// MethodAgentGet describes one agent.
	MethodAgentGet = "agent.get"
	// MethodAgentList describes every agent.
	MethodAgentList = "agent.list"
	// MethodAgentPrompt types a prompt into an agent.
	MethodAgentPrompt = "agent.prompt"
	// MethodAgentRead reads an agent's pane.
	MethodAgentRead = "agent.read"
	// MethodAgentWait holds until an agent reaches a status.
	MethodAgentWait = "agent.wait"
	// MethodPaneRead reads a pane.
	MethodPaneRead = "pane.read"
	// MethodPaneSendInput types text and keys into a pane.
	MethodPaneSendInput = "pane.send_input"
	// MethodPaneSendKeys presses keys in a pane.
	MethodPaneSendKeys = "pane.send_keys"
	// MethodPaneReportAgent reports an agent's state for its pane.
	MethodPaneReportAgent = "pane.report_agent"
	// MethodPaneReleaseAgent gives up a reporter's authority over a pane.
	MethodPaneReleaseAgent = "pane.release_agent"
	// MethodPaneClearAgentAuthority drops whichever report decides a pane.
	MethodPaneClearAgentAuthority = "pane.clear_agent_authority"
	// MethodPaneClose closes a pane and ends its processes.
	MethodPaneClose = "pane.close"
	// MethodSessionSnapshot describes the whole session.
	MethodSessionSnapshot = "session.snapshot"
	// MethodEventsSubscribe holds the connection open and pushes events.
	MethodEventsSubscribe = "events.subscribe"
)

// Result types: the "type" field of each success result.
const (
	// ResultPong answers ping.
	ResultPong = "pong"
	// ResultWorkspaceCreated answers workspace.create.
	ResultWorkspaceCreated = "workspace_created"
	// ResultWorkspaceInfo answers workspace.rename.
	ResultWorkspaceInfo = "workspace_info"
	// ResultTabCreated answers tab.create.
	ResultTabCreated = "tab_created"
	// ResultAgentStarted answers agent.start.
	ResultAgentStarted = "agent_started"
	// ResultAgentInfo answers agent.get and agent.wait.
	ResultAgentInfo = "agent_info"
	// ResultAgentList answers agent.list.
	ResultAgentList = "agent_list"
	// ResultAgentPrompted answers agent.prompt.
	ResultAgentPrompted = "agent_prompted"
	// ResultPaneRead answers pane.read and agent.read.
	ResultPaneRead = "pane_read"
	// ResultSessionSnapshot answers session.snapshot.
	ResultSessionSnapshot = "session_snapshot"
	// ResultOK answers calls that return nothing.
	ResultOK = "ok"
	// ResultSubscriptionStarted is the first line of events.subscribe.
	ResultSubscriptionStarted = "subscription_started"
)

// EmptyParams are the params of calls that take none.
type EmptyParams struct{}

// WorkspaceCreateParams are the params of workspace.create.
type WorkspaceCreateParams struct {
	// Cwd is the working directory of the workspace's first shell.
	Cwd string `json:"cwd,omitempty"`
	// Env is added to the environment of the workspace's shells. herdr's own
	// HERDR_* variables win over it.
	Env map[string]string `json:"env,omitempty"`
	// Focus makes the new workspace the active one.
	Focus bool `json:"focus,omitempty"`
	// Label is the workspace's display name.
	Label string `json:"label,omitempty"`
}

// WorkspaceTarget names a workspace.
type WorkspaceTarget struct {
	// WorkspaceID is the workspace's id.
	WorkspaceID string `json:"workspace_id"`
}

// WorkspaceRenameParams are the params of workspace.rename.
type WorkspaceRenameParams struct {
	WorkspaceID string `json:"workspace_id"`
	Label       string `json:"label"`
}

// AgentRenameParams are the params of agent.rename: Target is the agent's
// name or pane id, and a nil Name drops its name.
type AgentRenameParams struct {
	Target string  `json:"target"`
	Name   *string `json:"name"`
}

// TabCreateParams are the params of tab.create.
type TabCreateParams struct {
	// WorkspaceID is the workspace to add the tab to; the active one if empty.
	WorkspaceID string `json:"workspace_id,omitempty"`
	// Cwd is the working directory of the tab's shell.
	Cwd string `json:"cwd,omitempty"`
	// Env is added to the environment of the tab's shell.
	Env map[string]string `json:"env,omitempty"`
	// Focus makes the new tab the active one.
	Focus bool `json:"focus,omitempty"`
	// Label is the tab's display name.
	Label string `json:"label,omitempty"`
}

// WorkspaceCreated is the result of workspace.create.
type WorkspaceCreated struct {
	// Workspace is the new workspace.
	Workspace WorkspaceInfo `json:"workspace"`
	// Tab is the workspace's first tab.
	Tab TabInfo `json:"tab"`
	// RootPane is the tab's pane, running a fresh shell.
	RootPane PaneInfo `json:"root_pane"`
}

// TabCreated is the result of tab.create.
type TabCreated struct {
	// Tab is the new tab.
	Tab TabInfo `json:"tab"`
	// RootPane is the tab's pane, running a fresh shell.
	RootPane PaneInfo `json:"root_pane"`
}

// AgentStartParams are the params of agent.start.
type AgentStartParams struct {
	// Name names the agent: [a-z][a-z0-9_-]{0,31}, unique in the session.
	Name string `json:"name"`
	// Kind is a known agent kind, e.g. "claude" or "codex".
	Kind string `json:"kind"`
	// PaneID is the pane to start in; it must be an idle shell.
	PaneID string `json:"pane_id"`
	// Args are passed to the agent's executable.
	Args []string `json:"args,omitempty"`
	// TimeoutMS bounds startup: more than 3000 and at most 300000; 30000 if nil.
	TimeoutMS *uint64 `json:"timeout_ms,omitempty"`
}

// AgentStarted is the result of agent.start. It comes back as soon as the
// command is typed, with Agent.LaunchPending set: poll agent.get until
// InteractiveReady.
type AgentStarted struct {
	// Agent is the agent as herdr sees it right after typing the command.
	Agent AgentInfo `json:"agent"`
	// Argv is the command that was typed.
	Argv []string `json:"argv"`
}

// AgentTarget names an agent by name, pane id or terminal id.
type AgentTarget struct {
	// Target is the agent's name or pane id.
	Target string `json:"target"`
}

// PaneTarget names a pane.
type PaneTarget struct {
	// PaneID is the pane's id.
	PaneID string `json:"pane_id"`
}

// AgentPromptWait makes agent.prompt hold the connection until the agent
// reaches one of the statuses.
type AgentPromptWait struct {
	// Until lists the statuses to wait for; idle, done and blocked if empty.
	Until []AgentStatus `json:"until,omitempty"`
	// TimeoutMS bounds the wait.
	TimeoutMS *uint64 `json:"timeout_ms,omitempty"`
}

// AgentPromptParams are the params of agent.prompt.
type AgentPromptParams struct {
	// Target is the agent's name or pane id.
	Target string `json:"target"`
	// Text is typed into the agent, then Enter.
	Text string `json:"text"`
	// Wait, when set, holds the call until the agent reacted.
	Wait *AgentPromptWait `json:"wait,omitempty"`
}

// AgentWaitParams are the params of agent.wait.
type AgentWaitParams struct {
	// Target is the agent's name or pane id.
	Target string `json:"target"`
	// Until lists the statuses to wait for; idle, done and blocked if empty.
	Until []AgentStatus `json:"until,omitempty"`
	// TimeoutMS bounds the wait; the context bounds it too.
	TimeoutMS *uint64 `json:"timeout_ms,omitempty"`
}

// ReadParams are the params of agent.read (Target) and pane.read (PaneID).
type ReadParams struct {
	// Target is the agent to read; agent.read only.
	Target string `json:"target,omitempty"`
	// PaneID is the pane to read; pane.read only.
	PaneID string `json:"pane_id,omitempty"`
	// Source selects what to read.
	Source ReadSource `json:"source"`
	// Format is text if empty.
	Format ReadFormat `json:"format,omitempty"`
	// Lines keeps only the last lines; herdr caps it at 1000.
	Lines *int `json:"lines,omitempty"`
	// StripANSI removes styling; true if nil.
	StripANSI *bool `json:"strip_ansi,omitempty"`
}

// PaneSendInputParams are the params of pane.send_input. A command is run by
// sending its text with Keys ["enter"].
type PaneSendInputParams struct {
	// PaneID is the pane to type into.
	PaneID string `json:"pane_id"`
	// Text is typed first, as a bracketed paste if the program asked for it.
	Text string `json:"text,omitempty"`
	// Keys are pressed after the text, e.g. "enter", "ctrl+c", "up".
	Keys []string `json:"keys,omitempty"`
}

// PaneSendKeysParams are the params of pane.send_keys.
type PaneSendKeysParams struct {
	// PaneID is the pane to type into.
	PaneID string `json:"pane_id"`
	// Keys are pressed in order.
	Keys []string `json:"keys"`
}

// PaneReportAgentParams are the params of pane.report_agent, through which an
// agent's hooks become the status authority for its pane.
type PaneReportAgentParams struct {
	// PaneID is the reporting agent's pane (HERDR_PANE_ID in its environment).
	PaneID string `json:"pane_id"`
	// Source names the reporter, e.g. "fleetd".
	Source string `json:"source"`
	// Agent is the agent's label.
	Agent string `json:"agent"`
	// State is the agent's state.
	State AgentState `json:"state"`
	// Message says why, for people.
	Message *string `json:"message,omitempty"`
	// Seq orders reports from one source; a report with a seq at or below the
	// last one is stale and ignored, and once a source sent a seq, its
	// reports without one are ignored too.
	Seq *uint64 `json:"seq,omitempty"`
	// AgentSessionID is the agent's conversation id. herdr keeps it only
	// from its own integrations' sources (herdr:claude, ...).
	AgentSessionID *string `json:"agent_session_id,omitempty"`
	// AgentSessionPath is the agent's transcript path.
	AgentSessionPath *string `json:"agent_session_path,omitempty"`
}

// PaneReleaseAgentParams are the params of pane.release_agent: the source
// that reported an agent gives up the pane's status (the agent's session
// ended).
type PaneReleaseAgentParams struct {
	// PaneID is the agent's pane.
	PaneID string `json:"pane_id"`
	// Source is the reporter releasing its authority.
	Source string `json:"source"`
	// Agent is the label it reported.
	Agent string `json:"agent"`
	// Seq orders the release among the source's reports.
	Seq *uint64 `json:"seq,omitempty"`
}

// PaneClearAgentAuthorityParams are the params of
// pane.clear_agent_authority: whichever report decides the pane's status
// stops deciding it.
type PaneClearAgentAuthorityParams struct {
	// PaneID is the pane.
	PaneID string `json:"pane_id"`
	// Source, when set, clears the authority only if it is this source's.
	Source *string `json:"source,omitempty"`
	// Seq orders the call among the source's reports.
	Seq *uint64 `json:"seq,omitempty"`
}

// EventsSubscribeParams are the params of events.subscribe.
type EventsSubscribeParams struct {
	// Subscriptions lists what to receive.
	Subscriptions []Subscription `json:"subscriptions"`
}

type agentInfoResult struct {
	Agent AgentInfo `json:"agent"`
}

type agentListResult struct {
	Agents []AgentInfo `json:"agents"`
}

type paneReadResult struct {
	Read PaneRead `json:"read"`
}

type sessionSnapshotResult struct {
	Snapshot SessionSnapshot `json:"snapshot"`
}
