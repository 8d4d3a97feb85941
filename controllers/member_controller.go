package controllers

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
)

// resyncPeriod is the safety net behind herdr's events: a Member is looked at
// this often even if no event arrives.
const resyncPeriod = 5 * time.Minute

// herdrTimeout bounds each call to herdr from a reconcile.
const herdrTimeout = 10 * time.Second

// MemberReconciler keeps each Member's agent running in a herdr pane and
// mirrors its status.
type MemberReconciler struct {
	Client client.Client
	Reader client.Reader // uncached, for env Secrets the cache does not hold
	Panes  Panes
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
	// MaxConcurrentReconciles bounds parallel reconciles (default 4).
	MaxConcurrentReconciles int
}

// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=members,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=members/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=members/finalizers,verbs=update
// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=profiles,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// memberScope carries one reconcile pass: the status being built and the
// events to emit once it is written.
type memberScope struct {
	member *fleetv1alpha1.Member
	now    metav1.Time
	events []memberEvent
	// sawWorking is what this pass took from PaneWatch: given back if
	// the pass's status is not written.
	sawWorking bool
}

type memberEvent struct{ kind, reason, note string }

func (s *memberScope) event(kind, reason, format string, args ...any) {
	s.events = append(s.events, memberEvent{kind, reason, fmt.Sprintf(format, args...)})
}

func (s *memberScope) condition(typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&s.member.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: s.member.Generation,
	})
}

// Reconcile brings one Member's pane in line with its spec.
func (r *MemberReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	m := &fleetv1alpha1.Member{}
	if err := r.Client.Get(ctx, req.NamespacedName, m); err != nil {
		if apierrors.IsNotFound(err) {
			r.PaneWatch.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !m.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, m)
	}
	if controllerutil.AddFinalizer(m, fleetv1alpha1.MemberFinalizer) {
		// Go on with the updated object: the update event is filtered out.
		if err := r.Client.Update(ctx, m); err != nil {
			return ctrl.Result{}, err
		}
	}

	original := m.DeepCopy()
	scope := &memberScope{member: m, now: metav1.NewTime(r.Clock.Now())}
	result, reconcileErr := r.reconcileNormal(ctx, scope)
	rollUp(&m.Status, m.Generation, false)
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
	if result.RequeueAfter == 0 || result.RequeueAfter > resyncPeriod {
		result.RequeueAfter = resyncPeriod
	}
	return result, reconcileErr
}

func (r *MemberReconciler) reconcileNormal(ctx context.Context, s *memberScope) (ctrl.Result, error) {
	m := s.member
	worker, env, err := r.resolve(ctx, m)
	if err != nil {
		var missing *missingError
		if errors.As(err, &missing) {
			s.condition(fleetv1alpha1.ConditionPaneReady, metav1.ConditionFalse, missing.reason, missing.Error())
			return ctrl.Result{}, nil // a watch on Profiles brings us back
		}
		return ctrl.Result{}, err
	}
	m.Status.AgentKind = worker.Agent
	token, err := r.ensureToken(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	home := r.home(m)
	launch, err := planLaunch(worker, env, r.MCPURL, token, m.Name, home)
	if err != nil {
		var boundary *boundaryError
		if !errors.As(err, &boundary) {
			return ctrl.Result{}, err
		}
		if m.Status.WorkspaceID != "" {
			if err := r.closeWorkspaces(ctx, m); err != nil {
				return ctrl.Result{}, err
			}
			r.clearPane(m)
		}
		if cond := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionPaneReady); cond == nil || cond.Reason != fleetv1alpha1.ReasonSubscriptionBoundary {
			s.event(corev1.EventTypeWarning, fleetv1alpha1.ReasonSubscriptionBoundary, "Refusing to start the agent: %s", boundary.reason)
		}
		s.condition(fleetv1alpha1.ConditionPaneReady, metav1.ConditionFalse, fleetv1alpha1.ReasonSubscriptionBoundary, boundary.reason)
		s.condition(fleetv1alpha1.ConditionAgentReady, metav1.ConditionFalse, fleetv1alpha1.ReasonSubscriptionBoundary, "no agent is started across the subscription boundary")
		return ctrl.Result{}, reconcile.TerminalError(err)
	}

	hctx, cancel := context.WithTimeout(ctx, herdrTimeout)
	defer cancel()
	result, err := r.reconcilePane(ctx, hctx, s, launch)
	if errors.Is(err, herdr.ErrUnavailable) {
		s.condition(fleetv1alpha1.ConditionHerdrReachable, metav1.ConditionFalse, fleetv1alpha1.ReasonHerdrUnreachable, err.Error())
		// PaneWatch's probe brings us back as soon as herdr answers; the
		// requeue is the safety net.
		return ctrl.Result{RequeueAfter: 10 * time.Second}, nil
	}
	if err == nil {
		s.condition(fleetv1alpha1.ConditionHerdrReachable, metav1.ConditionTrue, fleetv1alpha1.ReasonHerdrReachable, "herdr answers at "+socketOf(r.Panes))
	}
	return result, err
}

// reconcilePane creates, adopts, observes or replaces the Member's pane.
func (r *MemberReconciler) reconcilePane(ctx, hctx context.Context, s *memberScope, launch Launch) (ctrl.Result, error) {
	m := s.member

	if m.Status.PaneID == "" {
		if fresh, err := r.isFresh(ctx, m); err != nil || !fresh {
			return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, err
		}
		adopted, err := r.adopt(hctx, s)
		if err != nil {
			return ctrl.Result{}, err
		}
		if !adopted {
			return r.createPane(hctx, s, launch)
		}
	}
	// Taken before the look, so a working status the look misses (a turn
	// that fell between two looks) still shows as a pickup.
	s.sawWorking = r.PaneWatch.TakeSawWorking(client.ObjectKeyFromObject(m))
	obs, err := r.observe(hctx, m.Status.PaneID)
	if err != nil {
		return ctrl.Result{}, err
	}
	agentCond := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionAgentReady)
	wasReady := agentCond != nil && agentCond.Status == metav1.ConditionTrue
	var startedAt time.Time
	if pane := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionPaneReady); pane != nil {
		startedAt = pane.LastTransitionTime.Time
	}
	if verdict, why := judgePane(obs, m.Status.TerminalID, wasReady, startedAt, s.now.Time); verdict == paneLost {
		if fresh, err := r.isFresh(ctx, m); err != nil || !fresh {
			return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, err
		}
		return r.recreate(hctx, s, launch, why)
	}
	if pane := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionPaneReady); pane == nil || pane.Status != metav1.ConditionTrue {
		s.condition(fleetv1alpha1.ConditionPaneReady, metav1.ConditionTrue, fleetv1alpha1.ReasonReady, "pane "+m.Status.PaneID+" in workspace "+m.Status.WorkspaceID)
	}
	key := client.ObjectKeyFromObject(m)
	r.PaneWatch.Track(key, m.Status.PaneID)
	r.Screens.Watch(key, m.Status.PaneID, m.Status.AgentKind)
	observeAgent(&m.Status, obs.Agent, s.sawWorking, s.now)
	r.observeHooks(ctx, s, obs.Agent)
	switch {
	case agentIsReady(obs.Agent):
		s.condition(fleetv1alpha1.ConditionAgentReady, metav1.ConditionTrue, fleetv1alpha1.ReasonReady, fmt.Sprintf("the agent is %s", m.Status.AgentStatus))
	case obs.Agent != nil && obs.Agent.LaunchPending && m.Status.AgentStatus == fleetv1alpha1.AgentBlocked:
		s.condition(fleetv1alpha1.ConditionAgentReady, metav1.ConditionFalse, fleetv1alpha1.ReasonBlockedAtStart,
			"the agent shows a dialog before it was ever ready, and waits for someone to answer it: "+cmp.Or(m.Status.AgentMessage, "(no text)"))
		return ctrl.Result{RequeueAfter: launchPoll}, nil
	default:
		s.condition(fleetv1alpha1.ConditionAgentReady, metav1.ConditionFalse, fleetv1alpha1.ReasonAgentStarting, "the agent was started and has not reported yet")
		if obs.Agent != nil && obs.Agent.LaunchPending {
			// herdr says nothing when a launch becomes ready: look again
			// soon, as herdr's own CLI polls agent.get.
			return ctrl.Result{RequeueAfter: launchPoll}, nil
		}
		if !startedAt.IsZero() {
			return ctrl.Result{RequeueAfter: agentStartTimeout - s.now.Sub(startedAt) + time.Second}, nil
		}
	}
	return ctrl.Result{}, nil
}

// observeHooks records what the agent's hooks told fleetd, for agents
// fleetd hooks: the agent's own session id (herdr keeps those only from its
// own integrations), whether herdr takes fleetd's reports, and what a
// blocked agent waits for.
func (r *MemberReconciler) observeHooks(ctx context.Context, s *memberScope, a *herdr.AgentInfo) {
	m := s.member
	key := client.ObjectKeyFromObject(m)
	var hookMessage string
	if agents.Hooked(m.Status.AgentKind) {
		st, ok, err := agents.ReadHookStatus(r.home(m).Dir)
		switch {
		case err != nil:
			log.FromContext(ctx).Info("Reading the agent's hook record", "member", klog.KObj(m), "error", err.Error())
		case ok:
			if st.SessionID != "" {
				m.Status.AgentSessionID = st.SessionID
			}
			hookMessage = st.Message
			r.observeContext(ctx, m, st)
		}
		switch {
		case a != nil && a.AgentSession != nil && a.AgentSession.Source != agents.ReportSource:
			s.condition(fleetv1alpha1.ConditionAgentHooks, metav1.ConditionFalse, fleetv1alpha1.ReasonOtherStatusSource,
				fmt.Sprintf("herdr's status for this pane belongs to %s (session %s) and drops fleetd's reports; the status shown is that source's", a.AgentSession.Source, a.AgentSession.Value))
		case ok:
			s.condition(fleetv1alpha1.ConditionAgentHooks, metav1.ConditionTrue, fleetv1alpha1.ReasonHooksReporting,
				fmt.Sprintf("the agent's hooks report its status to herdr as %s; last: %s", agents.ReportSource, st.Event))
		default:
			s.condition(fleetv1alpha1.ConditionAgentHooks, metav1.ConditionUnknown, fleetv1alpha1.ReasonAwaitingHooks, "no hook of the agent has run yet")
		}
	}
	m.Status.AgentMessage = ""
	if m.Status.AgentStatus == fleetv1alpha1.AgentBlocked {
		m.Status.AgentMessage = cmp.Or(r.Screens.Dialog(key), hookMessage)
	}
}

// observeContext records how much context the agent's session has left,
// from the usage its transcript records (Claude Code's and Codex's).
func (r *MemberReconciler) observeContext(ctx context.Context, m *fleetv1alpha1.Member, st agents.HookStatus) {
	if st.TranscriptPath == "" {
		return
	}
	u, ok, err := agents.ContextUsageOf(m.Status.AgentKind, r.home(m).Dir, st.TranscriptPath)
	switch {
	case err != nil:
		log.FromContext(ctx).Info("Reading the agent's context usage", "member", klog.KObj(m), "error", err.Error())
	case ok:
		m.Status.ContextRemainingPercent = ptr.To(u.RemainingPercent())
	}
}

// isFresh says whether the cached Member is the latest. Creating or
// replacing a pane on a stale view (the cache lags this controller's own
// status writes) would start a duplicate, so those paths check first.
func (r *MemberReconciler) isFresh(ctx context.Context, m *fleetv1alpha1.Member) (bool, error) {
	latest := &fleetv1alpha1.Member{}
	if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(m), latest); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return latest.ResourceVersion == m.ResourceVersion, nil
}

// home is where a Member's known agent keeps what fleetd seeds for it: one
// directory per Member incarnation, so a new Member of the same name starts
// afresh.
func (r *MemberReconciler) home(m *fleetv1alpha1.Member) agentHome {
	uid := string(m.UID)
	if len(uid) > 8 {
		uid = uid[:8]
	}
	return agentHome{Dir: filepath.Join(r.AgentDir, m.Namespace, m.Name+"-"+uid), HookCommand: r.HookCommand}
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

// TokenSecretName is the name of a Member's token Secret.
func TokenSecretName(member string) string { return member + "-fleetd-token" }

// ensureToken returns the Member's gateway token, minting a Secret for it
// when there is none for this Member's UID.
func (r *MemberReconciler) ensureToken(ctx context.Context, s *memberScope) (string, error) {
	m := s.member
	key := types.NamespacedName{Namespace: m.Namespace, Name: TokenSecretName(m.Name)}
	secret := &corev1.Secret{}
	err := r.Client.Get(ctx, key, secret)
	switch {
	case err == nil && secret.Labels[fleetv1alpha1.LabelMemberUID] == string(m.UID) && len(secret.Data[fleetv1alpha1.TokenSecretKey]) > 0:
		token := string(secret.Data[fleetv1alpha1.TokenSecretKey])
		m.Status.TokenSecretName, m.Status.TokenHash = key.Name, fleetv1alpha1.TokenHash(token)
		return token, nil
	case err == nil:
		// A Secret of an earlier Member with this name: its token must not
		// carry over.
		if err := r.Client.Delete(ctx, secret); client.IgnoreNotFound(err) != nil {
			return "", fmt.Errorf("deleting stale token secret %s: %w", key.Name, err)
		}
	case !apierrors.IsNotFound(err):
		return "", fmt.Errorf("getting token secret %s: %w", key.Name, err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("minting a token: %w", err)
	}
	token := hex.EncodeToString(raw)
	secret = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      key.Name,
			Namespace: key.Namespace,
			Labels: map[string]string{
				fleetv1alpha1.LabelMember:    m.Name,
				fleetv1alpha1.LabelMemberUID: string(m.UID),
			},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{fleetv1alpha1.TokenSecretKey: []byte(token)},
	}
	if err := controllerutil.SetControllerReference(m, secret, r.Client.Scheme()); err != nil {
		return "", err
	}
	if err := r.Client.Create(ctx, secret); err != nil {
		return "", fmt.Errorf("creating token secret %s: %w", key.Name, err)
	}
	m.Status.TokenSecretName, m.Status.TokenHash = key.Name, fleetv1alpha1.TokenHash(token)
	return token, nil
}

// workspaceLabel marks the workspace of one Member incarnation so that a
// restarted controller adopts it instead of starting a duplicate.
func workspaceLabel(m *fleetv1alpha1.Member) string {
	return fmt.Sprintf("fleetd:%s/%s:%s", m.Namespace, m.Name, m.UID)
}

// adopt takes over a pane an earlier pass created but did not record.
func (r *MemberReconciler) adopt(ctx context.Context, s *memberScope) (bool, error) {
	snap, err := r.Panes.SessionSnapshot(ctx)
	if err != nil {
		return false, fmt.Errorf("taking a herdr snapshot: %w", err)
	}
	label := workspaceLabel(s.member)
	for _, ws := range snap.Workspaces {
		if ws.Label != label {
			continue
		}
		for _, p := range snap.Panes {
			if p.WorkspaceID == ws.WorkspaceID {
				r.recordPane(s.member, p)
				s.condition(fleetv1alpha1.ConditionPaneReady, metav1.ConditionTrue, fleetv1alpha1.ReasonPaneAdopted, "adopted pane "+p.PaneID)
				s.event(corev1.EventTypeNormal, fleetv1alpha1.ReasonPaneAdopted, "Adopted pane %s in workspace %s", p.PaneID, ws.WorkspaceID)
				return true, nil
			}
		}
	}
	return false, nil
}

func (r *MemberReconciler) recordPane(m *fleetv1alpha1.Member, p herdr.PaneInfo) {
	m.Status.PaneID = p.PaneID
	m.Status.WorkspaceID = p.WorkspaceID
	m.Status.TabID = p.TabID
	m.Status.TerminalID = p.TerminalID
}

func (r *MemberReconciler) clearPane(m *fleetv1alpha1.Member) {
	m.Status.PaneID, m.Status.WorkspaceID, m.Status.TabID, m.Status.TerminalID = "", "", "", ""
	m.Status.AgentSessionID, m.Status.ContextRemainingPercent = "", nil
	m.Status.StateChangeSeq, m.Status.WorkingSeq = 0, 0
}

// createPane opens a workspace for the Member and starts its agent.
func (r *MemberReconciler) createPane(ctx context.Context, s *memberScope, l Launch) (ctrl.Result, error) {
	m := s.member
	if l.AgentKind != "" {
		if err := agents.Install(l.Files, l.WorkingDir); err != nil {
			return ctrl.Result{}, fmt.Errorf("writing the agent's configuration: %w", err)
		}
	}
	ws, err := r.Panes.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Cwd: l.WorkingDir, Env: l.Env, Label: workspaceLabel(m)})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("creating a workspace: %w", err)
	}
	r.recordPane(m, ws.RootPane)
	if l.AgentKind != "" {
		start := herdr.AgentStartParams{Name: agentName(m.Namespace, m.Name), Kind: l.AgentKind, PaneID: ws.RootPane.PaneID, Args: l.AgentArgs}
		_, err = r.Panes.AgentStart(ctx, start)
		if errors.Is(err, herdr.ErrAgentNameTaken) {
			// After a restart herdr may bring back an earlier agent of this
			// Member under its name (it resumes agents its own integrations
			// reported): that pane is this Member's past, not another's.
			freed, ferr := r.freeAgentName(ctx, m, start.Name, ws.Workspace.WorkspaceID)
			switch {
			case ferr != nil:
				err = ferr
			case freed:
				s.event(corev1.EventTypeNormal, fleetv1alpha1.ReasonPaneLost, "Closed an earlier pane of this Member that still held herdr agent name %s", start.Name)
				_, err = r.Panes.AgentStart(ctx, start)
			}
		}
	} else {
		err = r.Panes.PaneSendInput(ctx, herdr.PaneSendInputParams{PaneID: ws.RootPane.PaneID, Text: l.CommandLine, Keys: []string{"enter"}})
	}
	if err != nil {
		var herr *herdr.Error
		if errors.As(err, &herr) && !errors.Is(err, herdr.ErrNotFound) {
			// herdr refused the agent (unknown kind, name taken, ...): a
			// spec or environment problem that retrying will not fix soon.
			_ = r.closeWorkspaces(ctx, m)
			r.clearPane(m)
			s.condition(fleetv1alpha1.ConditionPaneReady, metav1.ConditionFalse, fleetv1alpha1.ReasonAgentStartFailed, err.Error())
			s.event(corev1.EventTypeWarning, fleetv1alpha1.ReasonAgentStartFailed, "herdr refused to start the agent: %v", err)
			return ctrl.Result{RequeueAfter: restartBackoffMax}, nil
		}
		return ctrl.Result{}, fmt.Errorf("starting the agent in pane %s: %w", ws.RootPane.PaneID, err)
	}
	s.condition(fleetv1alpha1.ConditionPaneReady, metav1.ConditionTrue, fleetv1alpha1.ReasonPaneCreated, "pane "+ws.RootPane.PaneID+" in workspace "+ws.Workspace.WorkspaceID)
	s.condition(fleetv1alpha1.ConditionAgentReady, metav1.ConditionFalse, fleetv1alpha1.ReasonAgentStarting, "the agent was started and has not reported yet")
	observeAgent(&m.Status, nil, false, s.now)
	s.event(corev1.EventTypeNormal, fleetv1alpha1.ReasonPaneCreated, "Started the agent in pane %s", ws.RootPane.PaneID)
	r.PaneWatch.Track(client.ObjectKeyFromObject(m), ws.RootPane.PaneID)
	return ctrl.Result{RequeueAfter: agentStartTimeout + time.Second}, nil
}

// freeAgentName closes the workspaces, other than keep, of earlier
// incarnations of m whose agents hold name in herdr. It reports whether it
// closed any; a name held by anything else is left alone, and herdr's
// refusal stands.
func (r *MemberReconciler) freeAgentName(ctx context.Context, m *fleetv1alpha1.Member, name, keep string) (bool, error) {
	snap, err := r.Panes.SessionSnapshot(ctx)
	if err != nil {
		return false, fmt.Errorf("taking a herdr snapshot: %w", err)
	}
	labels := map[string]string{}
	for _, ws := range snap.Workspaces {
		labels[ws.WorkspaceID] = ws.Label
	}
	mine := fmt.Sprintf("fleetd:%s/%s:", m.Namespace, m.Name)
	freed := false
	for _, a := range snap.Agents {
		if a.Name == nil || *a.Name != name || a.WorkspaceID == keep || !strings.HasPrefix(labels[a.WorkspaceID], mine) {
			continue
		}
		if err := r.Panes.WorkspaceClose(ctx, a.WorkspaceID); err != nil && !errors.Is(err, herdr.ErrNotFound) {
			return false, fmt.Errorf("closing workspace %s, which holds agent name %s: %w", a.WorkspaceID, name, err)
		}
		freed = true
	}
	return freed, nil
}

// recreate replaces a lost pane, after the restart backoff.
func (r *MemberReconciler) recreate(ctx context.Context, s *memberScope, l Launch, why string) (ctrl.Result, error) {
	m := s.member
	if wait := r.backoffLeft(m, s.now.Time); wait > 0 {
		s.condition(fleetv1alpha1.ConditionPaneReady, metav1.ConditionFalse, fleetv1alpha1.ReasonBackoff, fmt.Sprintf("%s; recreating in %s", why, wait.Round(time.Second)))
		s.condition(fleetv1alpha1.ConditionAgentReady, metav1.ConditionFalse, fleetv1alpha1.ReasonPaneLost, why)
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if err := r.closeWorkspaces(ctx, m); err != nil {
		return ctrl.Result{}, err
	}
	s.event(corev1.EventTypeWarning, fleetv1alpha1.ReasonPaneLost, "Pane %s lost: %s", m.Status.PaneID, why)
	r.clearPane(m)
	m.Status.Restarts++
	m.Status.LastRestartReason = why
	m.Status.LastRestartTime = &s.now
	// A fresh pane needs fresh conditions, or the new pane would inherit the
	// old one's readiness.
	meta.RemoveStatusCondition(&m.Status.Conditions, fleetv1alpha1.ConditionPaneReady)
	meta.RemoveStatusCondition(&m.Status.Conditions, fleetv1alpha1.ConditionAgentReady)
	res, err := r.createPane(ctx, s, l)
	if err == nil && m.Status.PaneID != "" {
		s.event(corev1.EventTypeNormal, fleetv1alpha1.ReasonPaneRecreated, "Recreated the pane as %s (restart %d)", m.Status.PaneID, m.Status.Restarts)
	}
	return res, err
}

// backoffLeft is how long to wait before the next recreation.
func (r *MemberReconciler) backoffLeft(m *fleetv1alpha1.Member, now time.Time) time.Duration {
	if m.Status.LastRestartTime == nil {
		return 0
	}
	next := m.Status.LastRestartTime.Add(restartDelay(m.Status.Restarts))
	if now.Before(next) {
		return next.Sub(now)
	}
	return 0
}

// observe reads what herdr knows of a pane.
func (r *MemberReconciler) observe(ctx context.Context, paneID string) (PaneObservation, error) {
	a, err := r.Panes.AgentGet(ctx, paneID)
	if err == nil {
		return PaneObservation{Exists: true, Agent: a}, nil
	}
	if !errors.Is(err, herdr.ErrNotFound) {
		return PaneObservation{}, fmt.Errorf("getting the agent of pane %s: %w", paneID, err)
	}
	// No agent there: is there still a pane?
	one := 1
	if _, err := r.Panes.PaneRead(ctx, herdr.ReadParams{PaneID: paneID, Source: herdr.ReadSourceRecent, Lines: &one}); err != nil {
		if errors.Is(err, herdr.ErrNotFound) {
			return PaneObservation{Exists: false}, nil
		}
		return PaneObservation{}, fmt.Errorf("reading pane %s: %w", paneID, err)
	}
	return PaneObservation{Exists: true}, nil
}

// closeWorkspaces closes every workspace labelled as this Member's. It goes
// by label, never by a recorded id: herdr reuses ids after a restart, and a
// recorded id may name another Member's workspace by now.
func (r *MemberReconciler) closeWorkspaces(ctx context.Context, m *fleetv1alpha1.Member) error {
	snap, err := r.Panes.SessionSnapshot(ctx)
	if err != nil {
		return fmt.Errorf("taking a herdr snapshot: %w", err)
	}
	label := workspaceLabel(m)
	for _, ws := range snap.Workspaces {
		if ws.Label != label {
			continue
		}
		if err := r.Panes.WorkspaceClose(ctx, ws.WorkspaceID); err != nil && !errors.Is(err, herdr.ErrNotFound) {
			return fmt.Errorf("closing workspace %s: %w", ws.WorkspaceID, err)
		}
	}
	return nil
}

// reconcileDelete closes the pane and lets the Member go. When herdr does not
// answer, it gives up after cleanupTimeout so a Member never hangs in
// deletion.
func (r *MemberReconciler) reconcileDelete(ctx context.Context, m *fleetv1alpha1.Member) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(m, fleetv1alpha1.MemberFinalizer) {
		return ctrl.Result{}, nil
	}
	key := client.ObjectKeyFromObject(m)
	r.PaneWatch.Forget(key)
	r.Screens.Forget(key)
	if m.Status.WorkspaceID != "" {
		hctx, cancel := context.WithTimeout(ctx, herdrTimeout)
		err := r.closeWorkspaces(hctx, m)
		cancel()
		if err != nil {
			waited := r.Clock.Since(m.DeletionTimestamp.Time)
			if waited < cleanupTimeout {
				log.FromContext(ctx).Info("Waiting for herdr to close the pane", "member", klog.KObj(m), "error", err.Error())
				return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
			}
			r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonCleanupTimedOut, "Delete",
				"Gave up closing workspace %s after %s: %v", m.Status.WorkspaceID, cleanupTimeout, err)
		}
	}
	if r.AgentDir != "" {
		if err := os.RemoveAll(r.home(m).Dir); err != nil {
			log.FromContext(ctx).Info("Removing the agent's directory", "member", klog.KObj(m), "error", err.Error())
		}
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: TokenSecretName(m.Name)}}
	if err := r.Client.Delete(ctx, secret); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("deleting token secret: %w", err)
	}
	controllerutil.RemoveFinalizer(m, fleetv1alpha1.MemberFinalizer)
	return ctrl.Result{}, client.IgnoreNotFound(r.Client.Update(ctx, m))
}

// writeStatus writes the status once, only if it changed, then emits the
// pass's events.
func (r *MemberReconciler) writeStatus(ctx context.Context, original *fleetv1alpha1.Member, s *memberScope) error {
	m := s.member
	if !equality.Semantic.DeepEqual(original.Status, m.Status) {
		// A merge patch against what this pass read touches only the fields
		// it changed, so the Delegation controller's queue fields survive.
		// The lock makes a pass that read a stale cache fail instead of
		// leaving out fields it wrongly thought unchanged.
		if err := r.Client.Status().Patch(ctx, m, client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("writing member status: %w", err)
		}
	}
	for _, e := range s.events {
		r.Recorder.Eventf(m, nil, e.kind, e.reason, "Reconcile", "%s", e.note)
	}
	return nil
}

func socketOf(p Panes) string {
	if c, ok := p.(interface{ SocketPath() string }); ok {
		return c.SocketPath()
	}
	return "its socket"
}

// SetupWithManager registers the reconciler and its event sources.
func (r *MemberReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 4
	}
	b := ctrl.NewControllerManagedBy(mgr).
		// Status writes (this controller's and the injector's queue fields)
		// are not a reason to look at herdr again.
		For(&fleetv1alpha1.Member{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{},
			predicate.LabelChangedPredicate{},
			predicate.AnnotationChangedPredicate{},
			deletionStarted,
		))).
		Owns(&corev1.Secret{}).
		Watches(&fleetv1alpha1.Profile{}, handler.EnqueueRequestsFromMapFunc(r.membersOfProfile)).
		WatchesRawSource(r.PaneWatch.Source())
	if r.Screens != nil {
		b = b.WatchesRawSource(r.Screens.Source())
	}
	return b.
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Named("member").
		Complete(r)
}

// deletionStarted passes the update that marks an object for deletion.
var deletionStarted = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
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
