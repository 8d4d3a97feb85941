package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
)

// Suspending and resuming a pod member. A suspended member has no Pod;
// its workspace claim, with the agent's directory on it (podAgentDir: the
// agent's configuration, transcripts and session), and its agent session
// id in status are kept. A message to it, or spec.suspend turned off,
// brings it back: a new Pod, and the agent started on its saved session.
//
// Nothing typed is lost to a suspension. A member is suspended only with
// nothing in flight to it, and in two passes: the first writes it
// suspended (no pane, not Ready), so that no injector that sees it types
// into it; the second, a moment later, looks at its messages live and
// deletes its Pod, or, when one was typed meanwhile by an injector whose
// view trailed, takes the suspension back. The injector, for a member
// that may be suspended, reads the Member live once it has recorded its
// intent to type, and puts the message back in the queue when the member
// was written suspended meanwhile (DelegationReconciler.deliver): either
// the suspension sees the intent, or the injector sees the suspension.

// suspendFence is how long a member's status has said that it may be
// suspended (its Suspended condition) before it is: the injector reads
// the Member from its cache, and this gives the cache time to show that
// the member needs the live look.
const suspendFence = 2 * time.Second

// suspendSettle is how long after a member is written suspended its Pod is
// deleted: time for an injector that typed into it meanwhile to have
// recorded so.
const suspendSettle = time.Second

// maySuspend says whether m's status marks it as a member that may be
// suspended: the injector then checks it live before it types. One that
// cannot be (CannotSuspend) is not checked.
func maySuspend(m *fleetv1alpha1.Member) bool {
	c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionSuspended)
	return c != nil && c.Reason != fleetv1alpha1.ReasonCannotSuspend
}

// reconcileSuspend suspends the member, keeps it suspended, or resumes it,
// as decideSuspend says; stop says the pass ends here, with the member
// suspended. A resume clears the suspension and lets the pass bring the
// member up as usual, its agent started on its saved session
// (createPane).
func (r *MemberReconciler) reconcileSuspend(ctx context.Context, s *memberScope, w Worker) (stop bool, result ctrl.Result, err error) {
	m := s.member
	configured := m.Spec.Suspend != nil || w.Idle != nil
	if !configured && m.Status.SuspendedAt == nil {
		if maySuspend(m) {
			s.facts.suspend = &suspendFact{drop: true}
		}
		return false, ctrl.Result{}, nil
	}
	queued, inFlight, err := r.messagesTo(ctx, m, false)
	if err != nil {
		return false, ctrl.Result{}, err
	}
	in := suspendInputs{
		Configured: configured,
		Requested:  m.Spec.Suspend != nil && *m.Spec.Suspend,
		Blocker:    r.runtimes().of(m).suspendBlocker(w),
		Queued:     queued,
		InFlight:   inFlight,
		Now:        s.now.Time,
	}
	if w.Idle != nil && w.Idle.SuspendAfter != nil {
		in.After = w.Idle.SuspendAfter.Duration
	}
	in.observe(&m.Status)
	v := decideSuspend(in)
	switch v.action {
	case suspendNow:
		// The cache may trail: suspend only if a live look agrees.
		queued, inFlight, err := r.messagesTo(ctx, m, true)
		if err != nil {
			return false, ctrl.Result{}, err
		}
		if inFlight > 0 || queued > 0 && v.reason == fleetv1alpha1.ReasonIdle {
			// It goes on; suspendDue looks again once the cache shows
			// what the live look saw.
			s.facts.suspend = &suspendFact{active: true}
			s.suspendPolicy = &in
			return false, ctrl.Result{}, nil
		}
		r.suspend(m, s.now)
		s.facts.suspend = &suspendFact{suspended: v.reason, after: in.After}
		s.event(corev1.EventTypeNormal, v.reason, "Suspending the member (%s): deleting pod %s; its workspace claim and agent session %s are kept",
			suspendWhy(v.reason, in.After), podNameOf(m), sessionName(m.Status.AgentSessionID))
		return true, ctrl.Result{RequeueAfter: suspendSettle}, nil
	case suspendKeep:
		s.facts.suspend = &suspendFact{suspended: v.reason, after: in.After}
		return r.keepSuspended(ctx, s)
	case suspendResume:
		m.Status.SuspendedAt = nil
		m.Status.ResumingSessionID = ""
		if _, ok := agents.ResumeArgs(m.Status.AgentKind, nil, m.Status.AgentSessionID); ok {
			m.Status.ResumingSessionID = m.Status.AgentSessionID
		}
		s.facts.suspend = &suspendFact{resuming: true, resumingSession: m.Status.ResumingSessionID}
		why := "a message is waiting for it"
		switch {
		case in.Blocker != "":
			why = in.Blocker
		case queued == 0 && inFlight == 0:
			why = "spec.suspend is no longer true"
		}
		s.event(corev1.EventTypeNormal, fleetv1alpha1.ReasonResuming, "Resuming the member (%s) on agent session %s", why, sessionName(m.Status.ResumingSessionID))
		return false, ctrl.Result{}, nil
	}
	s.facts.suspend = &suspendFact{active: in.Blocker == "", blocker: in.Blocker}
	// The pass goes on and may find the member newly idle: when it is due
	// is decided again on the status the pass writes (suspendDue).
	s.suspendPolicy = &in
	return false, ctrl.Result{}, nil
}

// suspendDue is when to look at a running member again to suspend it, from
// the status a pass is about to write; 0 for no time-driven look.
func suspendDue(s *memberScope) time.Duration {
	if s.suspendPolicy == nil {
		return 0
	}
	in := *s.suspendPolicy
	in.observe(&s.member.Status)
	switch v := decideSuspend(in); v.action {
	case suspendNone:
		return v.again
	default:
		return staleRetry
	}
}

// podNameOf is the Pod the member's status names, for an event.
func podNameOf(m *fleetv1alpha1.Member) string {
	if m.Status.PodName == "" {
		return "(none)"
	}
	return m.Status.PodName
}

// suspend writes m as suspended: no pane, no Pod, no agent status; its
// agent session id stays, for the resume. Its Pod is deleted by the next
// pass (keepSuspended).
func (r *MemberReconciler) suspend(m *fleetv1alpha1.Member, now metav1.Time) {
	key := client.ObjectKeyFromObject(m)
	r.PaneWatch.Forget(key)
	r.Screens.Forget(key)
	r.turns.Delete(key)
	session := m.Status.AgentSessionID
	clearPane(m)
	m.Status.AgentSessionID = session
	m.Status.AgentStatus, m.Status.AgentMessage, m.Status.AgentStatusSince = "", "", &now
	m.Status.ResumingSessionID = ""
	m.Status.SuspendedAt = &now
	// The Pod's name stays until the Pod is gone: the next pass deletes
	// it, or adopts it again if the suspension is taken back.
	m.Status.PodIP, m.Status.NodeName = "", ""
}

// keepSuspended makes sure a suspended member has no Pod. The first pass
// after the member was written suspended looks at its messages live: one
// typed meanwhile (an injector's view trailed the suspension) takes the
// suspension back, and the member goes on in the Pod it still has.
func (r *MemberReconciler) keepSuspended(ctx context.Context, s *memberScope) (bool, ctrl.Result, error) {
	m := s.member
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(m.Namespace), client.MatchingLabels{fleetv1alpha1.LabelMemberUID: string(m.UID)}); err != nil {
		return false, ctrl.Result{}, fmt.Errorf("listing the member's pods: %w", err)
	}
	live := 0
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp == nil {
			live++
		}
	}
	if live == 0 {
		if m.Status.PodName != "" {
			r.runtimes().of(m).forget(m.UID)
			clearPod(m)
		}
		return true, ctrl.Result{}, nil
	}
	if left := m.Status.SuspendedAt.Add(suspendSettle).Sub(s.now.Time); left > 0 {
		return true, ctrl.Result{RequeueAfter: left}, nil
	}
	_, inFlight, err := r.messagesTo(ctx, m, true)
	if err != nil {
		return false, ctrl.Result{}, err
	}
	if inFlight > 0 {
		// Typed into the pane before the injector saw the suspension: the
		// member goes on, and the pass adopts its pane again.
		m.Status.SuspendedAt = nil
		s.facts.suspend = &suspendFact{active: true}
		s.event(corev1.EventTypeNormal, fleetv1alpha1.ReasonActive, "Not suspending the member after all: a message was typed into it meanwhile")
		return false, ctrl.Result{}, nil
	}
	if err := r.deletePods(ctx, m); err != nil {
		return false, ctrl.Result{}, err
	}
	r.runtimes().of(m).forget(m.UID)
	clearPod(m)
	return true, ctrl.Result{}, nil
}

// messagesTo counts m's messages waiting in its queue and in flight, from
// the cache, or live (from the API server) when a decision must not rest
// on a view that trails.
func (r *MemberReconciler) messagesTo(ctx context.Context, m *fleetv1alpha1.Member, live bool) (queued, inFlight int, err error) {
	var list fleetv1alpha1.DelegationList
	if live {
		// The API server selects no custom field: list the namespace's.
		err = r.Reader.List(ctx, &list, client.InNamespace(m.Namespace))
	} else {
		err = r.Client.List(ctx, &list, client.InNamespace(m.Namespace), client.MatchingFields{IndexDelegationTo: m.Name})
	}
	if err != nil {
		return 0, 0, fmt.Errorf("listing the messages to %s: %w", m.Name, err)
	}
	for i := range list.Items {
		d := &list.Items[i]
		switch {
		case d.Spec.To != m.Name:
		case delegation.Queued(d):
			queued++
		case delegation.InFlight(d):
			inFlight++
		}
	}
	return queued, inFlight, nil
}

// observeResume records how the resume of a member's saved session went,
// once its pane is looked at: ready on it, or failed, in which case the
// pane is replaced by one whose agent starts a fresh session, and the
// message waiting for the member is still delivered to it. fresh is true
// when it replaced the pane.
func (r *MemberReconciler) observeResume(ctx context.Context, s *memberScope, obs PaneObservation, wasReady bool, l Launch) (fresh bool, result ctrl.Result, err error) {
	m := s.member
	session := m.Status.ResumingSessionID
	c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionSuspended)
	switch {
	case session == "" && (c == nil || c.Reason != fleetv1alpha1.ReasonResuming):
		return false, ctrl.Result{}, nil
	case session != "" && resumeFailed(obs, wasReady):
		why := fmt.Sprintf("the agent could not resume its saved session %s (it exited at once: the session is missing, corrupt or from another version of the agent); it starts a fresh session", session)
		s.event(corev1.EventTypeWarning, fleetv1alpha1.ReasonSessionNotResumed, "%s", why)
		m.Status.ResumingSessionID = ""
		if err := closeWorkspaces(ctx, s.panes, m); err != nil {
			return false, ctrl.Result{}, err
		}
		clearPane(m)
		s.facts.suspend = &suspendFact{sessionLost: why}
		s.facts.recreated = true
		result, err := r.createPane(ctx, s, l)
		return true, result, err
	case judgeAgent(obs.Agent, m.Status.AgentStatus) == agentReady:
		m.Status.ResumingSessionID = ""
		s.facts.suspend = &suspendFact{resumed: true, resumedSession: session}
		if session != "" {
			s.event(corev1.EventTypeNormal, fleetv1alpha1.ReasonResumed, "The agent resumed its saved session %s", session)
		} else {
			s.event(corev1.EventTypeNormal, fleetv1alpha1.ReasonResumed, "The member runs again, its agent on a fresh session: none was saved")
		}
	}
	return false, ctrl.Result{}, nil
}

// suspendedReceiver asks for a look at the Member a Delegation that
// arrived or settled is to, when that member is suspended or may be: a
// message resumes it, and the settle of its last one lets it be suspended.
func (r *MemberReconciler) suspendedReceiver(ctx context.Context, o client.Object) []reconcile.Request {
	d, ok := o.(*fleetv1alpha1.Delegation)
	if !ok {
		return nil
	}
	key := types.NamespacedName{Namespace: d.Namespace, Name: d.Spec.To}
	m := &fleetv1alpha1.Member{}
	if err := r.Client.Get(ctx, key, m); err != nil || !(m.Status.SuspendedAt != nil || maySuspend(m)) {
		return nil
	}
	return []reconcile.Request{{NamespacedName: key}}
}
