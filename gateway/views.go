package gateway

import (
	"context"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// MemberView is a member as tools and the REST surface show it.
type MemberView struct {
	Name             string `json:"name" jsonschema:"member name; use it as sessionId"`
	Phase            string `json:"phase,omitempty" jsonschema:"Pending, Starting, Ready, Restarting, Failed or Terminating"`
	AgentStatus      string `json:"agentStatus,omitempty" jsonschema:"idle, working, blocked (a dialog is on screen), done or unknown"`
	AgentStatusSince string `json:"agentStatusSince,omitempty" jsonschema:"when agentStatus last changed (RFC 3339)"`
	Waiting          string `json:"waiting,omitempty" jsonschema:"for a blocked member: the dialog on its screen, or what its agent said it waits for; someone must answer it in the pane"`
	PaneID           string `json:"paneId,omitempty" jsonschema:"herdr's id of the member's pane"`
	TerminalID       string `json:"terminalId,omitempty" jsonschema:"herdr's id of the pane's terminal"`
	WorkspaceID      string `json:"workspaceId,omitempty" jsonschema:"herdr's id of the member's workspace"`
	SessionID        string `json:"sessionId,omitempty" jsonschema:"the agent's own session id"`
	Team             string `json:"team,omitempty" jsonschema:"the team"`
	Role             string `json:"role,omitempty" jsonschema:"lead or member"`
	Profile          string `json:"profile,omitempty" jsonschema:"the profile the member runs from"`
	QueueDepth       int32  `json:"queueDepth,omitempty" jsonschema:"messages waiting for this member"`
	InFlight         string `json:"inFlight,omitempty" jsonschema:"dispatchId of the message it is working on"`
	SpawnedBy        string `json:"spawnedBy,omitempty" jsonschema:"who spawned it through the gateway (kind:name)"`
	Self             bool   `json:"self,omitempty" jsonschema:"true for the calling member"`
	Terminating      bool   `json:"terminating,omitempty" jsonschema:"the member is being deleted"`
	// ContextRemainingPercent is null where the agent reports no usage.
	ContextRemainingPercent *int32 `json:"contextRemainingPercent" jsonschema:"how much of its context window the agent's session had left at its latest model call, 0 to 100; null where the agent reports no usage"`
}

// MemberSummary is a member as bridge_list shows it: what a primary needs
// to pick a worker, and nothing more.
type MemberSummary struct {
	Name       string `json:"name" jsonschema:"member name; use it as sessionId"`
	Status     string `json:"status" jsonschema:"a ready member's agent status (idle, working, blocked, done, unknown), else its phase in lower case"`
	Waiting    string `json:"waiting,omitempty" jsonschema:"for a blocked member: the dialog on its screen; someone must answer it in the pane"`
	QueueDepth int32  `json:"queueDepth,omitempty" jsonschema:"messages waiting for it"`
	Team       string `json:"team,omitempty" jsonschema:"its team"`
	Profile    string `json:"profile,omitempty" jsonschema:"its profile"`
	Self       bool   `json:"self,omitempty" jsonschema:"true for the calling member"`
}

// memberSummary shows m compactly.
func memberSummary(m *fleetv1alpha1.Member, caller *Principal, q queue) MemberSummary {
	sum := MemberSummary{Name: m.Name, Status: summaryStatus(m), QueueDepth: q.depth, Team: m.Spec.Team, Profile: m.Spec.Profile, Self: isCaller(m, caller)}
	if m.Status.AgentStatus == fleetv1alpha1.AgentBlocked {
		sum.Waiting = m.Status.AgentMessage
	}
	return sum
}

// summaryStatus is a member's status in one word: a ready member's agent
// status, else its phase in lower case.
func summaryStatus(m *fleetv1alpha1.Member) string {
	switch status := strings.ToLower(string(m.Status.Phase)); {
	case m.DeletionTimestamp != nil:
		return "terminating"
	case m.Status.Phase == fleetv1alpha1.MemberReady && m.Status.AgentStatus != "":
		return string(m.Status.AgentStatus)
	case status == "":
		return "pending"
	default:
		return status
	}
}

// queue is what a member's queue holds.
type queue struct {
	depth    int32
	inFlight string
}

// memberView converts a Member for display.
func memberView(m *fleetv1alpha1.Member, caller *Principal, q queue) MemberView {
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
		QueueDepth:       q.depth,
		InFlight:         q.inFlight,
		SpawnedBy:        m.Annotations[fleetv1alpha1.AnnotationSpawnedBy],
		Self:             isCaller(m, caller),
		Terminating:      m.DeletionTimestamp != nil,

		ContextRemainingPercent: s.ContextRemainingPercent,
	}
	if v.Role == "" {
		v.Role = string(fleetv1alpha1.RoleMember)
	}
	return v
}

// memberView shows m with its queue.
func (g *Gateway) memberView(ctx context.Context, m *fleetv1alpha1.Member, caller *Principal) (MemberView, error) {
	q, err := g.queueOf(ctx, m.Namespace, m.Name)
	if err != nil {
		return MemberView{}, err
	}
	return memberView(m, caller, q), nil
}

// memberViews shows the Members keep passes (all when nil) with their
// queues, sorted by name.
func (g *Gateway) memberViews(ctx context.Context, ms []fleetv1alpha1.Member, caller *Principal, keep func(*fleetv1alpha1.Member) bool) ([]MemberView, error) {
	views := make([]MemberView, 0, len(ms))
	for i := range ms {
		if keep != nil && !keep(&ms[i]) {
			continue
		}
		v, err := g.memberView(ctx, &ms[i], caller)
		if err != nil {
			return nil, err
		}
		views = append(views, v)
	}
	slices.SortFunc(views, func(a, b MemberView) int { return strings.Compare(a.Name, b.Name) })
	return views, nil
}

// ProfileView is a Profile as bridge_profiles shows it. It never carries the
// environment: values may be credentials.
type ProfileView struct {
	Name        string   `json:"name" jsonschema:"the name"`
	Description string   `json:"description,omitempty" jsonschema:"what the profile is for"`
	Agent       string   `json:"agent,omitempty" jsonschema:"the herdr agent kind (claude, codex, ...)"`
	Command     []string `json:"command,omitempty" jsonschema:"the program and its arguments"`
	Model       string   `json:"model,omitempty" jsonschema:"the model the agent runs"`
	Effort      string   `json:"effort,omitempty" jsonschema:"the reasoning effort"`
	Billing     string   `json:"billing" jsonschema:"subscription or api"`
	Default     bool     `json:"default,omitempty" jsonschema:"bridge_send spawns from this profile when there is no member"`
}

// DelegationView is one of the caller's messages still in progress.
type DelegationView struct {
	DispatchID string `json:"dispatchId" jsonschema:"the message id"`
	Member     string `json:"member" jsonschema:"the member the message went to"`
	Phase      string `json:"phase" jsonschema:"Pending, Queued, Delivered, Working or Asking"`
	Created    string `json:"created,omitempty" jsonschema:"when it was sent (RFC 3339)"`
	Deadline   string `json:"deadline,omitempty" jsonschema:"when it times out (RFC 3339)"`
	// Question is the open question, if the worker asked one.
	Question *OpenQuestion `json:"question,omitempty"`
}

// OpenQuestion is a worker's unanswered bridge_ask.
type OpenQuestion struct {
	DispatchID string `json:"dispatchId" jsonschema:"the message id"`
	TurnID     string `json:"turnId" jsonschema:"pass it to bridge_send with your answer"`
	Member     string `json:"member" jsonschema:"the member the message went to"`
	Text       string `json:"text" jsonschema:"the question"`
	AskedAt    string `json:"askedAt,omitempty" jsonschema:"when the worker asked (RFC 3339)"`
}

// PolledOutcome is a settled message's outcome as bridge_poll shows it.
type PolledOutcome struct {
	DispatchID string     `json:"dispatchId" jsonschema:"the message id"`
	Member     string     `json:"member" jsonschema:"the member the message went to"`
	Outcome    string     `json:"outcome" jsonschema:"reply, turn_done, timeout, or an error code such as worker_gone"`
	Text       string     `json:"text,omitempty" jsonschema:"the reply or terminal tail"`
	Error      *ToolError `json:"error,omitempty" jsonschema:"why it failed, for error outcomes"`
	Content    string     `json:"content,omitempty" jsonschema:"the start of the message you sent"`
	SettledAt  string     `json:"settledAt,omitempty" jsonschema:"when it settled (RFC 3339)"`
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
