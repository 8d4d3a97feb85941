package gateway

import "time"

// The dashboard's bodies and events: what GET /ui/api/fleet and
// GET /ui/api/members/{member} stream (server-sent events, each event's data
// one of these as JSON), and the bodies of its two actions.

// DashboardHello is the first event of every dashboard stream: who the
// viewer is, as the gateway resolved its token, and what it may do.
type DashboardHello struct {
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Team      string `json:"team,omitempty"`
	// Screens says the viewer may watch members' terminals (primaries, as
	// bridge_read) and this gateway can read them.
	Screens bool `json:"screens"`
	// CancelOthers says the viewer may withdraw messages it did not send.
	CancelOthers bool `json:"cancelOthers"`
}

// DashboardMember is one member as the dashboard shows it: the MemberView
// every tool shows, and what a person scanning a fleet looks for.
type DashboardMember struct {
	MemberView
	// Status is the member's status in one word, as bridge_list says it.
	Status string `json:"status"`
	// Agent is the agent kind (claude, codex, ...) or the command line.
	Agent string `json:"agent,omitempty"`
	// InFlightContent is the start of the message in flight, when the
	// viewer may read it.
	InFlightContent string `json:"inFlightContent,omitempty"`
	Restarts        int32  `json:"restarts,omitempty"`
	// LastRestartReason says why the pane was last recreated.
	LastRestartReason string `json:"lastRestartReason,omitempty"`
	// NodeName and PodName say where a member in a Pod of its own runs;
	// empty for a member on the shared pane server.
	NodeName string `json:"nodeName,omitempty"`
	PodName  string `json:"podName,omitempty"`
	// PodPool names the Profile whose warm pool the member's Pod was
	// claimed from; empty for a Pod started for the member.
	PodPool string `json:"podPool,omitempty"`
	// SuspendedAt is when the member was suspended (RFC 3339), while it
	// is; SuspendedReason is why, as its Suspended condition says: Idle (a
	// message resumes it) or SuspendRequested (spec.suspend: messages wait).
	SuspendedAt     string `json:"suspendedAt,omitempty"`
	SuspendedReason string `json:"suspendedReason,omitempty"`
	// Usage is what its agent's model calls used, as a person reads it;
	// Cost is what that cost at its Profile's pricing ("0.0123 USD"). Both
	// are empty before the agent's first call, Cost without pricing.
	Usage string `json:"usage,omitempty"`
	Cost  string `json:"cost,omitempty"`
}

// DashboardMembers is a batch of changes to the fleet view. Reset replaces
// everything shown with Members; otherwise Members are added or replaced by
// name, and Removed are gone (deleted, or no longer visible to the viewer).
type DashboardMembers struct {
	Reset   bool              `json:"reset,omitempty"`
	Members []DashboardMember `json:"members"`
	Removed []string          `json:"removed,omitempty"`
}

// DashboardPool is one Profile's warm pool: how many Pods it keeps started
// for its members to claim, and what the pool holds as its controller last
// counted.
type DashboardPool struct {
	// Name is the Profile's.
	Name string `json:"name"`
	// Size is the Pods the pool keeps unclaimed (spec.warmPool.size).
	Size     int32 `json:"size"`
	Free     int32 `json:"free"`
	Starting int32 `json:"starting"`
	Claimed  int32 `json:"claimed"`
}

// DashboardPools is a batch of changes to the fleet view's warm pools, as
// DashboardMembers is to its members, by Profile name. It is an event of
// its own ("pools") rather than a field of DashboardMembers: pools change
// with Profiles, not Members, and a pool's status is rewritten as often as
// a Pod is claimed or started, which would otherwise send a members batch
// with no member in it; and a member viewer's team scopes its members but
// not the namespace's Profiles, which any viewer may list (bridge_profiles).
type DashboardPools struct {
	Reset   bool            `json:"reset,omitempty"`
	Pools   []DashboardPool `json:"pools"`
	Removed []string        `json:"removed,omitempty"`
}

// DashboardMemberPage is the member a member page shows; Member is nil once
// it is gone.
type DashboardMemberPage struct {
	Name   string           `json:"name"`
	Member *DashboardMember `json:"member"`
}

// DashboardMessage is one Delegation on a member's timeline.
type DashboardMessage struct {
	DispatchID string `json:"dispatchId"`
	FromKind   string `json:"fromKind"`
	FromName   string `json:"fromName"`
	FromYou    bool   `json:"fromYou,omitempty"`
	// Content is the message, cut to its first maxTimelineContent bytes.
	Content          string `json:"content"`
	ContentTruncated bool   `json:"contentTruncated,omitempty"`
	Phase            string `json:"phase"`
	Outcome          string `json:"outcome,omitempty"`
	Wait             bool   `json:"wait"`
	Deadline         string `json:"deadline,omitempty"`
	// Steps are what happened to it, in order, each with its time.
	Steps []DashboardStep `json:"steps"`
	// Cancellable says the viewer may withdraw it and it has not settled.
	Cancellable bool `json:"cancellable,omitempty"`
	// Usage is what the turn it started used, as a person reads it; Cost
	// what that cost. Empty before the member's first call for it.
	Usage string `json:"usage,omitempty"`
	Cost  string `json:"cost,omitempty"`
	// created orders the timeline.
	created time.Time
}

// DashboardStep is one step of a message's life.
type DashboardStep struct {
	// Step is created, queued, delivered, working, asked, answered,
	// withdrawn, cancel_requested, or how it settled: replied, turn_done,
	// timed_out, failed, worker_gone, cancelled; late_reply after a timeout.
	Step string `json:"step"`
	// At is when (RFC 3339; the API keeps whole seconds, the creation time
	// has the gateway's nanoseconds); empty when the status does not say.
	At string `json:"at,omitempty"`
	// Text is the question, answer, reply, terminal tail or reason.
	Text string `json:"text,omitempty"`
	// TurnID names a question.
	TurnID string `json:"turnId,omitempty"`
}

// DashboardMessages is a batch of changes to a member's timeline, like
// DashboardMembers. Total counts the messages to the member the viewer may
// see; at most maxTimeline of them are sent, newest first.
type DashboardMessages struct {
	Reset    bool               `json:"reset,omitempty"`
	Messages []DashboardMessage `json:"messages"`
	Removed  []string           `json:"removed,omitempty"`
	Total    int                `json:"total,omitempty"`
}

// DashboardScreen is a member's terminal as it shows now, or why it
// cannot be shown.
type DashboardScreen struct {
	PaneID string `json:"paneId,omitempty"`
	// Text is the visible screen, escape sequences removed.
	Text string `json:"text"`
	// Unavailable says why there is no screen (no pane yet, pane gone,
	// herdr unreachable).
	Unavailable string `json:"unavailable,omitempty"`
}

// DashboardSendRequest is the body of POST /ui/api/members/{member}/messages:
// bridge_send {wait: false} to that member.
type DashboardSendRequest struct {
	Content        string `json:"content"`
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
}
