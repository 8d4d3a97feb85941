package controllers

import (
	"time"

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
	// settling is how long a hooked agent this process just started has
	// still to run before it takes work (agentSettle).
	settling time.Duration
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
