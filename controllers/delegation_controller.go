package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
)

// IndexDelegationTo indexes Delegations by the member they are sent to.
const IndexDelegationTo = "spec.to"

// tailLines bounds the terminal tail a turn_done carries.
const tailLines = 40

// DelegationReconciler is the injector. It reconciles one member's queue at
// a time (requests are keyed by the member), so deliveries to a member are
// decided in one place, in order.
type DelegationReconciler struct {
	Client   client.Client
	Panes    Panes
	Recorder recorder.EventRecorder
	Clock    clock.PassiveClock
	Policy   DeliveryPolicy
	// MaxConcurrentReconciles bounds how many members' queues are worked on
	// at once (default 16). herdr holds a prompt for 300 ms before pressing
	// Enter, so this caps the fleet's delivery rate at about 3 per worker
	// per second.
	MaxConcurrentReconciles int
}

// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=delegations,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=delegations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=members,verbs=get;list;watch
// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=members/status,verbs=get;update;patch

// errConflict asks for a fresh look after someone else wrote a Delegation.
var errConflict = errors.New("delegation changed underneath; looking again")

// Reconcile decides and carries out what is due for one member's queue.
func (r *DelegationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	member := &fleetv1alpha1.Member{}
	view := MemberView{Gone: true}
	if err := r.Client.Get(ctx, req.NamespacedName, member); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		member = nil
	} else {
		view = memberViewOf(member)
	}
	var list fleetv1alpha1.DelegationList
	if err := r.Client.List(ctx, &list, client.InNamespace(req.Namespace), client.MatchingFields{IndexDelegationTo: req.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing delegations to %s: %w", req.Name, err)
	}
	byName := make(map[string]*fleetv1alpha1.Delegation, len(list.Items))
	for i := range list.Items {
		byName[list.Items[i].Name] = &list.Items[i]
	}

	gone, err := r.goneSenders(ctx, req.Namespace, list.Items)
	if err != nil {
		return ctrl.Result{}, err
	}
	now := r.Clock.Now()
	dec := Decide(view, list.Items, now, r.Policy, gone)
	for _, step := range dec.Steps {
		d := byName[step.Name]
		if err := r.apply(ctx, step, d, view, now); err != nil {
			if errors.Is(err, errConflict) || apierrors.IsConflict(err) {
				return ctrl.Result{RequeueAfter: 10 * time.Millisecond}, nil
			}
			return ctrl.Result{}, err
		}
	}
	for _, carrier := range handedOver(list.Items) {
		if err := r.acknowledgeOriginal(ctx, carrier); err != nil {
			if errors.Is(err, errConflict) {
				return ctrl.Result{RequeueAfter: 10 * time.Millisecond}, nil
			}
			return ctrl.Result{}, err
		}
	}
	if member != nil && member.DeletionTimestamp.IsZero() &&
		(member.Status.QueueDepth != dec.QueueDepth || member.Status.InFlight != dec.InFlight) {
		base := member.DeepCopy()
		member.Status.QueueDepth, member.Status.InFlight = dec.QueueDepth, dec.InFlight
		if err := r.Client.Status().Patch(ctx, member, client.MergeFrom(base)); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("writing the queue of member %s: %w", member.Name, err)
		}
	}
	return ctrl.Result{RequeueAfter: dec.RequeueAfter}, nil
}

// goneSenders finds the Members that sent outcomes still owed to them and no
// longer exist: nobody will collect those, so retention may take them.
func (r *DelegationReconciler) goneSenders(ctx context.Context, ns string, ds []fleetv1alpha1.Delegation) (sets.Set[string], error) {
	gone := sets.New[string]()
	if r.Policy.Retention <= 0 {
		return gone, nil
	}
	checked := sets.New[string]()
	for i := range ds {
		from := ds[i].Spec.From
		if from.Kind != fleetv1alpha1.PrincipalMember || checked.Has(from.Name) || !ds[i].Unclaimed() {
			continue
		}
		checked.Insert(from.Name)
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: from.Name}, &fleetv1alpha1.Member{})
		switch {
		case apierrors.IsNotFound(err):
			gone.Insert(from.Name)
		case err != nil:
			return nil, fmt.Errorf("looking up sender %s: %w", from.Name, err)
		}
	}
	return gone, nil
}

func memberViewOf(m *fleetv1alpha1.Member) MemberView {
	v := MemberView{
		Gone:       !m.DeletionTimestamp.IsZero(),
		Ready:      meta.IsStatusConditionTrue(m.Status.Conditions, fleetv1alpha1.ConditionReady),
		PaneID:     m.Status.PaneID,
		TerminalID: m.Status.TerminalID,
		Status:     m.Status.AgentStatus,
		Seq:        m.Status.StateChangeSeq,
		Command:    m.Status.AgentKind == "",
	}
	if m.Status.AgentStatusSince != nil {
		v.Since = m.Status.AgentStatusSince.Time
	}
	return v
}

// apply carries out one step.
func (r *DelegationReconciler) apply(ctx context.Context, step Step, d *fleetv1alpha1.Delegation, m MemberView, now time.Time) error {
	t := metav1.NewTime(now)
	switch step.Kind {
	case StepQueue:
		d.Status.Phase = fleetv1alpha1.DelegationQueued
		d.Status.QueuedAt = &t
		d.Status.Deadline = &metav1.Time{Time: d.Deadline()}
		setDelegationConditions(d, fleetv1alpha1.ReasonQueued, "waiting for member "+d.Spec.To)
		return r.write(ctx, d)
	case StepSettle:
		return r.settle(ctx, d, step.Phase, step.Outcome, step.Reason, step.Message, t)
	case StepPickup:
		d.Status.Phase = fleetv1alpha1.DelegationWorking
		d.Status.PickedUpAt = &t
		setDelegationConditions(d, fleetv1alpha1.ReasonDelivered, "the member picked it up")
		return r.write(ctx, d)
	case StepConfirm:
		d.Status.Phase = fleetv1alpha1.DelegationWorking
		d.Status.DeliveredAt = &t
		d.Status.PickedUpAt = &t
		setDelegationConditions(d, fleetv1alpha1.ReasonDelivered, "an interrupted delivery was confirmed by the member's pickup")
		return r.write(ctx, d)
	case StepTurnDone:
		tail, err := r.tail(ctx, d.Status.PaneID)
		if err != nil {
			return err
		}
		d.Status.Tail = &tail
		return r.settle(ctx, d, fleetv1alpha1.DelegationTurnDone, fleetv1alpha1.OutcomeTurnDone, fleetv1alpha1.ReasonTurnDone,
			"the member ended its turn without replying", t)
	case StepRecord:
		if d.Status.DeliveredAt == nil && d.Status.DeliveringAt != nil && d.Status.Reply != nil {
			// A reply proves the typing the confirmation did not record.
			d.Status.DeliveredAt = d.Status.DeliveringAt
		}
		setDelegationConditions(d, reasonOf(d.Status.Phase), "settled by the gateway")
		return r.write(ctx, d)
	case StepDetachedReply:
		return r.carryReply(ctx, d)
	case StepExpire:
		return r.expire(ctx, d)
	case StepDeliver:
		return r.deliver(ctx, d, m, t)
	}
	return fmt.Errorf("unknown step %q", step.Kind)
}

// deliver records the intent, types the message, then records the result.
// The intent comes first so that a controller stopped in between never types
// it twice (see Decide).
func (r *DelegationReconciler) deliver(ctx context.Context, d *fleetv1alpha1.Delegation, m MemberView, t metav1.Time) error {
	d.Status.DeliveringAt = &t
	d.Status.DeliveringSeq = m.Seq
	d.Status.PaneID, d.Status.TerminalID = m.PaneID, m.TerminalID
	if d.Status.Phase == "" || d.Status.Phase == fleetv1alpha1.DelegationPending {
		d.Status.Phase = fleetv1alpha1.DelegationQueued
		d.Status.QueuedAt = &t
		d.Status.Deadline = &metav1.Time{Time: d.Deadline()}
	}
	setDelegationConditions(d, fleetv1alpha1.ReasonQueued, "typing into pane "+m.PaneID)
	if err := r.write(ctx, d); err != nil {
		return err
	}

	hctx, cancel := context.WithTimeout(ctx, herdrTimeout)
	defer cancel()
	err := typeMessage(hctx, r.Panes, m, d.Spec.Content)
	var refusal *herdr.Error
	switch {
	case err == nil:
		now := metav1.NewTime(r.Clock.Now())
		d.Status.Phase = fleetv1alpha1.DelegationDelivered
		d.Status.DeliveredAt = &now
		setDelegationConditions(d, fleetv1alpha1.ReasonDelivered, "typed into pane "+m.PaneID)
		return r.write(ctx, d)
	case errors.As(err, &refusal):
		return r.settle(ctx, d, fleetv1alpha1.DelegationFailed, fleetv1alpha1.OutcomeDeliveryFailed, fleetv1alpha1.ReasonDeliveryRefused,
			fmt.Sprintf("herdr refused the delivery: %s: %s", refusal.Code, refusal.Message), metav1.NewTime(r.Clock.Now()))
	default:
		// Whether it was typed is unknown; Decide settles it once a pickup
		// proves it or the confirm window passes.
		return fmt.Errorf("typing delegation %s into pane %s: %w", d.Name, m.PaneID, err)
	}
}

// typeMessage types text into the member's pane and submits it: through
// herdr's agent.prompt, or, for a plain command herdr does not know as an
// agent (it answers agent_not_ready or agent_not_found), as input and Enter
// in one pane.send_input. One call, so that a controller stopped halfway
// never leaves text in the input line for the next message to be appended
// to; herdr pastes the text as a bracketed paste when the program asks for
// one, which is what keeps an Enter right behind it from being read as part
// of the text.
func typeMessage(ctx context.Context, panes Panes, m MemberView, text string) error {
	_, err := panes.AgentPrompt(ctx, herdr.AgentPromptParams{Target: m.PaneID, Text: text})
	if !m.Command || !(errors.Is(err, herdr.ErrAgentNotReady) || errors.Is(err, herdr.ErrAgentNotFound)) {
		return err
	}
	return panes.PaneSendInput(ctx, herdr.PaneSendInputParams{PaneID: m.PaneID, Text: text, Keys: []string{"enter"}})
}

// acknowledgeOriginal records on the Delegation a carrier answers that its
// reply reached the sender: the carrier was typed into the sender's pane.
// Until then the reply stays in the sender's bridge_poll, so a carrier that
// never gets typed (withdrawn, refused, pane lost) loses nothing.
func (r *DelegationReconciler) acknowledgeOriginal(ctx context.Context, carrier *fleetv1alpha1.Delegation) error {
	original := &fleetv1alpha1.Delegation{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: carrier.Namespace, Name: carrier.Spec.InReplyTo}, original)
	if apierrors.IsNotFound(err) || (err == nil && original.Status.AcknowledgedAt != nil) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting delegation %s, answered by %s: %w", carrier.Spec.InReplyTo, carrier.Name, err)
	}
	original.Status.AcknowledgedAt = carrier.Status.DeliveredAt.DeepCopy()
	return r.write(ctx, original)
}

// expire deletes a settled Delegation past its retention, as it was when
// decided on: a late reply or an acknowledgement written meanwhile makes the
// delete fail and the Delegation is looked at again.
func (r *DelegationReconciler) expire(ctx context.Context, d *fleetv1alpha1.Delegation) error {
	err := r.Client.Delete(ctx, d, client.Preconditions{UID: &d.UID, ResourceVersion: &d.ResourceVersion})
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		return errConflict
	}
	return fmt.Errorf("deleting delegation %s past its retention: %w", d.Name, err)
}

func (r *DelegationReconciler) tail(ctx context.Context, paneID string) (string, error) {
	hctx, cancel := context.WithTimeout(ctx, herdrTimeout)
	defer cancel()
	lines := tailLines
	read, err := r.Panes.PaneRead(hctx, herdr.ReadParams{PaneID: paneID, Source: herdr.ReadSourceRecent, Lines: &lines})
	if err != nil {
		if errors.Is(err, herdr.ErrNotFound) {
			return "", nil
		}
		return "", fmt.Errorf("reading the tail of pane %s: %w", paneID, err)
	}
	text := read.Text
	if len(text) > fleetv1alpha1.MaxContentBytes {
		text = text[len(text)-fleetv1alpha1.MaxContentBytes:]
	}
	return text, nil
}

// carryReply sends a reply nobody waits for into its member sender's pane, as
// a Delegation of its own that goes through the same gated queue.
func (r *DelegationReconciler) carryReply(ctx context.Context, d *fleetv1alpha1.Delegation) error {
	name := d.Name + "-reply"
	content := fmt.Sprintf("Reply from %s to your message %s:\n%s", d.Spec.To, d.Name, *d.Status.Reply)
	if len(content) > fleetv1alpha1.MaxContentBytes {
		content = content[:fleetv1alpha1.MaxContentBytes]
	}
	now := r.Clock.Now()
	reply := &fleetv1alpha1.Delegation{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: d.Namespace,
			Labels:    map[string]string{fleetv1alpha1.LabelMember: d.Spec.From.Name},
			Annotations: map[string]string{
				fleetv1alpha1.AnnotationSequence: now.UTC().Format(time.RFC3339Nano),
			},
		},
		Spec: fleetv1alpha1.DelegationSpec{
			From:      fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: d.Spec.To},
			To:        d.Spec.From.Name,
			Content:   content,
			Wait:      ptr.To(false),
			InReplyTo: d.Name,
			Hops:      d.Spec.Hops + 1,
		},
	}
	if err := r.Client.Create(ctx, reply); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the detached reply of %s: %w", d.Name, err)
	}
	d.Status.ReplyDeliveredAs = name
	return r.write(ctx, d)
}

func (r *DelegationReconciler) settle(ctx context.Context, d *fleetv1alpha1.Delegation, phase fleetv1alpha1.DelegationPhase, outcome fleetv1alpha1.Outcome, reason, msg string, t metav1.Time) error {
	d.Status.Phase = phase
	d.Status.Outcome = outcome
	d.Status.SettledAt = &t
	if d.Status.Deadline == nil {
		d.Status.Deadline = &metav1.Time{Time: d.Deadline()}
	}
	setDelegationConditions(d, reason, msg)
	if err := r.write(ctx, d); err != nil {
		return err
	}
	// The status tells the ordinary story; events are for what went wrong,
	// so a busy fleet does not write an Event per message.
	if outcome != fleetv1alpha1.OutcomeTurnDone && outcome != fleetv1alpha1.OutcomeReply {
		r.Recorder.Eventf(d, nil, corev1.EventTypeWarning, reason, "Settle", "%s", msg)
	}
	return nil
}

// write updates the status with optimistic concurrency: the gateway writes
// replies and questions to the same objects, and neither may lose the other's.
func (r *DelegationReconciler) write(ctx context.Context, d *fleetv1alpha1.Delegation) error {
	d.Status.ObservedGeneration = d.Generation
	if err := r.Client.Status().Update(ctx, d); err != nil {
		if apierrors.IsConflict(err) {
			return errConflict
		}
		return fmt.Errorf("writing the status of delegation %s: %w", d.Name, err)
	}
	return nil
}

// reasonOf is the condition reason for a terminal phase.
func reasonOf(p fleetv1alpha1.DelegationPhase) string {
	switch p {
	case fleetv1alpha1.DelegationReplied:
		return fleetv1alpha1.ReasonReplied
	case fleetv1alpha1.DelegationTurnDone:
		return fleetv1alpha1.ReasonTurnDone
	case fleetv1alpha1.DelegationTimedOut:
		return fleetv1alpha1.ReasonTimedOut
	case fleetv1alpha1.DelegationWorkerGone:
		return fleetv1alpha1.ReasonWorkerGone
	case fleetv1alpha1.DelegationCancelled:
		return fleetv1alpha1.ReasonCancelled
	}
	return fleetv1alpha1.ReasonDeliveryRefused
}

// setDelegationConditions derives Ready, Delivered and Settled from the
// phase.
func setDelegationConditions(d *fleetv1alpha1.Delegation, reason, msg string) {
	set := func(typ string, ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&d.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: d.Generation})
	}
	delivered := d.Status.DeliveredAt != nil
	deliveredReason := fleetv1alpha1.ReasonQueued
	if delivered {
		deliveredReason = fleetv1alpha1.ReasonDelivered
	}
	if reason == fleetv1alpha1.ReasonDeliveryRefused || reason == fleetv1alpha1.ReasonDeliveryUnconfirmed || reason == fleetv1alpha1.ReasonLoopGuard {
		deliveredReason = reason
	}
	deliveredMsg := msg
	if delivered {
		deliveredMsg = "typed into pane " + d.Status.PaneID
	}
	set(fleetv1alpha1.ConditionDelivered, delivered, deliveredReason, deliveredMsg)
	terminal := d.Status.Phase.IsTerminal()
	settledReason := fleetv1alpha1.ReasonInProgress
	if terminal {
		settledReason = reason
	}
	set(fleetv1alpha1.ConditionSettled, terminal, settledReason, msg)
	good := d.Status.Outcome == fleetv1alpha1.OutcomeReply || d.Status.Outcome == fleetv1alpha1.OutcomeTurnDone
	readyReason := fleetv1alpha1.ReasonInProgress
	if terminal {
		readyReason = reason
	}
	set(fleetv1alpha1.ConditionReady, terminal && good, readyReason, msg)
}

// SetupWithManager registers the reconciler. Requests are member keys: a
// Delegation maps to the member it is sent to.
func (r *DelegationReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 16
	}
	if err := IndexDelegations(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	toMember := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		d, ok := o.(*fleetv1alpha1.Delegation)
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: d.Namespace, Name: d.Spec.To}}}
	})
	// A deleted member will never collect the outcomes it is owed: look at
	// the queues that hold them, so retention can take them.
	owedTo := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		var list fleetv1alpha1.DelegationList
		if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing the delegations a deleted member sent", "member", o.GetName())
			return nil
		}
		queues := sets.New[string]()
		for i := range list.Items {
			if from := list.Items[i].Spec.From; from.Kind == fleetv1alpha1.PrincipalMember && from.Name == o.GetName() && list.Items[i].Unclaimed() {
				queues.Insert(list.Items[i].Spec.To)
			}
		}
		var reqs []reconcile.Request
		for _, q := range sets.List(queues) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: q}})
		}
		return reqs
	})
	onlyDeletes := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("delegation").
		Watches(&fleetv1alpha1.Delegation{}, toMember).
		Watches(&fleetv1alpha1.Member{}, &handler.EnqueueRequestForObject{}, builder.WithPredicates(memberStateChanged)).
		Watches(&fleetv1alpha1.Member{}, owedTo, builder.WithPredicates(onlyDeletes)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

// memberStateChanged passes Member changes the injector decides on, and not
// the queue fields it writes itself.
var memberStateChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*fleetv1alpha1.Member)
	cur, okNew := e.ObjectNew.(*fleetv1alpha1.Member)
	if !okOld || !okNew {
		return true
	}
	return memberViewOf(old) != memberViewOf(cur)
}}

// IndexDelegations registers the Delegation field indexes fleetd uses.
func IndexDelegations(ctx context.Context, idx client.FieldIndexer) error {
	return idx.IndexField(ctx, &fleetv1alpha1.Delegation{}, IndexDelegationTo, func(o client.Object) []string {
		return []string{o.(*fleetv1alpha1.Delegation).Spec.To}
	})
}
