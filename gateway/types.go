package gateway

// The bridge tools' inputs and outputs. Their jsonschema tags are the
// descriptions a client sees in tools/list.

import (
	"fmt"
	"strings"
)

// SendInput is the input of bridge_send.
type SendInput struct {
	Content        string `json:"content,omitempty" jsonschema:"the message for the worker, or your answer when turnId is set; leave it out with dispatchId"`
	SessionID      string `json:"sessionId,omitempty" jsonschema:"the member to send to: its name, agent session id, terminal id or pane id; omit when there is one other member (or none: one is spawned)"`
	TimeoutMs      *int64 `json:"timeoutMs,omitempty" jsonschema:"how long to wait in milliseconds; default 600000, capped by the gateway"`
	Wait           *bool  `json:"wait,omitempty" jsonschema:"false returns at once with dispatchId; default true"`
	TurnID         string `json:"turnId,omitempty" jsonschema:"answer the question with this turnId instead of sending a new message"`
	IdempotencyKey string `json:"idempotencyKey,omitempty" jsonschema:"makes retries safe: the same key never sends twice and re-attaches to the first message"`
	DispatchID     string `json:"dispatchId,omitempty" jsonschema:"re-attach to a message you sent (after a timeout or an interrupted call): wait for its outcome again, without sending anything"`
	AutoSpawn      *bool  `json:"autoSpawn,omitempty" jsonschema:"false never spawns a member for this message; default true: a message to a profile with no live member (or with no sessionId to a namespace without members) starts one"`
}

// SendOutput is the outcome of bridge_send.
type SendOutput struct {
	failure
	Outcome    string `json:"outcome,omitempty" jsonschema:"reply, question, turn_done, timeout, cancelled, interrupted (the gateway stopped; call again with dispatchId) or dispatched"`
	Text       string `json:"text,omitempty" jsonschema:"the reply, the question, or the terminal tail for turn_done"`
	TurnID     string `json:"turnId,omitempty" jsonschema:"for a question: pass it back with your answer"`
	DispatchID string `json:"dispatchId,omitempty" jsonschema:"the message's id, for bridge_poll and bridge_ack"`
	Member     string `json:"member,omitempty" jsonschema:"the member the message went to"`
}

func (o *SendOutput) metricOutcome() string { return o.Outcome }

// ReplyInput is the input of bridge_reply.
type ReplyInput struct {
	Content string `json:"content" jsonschema:"your complete reply to the sender"`
}

// ReplyOutput is the result of bridge_reply.
type ReplyOutput struct {
	failure
	DispatchID string `json:"dispatchId,omitempty" jsonschema:"the message you replied to"`
	Late       bool   `json:"late,omitempty" jsonschema:"the sender's deadline had passed; the reply reaches it later"`
}

// AskInput is the input of bridge_ask.
type AskInput struct {
	Content   string `json:"content" jsonschema:"your question for the sender"`
	TimeoutMs *int64 `json:"timeoutMs,omitempty" jsonschema:"how long to wait for the answer in milliseconds; default 600000"`
}

// AskOutput is the result of bridge_ask.
type AskOutput struct {
	failure
	Answer  *string `json:"answer,omitempty" jsonschema:"the sender's answer"`
	Outcome string  `json:"outcome,omitempty" jsonschema:"timeout when no answer came in time; interrupted when the gateway stopped"`
	TurnID  string  `json:"turnId,omitempty" jsonschema:"the question this answers"`
	Text    string  `json:"text,omitempty" jsonschema:"what to do next, for interrupted"`
}

func (o *AskOutput) metricOutcome() string {
	if o.Answer != nil {
		return "answer"
	}
	return o.Outcome
}

// PollInput is the input of bridge_poll.
type PollInput struct{}

// PollOutput is the result of bridge_poll.
type PollOutput struct {
	failure
	Outcomes  []PolledOutcome `json:"outcomes" jsonschema:"settled messages nobody waited for, oldest first"`
	Questions []OpenQuestion  `json:"questions" jsonschema:"open questions workers asked you"`
}

// AckInput is the input of bridge_ack.
type AckInput struct {
	DispatchID string   `json:"dispatchId,omitempty" jsonschema:"one message to acknowledge"`
	IDs        []string `json:"ids,omitempty" jsonschema:"several messages to acknowledge"`
}

// AckOutput is the result of bridge_ack.
type AckOutput struct {
	failure
	Acknowledged []string `json:"acknowledged" jsonschema:"the ids acknowledged by this call"`
}

// StatusInput is the input of bridge_status.
type StatusInput struct {
	SessionID string `json:"sessionId,omitempty" jsonschema:"one member: name, agent session id, terminal id or pane id"`
}

// StatusOutput is the result of bridge_status.
type StatusOutput struct {
	failure
	Members   []MemberView     `json:"members" jsonschema:"the member asked for (or you, if you are a member), in full"`
	Pending   []DelegationView `json:"pending" jsonschema:"your messages still in progress"`
	Outcomes  []PolledOutcome  `json:"outcomes" jsonschema:"outcomes of your messages that nobody waited for and you have not acknowledged: what bridge_poll shows"`
	Questions []OpenQuestion   `json:"questions" jsonschema:"questions workers asked you that are still open"`
}

// SpawnInput is the input of bridge_spawn.
type SpawnInput struct {
	Profile string `json:"profile,omitempty" jsonschema:"the profile to start from; default: the namespace's default profile"`
}

// SpawnOutput is the result of bridge_spawn.
type SpawnOutput struct {
	failure
	Member *MemberView `json:"member,omitempty" jsonschema:"the new member"`
}

// ListInput is the input of bridge_list.
type ListInput struct {
	Status     string `json:"status,omitempty" jsonschema:"only members with this status: idle, working, blocked, done, unknown (a ready member's agent), or pending, starting, restarting, failed, terminating"`
	Team       string `json:"team,omitempty" jsonschema:"only members of this team"`
	Profile    string `json:"profile,omitempty" jsonschema:"only members of this profile"`
	NamePrefix string `json:"namePrefix,omitempty" jsonschema:"only members whose name starts with this"`
	Limit      *int   `json:"limit,omitempty" jsonschema:"at most this many members, 1 to 500; default 100"`
	Continue   string `json:"continue,omitempty" jsonschema:"the continue value of the previous page, for the next one"`
}

// ListOutput is the result of bridge_list.
type ListOutput struct {
	failure
	Members  []MemberSummary `json:"members" jsonschema:"the members, by name"`
	Total    int             `json:"total" jsonschema:"how many members match the filters, on every page"`
	Continue string          `json:"continue,omitempty" jsonschema:"more members match: pass this as continue for the next page"`
}

// text shows the page one member a line, the header naming the columns.
func (o *ListOutput) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d members (name status queueDepth team profile):\n", len(o.Members), o.Total)
	for _, m := range o.Members {
		fmt.Fprintf(&b, "%s %s %d %s %s", m.Name, m.Status, m.QueueDepth, orDash(m.Team), orDash(m.Profile))
		if m.Self {
			b.WriteString(" (you)")
		}
		b.WriteString("\n")
		if m.Waiting != "" {
			fmt.Fprintf(&b, "  waiting on: %s\n", strings.ReplaceAll(m.Waiting, "\n", "\n  "))
		}
	}
	if o.Continue != "" {
		fmt.Fprintf(&b, "more: call bridge_list with continue=%q\n", o.Continue)
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// StopInput is the input of bridge_stop.
type StopInput struct {
	PaneID string `json:"paneId" jsonschema:"the member to stop: pane id, name, terminal id or agent session id"`
}

// StopOutput is the result of bridge_stop.
type StopOutput struct {
	failure
	Stopped     string `json:"stopped,omitempty" jsonschema:"the stopped member's name"`
	AlreadyGone bool   `json:"alreadyGone,omitempty" jsonschema:"there was no such member (any more), or it was already stopping: nothing left to stop"`
}

// ProfilesInput is the input of bridge_profiles.
type ProfilesInput struct{}

// ProfilesOutput is the result of bridge_profiles.
type ProfilesOutput struct {
	failure
	Profiles []ProfileView `json:"profiles" jsonschema:"profiles in your namespace"`
}

// WhoamiInput is the input of bridge_whoami.
type WhoamiInput struct{}

// WhoamiOutput is the result of bridge_whoami.
type WhoamiOutput struct {
	failure
	Kind       string          `json:"kind,omitempty" jsonschema:"Member, ServiceAccount or Static"`
	Name       string          `json:"name,omitempty" jsonschema:"your principal name"`
	Namespace  string          `json:"namespace,omitempty" jsonschema:"the Kubernetes namespace you act in"`
	Primary    bool            `json:"primary,omitempty" jsonschema:"true for callers that are not fleet members"`
	Team       string          `json:"team,omitempty" jsonschema:"your team, for members"`
	Role       string          `json:"role,omitempty" jsonschema:"your role in the team: lead or member"`
	Member     *MemberView     `json:"member,omitempty" jsonschema:"you, as a member"`
	Namespaces map[string]bool `json:"namespaces,omitempty" jsonschema:"tool namespaces and whether they are on"`
}

// CancelInput is the input of bridge_cancel.
type CancelInput struct {
	DispatchID string `json:"dispatchId" jsonschema:"the message to withdraw: the dispatchId bridge_send returned"`
}

// CancelOutput is the result of bridge_cancel.
type CancelOutput struct {
	failure
	DispatchID string `json:"dispatchId,omitempty" jsonschema:"the message"`
	Outcome    string `json:"outcome,omitempty" jsonschema:"cancelled; or how it settled first (reply, turn_done, timeout, worker_gone, delivery_failed); cancelling while the member's turn is still being interrupted"`
	Text       string `json:"text,omitempty" jsonschema:"the reply or the terminal tail when it settled another way first; why, for an error outcome"`
}

func (o *CancelOutput) metricOutcome() string { return o.Outcome }

// ReadInput is the input of bridge_read.
type ReadInput struct {
	SessionID string `json:"sessionId" jsonschema:"the member to read: its name, agent session id, terminal id or pane id"`
	Source    string `json:"source,omitempty" jsonschema:"visible (the screen now), recent (the latest lines as displayed; the default) or recent_unwrapped (the latest output as logical lines)"`
	Lines     *int   `json:"lines,omitempty" jsonschema:"how many lines of recent output, 1 to 1000; default 80"`
}

// ReadOutput is the result of bridge_read.
type ReadOutput struct {
	failure
	Member    string `json:"member,omitempty" jsonschema:"the member read"`
	PaneID    string `json:"paneId,omitempty" jsonschema:"its pane"`
	Source    string `json:"source,omitempty" jsonschema:"what was read"`
	Text      string `json:"text,omitempty" jsonschema:"the terminal text, escape sequences removed"`
	Truncated bool   `json:"truncated,omitempty" jsonschema:"the text was longer than 64 KiB: its end is kept"`
}
