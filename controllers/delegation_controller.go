package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/clock"
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
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/internal/tracing"
	"github.com/fleetd/fleetd/panehost"
)

// IndexDelegationTo indexes Delegations by the member they are sent to.
const IndexDelegationTo = "spec.to"

// tailLines bounds the terminal tail a turn_done carries.
const tailLines = 40

// DelegationReconciler is the injector. It reconciles one member's queue at
// a time (requests are keyed by the member): it gathers the member and its
// Delegations, lets delegation.Decide say what is due, and carries each
// step out through the delegation package's transitions with one write.
type DelegationReconciler struct {
	Sharding
	Client client.Client
	// Reader reads from the API server: the Secrets a message's images
	// come from, which the cache does not hold.
	Reader client.Reader
	// Panes is the shared pane server; Runtimes, when set, says where
	// each member's agent runs (on Panes, or in its Pod).
	Panes    PaneClient
	Runtimes *Runtimes
	Recorder recorder.EventRecorder
	Clock    clock.PassiveClock
	Policy   delegation.Policy
	// Metrics records what the Delegations went through; nil records
	// nothing.
	Metrics *Metrics
	// MaxConcurrentReconciles bounds how many members' queues are worked on
	// at once (default 16). herdr waits 300 ms after typing a prompt before
	// it presses Enter, so this caps the fleet's delivery rate at about 3 per worker
	// per second.
	MaxConcurrentReconciles int

	// mu guards what this process knows that the API does not: which
	// Delegations it saw typed, and which members' queues are blocked
	// because herdr refused a delivery for a dialog their status did not
	// show yet (the seq it refused at).
	mu        sync.Mutex
	typed     map[types.NamespacedName]sets.Set[string]
	blockedAt map[types.NamespacedName]int64

	runtimesOnce sync.Once

	// own is what this injector wrote that its cache may not show yet.
	own ownWrites

	// recorded records each step of each Delegation once.
	recorded delegationRecorder
}

// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=delegations,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=delegations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=members,verbs=get;list;watch

// errConflict asks for a fresh look after someone else wrote a Delegation.
var errConflict = errors.New("delegation changed underneath; looking again")

// Reconcile decides and carries out what is due for one member's queue.
func (r *DelegationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if !r.owns(req.Namespace, req.Name) {
		// Another replica's queue: its Delegations are not in this cache.
		return ctrl.Result{}, nil
	}
	member := &fleetv1alpha1.Member{}
	view := delegation.Member{Gone: true}
	command := false
	// panes is where the member's pane lives; nil when it has none to
	// reach (gone, or its Pod not running), and then nothing is typed.
	var panes PaneClient
	missing := false
	if err := r.Client.Get(ctx, req.NamespacedName, member); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		missing = true
	} else {
		view = memberViewOf(member)
		command = member.Status.AgentKind == ""
		panes, _ = r.runtimes().For(member)
	}
	view.BlockedAtSeq = r.blockedAtSeq(req.NamespacedName)
	var list fleetv1alpha1.DelegationList
	if err := r.Client.List(ctx, &list, client.InNamespace(req.Namespace), client.MatchingFields{IndexDelegationTo: req.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing delegations to %s: %w", req.Name, err)
	}
	if missing && slices.ContainsFunc(list.Items, func(d fleetv1alpha1.Delegation) bool { return !delegation.Settled(d.Status.Phase) }) {
		// Only the API server says a member is gone: the cache may not
		// show one created a moment ago (the gateway spawns a member and
		// sends to it at once), and its messages would end worker_gone.
		// Its create event brings this queue back.
		switch exists, err := r.memberExists(ctx, req.NamespacedName); {
		case err != nil:
			return ctrl.Result{}, err
		case exists:
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
	}
	r.own.overlayQueue(req.NamespacedName, list.Items)
	r.recorded.observe(req.NamespacedName, list.Items, r.Clock.Now())
	byName := make(map[string]*fleetv1alpha1.Delegation, len(list.Items))
	for i := range list.Items {
		byName[list.Items[i].Name] = &list.Items[i]
	}
	gone, err := r.goneSenders(ctx, req.Namespace, list.Items)
	if err != nil {
		return ctrl.Result{}, err
	}
	typed := r.typedIn(req.NamespacedName, byName)
	if panes != nil && awaitsConfirmation(list.Items, view, typed) {
		view = r.liveView(ctx, panes, member, view)
	}

	now := r.Clock.Now()
	moot, err := r.mootCarriers(ctx, req.Namespace, list.Items)
	if err != nil {
		return ctrl.Result{}, err
	}
	dec := delegation.Decide(view, list.Items, now, r.Policy, delegation.Seen{Typed: typed, GoneSenders: gone, MootCarriers: moot})
	if err := r.applyAll(ctx, req.NamespacedName, panes, dec.Steps, byName, view, command, now); err != nil {
		if errors.Is(err, errConflict) || apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: 10 * time.Millisecond}, nil
		}
		return ctrl.Result{}, err
	}
	for _, carrier := range list.Items {
		if carrier.Spec.InReplyTo == "" || !(typed.Has(carrier.Name) || carrier.Status.DeliveredAt != nil) {
			continue
		}
		if err := r.acknowledgeOriginal(ctx, &carrier, now); err != nil {
			if errors.Is(err, errConflict) {
				return ctrl.Result{RequeueAfter: 10 * time.Millisecond}, nil
			}
			return ctrl.Result{}, err
		}
	}
	expired := sets.New[string]()
	for _, step := range dec.Steps {
		if step.Kind == delegation.StepExpire {
			expired.Insert(step.Name)
		}
	}
	superseded := delegation.Superseded(list.Items, func(d *fleetv1alpha1.Delegation) bool { return !expired.Has(d.Name) })
	for i := range list.Items {
		if d := &list.Items[i]; !expired.Has(d.Name) {
			if err := r.markClosed(ctx, d, superseded[d.Name]); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	return ctrl.Result{RequeueAfter: dec.RequeueAfter}, nil
}

// memberExists reads from the API server whether the Member key exists.
func (r *DelegationReconciler) memberExists(ctx context.Context, key types.NamespacedName) (bool, error) {
	reader := r.Reader
	if reader == nil {
		reader = r.Client
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(fleetv1alpha1.GroupVersion.WithKind("Member"))
	switch err := reader.Get(ctx, key, m); {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading member %s: %w", key.Name, err)
	}
	return true, nil
}

// markClosed writes d's closed marks when they are out of date
// (delegation.MarkClosed; superseded by a message to its member typed
// after it), as it is after this look's writes: the
// gateway's cache leaves a closed Delegation out, and counts its sender's
// bound from the marks. A merge patch of the labels and annotations alone
// undoes no status write; a Delegation that opens again (its waiter
// recorded as gone after it settled) loses the mark at the next look,
// which its status write brings.
func (r *DelegationReconciler) markClosed(ctx context.Context, d *fleetv1alpha1.Delegation, superseded bool) error {
	if delegation.MarksCurrent(d, superseded) {
		return nil
	}
	marked := d.DeepCopy()
	delegation.MarkClosed(marked, superseded)
	switch err := r.Client.Patch(ctx, marked, client.MergeFrom(d)); {
	case apierrors.IsNotFound(err):
		r.own.forget(client.ObjectKeyFromObject(d))
		return nil
	case err != nil:
		return fmt.Errorf("marking delegation %s closed: %w", d.Name, err)
	}
	// Remembered as a status write is: a look before the cache shows the
	// mark decides on its resourceVersion, and retention's delete, which
	// is conditional on it, does not fail.
	r.own.wrote(d.ResourceVersion, marked)
	return nil
}

// runtimes is where each member's agent runs.
func (r *DelegationReconciler) runtimes() *Runtimes {
	r.runtimesOnce.Do(func() {
		if r.Runtimes == nil {
			r.Runtimes = NewRuntimes(r.Panes, nil, "", nil)
		}
	})
	return r.Runtimes
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
		if from.Kind != fleetv1alpha1.PrincipalMember || checked.Has(from.Name) || !delegation.Unclaimed(&ds[i]) {
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

// mootCarriers finds the queued Delegations that carry a question into its
// sender's pane whose question is no longer open: answered (through
// bridge_poll), withdrawn (the worker's bridge_ask ended), or its message
// settled. Typing them would only show a question nobody can answer any
// more.
func (r *DelegationReconciler) mootCarriers(ctx context.Context, ns string, ds []fleetv1alpha1.Delegation) (sets.Set[string], error) {
	moot := sets.New[string]()
	for i := range ds {
		d := &ds[i]
		if d.Spec.InReplyTo == "" || delegation.Typed(d) || delegation.Settled(d.Status.Phase) {
			continue
		}
		original := &fleetv1alpha1.Delegation{}
		err := r.fleet(r.Client).Get(ctx, types.NamespacedName{Namespace: ns, Name: d.Spec.InReplyTo}, original)
		switch {
		case apierrors.IsNotFound(err):
			// Whatever it carries, the carrier holds all of it.
			continue
		case err != nil:
			return nil, fmt.Errorf("getting delegation %s, carried by %s: %w", d.Spec.InReplyTo, d.Name, err)
		}
		if delegation.CarriesOpenQuestion(original, d.Name) == delegation.QuestionMoot {
			moot.Insert(d.Name)
		}
	}
	return moot, nil
}

// awaitsConfirmation says whether one of ds waits for its agent to show it
// was typed (delegation.AwaitsConfirmation).
func awaitsConfirmation(ds []fleetv1alpha1.Delegation, view delegation.Member, typed sets.Set[string]) bool {
	for i := range ds {
		if delegation.AwaitsConfirmation(&ds[i], view.WorkingSeq, typed.Has(ds[i].Name)) {
			return true
		}
	}
	return false
}

// liveView is view with the agent's status as herdr reports it now, when
// that is newer than what the Member's status shows. A delivery whose
// typing nobody saw end is proved by any status change since; the Member's
// status can lag the agent (coalesced writes, or, after a shard changed
// hands, the last replica's), and deciding on it would fail a message the
// agent is working on, then type the next one into its turn. A pane that
// runs another terminal, or herdr not answering, leaves view as it was.
func (r *DelegationReconciler) liveView(ctx context.Context, panes PaneClient, m *fleetv1alpha1.Member, view delegation.Member) delegation.Member {
	hctx, cancel := context.WithTimeout(ctx, herdrTimeout)
	defer cancel()
	info, err := panes.AgentGet(hctx, m.Status.PaneID)
	if err != nil || info.TerminalID != m.Status.TerminalID || int64(info.StateChangeSeq) <= m.Status.StateChangeSeq {
		return view
	}
	live := m.DeepCopy()
	observeAgent(&live.Status, info, false, metav1.NewTime(r.Clock.Now()))
	out := memberViewOf(live)
	out.BlockedAtSeq = view.BlockedAtSeq
	if view.Status == fleetv1alpha1.AgentBlocked {
		// A dialog read off the screen, which herdr's own status may not
		// show: nothing is typed over it on herdr's word.
		out.Status = fleetv1alpha1.AgentBlocked
	}
	return out
}

// memberViewOf is what Decide needs of a Member.
func memberViewOf(m *fleetv1alpha1.Member) delegation.Member {
	return delegation.Member{
		Gone:       !m.DeletionTimestamp.IsZero(),
		Ready:      meta.IsStatusConditionTrue(m.Status.Conditions, fleetv1alpha1.ConditionReady),
		PaneID:     m.Status.PaneID,
		TerminalID: m.Status.TerminalID,
		Status:     m.Status.AgentStatus,
		Seq:        m.Status.StateChangeSeq,
		WorkingSeq: m.Status.WorkingSeq,
		MaySuspend: maySuspend(m),
	}
}

// typedIn is what this process saw typed into member's pane, for the
// Delegations still there; it forgets the others.
func (r *DelegationReconciler) typedIn(member types.NamespacedName, present map[string]*fleetv1alpha1.Delegation) sets.Set[string] {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := r.typed[member]
	for name := range seen {
		if d, ok := present[name]; !ok || delegation.Settled(d.Status.Phase) && d.Spec.InReplyTo == "" {
			seen.Delete(name)
		}
	}
	return seen.Clone()
}

func (r *DelegationReconciler) markTyped(member types.NamespacedName, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.typed == nil {
		r.typed = map[types.NamespacedName]sets.Set[string]{}
	}
	if r.typed[member] == nil {
		r.typed[member] = sets.New[string]()
	}
	r.typed[member].Insert(name)
	delete(r.blockedAt, member)
}

// blockedAtSeq is the seq at which member's queue was blocked, nil when it
// is not.
func (r *DelegationReconciler) blockedAtSeq(member types.NamespacedName) *int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if seq, ok := r.blockedAt[member]; ok {
		return &seq
	}
	return nil
}

// blockQueue types nothing more into member's pane until its seq moves
// past seq.
func (r *DelegationReconciler) blockQueue(member types.NamespacedName, seq int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.blockedAt == nil {
		r.blockedAt = map[types.NamespacedName]int64{}
	}
	r.blockedAt[member] = seq
}

// applyAll carries out steps in order. A turn that ended is settled while
// the next message is typed: the two writes are to different Delegations
// and neither needs the other, and the settle's tail is read before
// anything is typed. The first error is returned once every step is done.
func (r *DelegationReconciler) applyAll(ctx context.Context, member types.NamespacedName, panes PaneClient, steps []delegation.Step, byName map[string]*fleetv1alpha1.Delegation, m delegation.Member, command bool, now time.Time) error {
	var (
		settling sync.WaitGroup
		mu       sync.Mutex
		errs     []error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}
	for _, step := range steps {
		d := byName[step.Name]
		if step.Kind != delegation.StepTurnDone {
			if err := r.apply(ctx, member, panes, step, d, m, command, now); err != nil {
				fail(err)
				break
			}
			continue
		}
		write, err := r.endTurn(ctx, member, panes, d, now)
		if err != nil {
			fail(err)
			break
		}
		settling.Go(func() {
			if err := write(); err != nil {
				fail(err)
			}
		})
	}
	settling.Wait()
	return errors.Join(errs...)
}

// endTurn settles d, whose member ended the turn without replying,
// TurnDone with the terminal's tail, read now, and returns the write that
// records it (see write: a reply it did not see makes it fail).
func (r *DelegationReconciler) endTurn(ctx context.Context, member types.NamespacedName, panes PaneClient, d *fleetv1alpha1.Delegation, now time.Time) (func() error, error) {
	if panes == nil {
		return nil, fmt.Errorf("%s of delegation %s: %w: member %s's pane host is not known", delegation.StepTurnDone, d.Name, panehost.ErrNoPaneHost, member.Name)
	}
	tail, err := readTail(ctx, panes, d.Status.PaneID)
	if err != nil {
		return nil, err
	}
	typedAt := pickupPending(d)
	delegation.TurnDone(d, now, tail)
	return func() error {
		if err := r.writeTraced(ctx, d, tracing.SpanSettled); err != nil {
			return err
		}
		// An end of turn the injector saw before the member working picks
		// the message up too.
		tracePickup(ctx, d, typedAt)
		return nil
	}, nil
}

// apply carries out one step with one write.
func (r *DelegationReconciler) apply(ctx context.Context, member types.NamespacedName, panes PaneClient, step delegation.Step, d *fleetv1alpha1.Delegation, m delegation.Member, command bool, now time.Time) error {
	switch step.Kind {
	case delegation.StepDeliver, delegation.StepTurnDone, delegation.StepInterrupt:
		if panes == nil {
			return fmt.Errorf("%s of delegation %s: %w: member %s's pane host is not known", step.Kind, d.Name, panehost.ErrNoPaneHost, member.Name)
		}
	}
	switch step.Kind {
	case delegation.StepDeliver:
		return r.deliver(ctx, member, panes, d, m, command, now)
	case delegation.StepPickup:
		typedAt := pickupPending(d)
		delegation.Pickup(d, now)
		if err := r.write(ctx, d); err != nil {
			return err
		}
		tracePickup(ctx, d, typedAt)
		return nil
	case delegation.StepTimeOut:
		delegation.TimeOut(d, now)
	case delegation.StepWorkerGone:
		delegation.WorkerGone(d, now, step.Message)
	case delegation.StepFail:
		delegation.Fail(d, now, step.Reason, step.Message)
	case delegation.StepCancel:
		delegation.Cancel(d, now, step.Message)
	case delegation.StepInterrupt:
		key, err := r.interrupt(ctx, panes, m.PaneID, command)
		if err != nil {
			return err
		}
		delegation.Interrupted(d, now, key)
	case delegation.StepCarryReply:
		return r.carryReply(ctx, d)
	case delegation.StepCarryQuestion:
		return r.carryQuestion(ctx, d)
	case delegation.StepExpire:
		return r.expire(ctx, d)
	default:
		return fmt.Errorf("unknown step %q", step.Kind)
	}
	if err := r.writeTraced(ctx, d, tracing.SpanSettled); err != nil {
		return err
	}
	// The status tells the ordinary story; events are for what went wrong,
	// so a busy fleet does not write an Event per message.
	r.Recorder.Eventf(d, nil, corev1.EventTypeWarning, step.Reason, "Settle", "%s", delegation.SettledMessage(d, string(d.Status.Phase)))
	return nil
}

// expire deletes a settled Delegation past its retention, as it was when
// decided on: a late reply or an acknowledgement written meanwhile makes the
// delete fail and the Delegation is looked at again.
func (r *DelegationReconciler) expire(ctx context.Context, d *fleetv1alpha1.Delegation) error {
	err := r.Client.Delete(ctx, d, client.Preconditions{UID: &d.UID, ResourceVersion: &d.ResourceVersion})
	switch {
	case err == nil, apierrors.IsNotFound(err):
		r.own.forget(client.ObjectKeyFromObject(d))
		return nil
	case apierrors.IsConflict(err):
		return errConflict
	}
	return fmt.Errorf("deleting delegation %s past its retention: %w", d.Name, err)
}

// write updates the status with optimistic concurrency, on the version it
// was decided on: the gateway writes replies and questions to the same
// objects, and neither may lose the other's. A turn that ended is settled
// this way too: a worker's reply is written before its turn can end, so a
// reply the decision did not see makes the settle fail, and the next look
// sees the reply; a reply written after the settle is kept as a late one.
// Exactly one of the two settles the message. What was written is
// remembered until the cache shows it, so the next look decides on it.
func (r *DelegationReconciler) write(ctx context.Context, d *fleetv1alpha1.Delegation) error {
	replaced := d.ResourceVersion
	if err := r.Client.Status().Update(ctx, d); err != nil {
		r.own.forget(client.ObjectKeyFromObject(d))
		if apierrors.IsConflict(err) {
			return errConflict
		}
		return fmt.Errorf("writing the status of delegation %s: %w", d.Name, err)
	}
	r.own.wrote(replaced, d)
	return nil
}

// SetupWithManager registers the reconciler. Requests are member keys: a
// Delegation maps to the member it is sent to.
func (r *DelegationReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 16
	}
	if r.Reader == nil {
		r.Reader = mgr.GetAPIReader()
	}
	r.recorded.metrics = r.Metrics
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
			if from := list.Items[i].Spec.From; from.Kind == fleetv1alpha1.PrincipalMember && from.Name == o.GetName() && delegation.Unclaimed(&list.Items[i]) {
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

// memberStateChanged passes the Member changes the injector decides on.
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
