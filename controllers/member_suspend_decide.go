package controllers

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// The decisions of suspending and resuming a member, as pure functions of
// what a pass found (member_suspend.go carries them out).

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

// suspendWhy says why a member is suspended, for an event.
func suspendWhy(reason string, after time.Duration) string {
	if reason == fleetv1alpha1.ReasonIdle {
		return fmt.Sprintf("idle for %s", after)
	}
	return "spec.suspend is true"
}

// resumeFailed says whether an agent started on a saved session is gone
// before it was ever ready: the CLI exits at once when it cannot resume
// the session (missing, corrupt, another version's), and its pane is back
// at the shell.
func resumeFailed(obs PaneObservation, wasReady bool) bool {
	return !wasReady && obs.Exists && obs.Agent == nil
}

// sessionName names a saved agent session in a message.
func sessionName(id string) string {
	if id == "" {
		return "(none saved)"
	}
	return id
}
