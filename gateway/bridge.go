package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// maxIdempotencyKey bounds an idempotency key, as the API does.
const maxIdempotencyKey = 128

// cacheGrace is how long a worker's reply or question waits for the cache to
// show its delivery before the API server is asked.
const cacheGrace = 250 * time.Millisecond

// SendInput is the input of bridge_send.
type SendInput struct {
	// content: the message for the worker, or your answer when turnId is set.
	Content string `json:"content" jsonschema:"the message for the worker, or your answer when turnId is set"`
	// sessionId: the member to send to: its name, agent session id, terminal id or pane id; omit when there is one other member (or none: one is spawned).
	SessionID string `json:"sessionId,omitempty" jsonschema:"the member to send to: its name, agent session id, terminal id or pane id; omit when there is one other member (or none: one is spawned)"`
	// timeoutMs: how long to wait in milliseconds; default 600000, capped by the gateway.
	TimeoutMs *int64 `json:"timeoutMs,omitempty" jsonschema:"how long to wait in milliseconds; default 600000, capped by the gateway"`
	// wait: false returns at once with dispatchId; default true.
	Wait *bool `json:"wait,omitempty" jsonschema:"false returns at once with dispatchId; default true"`
	// turnId: answer the question with this turnId instead of sending a new message.
	TurnID string `json:"turnId,omitempty" jsonschema:"answer the question with this turnId instead of sending a new message"`
	// idempotencyKey: makes retries safe: the same key never sends twice and re-attaches to the first message.
	IdempotencyKey string `json:"idempotencyKey,omitempty" jsonschema:"makes retries safe: the same key never sends twice and re-attaches to the first message"`
}

// SendOutput is the outcome of bridge_send.
type SendOutput struct {
	failure
	// outcome: reply, question, turn_done, timeout or dispatched.
	Outcome string `json:"outcome,omitempty" jsonschema:"reply, question, turn_done, timeout or dispatched"`
	// text: the reply, the question, or the terminal tail for turn_done.
	Text string `json:"text,omitempty" jsonschema:"the reply, the question, or the terminal tail for turn_done"`
	// turnId: for a question: pass it back with your answer.
	TurnID string `json:"turnId,omitempty" jsonschema:"for a question: pass it back with your answer"`
	// dispatchId: the message's id, for bridge_poll and bridge_ack.
	DispatchID string `json:"dispatchId,omitempty" jsonschema:"the message's id, for bridge_poll and bridge_ack"`
	// member: the member the message went to.
	Member string `json:"member,omitempty" jsonschema:"the member the message went to"`
}

func (o *SendOutput) metricOutcome() string { return o.Outcome }

// ReplyInput is the input of bridge_reply.
type ReplyInput struct {
	// content: your complete reply to the sender.
	Content string `json:"content" jsonschema:"your complete reply to the sender"`
}

// ReplyOutput is the result of bridge_reply.
type ReplyOutput struct {
	failure
	// dispatchId: the message you replied to.
	DispatchID string `json:"dispatchId,omitempty" jsonschema:"the message you replied to"`
	// late: the sender's deadline had passed; the reply reaches it later.
	Late bool `json:"late,omitempty" jsonschema:"the sender's deadline had passed; the reply reaches it later"`
}

// AskInput is the input of bridge_ask.
type AskInput struct {
	// content: your question for the sender.
	Content string `json:"content" jsonschema:"your question for the sender"`
	// timeoutMs: how long to wait for the answer in milliseconds; default 600000.
	TimeoutMs *int64 `json:"timeoutMs,omitempty" jsonschema:"how long to wait for the answer in milliseconds; default 600000"`
}

// AskOutput is the result of bridge_ask.
type AskOutput struct {
	failure
	// answer: the sender's answer.
	Answer *string `json:"answer,omitempty" jsonschema:"the sender's answer"`
	// outcome: timeout when no answer came in time.
	Outcome string `json:"outcome,omitempty" jsonschema:"timeout when no answer came in time"`
	// turnId: the question this answers.
	TurnID string `json:"turnId,omitempty" jsonschema:"the question this answers"`
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
	// outcomes: settled messages nobody waited for, oldest first.
	Outcomes []PolledOutcome `json:"outcomes" jsonschema:"settled messages nobody waited for, oldest first"`
	// questions: open questions workers asked you.
	Questions []OpenQuestion `json:"questions" jsonschema:"open questions workers asked you"`
}

// AckInput is the input of bridge_ack.
type AckInput struct {
	// dispatchId: one message to acknowledge.
	DispatchID string `json:"dispatchId,omitempty" jsonschema:"one message to acknowledge"`
	// ids: several messages to acknowledge.
	IDs []string `json:"ids,omitempty" jsonschema:"several messages to acknowledge"`
}

// AckOutput is the result of bridge_ack.
type AckOutput struct {
	failure
	// acknowledged: the ids acknowledged by this call.
	Acknowledged []string `json:"acknowledged" jsonschema:"the ids acknowledged by this call"`
}

// StatusInput is the input of bridge_status.
type StatusInput struct {
	// sessionId: one member: name, agent session id, terminal id or pane id.
	SessionID string `json:"sessionId,omitempty" jsonschema:"one member: name, agent session id, terminal id or pane id"`
}

// StatusOutput is the result of bridge_status.
type StatusOutput struct {
	failure
	// members: members with their live status.
	Members []MemberView `json:"members" jsonschema:"members with their live status"`
	// pending: your messages still in progress.
	Pending []DelegationView `json:"pending" jsonschema:"your messages still in progress"`
}

// SpawnInput is the input of bridge_spawn.
type SpawnInput struct {
	// profile: the profile to start from; default: the namespace's default profile.
	Profile string `json:"profile,omitempty" jsonschema:"the profile to start from; default: the namespace's default profile"`
}

// SpawnOutput is the result of bridge_spawn.
type SpawnOutput struct {
	failure
	// member: the new member.
	Member *MemberView `json:"member,omitempty" jsonschema:"the new member"`
}

// ListInput is the input of bridge_list.
type ListInput struct{}

// ListOutput is the result of bridge_list.
type ListOutput struct {
	failure
	// members: members with their live status.
	Members []MemberView `json:"members" jsonschema:"members with their live status"`
}

// StopInput is the input of bridge_stop.
type StopInput struct {
	// paneId: the member to stop: pane id, name, terminal id or agent session id.
	PaneID string `json:"paneId" jsonschema:"the member to stop: pane id, name, terminal id or agent session id"`
}

// StopOutput is the result of bridge_stop.
type StopOutput struct {
	failure
	// stopped: the stopped member's name.
	Stopped string `json:"stopped,omitempty" jsonschema:"the stopped member's name"`
}

// ProfilesInput is the input of bridge_profiles.
type ProfilesInput struct{}

// ProfilesOutput is the result of bridge_profiles.
type ProfilesOutput struct {
	failure
	// profiles: profiles in your namespace.
	Profiles []ProfileView `json:"profiles" jsonschema:"profiles in your namespace"`
}

// WhoamiInput is the input of bridge_whoami.
type WhoamiInput struct{}

// WhoamiOutput is the result of bridge_whoami.
type WhoamiOutput struct {
	failure
	// kind: Member, ServiceAccount or Static.
	Kind string `json:"kind,omitempty" jsonschema:"Member, ServiceAccount or Static"`
	// name: your principal name.
	Name string `json:"name,omitempty" jsonschema:"your principal name"`
	// namespace: the Kubernetes namespace you act in.
	Namespace string `json:"namespace,omitempty" jsonschema:"the Kubernetes namespace you act in"`
	// primary: true for callers that are not fleet members.
	Primary bool `json:"primary,omitempty" jsonschema:"true for callers that are not fleet members"`
	// team: your team, for members.
	Team string `json:"team,omitempty" jsonschema:"your team, for members"`
	// role: your role in the team: lead or member.
	Role string `json:"role,omitempty" jsonschema:"your role in the team: lead or member"`
	// member: you, as a member.
	Member *MemberView `json:"member,omitempty" jsonschema:"you, as a member"`
	// namespaces: tool namespaces and whether they are on.
	Namespaces map[string]bool `json:"namespaces,omitempty" jsonschema:"tool namespaces and whether they are on"`
}

// checkContent validates a message, question, answer or reply.
func checkContent(field, s string) *ToolError {
	switch {
	case s == "":
		return errorf(CodeInvalidArgument, "%s must not be empty", field)
	case len(s) > fleetv1alpha1.MaxContentBytes:
		return errorf(CodeInvalidArgument, "%s is %d bytes; at most %d are allowed", field, len(s), fleetv1alpha1.MaxContentBytes)
	case !utf8.ValidString(s):
		return errorf(CodeInvalidArgument, "%s is not valid UTF-8", field)
	}
	return nil
}

// requireMember refuses a tool that only workers can use.
func requireMember(c *call) *ToolError {
	if c.who.Kind != fleetv1alpha1.PrincipalMember {
		return errorf(CodeForbidden, "%s is for fleet members answering a message; you are %s %s", c.tool, c.who.Kind, c.who.Name)
	}
	return nil
}

// bridgeSend creates a Delegation, or finds the one an idempotency key or
// turn id names, and holds the call until its outcome.
func (g *Gateway) bridgeSend(ctx context.Context, c *call, in SendInput) (*SendOutput, error) {
	if err := checkContent("content", in.Content); err != nil {
		return nil, err
	}
	timeout, terr := holdTimeout(in.TimeoutMs, g.opts.MaxTimeout)
	if terr != nil {
		return nil, terr
	}
	wait := in.Wait == nil || *in.Wait
	if in.TurnID != "" {
		return g.answer(ctx, c, in, wait)
	}
	if len(in.IdempotencyKey) > maxIdempotencyKey {
		return nil, errorf(CodeInvalidArgument, "idempotencyKey is %d bytes; at most %d are allowed", len(in.IdempotencyKey), maxIdempotencyKey)
	}
	p := c.who
	var name string
	if in.IdempotencyKey != "" {
		name = idempotentName(p.Namespace, p.api(), in.IdempotencyKey)
		d, err := g.getDelegation(ctx, types.NamespacedName{Namespace: p.Namespace, Name: name})
		switch {
		case err == nil:
			return g.attach(ctx, c, d, in, wait)
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("looking up delegation %s: %w", name, err)
		}
	}

	member, err := g.sendTarget(ctx, p, in.SessionID)
	if err != nil {
		return nil, err
	}
	d := g.newDelegation(p, member, in.Content, wait, timeoutSeconds(timeout))
	if name != "" {
		d.GenerateName, d.Name, d.Spec.IdempotencyKey = "", name, in.IdempotencyKey
	}
	if err := g.client.Create(ctx, d); err != nil {
		if apierrors.IsAlreadyExists(err) && name != "" {
			// Another call with the same key won the race.
			existing := &fleetv1alpha1.Delegation{}
			if err := g.live.Get(ctx, client.ObjectKeyFromObject(d), existing); err != nil {
				return nil, fmt.Errorf("reading delegation %s: %w", name, err)
			}
			return g.attach(ctx, c, existing, in, wait)
		}
		return nil, fmt.Errorf("creating a delegation to %s: %w", member.Name, err)
	}
	if !wait {
		return &SendOutput{Outcome: outcomeDispatched, DispatchID: d.Name, Member: d.Spec.To}, nil
	}
	return g.await(ctx, c, d, timeout, nil)
}

// newDelegation builds a message from p to member, with the labels and the
// sequence annotation the controller and bridge_poll select by.
func (g *Gateway) newDelegation(p *Principal, member *fleetv1alpha1.Member, content string, wait bool, timeoutSeconds int32) *fleetv1alpha1.Delegation {
	d := &fleetv1alpha1.Delegation{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    p.Namespace,
			GenerateName: delegationGenerateName(member.Name),
			Labels: map[string]string{
				fleetv1alpha1.LabelMember: member.Name,
				fleetv1alpha1.LabelSender: senderLabel(p.api()),
			},
			Annotations: map[string]string{
				// Creation timestamps have whole seconds; the queue needs the
				// order of messages sent within one.
				fleetv1alpha1.AnnotationSequence: g.opts.Clock.Now().UTC().Format(time.RFC3339Nano),
			},
		},
		Spec: fleetv1alpha1.DelegationSpec{
			From:           p.api(),
			To:             member.Name,
			Content:        content,
			Wait:           ptr.To(wait),
			TimeoutSeconds: timeoutSeconds,
		},
	}
	if member.Spec.Team != "" {
		d.Labels[fleetv1alpha1.LabelTeam] = member.Spec.Team
	}
	return d
}

// sendTarget resolves the member a bridge_send goes to, spawning one from
// the default Profile when the namespace has none.
func (g *Gateway) sendTarget(ctx context.Context, p *Principal, sessionID string) (*fleetv1alpha1.Member, error) {
	members, err := g.members(ctx, p.Namespace)
	if err != nil {
		return nil, err
	}
	t, terr := resolveTarget(members, sessionID, p)
	if terr != nil {
		return nil, terr
	}
	if t.spawn {
		m, err := g.spawn(ctx, p, spawnRequest{})
		if err != nil {
			var te *ToolError
			if errors.As(err, &te) && te.Code == CodeNotFound {
				return nil, errorf(CodeNotFound, "there is no member to send to and no default profile to spawn one from: create a Profile with spec.default: true, or spawn a member with bridge_spawn")
			}
			return nil, err
		}
		return m, nil
	}
	i := slices.IndexFunc(members, func(m fleetv1alpha1.Member) bool { return m.Name == t.member })
	return &members[i], nil
}

// attach returns the outcome of an existing Delegation that an idempotency
// key named, waiting on it again when it has none yet.
func (g *Gateway) attach(ctx context.Context, c *call, d *fleetv1alpha1.Delegation, in SendInput, wait bool) (*SendOutput, error) {
	if principalKey(d.Spec.From) != c.who.key() || d.Spec.Content != in.Content {
		return nil, errorf(CodeConflict, "idempotencyKey %q was already used for a different message (%s); use a new key for a new message", in.IdempotencyKey, d.Name)
	}
	if !wait {
		return &SendOutput{Outcome: outcomeDispatched, DispatchID: d.Name, Member: d.Spec.To}, nil
	}
	return g.awaitExisting(ctx, c, d, in.TimeoutMs, nil)
}

// awaitExisting waits on a Delegation created by an earlier call: no longer
// than its deadline, and no longer than timeoutMs when given.
func (g *Gateway) awaitExisting(ctx context.Context, c *call, d *fleetv1alpha1.Delegation, timeoutMs *int64, answered sets.Set[string]) (*SendOutput, error) {
	remaining := d.Deadline().Sub(g.opts.Clock.Now())
	if timeoutMs != nil && *timeoutMs > 0 {
		own, _ := holdTimeout(timeoutMs, g.opts.MaxTimeout)
		remaining = min(remaining, own)
	}
	d = g.reattach(ctx, d)
	return g.await(ctx, c, d, max(remaining, 0), answered)
}

// await holds a bridge_send until its Delegation has an outcome for the
// sender. A waiter that leaves without one records detachedAt, so the
// outcome is kept for bridge_poll (or typed into a member sender's pane).
func (g *Gateway) await(ctx context.Context, c *call, d *fleetv1alpha1.Delegation, timeout time.Duration, answered sets.Set[string]) (*SendOutput, error) {
	var out *SendOutput
	var terr *ToolError
	decide := func(d *fleetv1alpha1.Delegation) bool {
		var done bool
		out, terr, done = outcomeOf(d, answered)
		return done
	}
	last, err := g.hold(ctx, c, d, timeout, decide)
	switch {
	case err == nil:
		g.acknowledge(ctx, last)
	case errors.Is(err, errDelegationDeleted):
		return nil, errorf(CodeCancelled, "delegation %s was deleted", d.Name)
	case errors.Is(err, errHoldTimeout):
		if _, reached := g.detach(ctx, last, decide); reached {
			break
		}
		return &SendOutput{Outcome: outcomeTimeout, DispatchID: d.Name, Member: d.Spec.To}, nil
	default:
		// The caller is gone (or the gateway is stopping); the Delegation
		// carries on, and its outcome waits for bridge_poll or a re-attach.
		g.detach(ctx, last, nil)
		return nil, err
	}
	if terr != nil {
		return nil, terr
	}
	return out, nil
}

// answer records the sender's answer to a worker's question and waits on
// the same Delegation again.
func (g *Gateway) answer(ctx context.Context, c *call, in SendInput, wait bool) (*SendOutput, error) {
	name, ok := parseTurnID(in.TurnID)
	if !ok {
		return nil, errorf(CodeInvalidArgument, "turnId %q is not a turn id from a question (they look like <dispatchId>.q1)", in.TurnID)
	}
	d, err := g.getDelegation(ctx, types.NamespacedName{Namespace: c.who.Namespace, Name: name})
	if apierrors.IsNotFound(err) {
		return nil, errorf(CodeNotFound, "no question %s: message %s does not exist", in.TurnID, name)
	}
	if err != nil {
		return nil, err
	}
	if principalKey(d.Spec.From) != c.who.key() {
		return nil, errorf(CodeForbidden, "question %s was asked about a message you did not send", in.TurnID)
	}
	if findQuestion(d, in.TurnID) == nil {
		return nil, errorf(CodeNotFound, "message %s has no question %s", name, in.TurnID)
	}
	now := metav1.NewTime(g.opts.Clock.Now())
	d, err = g.updateStatus(ctx, d, func(d *fleetv1alpha1.Delegation) (bool, error) {
		q := findQuestion(d, in.TurnID)
		switch {
		case q == nil:
			return false, errorf(CodeNotFound, "message %s has no question %s", name, in.TurnID)
		case d.Status.Phase.IsTerminal():
			// Too late to answer; the waiter below returns the outcome.
			return false, nil
		case q.Answer != nil && *q.Answer == in.Content:
			// A retried answer.
			return false, nil
		case q.Answer != nil:
			return false, errorf(CodeConflict, "question %s was already answered differently", in.TurnID)
		case q.WithdrawnAt != nil:
			return false, errorf(CodeConflict, "question %s was withdrawn: the worker stopped waiting for the answer and went on; send it a new message instead", in.TurnID)
		}
		q.Answer, q.AnsweredAt = ptr.To(in.Content), &now
		if d.Status.Phase == fleetv1alpha1.DelegationAsking && openQuestion(d) == nil {
			d.Status.Phase = fleetv1alpha1.DelegationWorking
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if !wait {
		return &SendOutput{Outcome: outcomeDispatched, DispatchID: d.Name, Member: d.Spec.To}, nil
	}
	return g.awaitExisting(ctx, c, d, in.TimeoutMs, sets.New(in.TurnID))
}

// bridgeReply settles the caller's current Delegation with its reply, or
// records a late reply on the one that timed out.
func (g *Gateway) bridgeReply(ctx context.Context, c *call, in ReplyInput) (*ReplyOutput, error) {
	if err := requireMember(c); err != nil {
		return nil, err
	}
	if err := checkContent("content", in.Content); err != nil {
		return nil, err
	}
	now := metav1.NewTime(g.opts.Clock.Now())
	for attempt := 0; attempt < 3; attempt++ {
		d, late, err := g.replyTarget(ctx, c.who, attempt > 0)
		if err != nil {
			return nil, err
		}
		if d == nil {
			return nil, errorf(CodeNotFound, "no message is in flight to you, so there is nothing to reply to (a reply only settles a message that was delivered to you)")
		}
		d, err = g.updateStatus(ctx, d, func(d *fleetv1alpha1.Delegation) (bool, error) {
			switch {
			case d.Spec.To != c.who.Name:
				return false, errStale
			case !late && inFlight(d):
				d.Status.Reply, d.Status.RepliedAt = ptr.To(in.Content), &now
				d.Status.Phase, d.Status.Outcome, d.Status.SettledAt = fleetv1alpha1.DelegationReplied, fleetv1alpha1.OutcomeReply, &now
			case late && d.Status.Phase == fleetv1alpha1.DelegationTimedOut && d.Status.Reply == nil:
				d.Status.Reply, d.Status.RepliedAt = ptr.To(in.Content), &now
				// The sender may have acknowledged the timeout already;
				// the reply is news it has to see.
				d.Status.AcknowledgedAt = nil
			default:
				return false, errStale
			}
			return true, nil
		})
		if errors.Is(err, errStale) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &ReplyOutput{DispatchID: d.Name, Late: late}, nil
	}
	return nil, errorf(CodeConflict, "the message in flight to you kept changing; try again")
}

// replyTarget finds the Delegation a reply settles: in flight to the caller,
// else timed out after delivery without a reply (late). The cache answers
// first; when it shows nothing, or live is set, the API server decides,
// since a worker may reply a moment after its delivery was written.
func (g *Gateway) replyTarget(ctx context.Context, p *Principal, live bool) (*fleetv1alpha1.Delegation, bool, error) {
	named := ""
	if p.Member != nil {
		named = p.Member.Status.InFlight
	}
	if !live {
		// A worker often replies a moment after its delivery was written,
		// before the cache shows it: wait briefly for the cache to catch up
		// before asking the API server.
		key := receiverKey(p.Namespace, p.Name)
		w := g.rv.subscribe(key)
		defer g.rv.unsubscribe(key, w)
		grace := time.NewTimer(cacheGrace)
		defer grace.Stop()
	wait:
		for {
			ds, err := g.delegationsTo(ctx, p.Namespace, p.Name, stateActive)
			if err != nil {
				return nil, false, err
			}
			if d := currentDelegation(ds, named); d != nil {
				return d, false, nil
			}
			select {
			case <-w.wake:
			case <-grace.C:
				break wait
			case <-ctx.Done():
				return nil, false, ctx.Err()
			}
		}
	}
	ds, err := g.allDelegationsTo(ctx, p.Namespace, p.Name)
	if err != nil {
		return nil, false, err
	}
	if d := currentDelegation(ds, named); d != nil {
		return d, false, nil
	}
	if d := lateReplyTarget(ds); d != nil {
		return d, true, nil
	}
	return nil, false, nil
}

// bridgeAsk records a question on the caller's current Delegation and holds
// the call until the sender answers it.
func (g *Gateway) bridgeAsk(ctx context.Context, c *call, in AskInput) (*AskOutput, error) {
	if err := requireMember(c); err != nil {
		return nil, err
	}
	if err := checkContent("content", in.Content); err != nil {
		return nil, err
	}
	timeout, terr := holdTimeout(in.TimeoutMs, g.opts.MaxTimeout)
	if terr != nil {
		return nil, terr
	}
	now := metav1.NewTime(g.opts.Clock.Now())
	var d *fleetv1alpha1.Delegation
	var turn string
	for attempt := 0; ; attempt++ {
		if attempt == 3 {
			return nil, errorf(CodeConflict, "the message in flight to you kept changing; try again")
		}
		current, late, err := g.replyTarget(ctx, c.who, attempt > 0)
		if err != nil {
			return nil, err
		}
		if current == nil || late {
			return nil, errorf(CodeNotFound, "no message is in flight to you, so there is nobody to ask")
		}
		d, err = g.updateStatus(ctx, current, func(d *fleetv1alpha1.Delegation) (bool, error) {
			if d.Spec.To != c.who.Name || !inFlight(d) {
				return false, errStale
			}
			n := len(d.Status.Questions) + 1
			if n > fleetv1alpha1.MaxQuestions {
				return false, errorf(CodeConflict, "message %s already has %d questions, the most one message can carry; decide and reply", d.Name, fleetv1alpha1.MaxQuestions)
			}
			turn = turnID(d.Name, n)
			d.Status.Questions = append(d.Status.Questions, fleetv1alpha1.Question{TurnID: turn, Text: in.Content, AskedAt: now})
			d.Status.Phase = fleetv1alpha1.DelegationAsking
			return true, nil
		})
		if errors.Is(err, errStale) {
			continue
		}
		if err != nil {
			return nil, err
		}
		break
	}

	var out *AskOutput
	var aerr *ToolError
	_, err := g.hold(ctx, c, d, timeout, func(d *fleetv1alpha1.Delegation) bool {
		var done bool
		out, aerr, done = answerOf(d, turn)
		return done
	})
	if err != nil && !errors.Is(err, errDelegationDeleted) {
		// The worker goes on without the answer (it timed out, or its call
		// is gone): an open question would hold the message, and its
		// member's queue, until the deadline.
		g.withdrawQuestion(ctx, d, turn)
	}
	switch {
	case err == nil:
	case errors.Is(err, errHoldTimeout):
		return &AskOutput{Outcome: outcomeTimeout, TurnID: turn}, nil
	case errors.Is(err, errDelegationDeleted):
		return nil, errorf(CodeCancelled, "message %s was deleted before your question was answered", d.Name)
	default:
		return nil, err
	}
	if aerr != nil {
		return nil, aerr
	}
	return out, nil
}

// withdrawQuestion records that the worker stopped waiting for the answer
// to turn, unless it was answered meanwhile: the message is worked on again,
// so the turn's own end settles it. It writes under a context of its own,
// since the call's may have ended.
func (g *Gateway) withdrawQuestion(ctx context.Context, d *fleetv1alpha1.Delegation, turn string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), detachTimeout)
	defer cancel()
	now := metav1.NewTime(g.opts.Clock.Now())
	if _, err := g.updateStatus(ctx, d, func(d *fleetv1alpha1.Delegation) (bool, error) {
		q := findQuestion(d, turn)
		if q == nil || q.Answer != nil || q.WithdrawnAt != nil || d.Status.Phase.IsTerminal() {
			return false, nil
		}
		q.WithdrawnAt = &now
		if d.Status.Phase == fleetv1alpha1.DelegationAsking && openQuestion(d) == nil {
			d.Status.Phase = fleetv1alpha1.DelegationWorking
		}
		return true, nil
	}); err != nil {
		g.log.Error(err, "Withdrawing an abandoned question", "delegation", klog.KObj(d), "turn", turn)
	}
}

// bridgePoll lists the caller's outcomes that nobody waited for, and the
// open questions addressed to it.
func (g *Gateway) bridgePoll(ctx context.Context, c *call, _ PollInput) (*PollOutput, error) {
	done, err := g.delegationsFrom(ctx, c.who, statePollable)
	if err != nil {
		return nil, err
	}
	pending, err := g.delegationsFrom(ctx, c.who, statePending)
	if err != nil {
		return nil, err
	}
	out := &PollOutput{Outcomes: []PolledOutcome{}, Questions: []OpenQuestion{}}
	var ready, asking []*fleetv1alpha1.Delegation
	for i := range done {
		ready = append(ready, &done[i])
	}
	for i := range pending {
		if openQuestion(&pending[i]) != nil {
			asking = append(asking, &pending[i])
		}
	}
	sortForPoll(ready)
	sortForPoll(asking)
	for _, d := range ready {
		out.Outcomes = append(out.Outcomes, polledOutcome(d))
	}
	for _, d := range asking {
		out.Questions = append(out.Questions, openQuestionView(d))
	}
	return out, nil
}

// polledOutcome shows a settled Delegation to its sender.
func polledOutcome(d *fleetv1alpha1.Delegation) PolledOutcome {
	po := PolledOutcome{DispatchID: d.Name, Member: d.Spec.To, Content: excerpt(d.Spec.Content, 200), SettledAt: timeString(d.Status.SettledAt)}
	out, terr, _ := outcomeOf(d, nil)
	switch {
	case terr != nil:
		po.Outcome, po.Error = string(terr.Code), terr
	case out != nil:
		po.Outcome, po.Text = out.Outcome, out.Text
	}
	return po
}

// openQuestionView shows a Delegation's open question to its sender.
func openQuestionView(d *fleetv1alpha1.Delegation) OpenQuestion {
	q := openQuestion(d)
	return OpenQuestion{DispatchID: d.Name, TurnID: q.TurnID, Member: d.Spec.To, Text: q.Text, AskedAt: q.AskedAt.UTC().Format(time.RFC3339)}
}

// bridgeAck acknowledges settled outcomes of the caller's Delegations. All
// ids are checked before any is written, so a refused id changes nothing.
func (g *Gateway) bridgeAck(ctx context.Context, c *call, in AckInput) (*AckOutput, error) {
	ids := slices.Clone(in.IDs)
	if in.DispatchID != "" {
		ids = append(ids, in.DispatchID)
	}
	var targets []*fleetv1alpha1.Delegation
	if len(ids) == 0 {
		ds, err := g.delegationsFrom(ctx, c.who, statePollable)
		if err != nil {
			return nil, err
		}
		for i := range ds {
			targets = append(targets, &ds[i])
		}
	} else {
		if len(ids) > 1000 {
			return nil, errorf(CodeInvalidArgument, "at most 1000 ids per call, got %d", len(ids))
		}
		seen := sets.New[string]()
		for _, id := range ids {
			if seen.Has(id) {
				continue
			}
			seen.Insert(id)
			if id == "" {
				return nil, errorf(CodeInvalidArgument, "ids must not be empty")
			}
			d, err := g.getDelegation(ctx, types.NamespacedName{Namespace: c.who.Namespace, Name: id})
			if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
				return nil, errorf(CodeNotFound, "no message %s", id)
			}
			if err != nil {
				return nil, err
			}
			if principalKey(d.Spec.From) != c.who.key() {
				return nil, errorf(CodeForbidden, "message %s was not sent by you", id)
			}
			if !d.Status.Phase.IsTerminal() {
				return nil, errorf(CodeConflict, "message %s has no outcome yet (phase %s); acknowledge it once bridge_poll shows it", id, phaseOf(d))
			}
			targets = append(targets, d)
		}
	}
	now := metav1.NewTime(g.opts.Clock.Now())
	out := &AckOutput{Acknowledged: []string{}}
	for _, d := range targets {
		if _, err := g.updateStatus(ctx, d, func(d *fleetv1alpha1.Delegation) (bool, error) {
			if d.Status.AcknowledgedAt != nil {
				return false, nil
			}
			d.Status.AcknowledgedAt = &now
			return true, nil
		}); err != nil {
			return nil, err
		}
		out.Acknowledged = append(out.Acknowledged, d.Name)
	}
	// A bridge_poll right after the ack reads the cache: wait until it shows
	// the acks, so the caller never sees an acknowledged outcome again.
	for _, d := range targets {
		g.awaitCache(ctx, client.ObjectKeyFromObject(d), func(d *fleetv1alpha1.Delegation) bool { return d.Status.AcknowledgedAt != nil })
	}
	slices.Sort(out.Acknowledged)
	return out, nil
}

// cacheCatchUp bounds how long a call waits for the cache to show its own
// write.
const cacheCatchUp = 2 * time.Second

// awaitCache waits, at most cacheCatchUp, until the cached Delegation at key
// satisfies shows.
func (g *Gateway) awaitCache(ctx context.Context, key types.NamespacedName, shows func(*fleetv1alpha1.Delegation) bool) {
	w := g.rv.subscribe(key)
	defer g.rv.unsubscribe(key, w)
	limit := time.NewTimer(cacheCatchUp)
	defer limit.Stop()
	for {
		var d fleetv1alpha1.Delegation
		if err := g.cache.Get(ctx, key, &d); err != nil || shows(&d) {
			return
		}
		select {
		case <-w.wake:
		case <-limit.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

func phaseOf(d *fleetv1alpha1.Delegation) fleetv1alpha1.DelegationPhase {
	if d.Status.Phase == "" {
		return fleetv1alpha1.DelegationPending
	}
	return d.Status.Phase
}

// bridgeStatus shows members' live state and the caller's messages in
// progress.
func (g *Gateway) bridgeStatus(ctx context.Context, c *call, in StatusInput) (*StatusOutput, error) {
	if err := g.allow(ctx, c.who, GetMembers); err != nil {
		return nil, err
	}
	members, err := g.members(ctx, c.who.Namespace)
	if err != nil {
		return nil, err
	}
	out := &StatusOutput{Pending: []DelegationView{}}
	if in.SessionID != "" {
		m, terr := findMember(members, in.SessionID)
		if terr != nil {
			return nil, terr
		}
		out.Members = []MemberView{memberView(m, c.who)}
	} else {
		out.Members = memberViews(members, c.who, nil)
	}
	ds, err := g.delegationsFrom(ctx, c.who, statePending)
	if err != nil {
		return nil, err
	}
	var pending []*fleetv1alpha1.Delegation
	for i := range ds {
		pending = append(pending, &ds[i])
	}
	sortForPoll(pending)
	for _, d := range pending {
		v := DelegationView{
			DispatchID: d.Name, Member: d.Spec.To, Phase: string(phaseOf(d)),
			Created: d.CreationTimestamp.UTC().Format(time.RFC3339), Deadline: d.Deadline().UTC().Format(time.RFC3339),
		}
		if openQuestion(d) != nil {
			q := openQuestionView(d)
			v.Question = &q
		}
		out.Pending = append(out.Pending, v)
	}
	return out, nil
}

// bridgeSpawn starts a member from a Profile.
func (g *Gateway) bridgeSpawn(ctx context.Context, c *call, in SpawnInput) (*SpawnOutput, error) {
	m, err := g.spawn(ctx, c.who, spawnRequest{profile: in.Profile})
	if err != nil {
		return nil, err
	}
	v := memberView(m, c.who)
	return &SpawnOutput{Member: &v}, nil
}

// bridgeList lists the members of the caller's namespace.
func (g *Gateway) bridgeList(ctx context.Context, c *call, _ ListInput) (*ListOutput, error) {
	if err := g.allow(ctx, c.who, GetMembers); err != nil {
		return nil, err
	}
	members, err := g.members(ctx, c.who.Namespace)
	if err != nil {
		return nil, err
	}
	return &ListOutput{Members: memberViews(members, c.who, nil)}, nil
}

// bridgeStop deletes a member the caller may stop.
func (g *Gateway) bridgeStop(ctx context.Context, c *call, in StopInput) (*StopOutput, error) {
	name, err := g.stop(ctx, c.who, in.PaneID)
	if err != nil {
		return nil, err
	}
	return &StopOutput{Stopped: name}, nil
}

// bridgeProfiles lists the Profiles of the caller's namespace.
func (g *Gateway) bridgeProfiles(ctx context.Context, c *call, _ ProfilesInput) (*ProfilesOutput, error) {
	ps, err := g.profiles(ctx, c.who.Namespace)
	if err != nil {
		return nil, err
	}
	def := defaultProfile(ps)
	out := &ProfilesOutput{Profiles: make([]ProfileView, 0, len(ps))}
	for i := range ps {
		p := &ps[i]
		out.Profiles = append(out.Profiles, ProfileView{
			Name: p.Name, Description: p.Spec.Description, Agent: string(p.Spec.Agent), Command: p.Spec.Command,
			Model: p.Spec.Model, Effort: string(p.Spec.Effort), Billing: string(billingOf(p)), Default: def != nil && def.Name == p.Name,
		})
	}
	slices.SortFunc(out.Profiles, func(a, b ProfileView) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out, nil
}

// bridgeWhoami reports the caller's identity as the gateway resolved it.
func (g *Gateway) bridgeWhoami(ctx context.Context, c *call, _ WhoamiInput) (*WhoamiOutput, error) {
	p := c.who
	out := &WhoamiOutput{Kind: string(p.Kind), Name: p.Name, Namespace: p.Namespace, Primary: p.isPrimary(), Namespaces: map[string]bool{}}
	for _, ns := range []ToolNamespace{ToolNamespaceBridge, ToolNamespaceTeam, ToolNamespaceProcess} {
		out.Namespaces[string(ns)] = g.enabled(ns)
	}
	if p.Member != nil {
		// The member as it is now, not as it was when the token was checked.
		var m fleetv1alpha1.Member
		if err := g.cache.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, &m); err != nil {
			return nil, fmt.Errorf("reading member %s: %w", p.Name, err)
		}
		v := memberView(&m, p)
		out.Member, out.Team, out.Role = &v, v.Team, v.Role
	}
	return out, nil
}
