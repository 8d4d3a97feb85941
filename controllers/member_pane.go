package controllers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
)

// The pane's lifecycle: create it, adopt one an earlier pass made, look at
// it, replace it when it is lost, close it. Each step acts on the scope's
// pane host (s.panes) or the PaneClient it is given, and records what it found
// on the scope's facts.

// staleRetry is how soon a pass that found its view of the Member stale
// looks again, once the cache has caught up.
const staleRetry = 100 * time.Millisecond

// agentSettle is how long Claude Code or Codex, started in a pane, runs
// before it takes work. Both show their prompt, which herdr reads as
// ready, before they have connected to their MCP servers, which they do in
// the background: a message typed at once was answered with no fleetd
// tools (the model saw none offered). An agent taken over from a warm Pod
// settled there (warmAgentSettle); one adopted after a restart of fleetd
// has run for longer.
const agentSettle = 5 * time.Second

// reconcilePane creates, adopts, observes or replaces the Member's pane.
func (r *MemberReconciler) reconcilePane(ctx, hctx context.Context, s *memberScope, launch Launch) (ctrl.Result, error) {
	m := s.member
	recordDirs(m, launch, r.home(m).Dir)

	if m.Status.PaneID == "" {
		fresh, err := r.isFresh(ctx, m)
		if err != nil {
			return ctrl.Result{}, err
		}
		if !fresh {
			return ctrl.Result{RequeueAfter: staleRetry}, nil
		}
		if m.Status.PodPool != "" {
			// A claimed warm Pod may run an agent started for the member
			// ahead; adopt records it.
			if _, err := r.takeWarmAgent(hctx, s, launch); err != nil {
				return ctrl.Result{}, err
			}
		}
		adopted, err := adopt(hctx, s)
		if err != nil {
			return ctrl.Result{}, err
		}
		if !adopted && s.claimedNow {
			// An agent started now would reach the gateway with the Pod's
			// token before this pass's status binds it to the member.
			return ctrl.Result{RequeueAfter: claimedRecheck}, nil
		}
		if !adopted {
			return r.createPane(hctx, s, launch)
		}
	}
	key := client.ObjectKeyFromObject(m)
	// Taken before the look, so a working status the look misses (a turn
	// that fell between two looks) still shows as a pickup.
	s.sawWorking = r.PaneWatch.TakeSawWorking(key)
	obs, err := observe(hctx, s.panes, m.Status.PaneID)
	if err != nil {
		return ctrl.Result{}, err
	}
	wasReady := meta.IsStatusConditionTrue(m.Status.Conditions, fleetv1alpha1.ConditionAgentReady)
	if fresh, result, err := r.observeResume(hctx, s, obs, wasReady, launch); fresh || err != nil {
		return result, err
	}
	startedAt := s.paneStartedAt()
	if verdict, why := judgePane(obs, m.Status.TerminalID, wasReady, startedAt, s.now.Time); verdict == paneLost {
		fresh, err := r.isFresh(ctx, m)
		if err != nil {
			return ctrl.Result{}, err
		}
		if !fresh {
			return ctrl.Result{RequeueAfter: staleRetry}, nil
		}
		return r.recreate(hctx, s, launch, why)
	}
	s.facts.observed = &obs
	r.PaneWatch.Track(key, m.Status.PaneID, s.panes)
	r.Screens.Watch(key, m.Status.PaneID, m.Status.AgentKind, s.panes)
	hold := r.holdWorking(key, &m.Status, obs.Agent, s.now.Time)
	if hold > 0 {
		// The turn is not shown yet; what was seen of it is kept for the
		// look that shows it.
		if s.sawWorking {
			r.PaneWatch.GiveBackSawWorking(key)
			s.sawWorking = false
		}
	} else {
		observeAgent(&m.Status, obs.Agent, s.sawWorking, s.now)
	}
	again := r.observeHooks(ctx, s)
	if at, ok := r.started.Load(key); ok {
		if left := agentSettle - s.now.Sub(at.(time.Time)); left > 0 {
			s.facts.settling = left
			again = sooner(again, left)
		} else {
			r.started.Delete(key)
		}
	}
	switch judgeAgent(obs.Agent, m.Status.AgentStatus) {
	case agentBlockedAtStart:
		return ctrl.Result{RequeueAfter: launchPoll}, nil
	case agentStarting:
		if obs.Agent != nil && obs.Agent.LaunchPending {
			// herdr says nothing when a launch becomes ready: look again
			// soon, as herdr's own CLI polls agent.get.
			return ctrl.Result{RequeueAfter: launchPoll}, nil
		}
		if !startedAt.IsZero() {
			return ctrl.Result{RequeueAfter: agentStartTimeout - s.now.Sub(startedAt) + time.Second}, nil
		}
	}
	return ctrl.Result{RequeueAfter: sooner(hold, again)}, nil
}

// holdWorking is holdWorking for the Member key, whose agent a shows: it
// remembers when this process first saw the agent working in its current
// turn, and forgets it once the agent stops.
func (r *MemberReconciler) holdWorking(key types.NamespacedName, st *fleetv1alpha1.MemberStatus, a *herdr.AgentInfo, now time.Time) time.Duration {
	if a == nil || agentStatus(a.AgentStatus) != fleetv1alpha1.AgentWorking {
		r.turns.Delete(key)
		return 0
	}
	turn := turnStart{terminalID: a.TerminalID, seq: a.StateChangeSeq, at: now}
	if seen, ok := r.turns.Load(key); ok && seen.(turnStart).terminalID == turn.terminalID && seen.(turnStart).seq == turn.seq {
		turn = seen.(turnStart)
	} else {
		r.turns.Store(key, turn)
	}
	return holdWorking(st, a, turn.at, now)
}

// paneStartedAt is when the Member's pane became ready, as PaneReady's
// transition will say once this pass's conditions are set: a pane adopted
// in this pass became ready now, unless PaneReady already said so.
func (s *memberScope) paneStartedAt() time.Time {
	pane := meta.FindStatusCondition(s.member.Status.Conditions, fleetv1alpha1.ConditionPaneReady)
	switch {
	case s.facts.adopted != "" && (pane == nil || pane.Status != metav1.ConditionTrue):
		return s.now.Time
	case pane != nil:
		return pane.LastTransitionTime.Time
	}
	return time.Time{}
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

// workspaceLabel marks the workspace of one Member incarnation so that a
// restarted controller adopts it instead of starting a duplicate.
func workspaceLabel(m *fleetv1alpha1.Member) string {
	return fmt.Sprintf("fleetd:%s/%s:%s", m.Namespace, m.Name, m.UID)
}

// parseWorkspaceLabel reads the Member a workspace label names; ok is false
// for a workspace that is not a Member's.
func parseWorkspaceLabel(label string) (key types.NamespacedName, uid types.UID, ok bool) {
	rest, ok := strings.CutPrefix(label, "fleetd:")
	if !ok {
		return key, "", false
	}
	name, id, ok := strings.Cut(rest, ":")
	if !ok {
		return key, "", false
	}
	ns, member, ok := strings.Cut(name, "/")
	if !ok || ns == "" || member == "" || id == "" {
		return key, "", false
	}
	return types.NamespacedName{Namespace: ns, Name: member}, types.UID(id), true
}

// adopt takes over a pane an earlier pass created but did not record.
func adopt(ctx context.Context, s *memberScope) (bool, error) {
	snap, err := s.panes.SessionSnapshot(ctx)
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
				recordPane(s.member, p)
				s.facts.adopted = p.PaneID
				s.event(corev1.EventTypeNormal, fleetv1alpha1.ReasonPaneAdopted, "Adopted pane %s in workspace %s", p.PaneID, ws.WorkspaceID)
				return true, nil
			}
		}
	}
	return false, nil
}

// recordPane makes p the Member's pane.
func recordPane(m *fleetv1alpha1.Member, p herdr.PaneInfo) {
	m.Status.PaneID = p.PaneID
	m.Status.WorkspaceID = p.WorkspaceID
	m.Status.TabID = p.TabID
	m.Status.TerminalID = p.TerminalID
}

// clearPane forgets the Member's pane and what its agent reported.
func clearPane(m *fleetv1alpha1.Member) {
	m.Status.PaneID, m.Status.WorkspaceID, m.Status.TabID, m.Status.TerminalID = "", "", "", ""
	m.Status.AgentSessionID, m.Status.ContextRemainingPercent = "", nil
	m.Status.StateChangeSeq, m.Status.WorkingSeq = 0, 0
}

// createPane opens a workspace for the Member and starts its agent.
func (r *MemberReconciler) createPane(ctx context.Context, s *memberScope, l Launch) (ctrl.Result, error) {
	m := s.member
	if s.tokenStale {
		token, err := r.freshToken(ctx, s)
		if err != nil {
			return ctrl.Result{}, err
		}
		l.Env = maps.Clone(l.Env)
		l.Env[agents.EnvToken] = token
	}
	if l.AgentKind != "" {
		if err := s.files.Install(ctx, r.home(m).Dir, l.WorkingDir, l.Files); err != nil {
			return ctrl.Result{}, fmt.Errorf("writing the agent's configuration: %w", err)
		}
	}
	ws, err := s.panes.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Cwd: l.WorkingDir, Env: l.Env, Label: workspaceLabel(m)})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("creating a workspace: %w", err)
	}
	recordPane(m, ws.RootPane)
	if l.AgentKind != "" {
		args := l.AgentArgs
		if resumed, ok := agents.ResumeArgs(fleetv1alpha1.AgentKind(l.AgentKind), args, m.Status.ResumingSessionID); ok {
			// A suspended member comes back on its saved session
			// (observeResume says how that went).
			args = resumed
		}
		start := herdr.AgentStartParams{Name: agentName(m.Namespace, m.Name), Kind: l.AgentKind, PaneID: ws.RootPane.PaneID, Args: args}
		_, err = s.panes.AgentStart(ctx, start)
		if errors.Is(err, herdr.ErrAgentNameTaken) {
			// After a restart herdr may bring back an earlier agent of this
			// Member under its name (it resumes agents its own integrations
			// reported): that pane is this Member's past, not another's.
			freed, ferr := freeAgentName(ctx, s.panes, m, start.Name, ws.Workspace.WorkspaceID)
			switch {
			case ferr != nil:
				err = ferr
			case freed:
				s.event(corev1.EventTypeNormal, fleetv1alpha1.ReasonPaneLost, "Closed an earlier pane of this Member that still held herdr agent name %s", start.Name)
				_, err = s.panes.AgentStart(ctx, start)
			}
		}
	} else {
		err = s.panes.PaneSendInput(ctx, herdr.PaneSendInputParams{PaneID: ws.RootPane.PaneID, Text: l.CommandLine, Keys: []string{"enter"}})
	}
	if err != nil {
		var herr *herdr.Error
		if errors.As(err, &herr) && !errors.Is(err, herdr.ErrNotFound) {
			// herdr refused the agent (unknown kind, name taken, ...): a
			// spec or environment problem that retrying will not fix soon.
			_ = closeWorkspaces(ctx, s.panes, m)
			clearPane(m)
			s.facts.startRefused = err.Error()
			s.event(corev1.EventTypeWarning, fleetv1alpha1.ReasonAgentStartFailed, "herdr refused to start the agent: %v", err)
			return ctrl.Result{RequeueAfter: restartBackoffMax}, nil
		}
		return ctrl.Result{}, fmt.Errorf("starting the agent in pane %s: %w", ws.RootPane.PaneID, err)
	}
	s.facts.started = &startedPane{paneID: ws.RootPane.PaneID, workspaceID: ws.Workspace.WorkspaceID}
	if agents.Hooked(fleetv1alpha1.AgentKind(l.AgentKind)) {
		r.started.Store(client.ObjectKeyFromObject(m), s.now.Time)
	}
	observeAgent(&m.Status, nil, false, s.now)
	s.event(corev1.EventTypeNormal, fleetv1alpha1.ReasonPaneCreated, "Started the agent in pane %s", ws.RootPane.PaneID)
	r.PaneWatch.Track(client.ObjectKeyFromObject(m), ws.RootPane.PaneID, s.panes)
	return ctrl.Result{RequeueAfter: agentStartTimeout + time.Second}, nil
}

// freeAgentName closes the workspaces, other than keep, of earlier
// incarnations of m whose agents hold name in herdr. It reports whether it
// closed any; a name held by anything else is left alone, and herdr's
// refusal stands.
func freeAgentName(ctx context.Context, panes PaneClient, m *fleetv1alpha1.Member, name, keep string) (bool, error) {
	snap, err := panes.SessionSnapshot(ctx)
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
		if err := panes.WorkspaceClose(ctx, a.WorkspaceID); err != nil && !errors.Is(err, herdr.ErrNotFound) {
			return false, fmt.Errorf("closing workspace %s, which holds agent name %s: %w", a.WorkspaceID, name, err)
		}
		freed = true
	}
	return freed, nil
}

// recreate replaces a lost pane, after the restart backoff.
func (r *MemberReconciler) recreate(ctx context.Context, s *memberScope, l Launch, why string) (ctrl.Result, error) {
	m := s.member
	if wait := backoffLeft(m, s.now.Time); wait > 0 {
		s.facts.waiting = &paneWait{why: why, left: wait}
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if err := closeWorkspaces(ctx, s.panes, m); err != nil {
		return ctrl.Result{}, err
	}
	s.event(corev1.EventTypeWarning, fleetv1alpha1.ReasonPaneLost, "Pane %s lost: %s", m.Status.PaneID, why)
	clearPane(m)
	m.Status.Restarts++
	m.Status.LastRestartReason = why
	m.Status.LastRestartTime = &s.now
	// The new pane must not inherit the old one's readiness.
	s.facts.recreated = true
	res, err := r.createPane(ctx, s, l)
	if err == nil && m.Status.PaneID != "" {
		s.event(corev1.EventTypeNormal, fleetv1alpha1.ReasonPaneRecreated, "Recreated the pane as %s (restart %d)", m.Status.PaneID, m.Status.Restarts)
	}
	return res, err
}

// backoffLeft is how long to wait before the next recreation.
func backoffLeft(m *fleetv1alpha1.Member, now time.Time) time.Duration {
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
func observe(ctx context.Context, panes PaneClient, paneID string) (PaneObservation, error) {
	a, err := panes.AgentGet(ctx, paneID)
	if err == nil {
		return PaneObservation{Exists: true, Agent: a}, nil
	}
	if !errors.Is(err, herdr.ErrNotFound) {
		return PaneObservation{}, fmt.Errorf("getting the agent of pane %s: %w", paneID, err)
	}
	// No agent there: is there still a pane?
	one := 1
	if _, err := panes.PaneRead(ctx, herdr.ReadParams{PaneID: paneID, Source: herdr.ReadSourceRecent, Lines: &one}); err != nil {
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
func closeWorkspaces(ctx context.Context, panes PaneClient, m *fleetv1alpha1.Member) error {
	snap, err := panes.SessionSnapshot(ctx)
	if err != nil {
		return fmt.Errorf("taking a herdr snapshot: %w", err)
	}
	label := workspaceLabel(m)
	for _, ws := range snap.Workspaces {
		if ws.Label != label {
			continue
		}
		if err := panes.WorkspaceClose(ctx, ws.WorkspaceID); err != nil && !errors.Is(err, herdr.ErrNotFound) {
			return fmt.Errorf("closing workspace %s: %w", ws.WorkspaceID, err)
		}
	}
	return nil
}
