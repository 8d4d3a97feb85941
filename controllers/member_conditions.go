package controllers

import (
	"cmp"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// agentStartingMessage is AgentReady's message for an agent that has not
// reported yet.
const agentStartingMessage = "the agent was started and has not reported yet"

// setConditions sets every condition of a Member from what one pass found
// out. Each condition is computed by one function of its own, which alone
// answers "why is it so" (paneReadyCondition, podScheduledCondition,
// isolatedCondition, agentHooksCondition, agentReadyCondition,
// herdrReachableCondition); the Ready rollup and the phase follow from
// them. A condition no fact speaks of keeps what it said. now is the
// transition time of a condition that changes status.
func setConditions(st *fleetv1alpha1.MemberStatus, generation int64, f memberFacts, now metav1.Time) {
	for _, c := range []struct {
		typ     string
		verdict conditionVerdict
	}{
		{fleetv1alpha1.ConditionPaneReady, paneReadyCondition(st, f)},
		{fleetv1alpha1.ConditionPodScheduled, podScheduledCondition(st, f)},
		{fleetv1alpha1.ConditionIsolated, isolatedCondition(f)},
		{fleetv1alpha1.ConditionAgentHooks, agentHooksCondition(st, f)},
		{fleetv1alpha1.ConditionAgentReady, agentReadyCondition(st, f)},
		{fleetv1alpha1.ConditionHerdrReachable, herdrReachableCondition(f)},
		{fleetv1alpha1.ConditionSuspended, suspendedCondition(st, f)},
	} {
		c.verdict.apply(&st.Conditions, c.typ, generation, now)
	}
	rollUp(st, generation, f.deleting, now)
}

// conditionVerdict is what one pass says of one condition.
type conditionVerdict struct {
	// status is empty when no fact of the pass speaks of the condition:
	// it keeps what it said.
	status  metav1.ConditionStatus
	reason  string
	message string
	// renew forgets what the condition said before, so that a new pane
	// starts afresh rather than inherit the old one's readiness and the
	// time it became so.
	renew bool
}

func verdict(status metav1.ConditionStatus, reason, message string) conditionVerdict {
	return conditionVerdict{status: status, reason: reason, message: message}
}

// apply writes v into conditions as the condition typ.
func (v conditionVerdict) apply(conditions *[]metav1.Condition, typ string, generation int64, now metav1.Time) {
	if v.renew {
		meta.RemoveStatusCondition(conditions, typ)
	}
	if v.status == "" {
		return
	}
	meta.SetStatusCondition(conditions, metav1.Condition{
		Type: typ, Status: v.status, Reason: v.reason, Message: v.message, ObservedGeneration: generation, LastTransitionTime: now,
	})
}

// paneReadyCondition says whether the Member has a pane: the newest step
// of the pass that speaks of it wins (a started agent over a refused start over a
// Pod still coming up, and those over a recreation, a backoff, an
// adoption, a boundary or something missing), and a pane seen alive is
// ready, keeping what made it so where it already was.
func paneReadyCondition(st *fleetv1alpha1.MemberStatus, f memberFacts) conditionVerdict {
	var v conditionVerdict
	switch {
	case f.suspended():
		return verdict(metav1.ConditionFalse, f.suspend.suspended, "the member is suspended: its pod and pane are gone until it is resumed")
	case f.started != nil:
		v = verdict(metav1.ConditionTrue, fleetv1alpha1.ReasonPaneCreated, "pane "+f.started.paneID+" in workspace "+f.started.workspaceID)
	case f.startRefused != "":
		v = verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonAgentStartFailed, f.startRefused)
	case f.pod != nil && f.pod.unschedulable != "":
		v = verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonUnschedulable, "no node fits the member's pod: "+f.pod.unschedulable)
	case f.pod != nil:
		v = verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonPodStarting, "pod "+st.PodName+": "+f.pod.waiting)
	case f.recreated:
	case f.waiting != nil:
		v = verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonBackoff, fmt.Sprintf("%s; recreating in %s", f.waiting.why, f.waiting.left.Round(time.Second)))
	case f.adopted != "":
		v = verdict(metav1.ConditionTrue, fleetv1alpha1.ReasonPaneAdopted, "adopted pane "+f.adopted)
	case f.podForbidden != "":
		v = verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonPodForbidden, f.podForbidden)
	case f.claimTaken != "":
		v = verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonWorkspaceClaimTaken, f.claimTaken)
	case f.boundary != "":
		v = verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonSubscriptionBoundary, f.boundary)
	case f.unresolved != nil:
		v = verdict(metav1.ConditionFalse, f.unresolved.reason, f.unresolved.Error())
	}
	v.renew = f.recreated
	if f.observed == nil {
		return v
	}
	stillReady := v.status == "" && !v.renew && meta.IsStatusConditionTrue(st.Conditions, fleetv1alpha1.ConditionPaneReady)
	if v.status == metav1.ConditionTrue || stillReady {
		return v
	}
	observed := verdict(metav1.ConditionTrue, fleetv1alpha1.ReasonReady, "pane "+st.PaneID+" in workspace "+st.WorkspaceID)
	observed.renew = v.renew
	return observed
}

// podScheduledCondition says whether a pod member's Pod runs on a node.
func podScheduledCondition(st *fleetv1alpha1.MemberStatus, f memberFacts) conditionVerdict {
	switch {
	case f.suspended():
		return verdict(metav1.ConditionFalse, f.suspend.suspended, "the member is suspended: it has no pod")
	case f.podScheduled, f.pod != nil && f.pod.unschedulable == "" && st.NodeName != "":
		return verdict(metav1.ConditionTrue, fleetv1alpha1.ReasonPodScheduled, "pod "+st.PodName+" runs on node "+st.NodeName)
	case f.pod != nil && f.pod.unschedulable != "":
		return verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonUnschedulable, f.pod.unschedulable)
	}
	return conditionVerdict{}
}

// isolatedCondition says whether other members can act as this one.
func isolatedCondition(f memberFacts) conditionVerdict {
	switch i := f.isolation; {
	case i == nil:
		return conditionVerdict{}
	case i.shared:
		return verdict(metav1.ConditionFalse, i.reason, i.message)
	default:
		return verdict(metav1.ConditionTrue, i.reason, i.message)
	}
}

// agentHooksCondition says whether a hooked agent's hooks report its
// status, once its pane is seen alive.
func agentHooksCondition(st *fleetv1alpha1.MemberStatus, f memberFacts) conditionVerdict {
	if f.observed == nil || !agents.Hooked(st.AgentKind) {
		return conditionVerdict{}
	}
	switch a := f.observed.Agent; {
	case a != nil && a.AgentSession != nil && a.AgentSession.Source != agents.ReportSource:
		return verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonOtherStatusSource,
			fmt.Sprintf("herdr's status for this pane belongs to %s (session %s) and drops fleetd's reports; the status shown is that source's", a.AgentSession.Source, a.AgentSession.Value))
	case f.hookRecord != nil:
		return verdict(metav1.ConditionTrue, fleetv1alpha1.ReasonHooksReporting,
			fmt.Sprintf("the agent's hooks report its status to herdr as %s; last: %s", agents.ReportSource, f.hookRecord.Event))
	default:
		return verdict(metav1.ConditionUnknown, fleetv1alpha1.ReasonAwaitingHooks, "no hook of the agent has run yet")
	}
}

// agentReadyCondition says whether the agent can take work: what the pane
// seen alive shows, else a just-started agent, else why no agent runs.
func agentReadyCondition(st *fleetv1alpha1.MemberStatus, f memberFacts) conditionVerdict {
	var v conditionVerdict
	switch {
	case f.suspended():
		return verdict(metav1.ConditionFalse, f.suspend.suspended, "the member is suspended: its agent is stopped, its session kept")
	case f.observed != nil:
		switch judgeAgent(f.observed.Agent, st.AgentStatus) {
		case agentReady:
			if f.settling > 0 {
				v = verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonAgentStarting, "the agent is up, and connecting to its MCP servers")
				break
			}
			v = verdict(metav1.ConditionTrue, fleetv1alpha1.ReasonReady, fmt.Sprintf("the agent is %s", st.AgentStatus))
		case agentBlockedAtStart:
			v = verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonBlockedAtStart,
				"the agent shows a dialog before it was ever ready, and waits for someone to answer it: "+cmp.Or(st.AgentMessage, "(no text)"))
		default:
			v = verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonAgentStarting, agentStartingMessage)
		}
	case f.started != nil:
		v = verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonAgentStarting, agentStartingMessage)
	case f.recreated:
	case f.waiting != nil:
		v = verdict(metav1.ConditionFalse, cmp.Or(f.waiting.reason, fleetv1alpha1.ReasonPaneLost), f.waiting.why)
	case f.podForbidden != "":
		v = verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonPodForbidden, "no Pod is made for a Member that asks for more than a Member may")
	case f.claimTaken != "":
		v = verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonWorkspaceClaimTaken, "no Pod is made with another Member's workspace claim")
	case f.boundary != "":
		v = verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonSubscriptionBoundary, "no agent is started across the subscription boundary")
	}
	v.renew = f.recreated
	return v
}

// herdrReachableCondition says whether herdr answered the pass.
func herdrReachableCondition(f memberFacts) conditionVerdict {
	switch h := f.herdr; {
	case h == nil:
		return conditionVerdict{}
	case h.reachable:
		return verdict(metav1.ConditionTrue, fleetv1alpha1.ReasonHerdrReachable, "herdr answers at "+h.detail)
	default:
		return verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonHerdrUnreachable, h.detail)
	}
}

// rollUp sets the Ready condition and the phase from the specific
// conditions, or to Terminating for a Member being deleted.
func rollUp(st *fleetv1alpha1.MemberStatus, generation int64, deleting bool, now metav1.Time) {
	pane := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionPaneReady)
	agent := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionAgentReady)
	herdrOK := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionHerdrReachable)
	ready := metav1.Condition{Type: fleetv1alpha1.ConditionReady, ObservedGeneration: generation, LastTransitionTime: now}
	switch {
	case deleting:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, fleetv1alpha1.ReasonDeleting, "the member is being deleted"
		st.Phase = fleetv1alpha1.MemberTerminating
	case st.SuspendedAt != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, fleetv1alpha1.ReasonIdle, "the member is suspended"
		if c := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionSuspended); c != nil && c.Status == metav1.ConditionTrue {
			ready.Reason, ready.Message = c.Reason, c.Message
		}
		st.Phase = fleetv1alpha1.MemberSuspended
	case herdrOK != nil && herdrOK.Status == metav1.ConditionFalse:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, herdrOK.Reason, herdrOK.Message
		if st.PaneID == "" {
			st.Phase = fleetv1alpha1.MemberPending
		} else {
			st.Phase = fleetv1alpha1.MemberRestarting
		}
	case pane == nil || pane.Status != metav1.ConditionTrue:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, fleetv1alpha1.ReasonPaneLost, "no pane"
		if pane != nil {
			ready.Reason, ready.Message = pane.Reason, pane.Message
		}
		switch {
		case pane != nil && pane.Reason == fleetv1alpha1.ReasonSubscriptionBoundary,
			pane != nil && pane.Reason == fleetv1alpha1.ReasonPodForbidden,
			pane != nil && pane.Reason == fleetv1alpha1.ReasonAgentStartFailed:
			st.Phase = fleetv1alpha1.MemberFailed
		case st.Restarts > 0:
			st.Phase = fleetv1alpha1.MemberRestarting
		default:
			st.Phase = fleetv1alpha1.MemberPending
		}
	case agent == nil || agent.Status != metav1.ConditionTrue:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, fleetv1alpha1.ReasonAgentStarting, "the agent has not reported yet"
		if agent != nil {
			ready.Reason, ready.Message = agent.Reason, agent.Message
		}
		st.Phase = fleetv1alpha1.MemberStarting
	default:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, fleetv1alpha1.ReasonReady, "the agent runs in pane "+st.PaneID
		st.Phase = fleetv1alpha1.MemberReady
	}
	meta.SetStatusCondition(&st.Conditions, ready)
	st.ObservedGeneration = generation
}
