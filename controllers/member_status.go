package controllers

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
)

// Restart backoff: the first recreation is immediate, then it doubles from
// restartBackoffBase up to restartBackoffMax.
const (
	restartBackoffBase = time.Second
	restartBackoffMax  = 5 * time.Minute
	// agentStartTimeout is how long a started agent may stay silent before its
	// pane is judged lost and recreated.
	agentStartTimeout = 2 * time.Minute
	// cleanupTimeout bounds how long deletion waits for herdr.
	cleanupTimeout = 30 * time.Second
	// launchPoll is how often a launching agent is looked at: herdr sends
	// no event when a launch becomes ready.
	launchPoll = 500 * time.Millisecond
)

// restartDelay is how long to wait after the restart-th recreation before
// the next.
func restartDelay(restarts int32) time.Duration {
	if restarts <= 0 {
		return 0
	}
	d := restartBackoffBase
	for i := int32(1); i < restarts; i++ {
		d *= 2
		if d >= restartBackoffMax {
			return restartBackoffMax
		}
	}
	return d
}

// PaneObservation is what herdr says about a Member's pane.
type PaneObservation struct {
	// Exists is false when herdr knows no such pane.
	Exists bool
	// Agent is the pane's agent, nil for a plain shell.
	Agent *herdr.AgentInfo
}

// paneVerdict is what to do about a Member's pane.
type paneVerdict int

const (
	// paneKeep: the pane is fine (ready or still starting).
	paneKeep paneVerdict = iota
	// paneLost: the pane or its agent is gone; recreate it.
	paneLost
)

// judgePane decides whether a pane is alive. A pane whose agent went away
// after it was ready, or that never got one within agentStartTimeout, is lost.
// herdr reuses pane ids after a restart, so a pane id that now shows another
// terminal than the one recorded is lost too.
func judgePane(obs PaneObservation, terminalID string, wasReady bool, startedAt time.Time, now time.Time) (paneVerdict, string) {
	if !obs.Exists {
		return paneLost, "the pane was closed or its process exited"
	}
	if obs.Agent != nil && terminalID != "" && obs.Agent.TerminalID != "" && obs.Agent.TerminalID != terminalID {
		return paneLost, "the pane id now names another terminal (herdr restarted)"
	}
	if obs.Agent != nil && obs.Agent.Agent != nil {
		return paneKeep, ""
	}

	if wasReady {
		return paneLost, "the agent exited and left a bare shell"
	}
	if !startedAt.IsZero() && now.Sub(startedAt) > agentStartTimeout {
		return paneLost, "the agent did not report within " + agentStartTimeout.String()
	}
	return paneKeep, ""
}

// agentStatus maps herdr's status onto the API's.
func agentStatus(s herdr.AgentStatus) fleetv1alpha1.AgentStatus {
	switch fleetv1alpha1.AgentStatus(s) {
	case fleetv1alpha1.AgentIdle, fleetv1alpha1.AgentWorking, fleetv1alpha1.AgentBlocked, fleetv1alpha1.AgentDone:
		return fleetv1alpha1.AgentStatus(s)
	}
	return fleetv1alpha1.AgentUnknown
}

// agentIsReady says whether a started agent can take work: it is
// interactive and reports a status, not just launched.
func agentIsReady(a *herdr.AgentInfo) bool {
	if a == nil || a.Agent == nil || a.LaunchPending {
		return false
	}
	return a.InteractiveReady || agentStatus(a.AgentStatus) != fleetv1alpha1.AgentUnknown
}

// observeAgent copies an agent's live state into status. sawWorking says
// whether herdr reported the agent working or blocked since the last look:
// a turn that began and ended between two looks (or before herdr's event
// about it arrived) still moves workingSeq, to the last seq before the one
// seen now, the latest the working status can have had.
func observeAgent(st *fleetv1alpha1.MemberStatus, a *herdr.AgentInfo, sawWorking bool, now metav1.Time) {
	status := fleetv1alpha1.AgentUnknown
	if a != nil {
		status = agentStatus(a.AgentStatus)
		seq := int64(a.StateChangeSeq)
		switch {
		case status == fleetv1alpha1.AgentWorking || status == fleetv1alpha1.AgentBlocked:
			st.WorkingSeq = seq
		case sawWorking && seq-1 > st.WorkingSeq:
			st.WorkingSeq = seq - 1
		}
		st.StateChangeSeq = seq
		if a.AgentSession != nil && a.AgentSession.Value != "" {
			st.AgentSessionID = a.AgentSession.Value
		}
		if a.TerminalID != "" {
			st.TerminalID = a.TerminalID
		}
	}
	if st.AgentStatus != status || st.AgentStatusSince == nil {
		st.AgentStatus = status
		st.AgentStatusSince = &now
	}
}

// rollUp sets the Ready condition and the phase from the specific conditions.
func rollUp(st *fleetv1alpha1.MemberStatus, generation int64, deleting bool) {
	pane := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionPaneReady)
	agent := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionAgentReady)
	herdrOK := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionHerdrReachable)
	ready := metav1.Condition{Type: fleetv1alpha1.ConditionReady, ObservedGeneration: generation}
	switch {
	case deleting:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, fleetv1alpha1.ReasonDeleting, "the member is being deleted"
		st.Phase = fleetv1alpha1.MemberTerminating
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
