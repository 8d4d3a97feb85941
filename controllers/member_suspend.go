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

// suspendAction is what to do about a member that may be suspended.
type suspendAction int

const (
	// suspendNone: it runs, and stays running for now.
	suspendNone suspendAction = iota
	// suspendNow: write it suspended; its Pod goes in the next pass.
	suspendNow
	// suspendKeep: it is suspended and stays so.
	suspendKeep
	// suspendResume: it is suspended, and comes back now.
	suspendResume
)

// suspendInputs is what decideSuspend looks at.
type suspendInputs struct {
	// Configured says the member may be suspended at all: spec.suspend or
	// an idle policy (its own or its Profile's) is set.
	Configured bool
	// Requested is spec.suspend true.
	Requested bool
	// After is idle.suspendAfter; 0 never suspends for being idle.
	After time.Duration
	// Blocker is why the member cannot be suspended; empty when it can.
	Blocker string
	// Suspended says the member is suspended now, and SuspendedFor why
	// (ReasonIdle or ReasonSuspendRequested).
	Suspended    bool
	SuspendedFor string
	// MarkedAt is since when the member's status has said that it may be
	// suspended; zero when it does not say so yet.
	MarkedAt time.Time
	// Ready is the member's Ready condition; Idle says its agent waits
	// for input (idle or done), and IdleSince since when.
	Ready     bool
	Idle      bool
	IdleSince time.Time
	// Queued and InFlight count the messages to the member waiting in its
	// queue, and typed and not settled (a question open among them).
	Queued, InFlight int
	Now              time.Time
}

// suspendVerdict is decideSuspend's answer.
type suspendVerdict struct {
	action suspendAction
	// reason is why the member is or is to be suspended: ReasonIdle or
	// ReasonSuspendRequested.
	reason string
	// again is when to look again; 0 for no time-driven look.
	again time.Duration
}

// decideSuspend says whether a member is to be suspended now, stays as it
// is, or is to be resumed:
//   - a suspended member stays so while spec.suspend is true (messages
//     wait in its queue); otherwise a queued message resumes it, and so
//     does spec.suspend turned off for one suspended by it. One suspended
//     for being idle waits for a message.
//   - a running member is never suspended with a message in flight to it
//     (an open question is in flight); spec.suspend suspends it then, with
//     messages still queued; an idle policy suspends it once it has been
//     Ready and idle for suspendAfter with nothing queued.
//   - a member is suspended only suspendFence after its status first said
//     it may be, so the injector knows to check it live.
//   - a member that cannot be suspended (Blocker) never is, and one that
//     is comes back.
func decideSuspend(in suspendInputs) suspendVerdict {
	switch {
	case in.Suspended && in.Blocker != "":
		return suspendVerdict{action: suspendResume}
	case in.Suspended && in.Requested:
		return suspendVerdict{action: suspendKeep, reason: fleetv1alpha1.ReasonSuspendRequested}
	case in.Suspended && (in.Queued > 0 || in.InFlight > 0):
		return suspendVerdict{action: suspendResume}
	case in.Suspended && in.SuspendedFor == fleetv1alpha1.ReasonSuspendRequested:
		return suspendVerdict{action: suspendResume}
	case in.Suspended:
		return suspendVerdict{action: suspendKeep, reason: fleetv1alpha1.ReasonIdle}
	case !in.Configured || in.Blocker != "" || in.InFlight > 0:
		return suspendVerdict{}
	}
	var reason string
	var at time.Time
	switch {
	case in.Requested:
		reason, at = fleetv1alpha1.ReasonSuspendRequested, in.Now
	case in.After > 0 && in.Ready && in.Idle && in.Queued == 0 && !in.IdleSince.IsZero():
		reason, at = fleetv1alpha1.ReasonIdle, in.IdleSince.Add(in.After)
	default:
		return suspendVerdict{}
	}
	if in.MarkedAt.IsZero() {
		// This pass marks it; the next may suspend it.
		return suspendVerdict{again: suspendFence}
	}
	if fence := in.MarkedAt.Add(suspendFence); fence.After(at) {
		at = fence
	}
	if in.Now.Before(at) {
		return suspendVerdict{again: at.Sub(in.Now)}
	}
	return suspendVerdict{action: suspendNow, reason: reason}
}

// suspendBlocker says why a member that runs in rt with w's pod cannot be
// suspended, or "" when it can: only a Pod member's Pod can be given up,
// and only a workspace claim keeps the workspace and the agent's session
// (on podAgentDir) once it is; an emptyDir goes with its Pod.
func suspendBlocker(rt fleetv1alpha1.Runtime, w Worker) string {
	switch {
	case rt != fleetv1alpha1.RuntimePod:
		return "the member runs on the shared pane server; only a member in a Pod of its own is suspended"
	case w.Pod == nil || w.Pod.Workspace == nil || w.Pod.Workspace.VolumeClaim == nil:
		return "the member's workspace is an emptyDir, which would be lost with its Pod, and the agent's session with it; " +
			"give it a claim (spec.pod.workspace.volumeClaim, or its Profile's) to let it be suspended"
	}
	return ""
}

// suspendFact is what a pass found out about suspension, for the
// Suspended condition.
type suspendFact struct {
	// blocker is why the member cannot be suspended.
	blocker string
	// suspended is why the member is suspended now (ReasonIdle,
	// ReasonSuspendRequested), and after its idle policy's suspendAfter.
	suspended string
	after     time.Duration
	// resuming is the saved session the member is resumed on ("" for a
	// fresh one) while resuming is true.
	resuming        bool
	resumingSession string
	// resumed says the agent is ready after a resume, on resumedSession
	// ("" for a fresh session: none was saved).
	resumed        bool
	resumedSession string
	// sessionLost says why the saved session could not be resumed; the
	// agent starts a fresh session.
	sessionLost string
	// active says the member runs and may be suspended.
	active bool
	// drop forgets the condition: the member may no longer be suspended.
	drop bool
}

// suspendedCondition says whether the member is suspended, and since when
// and why, or how its resume went.
func suspendedCondition(st *fleetv1alpha1.MemberStatus, f memberFacts) conditionVerdict {
	sf := f.suspend
	switch {
	case sf == nil:
		return conditionVerdict{}
	case sf.drop:
		return conditionVerdict{renew: true}
	case sf.suspended != "":
		since := "now"
		if st.SuspendedAt != nil {
			since = st.SuspendedAt.UTC().Format(time.RFC3339)
		}
		why := "spec.suspend is true; messages wait in its queue until it is false"
		if sf.suspended == fleetv1alpha1.ReasonIdle {
			why = fmt.Sprintf("it was idle for %s with nothing queued or in flight; a message resumes it", sf.after)
		}
		return verdict(metav1.ConditionTrue, sf.suspended, fmt.Sprintf("suspended since %s: %s; its pod is deleted, its workspace claim and agent session %s are kept", since, why, sessionName(st.AgentSessionID)))
	case sf.blocker != "":
		return verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonCannotSuspend, sf.blocker)
	case sf.sessionLost != "":
		return verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonSessionNotResumed, sf.sessionLost)
	case sf.resumed && sf.resumedSession != "":
		return verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonResumed, "the agent resumed its saved session "+sf.resumedSession)
	case sf.resumed:
		return verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonResumed, "the member runs again, its agent on a fresh session: none was saved")
	case sf.resuming && sf.resumingSession != "":
		return verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonResuming, "starting a pod and the agent on its saved session "+sf.resumingSession)
	case sf.resuming:
		return verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonResuming, "starting a pod and the agent, on a fresh session: none was saved")
	case sf.active:
		// A resume's outcome stays until the next suspension.
		c := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionSuspended)
		if c != nil && c.Status == metav1.ConditionFalse && c.Reason != fleetv1alpha1.ReasonCannotSuspend {
			return conditionVerdict{}
		}
		v := verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonActive, "the member runs; it is suspended when idle long enough, or when spec.suspend is true")
		// From CannotSuspend the member becomes one that may be suspended
		// now: its transition time says since when (suspendFence).
		v.renew = c != nil && c.Reason == fleetv1alpha1.ReasonCannotSuspend
		return v
	}
	return conditionVerdict{}
}

// sessionName names a saved agent session in a message.
func sessionName(id string) string {
	if id == "" {
		return "(none saved)"
	}
	return id
}

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
		Blocker:    suspendBlocker(m.Status.Runtime, w),
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

// observe fills in what in takes from a Member's status.
func (in *suspendInputs) observe(st *fleetv1alpha1.MemberStatus) {
	in.Suspended = st.SuspendedAt != nil
	ready := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionReady)
	in.Ready = ready != nil && ready.Status == metav1.ConditionTrue
	in.Idle = st.AgentStatus == fleetv1alpha1.AgentIdle || st.AgentStatus == fleetv1alpha1.AgentDone
	in.IdleSince = time.Time{}
	if st.AgentStatusSince != nil {
		in.IdleSince = st.AgentStatusSince.Time
	}
	// An agent is idle at its prompt before the member is Ready: idle
	// time counts from when both held, so a member that just started is
	// Ready for suspendAfter before it is suspended.
	if in.Ready && ready.LastTransitionTime.After(in.IdleSince) {
		in.IdleSince = ready.LastTransitionTime.Time
	}
	in.MarkedAt, in.SuspendedFor = time.Time{}, ""
	if c := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionSuspended); c != nil && c.Reason != fleetv1alpha1.ReasonCannotSuspend {
		in.MarkedAt = c.LastTransitionTime.Time
		if c.Status == metav1.ConditionTrue {
			in.SuspendedFor = c.Reason
		}
	}
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

// suspendWhy says why a member is suspended, for an event.
func suspendWhy(reason string, after time.Duration) string {
	if reason == fleetv1alpha1.ReasonIdle {
		return fmt.Sprintf("idle for %s", after)
	}
	return "spec.suspend is true"
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

// resumeFailed says whether an agent started on a saved session is gone
// before it was ever ready: the CLI exits at once when it cannot resume
// the session (missing, corrupt, another version's), and its pane is back
// at the shell.
func resumeFailed(obs PaneObservation, wasReady bool) bool {
	return !wasReady && obs.Exists && obs.Agent == nil
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

// suspendedReceiver asks for a look at the Member a new Delegation is to,
// when that member is suspended or may be: a message resumes it.
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
