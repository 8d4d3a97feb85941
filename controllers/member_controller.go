package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/panehost"
)

// resyncPeriod is the safety net behind herdr's events: a Member is looked at
// this often even if no event arrives.
const resyncPeriod = 5 * time.Minute

// herdrTimeout bounds each call to herdr from a reconcile.
const herdrTimeout = 10 * time.Second

// MemberReconciler keeps each Member's agent running in a herdr pane and
// mirrors its status. Reconcile, the delete path, the status write and
// setup are here; the phases of a pass live beside it, by the question a
// reader brings:
//
//   - launch.go and env.go: the Member merged with its Profile, and the
//     command line and environment its pane gets;
//   - runtime.go: where the agent runs, the shared pane server or a Pod of
//     its own, and all that differs between the two (the pane host, the
//     files and agent directory, the gateway URL, bringing it up,
//     isolation, teardown);
//   - member_pod.go: a pod member's Pod brought up, replaced and deleted,
//     and its pane host credentials; member_pod_spec.go the Pod itself;
//     member_workspace.go its workspace claim; member_netpol.go the
//     network policies that wall it in; member_pod_bounds.go what its
//     spec.pod may ask; member_pod_resources.go the bounds it gets by
//     default;
//   - member_token.go: a shared member's gateway token Secret;
//   - member_pane.go: the pane's lifecycle (create, adopt, restart, close);
//   - member_agent.go: what the agent's hooks and transcript say, and its
//     usage priced; member_turns.go sets each message's usage from the
//     transcript's turns; member_tokens.go counts the tokens in a metric;
//   - member_files.go: where the agent works, and the gateway's reads of
//     the files a member sends;
//   - member_suspend.go: a pod member suspended (its Pod given up, its
//     workspace and agent session kept) and resumed on its saved session;
//     member_suspend_decide.go decides when.
//
// Each phase records what it found on the pass's scope (memberScope.facts),
// and setConditions (member_conditions.go) turns them into the Member's
// conditions, one function per condition.
type MemberReconciler struct {
	Sharding
	Client client.Client
	Reader client.Reader // uncached, for env Secrets the cache does not hold
	// Panes is the shared pane server beside fleetd.
	Panes PaneClient
	// Runtimes says where each Member's agent runs: on Panes, or in a Pod
	// of its own. Nil runs every Member on Panes.
	Runtimes *Runtimes
	// DefaultRuntime is where Members that do not say run; Shared if empty.
	DefaultRuntime fleetv1alpha1.Runtime
	// Pods are how pod members run; CA mints their pane hosts'
	// credentials (nil: no pod members).
	Pods PodSettings
	CA   *panehost.CA

	runtimesOnce sync.Once
	// policies are the namespaces whose member NetworkPolicy this run
	// made sure of.
	policies sync.Map
	// egressPolicies is the spec of each Member's egress policy, by the
	// Member's uid, as this run last made or found it.
	egressPolicies sync.Map
	// PaneWatch follows herdr's events about the Members' panes.
	PaneWatch *PaneWatch
	// Screens reads the screens of agents fleetd has screen rules for; nil
	// reads none.
	Screens  *ScreenWatch
	Recorder recorder.EventRecorder
	Clock    clock.PassiveClock
	// MCPURL is the gateway's MCP endpoint as panes reach it.
	MCPURL string
	// AgentDir is the directory under which each Member of a known agent
	// gets its own: the agent's configuration and its hooks' record. herdr's
	// panes must reach it at the same path.
	AgentDir string
	// HookCommand runs `fleetd hook` where the panes run.
	HookCommand []string
	// MaxConcurrentReconciles bounds parallel reconciles (default 16).
	MaxConcurrentReconciles int
	// Metrics counts restarts; nil counts nothing.
	Metrics *Metrics

	// turns is when each Member's agent was first seen working in its
	// current turn (holdWorking).
	turns sync.Map // types.NamespacedName -> turnStart
	// started is when this process started each Member's hooked agent
	// (createPane), until it has settled (agentSettle).
	started sync.Map // types.NamespacedName -> time.Time
	// own is what this controller wrote that its cache may not show yet.
	own ownWrites
}

// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=members,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=members/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=members/finalizers,verbs=update
// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=profiles,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;create;update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// memberScope carries one reconcile pass: the Member whose status is being
// built, what the pass found out (its facts, from which setConditions sets
// the conditions), and the Kubernetes Events to emit once the status is
// written.
type memberScope struct {
	member *fleetv1alpha1.Member
	now    metav1.Time
	// panes is the pane host the Member's panes live on, and files where
	// its agent's configuration and hook record are.
	panes  PaneClient
	files  AgentFiles
	facts  memberFacts
	events []memberEvent
	// sawWorking is what this pass took from the PaneWatch: given back if
	// the pass's status is not written.
	sawWorking bool
	// pricing is what the Member's model costs, from its Profile.
	pricing *fleetv1alpha1.Pricing
	// tokenStale says the token Secret was written by someone else: the
	// pass knows no token a new pane may start with (freshToken).
	tokenStale bool
	// claimedNow says this pass claimed a warm Pod: its status does not
	// name the Pod yet, so the Pod's token is not the member's yet.
	claimedNow bool
	// suspendPolicy is what the pass knew about suspending a running
	// member that may be suspended: suspendDue decides from it, on the
	// status the pass writes, when to look again.
	suspendPolicy *suspendInputs
}

// memberEvent is a Kubernetes Event about the Member.
type memberEvent struct{ kind, reason, note string }

func (s *memberScope) event(kind, reason, format string, args ...any) {
	s.events = append(s.events, memberEvent{kind, reason, fmt.Sprintf(format, args...)})
}

// newScope starts a pass over m, on the shared pane server until the pass
// finds out where the Member runs.
func (r *MemberReconciler) newScope(m *fleetv1alpha1.Member) *memberScope {
	return &memberScope{member: m, now: metav1.NewTime(r.Clock.Now()), panes: r.Panes, files: panehost.Local{}}
}

// runtimes is where each Member's agent runs.
func (r *MemberReconciler) runtimes() *Runtimes {
	r.runtimesOnce.Do(func() {
		if r.Runtimes == nil {
			r.Runtimes = NewRuntimes(r.Panes, nil, r.AgentDir, r.HookCommand)
		}
	})
	return r.Runtimes
}

// Reconcile brings one Member's pane in line with its spec.
func (r *MemberReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if !r.owns(req.Namespace, req.Name) {
		return ctrl.Result{}, nil
	}
	m := &fleetv1alpha1.Member{}
	if err := r.Client.Get(ctx, req.NamespacedName, m); err != nil {
		if apierrors.IsNotFound(err) {
			r.PaneWatch.Forget(req.NamespacedName)
			r.turns.Delete(req.NamespacedName)
			r.started.Delete(req.NamespacedName)
			r.own.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// Its status as this controller last wrote it, when the cache does not
	// show that yet: a pass decides on it, and writes on its version.
	m = r.own.current(m).(*fleetv1alpha1.Member)
	if !m.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, m)
	}
	if controllerutil.AddFinalizer(m, fleetv1alpha1.MemberFinalizer) {
		// Go on with the updated object: the update event is filtered out.
		before := m.ResourceVersion
		if err := r.Client.Update(ctx, m); err != nil {
			return ctrl.Result{}, err
		}
		r.own.wrote(before, m)
	}

	original := m.DeepCopy()
	scope := r.newScope(m)
	result, reconcileErr := r.reconcileNormal(ctx, scope)
	setConditions(&m.Status, m.Generation, scope.facts, scope.now)
	if err := r.writeStatus(ctx, original, scope); err != nil {
		if scope.sawWorking {
			r.PaneWatch.GiveBackSawWorking(req.NamespacedName)
		}
		if apierrors.IsConflict(err) {
			// Read again and redo the pass: herdr's state is re-observed.
			return ctrl.Result{RequeueAfter: 10 * time.Millisecond}, nil
		}
		return ctrl.Result{}, errors.Join(reconcileErr, err)
	}
	if reconcileErr != nil {
		// controller-runtime ignores a result returned with an error: the
		// error's backoff brings the Member back.
		return ctrl.Result{}, reconcileErr
	}
	result.RequeueAfter = sooner(result.RequeueAfter, suspendDue(scope))
	if result.RequeueAfter == 0 || result.RequeueAfter > resyncPeriod {
		result.RequeueAfter = resyncPeriod
	}
	return result, nil
}

func (r *MemberReconciler) reconcileNormal(ctx context.Context, s *memberScope) (ctrl.Result, error) {
	m := s.member
	worker, env, err := r.resolve(ctx, m)
	if err != nil {
		var missing *missingError
		if errors.As(err, &missing) {
			s.facts.unresolved = missing
			return ctrl.Result{}, nil // a watch on Profiles brings us back
		}
		return ctrl.Result{}, err
	}
	m.Status.AgentKind = worker.Agent
	s.pricing = worker.Pricing
	m.Status.Runtime = runtimeOf(m, worker, r.DefaultRuntime)
	if stop, result, err := r.reconcileSuspend(ctx, s, worker); err != nil || stop {
		return result, err
	}
	rt := r.runtimes().of(m)
	mcpURL, token, err := rt.gateway(ctx, r, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	launch, err := planLaunch(worker, env, mcpURL, token, m.Name, rt.home(m))
	if err != nil {
		var boundary *boundaryError
		if !errors.As(err, &boundary) {
			return ctrl.Result{}, err
		}
		if m.Status.WorkspaceID != "" {
			if err := closeWorkspaces(ctx, s.panes, m); err != nil {
				return ctrl.Result{}, err
			}
			clearPane(m)
		}
		if cond := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionPaneReady); cond == nil || cond.Reason != fleetv1alpha1.ReasonSubscriptionBoundary {
			s.event(corev1.EventTypeWarning, fleetv1alpha1.ReasonSubscriptionBoundary, "Refusing to start the agent: %s", boundary.reason)
		}
		s.facts.boundary = boundary.reason
		return ctrl.Result{}, reconcile.TerminalError(err)
	}

	if up, result, err := rt.prepare(ctx, r, s, worker); err != nil || !up {
		return result, err
	}
	if s.panes, err = rt.panes(m); err != nil {
		return ctrl.Result{}, err
	}
	if s.files, err = rt.files(ctx, m); err != nil {
		return ctrl.Result{}, err
	}
	s.facts.isolation = rt.isolation(ctx, m, s.panes)
	hctx, cancel := context.WithTimeout(ctx, herdrTimeout)
	defer cancel()
	result, err := r.reconcilePane(ctx, hctx, s, launch)
	if errors.Is(err, herdr.ErrUnavailable) {
		s.facts.herdr = &herdrReach{detail: err.Error()}
		// The PaneWatch's probe brings us back as soon as herdr answers;
		// the requeue is the safety net.
		return ctrl.Result{RequeueAfter: 10 * time.Second}, nil
	}
	if err == nil {
		s.facts.herdr = &herdrReach{reachable: true, detail: socketOf(s.panes)}
	}
	return result, err
}

// resolve finds how to run the Member and the values of its environment.
func (r *MemberReconciler) resolve(ctx context.Context, m *fleetv1alpha1.Member) (Worker, map[string]string, error) {
	var profile *fleetv1alpha1.Profile
	if m.Spec.Profile != "" {
		profile = &fleetv1alpha1.Profile{}
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.Profile}, profile); err != nil {
			if apierrors.IsNotFound(err) {
				return Worker{}, nil, &missingError{fleetv1alpha1.ReasonProfileNotFound, fmt.Sprintf("profile %q does not exist in namespace %s", m.Spec.Profile, m.Namespace)}
			}
			return Worker{}, nil, fmt.Errorf("getting profile %s: %w", m.Spec.Profile, err)
		}
	}
	w := resolveWorker(m, profile)
	env, err := resolveEnv(ctx, r.Reader, m.Namespace, w.Env)
	if err != nil {
		return Worker{}, nil, err
	}
	return w, env, nil
}

// reconcileDelete closes the pane and lets the Member go. When herdr does not
// answer, it gives up after cleanupTimeout so a Member never hangs in
// deletion. Until then the Member's status says it is terminating.
func (r *MemberReconciler) reconcileDelete(ctx context.Context, m *fleetv1alpha1.Member) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(m, fleetv1alpha1.MemberFinalizer) {
		return ctrl.Result{}, nil
	}
	key := client.ObjectKeyFromObject(m)
	r.PaneWatch.Forget(key)
	r.Screens.Forget(key)
	r.started.Delete(key)
	original := m.DeepCopy()
	s := r.newScope(m)
	s.facts.deleting = true
	setConditions(&m.Status, m.Generation, s.facts, s.now)
	if err := r.writeStatus(ctx, original, s); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: 10 * time.Millisecond}, nil
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	rt := r.runtimes()
	if done, result, err := rt.of(m).teardown(ctx, r, m); err != nil || !done {
		return result, err
	}
	if err := r.deleteToken(ctx, m); err != nil {
		return ctrl.Result{}, err
	}
	rt.Forget(m.UID)
	r.egressPolicies.Delete(string(m.UID))
	controllerutil.RemoveFinalizer(m, fleetv1alpha1.MemberFinalizer)
	return ctrl.Result{}, client.IgnoreNotFound(r.Client.Update(ctx, m))
}

// writeStatus writes the status once, only if it changed, then emits the
// pass's events.
func (r *MemberReconciler) writeStatus(ctx context.Context, original *fleetv1alpha1.Member, s *memberScope) error {
	m := s.member
	if !equality.Semantic.DeepEqual(original.Status, m.Status) {
		// A merge patch carries only what this pass changed. The lock makes
		// a pass that read a stale cache fail and look again, rather than
		// write what it saw over a newer status.
		if err := r.Client.Status().Patch(ctx, m, client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})); err != nil {
			r.own.forget(client.ObjectKeyFromObject(m))
			return fmt.Errorf("writing member status: %w", err)
		}
		r.own.wrote(original.ResourceVersion, m)
		r.Metrics.restarted(original, m)
	}
	for _, e := range s.events {
		r.Recorder.Eventf(m, nil, e.kind, e.reason, "Reconcile", "%s", e.note)
	}
	return nil
}

// socketOf says where p answers, for the HerdrReachable condition.
func socketOf(p PaneClient) string {
	if c, ok := p.(interface{ SocketPath() string }); ok {
		return c.SocketPath()
	}
	return "its socket"
}

// SetupWithManager registers the reconciler and its event sources.
func (r *MemberReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 16
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &fleetv1alpha1.Member{}, IndexMemberNode, func(o client.Object) []string {
		if n := o.(*fleetv1alpha1.Member).Status.NodeName; n != "" {
			return []string{n}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing members by node: %w", err)
	}
	b := ctrl.NewControllerManagedBy(mgr).
		// This controller's own status writes are not a reason to look at
		// herdr again.
		For(&fleetv1alpha1.Member{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{},
			predicate.LabelChangedPredicate{},
			predicate.AnnotationChangedPredicate{},
			deletionStarted,
		))).
		Owns(&corev1.Secret{}).
		Owns(&corev1.Pod{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.membersOnNode), builder.WithPredicates(nodeReadinessChanged)).
		// A Profile's spec, not its status (its counts and its pool's).
		Watches(&fleetv1alpha1.Profile{}, handler.EnqueueRequestsFromMapFunc(r.membersOfProfile), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A message to a suspended member resumes it.
		Watches(&fleetv1alpha1.Delegation{}, handler.EnqueueRequestsFromMapFunc(r.suspendedReceiver), builder.WithPredicates(delegationArrivedOrSettled)).
		WatchesRawSource(r.PaneWatch.Source())
	if r.Screens != nil {
		b = b.WatchesRawSource(r.Screens.Source())
	}
	return b.
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Named("member").
		Complete(r)
}

// delegationArrivedOrSettled passes a new Delegation (a message may
// resume a suspended member) and one that settles (its member, idle with
// nothing left in flight, may now be suspended: nothing else would look
// before the resync).
var delegationArrivedOrSettled = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, okOld := e.ObjectOld.(*fleetv1alpha1.Delegation)
		cur, okNew := e.ObjectNew.(*fleetv1alpha1.Delegation)
		return okOld && okNew && delegation.Settled(old.Status.Phase) != delegation.Settled(cur.Status.Phase)
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// deletionStarted passes the update that marks an object for deletion.
var deletionStarted = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
}}

// IndexMemberNode indexes Members by the node their Pod runs on.
const IndexMemberNode = "status.nodeName"

// membersOnNode asks for a look at the Members whose Pods run on a node
// whose readiness changed: a lost node's members come back elsewhere.
func (r *MemberReconciler) membersOnNode(ctx context.Context, o client.Object) []reconcile.Request {
	var members fleetv1alpha1.MemberList
	if err := r.Client.List(ctx, &members, client.MatchingFields{IndexMemberNode: o.GetName()}); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(members.Items))
	for i := range members.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&members.Items[i])})
	}
	return reqs
}

// nodeReadinessChanged passes a node's creation, deletion, and the updates
// that change whether it is Ready.
var nodeReadinessChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*corev1.Node)
	cur, okNew := e.ObjectNew.(*corev1.Node)
	if !okOld || !okNew {
		return true
	}
	readyOf := func(n *corev1.Node) corev1.ConditionStatus {
		if c := nodeReady(n); c != nil {
			return c.Status
		}
		return ""
	}
	return readyOf(old) != readyOf(cur)
}}

func (r *MemberReconciler) membersOfProfile(ctx context.Context, o client.Object) []reconcile.Request {
	var members fleetv1alpha1.MemberList
	if err := r.Client.List(ctx, &members, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, m := range members.Items {
		if m.Spec.Profile == o.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&m)})
		}
	}
	return reqs
}
