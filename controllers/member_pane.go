package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
)

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
