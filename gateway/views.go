package gateway

import (
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// MemberView is a member as tools and the REST surface show it.
type MemberView struct {
	// name: member name; use it as sessionId.
	Name string `json:"name" jsonschema:"member name; use it as sessionId"`
	// phase: Pending, Starting, Ready, Restarting, Failed or Terminating.
	Phase string `json:"phase,omitempty" jsonschema:"Pending, Starting, Ready, Restarting, Failed or Terminating"`
	// agentStatus: idle, working, blocked (a dialog is on screen), done or unknown.
	AgentStatus string `json:"agentStatus,omitempty" jsonschema:"idle, working, blocked (a dialog is on screen), done or unknown"`
	// AgentStatusSince is when agentStatus last changed (RFC 3339).
	AgentStatusSince string `json:"agentStatusSince,omitempty"`
	Waiting          string `json:"waiting,omitempty" jsonschema:"for a blocked member: the dialog on its screen, or what its agent said it waits for; someone must answer it in the pane"`
	// paneId: herdr's id of the member's pane.
	PaneID string `json:"paneId,omitempty" jsonschema:"herdr's id of the member's pane"`
	// terminalId: herdr's id of the pane's terminal.
	TerminalID string `json:"terminalId,omitempty" jsonschema:"herdr's id of the pane's terminal"`
	// workspaceId: herdr's id of the member's workspace.
	WorkspaceID string `json:"workspaceId,omitempty" jsonschema:"herdr's id of the member's workspace"`
	// sessionId: the agent's own session id.
	SessionID string `json:"sessionId,omitempty" jsonschema:"the agent's own session id"`
	// team: the team.
	Team string `json:"team,omitempty" jsonschema:"the team"`
	// role: lead or member.
	Role string `json:"role,omitempty" jsonschema:"lead or member"`
	// profile: the profile the member runs from.
	Profile string `json:"profile,omitempty" jsonschema:"the profile the member runs from"`
	// queueDepth: messages waiting for this member.
	QueueDepth int32 `json:"queueDepth,omitempty" jsonschema:"messages waiting for this member"`
	// inFlight: dispatchId of the message it is working on.
	InFlight string `json:"inFlight,omitempty" jsonschema:"dispatchId of the message it is working on"`
	// spawnedBy: who spawned it through the gateway (kind:name).
	SpawnedBy string `json:"spawnedBy,omitempty" jsonschema:"who spawned it through the gateway (kind:name)"`
	// self: true for the calling member.
	Self bool `json:"self,omitempty" jsonschema:"true for the calling member"`
	// terminating: the member is being deleted.
	Terminating bool `json:"terminating,omitempty" jsonschema:"the member is being deleted"`
}

// memberView converts a Member for display.
func memberView(m *fleetv1alpha1.Member, caller *Principal) MemberView {
	s := m.Status
	v := MemberView{
		Name:             m.Name,
		Phase:            string(s.Phase),
		AgentStatus:      string(s.AgentStatus),
		AgentStatusSince: timeString(s.AgentStatusSince),
		Waiting:          s.AgentMessage,
		PaneID:           s.PaneID,
		TerminalID:       s.TerminalID,
		WorkspaceID:      s.WorkspaceID,
		SessionID:        s.AgentSessionID,
		Team:             m.Spec.Team,
		Role:             string(m.Spec.Role),
		Profile:          m.Spec.Profile,
		QueueDepth:       s.QueueDepth,
		InFlight:         s.InFlight,
		SpawnedBy:        m.Annotations[fleetv1alpha1.AnnotationSpawnedBy],
		Self:             isCaller(m, caller),
		Terminating:      m.DeletionTimestamp != nil,
	}
	if v.Role == "" {
		v.Role = string(fleetv1alpha1.RoleMember)
	}
	return v
}

// memberViews converts and sorts Members by name.
func memberViews(ms []fleetv1alpha1.Member, caller *Principal, keep func(*fleetv1alpha1.Member) bool) []MemberView {
	views := make([]MemberView, 0, len(ms))
	for i := range ms {
		if keep == nil || keep(&ms[i]) {
			views = append(views, memberView(&ms[i], caller))
		}
	}
	slices.SortFunc(views, func(a, b MemberView) int { return strings.Compare(a.Name, b.Name) })
	return views
}

// ProfileView is a Profile as bridge_profiles shows it. It never carries the
// environment: values may be credentials.
type ProfileView struct {
	// name: the name.
	Name string `json:"name" jsonschema:"the name"`
	// description: what the profile is for.
	Description string `json:"description,omitempty" jsonschema:"what the profile is for"`
	// agent: the herdr agent kind (claude, codex, ..).
	Agent string `json:"agent,omitempty" jsonschema:"the herdr agent kind (claude, codex, ...)"`
	// command: the program and its arguments.
	Command []string `json:"command,omitempty" jsonschema:"the program and its arguments"`
	// model: the model the agent runs.
	Model string `json:"model,omitempty" jsonschema:"the model the agent runs"`
	// effort: the reasoning effort.
	Effort string `json:"effort,omitempty" jsonschema:"the reasoning effort"`
	// billing: subscription or api.
	Billing string `json:"billing" jsonschema:"subscription or api"`
	// default: bridge_send spawns from this profile when there is no member.
	Default bool `json:"default,omitempty" jsonschema:"bridge_send spawns from this profile when there is no member"`
}

// DelegationView is one of the caller's messages still in progress.
type DelegationView struct {
	// dispatchId: the message id.
	DispatchID string `json:"dispatchId" jsonschema:"the message id"`
	// member: the member the message went to.
	Member string `json:"member" jsonschema:"the member the message went to"`
	// phase: Pending, Queued, Delivered, Working or Asking.
	Phase string `json:"phase" jsonschema:"Pending, Queued, Delivered, Working or Asking"`
	// created: when it was sent (RFC 3339).
	Created string `json:"created,omitempty" jsonschema:"when it was sent (RFC 3339)"`
	// deadline: when it times out (RFC 3339).
	Deadline string `json:"deadline,omitempty" jsonschema:"when it times out (RFC 3339)"`
	// Question is the open question, if the worker asked one.
	Question *OpenQuestion `json:"question,omitempty"`
}

// OpenQuestion is a worker's unanswered bridge_ask.
type OpenQuestion struct {
	// dispatchId: the message id.
	DispatchID string `json:"dispatchId" jsonschema:"the message id"`
	// turnId: pass it to bridge_send with your answer.
	TurnID string `json:"turnId" jsonschema:"pass it to bridge_send with your answer"`
	// member: the member the message went to.
	Member string `json:"member" jsonschema:"the member the message went to"`
	// text: the question.
	Text string `json:"text" jsonschema:"the question"`
	// askedAt: when the worker asked (RFC 3339).
	AskedAt string `json:"askedAt,omitempty" jsonschema:"when the worker asked (RFC 3339)"`
}

// PolledOutcome is a settled message's outcome as bridge_poll shows it.
type PolledOutcome struct {
	// dispatchId: the message id.
	DispatchID string `json:"dispatchId" jsonschema:"the message id"`
	// member: the member the message went to.
	Member string `json:"member" jsonschema:"the member the message went to"`
	// outcome: reply, turn_done, timeout, or an error code such as worker_gone.
	Outcome string `json:"outcome" jsonschema:"reply, turn_done, timeout, or an error code such as worker_gone"`
	// text: the reply or terminal tail.
	Text string `json:"text,omitempty" jsonschema:"the reply or terminal tail"`
	// error: why it failed, for error outcomes.
	Error *ToolError `json:"error,omitempty" jsonschema:"why it failed, for error outcomes"`
	// content: the start of the message you sent.
	Content string `json:"content,omitempty" jsonschema:"the start of the message you sent"`
	// settledAt: when it settled (RFC 3339).
	SettledAt string `json:"settledAt,omitempty" jsonschema:"when it settled (RFC 3339)"`
}

func timeString(t *metav1.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// excerpt shortens a message for display.
func excerpt(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut on a rune boundary.
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
