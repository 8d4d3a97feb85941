package herdr

// SubscriptionType names what an events.subscribe subscription receives.
type SubscriptionType string

// Lifecycle subscriptions: every event of the kind, for every pane.
const (
	// SubscribeWorkspaceCreated receives EventWorkspaceCreated.
	SubscribeWorkspaceCreated SubscriptionType = "workspace.created"
	// SubscribeWorkspaceUpdated receives EventWorkspaceUpdated.
	SubscribeWorkspaceUpdated SubscriptionType = "workspace.updated"
	// SubscribeWorkspaceClosed receives EventWorkspaceClosed.
	SubscribeWorkspaceClosed SubscriptionType = "workspace.closed"
	// SubscribeTabCreated receives EventTabCreated.
	SubscribeTabCreated SubscriptionType = "tab.created"
	// SubscribeTabClosed receives EventTabClosed.
	SubscribeTabClosed SubscriptionType = "tab.closed"
	// SubscribePaneCreated receives EventPaneCreated.
	SubscribePaneCreated SubscriptionType = "pane.created"
	// SubscribePaneClosed receives EventPaneClosed. Closing a workspace
	// sends only EventWorkspaceClosed, not one of these per pane.
	SubscribePaneClosed SubscriptionType = "pane.closed"
	// SubscribePaneUpdated receives EventPaneUpdated.
	SubscribePaneUpdated SubscriptionType = "pane.updated"
	// SubscribePaneExited receives EventPaneExited.
	SubscribePaneExited SubscriptionType = "pane.exited"
	// SubscribePaneAgentDetected receives EventPaneAgentDetected.
	SubscribePaneAgentDetected SubscriptionType = "pane.agent_detected"
)

// Filtered subscriptions: events of one pane.
const (
	// SubscribePaneAgentStatusChanged receives a pane's status changes.
	SubscribePaneAgentStatusChanged SubscriptionType = "pane.agent_status_changed"
	// SubscribePaneOutputMatched receives a pane's output matching a pattern.
	SubscribePaneOutputMatched SubscriptionType = "pane.output_matched"
)

// OutputMatchType says how OutputMatch.Value is matched against a line.
type OutputMatchType string

// Output match types.
const (
	// OutputMatchSubstring matches lines containing Value.
	OutputMatchSubstring OutputMatchType = "substring"
	// OutputMatchRegex matches lines matching the regular expression Value.
	OutputMatchRegex OutputMatchType = "regex"
)

// OutputMatch is the pattern of a pane.output_matched subscription.
type OutputMatch struct {
	// Type says how Value is matched.
	Type OutputMatchType `json:"type"`
	// Value is the substring or regular expression.
	Value string `json:"value"`
}

// Subscription is one entry of events.subscribe. Use the constructors.
type Subscription struct {
	// Type names what to receive.
	Type SubscriptionType `json:"type"`
	// PaneID is the pane of a filtered subscription.
	PaneID string `json:"pane_id,omitempty"`
	// AgentStatus narrows pane.agent_status_changed to one status.
	AgentStatus *AgentStatus `json:"agent_status,omitempty"`
	// Source is what pane.output_matched reads.
	Source ReadSource `json:"source,omitempty"`
	// Match is the pattern of pane.output_matched.
	Match *OutputMatch `json:"match,omitempty"`
	// Lines bounds how much pane.output_matched reads.
	Lines *int `json:"lines,omitempty"`
	// StripANSI removes styling before matching; true if nil.
	StripANSI *bool `json:"strip_ansi,omitempty"`
}

// Lifecycle returns a subscription to every event of a lifecycle type.
func Lifecycle(t SubscriptionType) Subscription {
	return Subscription{Type: t}
}

// PaneAgentStatusChanged returns a subscription to the status changes of one pane.
func PaneAgentStatusChanged(paneID string) Subscription {
	return Subscription{Type: SubscribePaneAgentStatusChanged, PaneID: paneID}
}

// PaneOutputMatched returns a subscription to a pane's output matching m.
func PaneOutputMatched(paneID string, source ReadSource, m OutputMatch) Subscription {
	return Subscription{Type: SubscribePaneOutputMatched, PaneID: paneID, Source: source, Match: &m}
}

// EventKind names an event on a subscription stream.
type EventKind string

// Lifecycle event kinds, as herdr pushes them.
const (
	// EventWorkspaceCreated carries the new workspace in Data.Workspace.
	EventWorkspaceCreated EventKind = "workspace_created"
	// EventWorkspaceUpdated carries the workspace in Data.Workspace.
	EventWorkspaceUpdated EventKind = "workspace_updated"
	// EventWorkspaceClosed carries Data.WorkspaceID and, when known, the
	// workspace as it was.
	EventWorkspaceClosed EventKind = "workspace_closed"
	// EventTabCreated carries the new tab in Data.Tab.
	EventTabCreated EventKind = "tab_created"
	// EventTabClosed carries Data.TabID and Data.WorkspaceID.
	EventTabClosed EventKind = "tab_closed"
	// EventPaneCreated carries the new pane in Data.Pane.
	EventPaneCreated EventKind = "pane_created"
	// EventPaneClosed carries Data.PaneID and Data.WorkspaceID.
	EventPaneClosed EventKind = "pane_closed"
	// EventPaneUpdated carries the pane in Data.Pane.
	EventPaneUpdated EventKind = "pane_updated"
	// EventPaneExited carries Data.PaneID and Data.WorkspaceID of a pane
	// whose shell exited; the pane is gone.
	EventPaneExited EventKind = "pane_exited"
	// EventPaneAgentDetected carries Data.PaneID and the new Data.Agent,
	// nil when the agent left.
	EventPaneAgentDetected EventKind = "pane_agent_detected"
)

// Filtered event kinds.
const (
	// EventPaneAgentStatusChanged reports a pane's new status.
	EventPaneAgentStatusChanged EventKind = "pane.agent_status_changed"
	// EventPaneOutputMatched reports a pane's output matching a pattern.
	EventPaneOutputMatched EventKind = "pane.output_matched"
)

// EventResync is synthesised by Stream, never sent by herdr: the stream
// (re)connected and Event.Snapshot holds the whole session as it was after the
// subscription started. A consumer that reconciles against the snapshot and
// then looks again at whatever each later event names misses nothing across
// a reconnect. Events that follow it are not all newer than the snapshot:
// herdr 0.8.2 replays to a new lifecycle subscription up to 512 events it
// retained, oldest first, so an event is a reason to look, not a fact to
// apply.
const EventResync EventKind = "resync"

// Event is one event from a subscription.
type Event struct {
	// Kind names the event.
	Kind EventKind `json:"event"`
	// Data holds the event's fields.
	Data EventData `json:"data"`
	// Snapshot is set on EventResync only.
	Snapshot *SessionSnapshot `json:"-"`
}

// EventData holds the fields of every event kind fleetd handles; each kind
// fills the fields herdr documents for it.
type EventData struct {
	// Type repeats the kind of a lifecycle event; filtered events omit it.
	Type EventKind `json:"type,omitempty"`
	// WorkspaceID is the workspace the event concerns.
	WorkspaceID string `json:"workspace_id,omitempty"`
	// TabID is the tab the event concerns.
	TabID string `json:"tab_id,omitempty"`
	// PaneID is the pane the event concerns.
	PaneID string `json:"pane_id,omitempty"`
	// Workspace is set on workspace_created, workspace_updated and, when known,
	// workspace_closed.
	Workspace *WorkspaceInfo `json:"workspace,omitempty"`
	// Tab is set on tab_created.
	Tab *TabInfo `json:"tab,omitempty"`
	// Pane is set on pane_created and pane_updated.
	Pane *PaneInfo `json:"pane,omitempty"`
	// AgentStatus is set on pane.agent_status_changed.
	AgentStatus AgentStatus `json:"agent_status,omitempty"`
	// Agent is the pane's agent label on pane.agent_status_changed and
	// pane_agent_detected.
	Agent *string `json:"agent,omitempty"`
	// DisplayAgent is the agent name shown to people.
	DisplayAgent *string `json:"display_agent,omitempty"`
	// Title is the pane's display title.
	Title *string `json:"title,omitempty"`
	// StateLabels maps statuses to custom display labels.
	StateLabels map[string]string `json:"state_labels,omitempty"`
	// MatchedLine is the line that matched, on pane.output_matched.
	MatchedLine *string `json:"matched_line,omitempty"`
	// Read is what was read when the output matched.
	Read *PaneRead `json:"read,omitempty"`
}
