package controllers

import (
	"cmp"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/panehost"
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

// agentReadiness is how far a started agent is from taking work.
type agentReadiness int

const (
	// agentStarting: started, and it has not reported yet.
	agentStarting agentReadiness = iota
	// agentReady: it can take work.
	agentReady
	// agentBlockedAtStart: it shows a dialog before it was ever ready, and
	// waits for someone to answer it.
	agentBlockedAtStart
)

// judgeAgent says how far the agent herdr reports in a pane is from taking
// work; status is its status as the Member shows it.
func judgeAgent(a *herdr.AgentInfo, status fleetv1alpha1.AgentStatus) agentReadiness {
	switch {
	case agentIsReady(a):
		return agentReady
	case a != nil && a.LaunchPending && status == fleetv1alpha1.AgentBlocked:
		return agentBlockedAtStart
	}
	return agentStarting
}

// agentIsReady says whether a started agent can take work: it is
// interactive and reports a status, not just launched.
func agentIsReady(a *herdr.AgentInfo) bool {
	if a == nil || a.Agent == nil || a.LaunchPending {
		return false
	}
	return a.InteractiveReady || agentStatus(a.AgentStatus) != fleetv1alpha1.AgentUnknown
}

// workingMirrorDelay is how long an agent works before its Member's status
// says so. A turn that ends sooner is written once, when it ends: its
// workingSeq records the turn all the same, which is what the injector's
// pickup and turn-end rules read, and a message is not typed meanwhile,
// since the one before it was not seen picked up. It spares a busy fleet
// two status writes per short turn; blocked is mirrored at once, since a
// dialog must stop the queue.
const workingMirrorDelay = 500 * time.Millisecond

// turnStart is when this process first saw an agent working in one turn:
// its terminal, and the seq it went working at.
type turnStart struct {
	terminalID string
	seq        uint64
	at         time.Time
}

// holdWorking says how much longer st is to stay as it is rather than show
// a, an agent seen working in the turn that began at start; zero mirrors a
// now. Only a turn's start is held back: working seen while st shows the
// agent waiting for input, in the same terminal.
func holdWorking(st *fleetv1alpha1.MemberStatus, a *herdr.AgentInfo, start, now time.Time) time.Duration {
	if a == nil || agentStatus(a.AgentStatus) != fleetv1alpha1.AgentWorking ||
		st.AgentStatus != fleetv1alpha1.AgentIdle && st.AgentStatus != fleetv1alpha1.AgentDone ||
		a.TerminalID != "" && st.TerminalID != "" && a.TerminalID != st.TerminalID {
		return 0
	}
	return max(0, start.Add(workingMirrorDelay).Sub(now))
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

// memberFacts is what one reconcile pass found out about a Member. The
// phases record it; setConditions alone turns it into conditions. A field
// left zero is something the pass did not find out (it returned before,
// or it was not so).
type memberFacts struct {
	// unresolved is a Profile or Secret the spec needs that does not exist.
	unresolved *missingError
	// boundary is why starting the agent would cross the subscription
	// boundary.
	boundary string
	// podForbidden is what the Member's own pod asks for beyond what a
	// Member may; fleetd makes it no Pod.
	podForbidden string
	// claimTaken is why the Member's workspace claim is another Member
	// incarnation's; fleetd makes it no Pod.
	claimTaken string
	// adopted is the pane an earlier pass created and this one took over.
	adopted string
	// waiting is a lost pane waiting out the restart backoff.
	waiting *paneWait
	// recreated says the pass closed a lost pane to start another.
	recreated bool
	// startRefused is herdr's refusal to start the agent in a new pane.
	startRefused string
	// started is the new pane the pass started the agent in.
	started *startedPane
	// observed is what herdr says of a pane judged alive.
	observed *PaneObservation
	// hookRecord is the last record of the agent's hooks; nil when no hook
	// ran yet (or its record could not be read).
	hookRecord *agents.HookStatus
	// herdr is whether herdr answered the pass; nil when the pass did not
	// get that far, or failed on the way for another reason.
	herdr *herdrReach
	// deleting says the Member is being deleted.
	deleting bool
	// pod is a pod member's Pod that is not up yet; nil when it is up, or
	// the member runs on the shared pane server.
	pod *podStart
	// podScheduled says a pod member's Pod runs on a node.
	podScheduled bool
	// isolation is whether other members can act as this one; nil when
	// the pass did not find out.
	isolation *isolation
	// suspend is what the pass found out about suspending the member; nil
	// when it did not look.
	suspend *suspendFact
}

// suspended says the pass found the member suspended.
func (f memberFacts) suspended() bool { return f.suspend != nil && f.suspend.suspended != "" }

// isolation is whether the Member is kept apart from the others.
type isolation struct {
	shared  bool
	reason  string
	message string
}

// isolationOnShared is a shared member's isolation on a pane server that
// does what info says.
func isolationOnShared(info panehost.HostInfo) *isolation {
	if info.Users {
		return &isolation{reason: fleetv1alpha1.ReasonOwnUser, message: "the member's processes run as a Unix user of their own on the shared pane server"}
	}
	return &isolation{shared: true, reason: fleetv1alpha1.ReasonSharedUser, message: "the members on this pane server share one Unix user: one can read another's token, screen and files and act as it. " +
		"Run fleetd's pane server as root (or with CAP_SETUID and CAP_SETGID) to give each member a user of its own, or run members in pods (runtime: Pod)"}
}

// paneWait is a lost pane (or Pod) that is recreated once the restart
// backoff ends.
type paneWait struct {
	// why the pane was judged lost.
	why string
	// left is how long the backoff still holds.
	left time.Duration
	// reason is AgentReady's reason meanwhile: PaneLost, or PodLost.
	reason string
}

// startedPane is where an agent was started.
type startedPane struct{ paneID, workspaceID string }

// herdrReach is whether herdr answered: where it answers, or why it did not.
type herdrReach struct {
	reachable bool
	detail    string
}

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
