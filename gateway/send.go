package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/tracing"
	"github.com/fleetd/fleetd/shard"
)

// maxIdempotencyKey bounds an idempotency key, as the API does.
const maxIdempotencyKey = 128

// send creates a Delegation, or finds the one an idempotency key or
// turn id names, and holds the call until its outcome.
func (s *service) send(ctx context.Context, c *call, in SendInput) (*SendOutput, error) {
	timeout, terr := holdTimeout(in.TimeoutMs, s.opts.MaxTimeout)
	if terr != nil {
		return nil, terr
	}
	wait := in.Wait == nil || *in.Wait
	if in.DispatchID != "" {
		return s.rejoin(ctx, c, in, wait)
	}
	if err := checkContent("content", in.Content); err != nil {
		return nil, err
	}
	if in.TurnID != "" {
		return s.answerQuestion(ctx, c, in, wait)
	}
	if len(in.IdempotencyKey) > maxIdempotencyKey {
		return nil, toolerr.New(toolerr.InvalidArgument, "idempotencyKey is %d bytes; at most %d are allowed", len(in.IdempotencyKey), maxIdempotencyKey)
	}
	p := c.who
	var name string
	if in.IdempotencyKey != "" {
		name = idempotentName(p.Namespace, p.API(), in.IdempotencyKey)
		d, err := s.getDelegation(ctx, types.NamespacedName{Namespace: p.Namespace, Name: name})
		switch {
		case err == nil:
			return s.attach(ctx, c, d, in, wait)
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("looking up delegation %s: %w", name, err)
		}
	}

	member, err := s.sendTarget(ctx, p, in.SessionID, in.AutoSpawn == nil || *in.AutoSpawn)
	if err != nil {
		return nil, err
	}
	d := s.newDelegation(p, member, in.Content, wait, timeoutSeconds(timeout))
	if name != "" {
		d.GenerateName, d.Name, d.Spec.IdempotencyKey = "", name, in.IdempotencyKey
	}
	if err := s.createDelegation(ctx, p, d); err != nil {
		if apierrors.IsAlreadyExists(err) && name != "" {
			// Another call with the same key won the race.
			existing := &fleetv1alpha1.Delegation{}
			if err := s.live.Get(ctx, client.ObjectKeyFromObject(d), existing); err != nil {
				return nil, fmt.Errorf("reading delegation %s: %w", name, err)
			}
			return s.attach(ctx, c, existing, in, wait)
		}
		return nil, fmt.Errorf("creating a delegation to %s: %w", member.Name, err)
	}
	if !wait {
		return &SendOutput{Outcome: outcomeDispatched, DispatchID: d.Name, Member: d.Spec.To}, nil
	}
	return s.await(ctx, c, d, timeout, nil)
}

// createDelegation creates d, a message from p, within the limits
// (createDelegations).
func (s *service) createDelegation(ctx context.Context, p *identity.Principal, d *fleetv1alpha1.Delegation) error {
	_, err := s.createDelegations(ctx, p, []*fleetv1alpha1.Delegation{d}, nil)
	return err
}

// createDelegations creates ds, one call's messages from p, within the
// limits: each is one hop further than the message p (a member) works on,
// and all of them fit the bounds of this file, or none is created. Once
// they are admitted, and before the first is created, prepare (when not
// nil) writes what they refer to; nothing is written for messages that are
// refused. It returns how many were created before an error; an error
// from the API server comes back as it is, a quota's refusal as
// quota_exceeded.
func (s *service) createDelegations(ctx context.Context, p *identity.Principal, ds []*fleetv1alpha1.Delegation, prepare func() error) (int, error) {
	for _, d := range ds {
		if err := s.chain(ctx, p, d); err != nil {
			return 0, err
		}
	}
	a, err := s.admitDelegations(ctx, p, ds)
	if err != nil {
		return 0, err
	}
	defer a.release()
	if prepare != nil {
		if err := prepare(); err != nil {
			return 0, err
		}
	}
	for i, d := range ds {
		tracing.Inject(ctx, d)
		err := s.client.Create(ctx, d)
		for try := 0; apierrors.IsAlreadyExists(err) && d.GenerateName != "" && try < nameTries; try++ {
			// Another message took the name first: another one, as the
			// API server itself would try.
			d.Name = generateName(d.GenerateName)
			a.renamed(i, d.Name)
			err = s.client.Create(ctx, d)
		}
		if err := quotaRefusal(err, "message to "+d.Spec.To); err != nil {
			return i, err
		}
		a.created(i, d.Name, s.opts.Clock.Now())
	}
	return len(ds), nil
}

// nameTries bounds the names tried for one message past its first.
const nameTries = 3

// newDelegation builds a message from p to member, with the labels and the
// sequence annotation the controller and bridge_poll select by.
func (s *service) newDelegation(p *identity.Principal, member *fleetv1alpha1.Member, content string, wait bool, timeoutSeconds int32) *fleetv1alpha1.Delegation {
	d := &fleetv1alpha1.Delegation{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    p.Namespace,
			GenerateName: delegationGenerateName(member.Name),
			Labels: map[string]string{
				fleetv1alpha1.LabelMember: member.Name,
				fleetv1alpha1.LabelSender: delegation.SenderLabel(p.API()),
				fleetv1alpha1.LabelShard:  shard.Value(shard.Of(p.Namespace, member.Name, s.opts.Shards)),
			},
			Annotations: map[string]string{
				// Creation timestamps have whole seconds; the queue needs the
				// order of messages sent within one.
				fleetv1alpha1.AnnotationSequence: s.opts.Clock.Now().UTC().Format(time.RFC3339Nano),
			},
		},
		Spec: fleetv1alpha1.DelegationSpec{
			From:           p.API(),
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

// sendTarget resolves the member a bridge_send goes to. With autoSpawn it
// spawns one from the default Profile when the namespace has none, or from
// the Profile sessionID names when that Profile has no live member.
func (s *service) sendTarget(ctx context.Context, p *identity.Principal, sessionID string, autoSpawn bool) (*fleetv1alpha1.Member, error) {
	members, err := s.members(ctx, p.Namespace)
	if err != nil {
		return nil, err
	}
	profiles, err := s.profiles(ctx, p.Namespace)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(profiles))
	for _, pr := range profiles {
		names = append(names, pr.Name)
	}
	t, terr := resolveTarget(members, names, sessionID, p, s.describerFor(ctx, p))
	if terr != nil {
		return nil, terr
	}
	if !t.spawn {
		i := slices.IndexFunc(members, func(m fleetv1alpha1.Member) bool { return m.Name == t.member })
		return &members[i], nil
	}
	if !autoSpawn {
		if t.profile != "" {
			return nil, toolerr.New(toolerr.NotFound, "profile %s has no live member and autoSpawn is false: spawn one with bridge_spawn, or leave autoSpawn out", t.profile)
		}
		return nil, toolerr.New(toolerr.NotFound, "there is no member to send to and autoSpawn is false: spawn one with bridge_spawn, or leave autoSpawn out")
	}
	// A member spawned for a Profile is named after it: concurrent sends to
	// the Profile spawn one member, and later sends find it by name.
	m, err := s.spawnMember(ctx, p, newMember{profile: t.profile, name: t.profile})
	var te *toolerr.Error
	switch {
	case apierrors.IsAlreadyExists(err):
		existing := &fleetv1alpha1.Member{}
		if err := s.live.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: t.profile}, existing); err != nil {
			return nil, fmt.Errorf("reading member %s: %w", t.profile, err)
		}
		if existing.DeletionTimestamp != nil {
			return nil, toolerr.New(toolerr.WorkerGone, "member %s of profile %s is being deleted; send again once it is gone", existing.Name, t.profile)
		}
		return existing, nil
	case errors.As(err, &te) && te.Code == toolerr.NotFound && t.profile == "":
		return nil, toolerr.New(toolerr.NotFound, "there is no member to send to and no default profile to spawn one from: create a Profile with spec.default: true, or spawn a member with bridge_spawn")
	case err != nil:
		return nil, err
	}
	return m, nil
}

// describerFor lists members in p's error messages only when p may see
// members (RBAC's get members for a service account): a caller allowed
// only to send learns no names or statuses from a refusal. It asks once,
// and only when an error would list members.
func (s *service) describerFor(ctx context.Context, p *identity.Principal) memberDescriber {
	var asked, allowed bool
	return func(ms []*fleetv1alpha1.Member) (string, bool) {
		if !asked {
			asked, allowed = true, s.allow(ctx, p, identity.GetMembers) == nil
		}
		if !allowed {
			return "", false
		}
		return describeMembers(ms), true
	}
}

// rejoin waits again on a message the caller sent, named by its dispatch
// id: after a timeout, or a call a stopping gateway ended.
func (s *service) rejoin(ctx context.Context, c *call, in SendInput, wait bool) (*SendOutput, error) {
	if in.TurnID != "" || in.IdempotencyKey != "" || in.SessionID != "" {
		return nil, toolerr.New(toolerr.InvalidArgument, "dispatchId re-attaches to a message you sent; pass it alone (with timeoutMs or wait), without turnId, idempotencyKey or sessionId")
	}
	d, err := s.message(ctx, c.who.Namespace, in.DispatchID)
	if err != nil {
		return nil, err
	}
	if identity.Key(d.Spec.From) != c.who.Key() {
		return nil, toolerr.New(toolerr.Forbidden, "message %s was sent by %s, not by you: only its sender waits on it", d.Name, d.Spec.From.Name)
	}
	if in.Content != "" && in.Content != d.Spec.Content {
		return nil, toolerr.New(toolerr.Conflict, "message %s has other content; leave content out to re-attach, or send a new message without dispatchId", d.Name)
	}
	if !wait {
		return &SendOutput{Outcome: outcomeDispatched, DispatchID: d.Name, Member: d.Spec.To}, nil
	}
	return s.awaitExisting(ctx, c, d, in.TimeoutMs, nil)
}

// attach returns the outcome of an existing Delegation that an idempotency
// key named, waiting on it again when it has none yet.
func (s *service) attach(ctx context.Context, c *call, d *fleetv1alpha1.Delegation, in SendInput, wait bool) (*SendOutput, error) {
	if identity.Key(d.Spec.From) != c.who.Key() || d.Spec.Content != in.Content {
		return nil, toolerr.New(toolerr.Conflict, "idempotencyKey %q was already used for a different message (%s); use a new key for a new message", in.IdempotencyKey, d.Name)
	}
	if !wait {
		return &SendOutput{Outcome: outcomeDispatched, DispatchID: d.Name, Member: d.Spec.To}, nil
	}
	return s.awaitExisting(ctx, c, d, in.TimeoutMs, nil)
}

// awaitExisting waits on a Delegation created by an earlier call: no longer
// than its deadline, and no longer than timeoutMs when given.
func (s *service) awaitExisting(ctx context.Context, c *call, d *fleetv1alpha1.Delegation, timeoutMs *int64, answered sets.Set[string]) (*SendOutput, error) {
	remaining := delegation.Deadline(d).Sub(s.opts.Clock.Now())
	if timeoutMs != nil && *timeoutMs > 0 {
		own, _ := holdTimeout(timeoutMs, s.opts.MaxTimeout)
		remaining = min(remaining, own)
	}
	d = s.reattach(ctx, d)
	return s.await(ctx, c, d, max(remaining, 0), answered)
}

// await holds a bridge_send until its Delegation has an outcome for the
// sender. A waiter that leaves without one records detachedAt, so the
// outcome is kept for bridge_poll (or typed into a member sender's pane).
func (s *service) await(ctx context.Context, c *call, d *fleetv1alpha1.Delegation, timeout time.Duration, answered sets.Set[string]) (*SendOutput, error) {
	var out *SendOutput
	var terr *toolerr.Error
	decide := func(d *fleetv1alpha1.Delegation) bool {
		var done bool
		out, terr, done = outcomeOf(d, answered)
		return done
	}
	name, to := d.Name, d.Spec.To
	return holdThen(s, ctx, c, d, timeout, decide, func(ctx context.Context, last *fleetv1alpha1.Delegation, err error) (*SendOutput, error) {
		switch {
		case err == nil:
			s.acknowledge(ctx, last)
		case errors.Is(err, errDelegationDeleted):
			return nil, toolerr.New(toolerr.Cancelled, "delegation %s was deleted", name)
		case errors.Is(err, errHoldTimeout):
			if _, reached := s.detach(ctx, last, decide); reached {
				break
			}
			return &SendOutput{Outcome: outcomeTimeout, DispatchID: name, Member: to}, nil
		case errors.Is(err, errGatewayStopping):
			if _, reached := s.detach(ctx, last, decide); reached {
				break
			}
			return &SendOutput{Outcome: outcomeInterrupted, DispatchID: name, Member: to, Text: interruptedText(name)}, nil
		default:
			// The caller is gone (or the gateway is stopping); the Delegation
			// carries on, and its outcome waits for bridge_poll or a re-attach.
			s.detach(ctx, last, nil)
			return nil, err
		}
		if terr != nil {
			return nil, terr
		}
		return out, nil
	})
}

// answer records the sender's answer to a worker's question and waits on
// the same Delegation again.
func (s *service) answerQuestion(ctx context.Context, c *call, in SendInput, wait bool) (*SendOutput, error) {
	name, ok := delegation.ParseTurnID(in.TurnID)
	if !ok {
		return nil, toolerr.New(toolerr.InvalidArgument, "turnId %q is not a turn id from a question (they look like <dispatchId>.q1)", in.TurnID)
	}
	d, err := s.getDelegation(ctx, types.NamespacedName{Namespace: c.who.Namespace, Name: name})
	if apierrors.IsNotFound(err) {
		return nil, toolerr.New(toolerr.NotFound, "no question %s: message %s does not exist", in.TurnID, name)
	}
	if err != nil {
		return nil, err
	}
	if identity.Key(d.Spec.From) != c.who.Key() {
		return nil, toolerr.New(toolerr.Forbidden, "question %s was asked about a message you did not send", in.TurnID)
	}
	if delegation.FindQuestion(d, in.TurnID) == nil {
		return nil, toolerr.New(toolerr.NotFound, "message %s has no question %s", name, in.TurnID)
	}
	now := s.opts.Clock.Now()
	d, err = s.updateStatus(ctx, d, func(d *fleetv1alpha1.Delegation) (bool, error) {
		changed, err := delegation.Answer(d, now, in.TurnID, in.Content)
		switch {
		case errors.Is(err, delegation.ErrNoQuestion):
			return false, toolerr.New(toolerr.NotFound, "message %s has no question %s", name, in.TurnID)
		case errors.Is(err, delegation.ErrAnsweredDifferently):
			return false, toolerr.New(toolerr.Conflict, "question %s was already answered differently", in.TurnID)
		case errors.Is(err, delegation.ErrWithdrawn):
			return false, toolerr.New(toolerr.Conflict, "question %s was withdrawn: the worker stopped waiting for the answer and went on; send it a new message instead", in.TurnID)
		}
		// A settled message or a retried answer changes nothing; the
		// waiter below returns the outcome.
		return changed, err
	})
	if err != nil {
		return nil, err
	}
	if !wait {
		return &SendOutput{Outcome: outcomeDispatched, DispatchID: d.Name, Member: d.Spec.To}, nil
	}
	return s.awaitExisting(ctx, c, d, in.TimeoutMs, sets.New(in.TurnID))
}
