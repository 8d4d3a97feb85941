package controllers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
)

func TestRestartDelay(t *testing.T) {
	cases := map[string]struct {
		restarts int32
		want     time.Duration
	}{
		"never restarted":  {0, 0},
		"first restart":    {1, time.Second},
		"second doubles":   {2, 2 * time.Second},
		"fifth":            {5, 16 * time.Second},
		"capped":           {12, restartBackoffMax},
		"far past the cap": {1000, restartBackoffMax},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := restartDelay(tc.restarts); got != tc.want {
				t.Errorf("restartDelay(%d) = %s, want %s", tc.restarts, got, tc.want)
			}
		})
	}
}

func TestJudgePane(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	agent := &herdr.AgentInfo{TerminalID: "term_a", Agent: ptr.To("scripted"), AgentStatus: herdr.AgentStatusIdle}
	cases := map[string]struct {
		obs       PaneObservation
		terminal  string
		wasReady  bool
		startedAt time.Time
		want      paneVerdict
	}{
		"pane gone":                        {obs: PaneObservation{}, want: paneLost},
		"agent running":                    {obs: PaneObservation{Exists: true, Agent: agent}, terminal: "term_a", wasReady: true, want: paneKeep},
		"pane id reused by a new terminal": {obs: PaneObservation{Exists: true, Agent: agent}, terminal: "term_old", wasReady: true, want: paneLost},
		"bare shell after the agent ran":   {obs: PaneObservation{Exists: true}, wasReady: true, want: paneLost},
		"still starting":                   {obs: PaneObservation{Exists: true}, startedAt: now.Add(-10 * time.Second), want: paneKeep},
		"never reported":                   {obs: PaneObservation{Exists: true}, startedAt: now.Add(-agentStartTimeout - time.Second), want: paneLost},
		"unknown terminal is no evidence":  {obs: PaneObservation{Exists: true, Agent: agent}, terminal: "", want: paneKeep},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, why := judgePane(tc.obs, tc.terminal, tc.wasReady, tc.startedAt, now)
			if got != tc.want {
				t.Errorf("judgePane = %v (%s), want %v", got, why, tc.want)
			}
			if got == paneLost && why == "" {
				t.Errorf("a lost pane needs a reason")
			}
		})
	}
}

func TestRollUp(t *testing.T) {
	cond := func(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason}
	}
	cases := map[string]struct {
		status    fleetv1alpha1.MemberStatus
		deleting  bool
		wantPhase fleetv1alpha1.MemberPhase
		wantReady metav1.ConditionStatus
		reason    string
	}{
		"nothing yet": {wantPhase: fleetv1alpha1.MemberPending, wantReady: metav1.ConditionFalse, reason: fleetv1alpha1.ReasonPaneLost},
		"starting": {
			status:    fleetv1alpha1.MemberStatus{PaneID: "w1:p1", Conditions: []metav1.Condition{cond(fleetv1alpha1.ConditionPaneReady, metav1.ConditionTrue, "PaneCreated"), cond(fleetv1alpha1.ConditionAgentReady, metav1.ConditionFalse, fleetv1alpha1.ReasonAgentStarting)}},
			wantPhase: fleetv1alpha1.MemberStarting, wantReady: metav1.ConditionFalse, reason: fleetv1alpha1.ReasonAgentStarting,
		},
		"ready": {
			status:    fleetv1alpha1.MemberStatus{PaneID: "w1:p1", Conditions: []metav1.Condition{cond(fleetv1alpha1.ConditionHerdrReachable, metav1.ConditionTrue, "x"), cond(fleetv1alpha1.ConditionPaneReady, metav1.ConditionTrue, "PaneCreated"), cond(fleetv1alpha1.ConditionAgentReady, metav1.ConditionTrue, "Ready")}},
			wantPhase: fleetv1alpha1.MemberReady, wantReady: metav1.ConditionTrue, reason: fleetv1alpha1.ReasonReady,
		},
		"herdr down with a pane": {
			status:    fleetv1alpha1.MemberStatus{PaneID: "w1:p1", Conditions: []metav1.Condition{cond(fleetv1alpha1.ConditionHerdrReachable, metav1.ConditionFalse, fleetv1alpha1.ReasonHerdrUnreachable), cond(fleetv1alpha1.ConditionPaneReady, metav1.ConditionTrue, "PaneCreated")}},
			wantPhase: fleetv1alpha1.MemberRestarting, wantReady: metav1.ConditionFalse, reason: fleetv1alpha1.ReasonHerdrUnreachable,
		},
		"subscription boundary": {
			status:    fleetv1alpha1.MemberStatus{Conditions: []metav1.Condition{cond(fleetv1alpha1.ConditionPaneReady, metav1.ConditionFalse, fleetv1alpha1.ReasonSubscriptionBoundary)}},
			wantPhase: fleetv1alpha1.MemberFailed, wantReady: metav1.ConditionFalse, reason: fleetv1alpha1.ReasonSubscriptionBoundary,
		},
		"backing off after restarts": {
			status:    fleetv1alpha1.MemberStatus{Restarts: 2, Conditions: []metav1.Condition{cond(fleetv1alpha1.ConditionPaneReady, metav1.ConditionFalse, fleetv1alpha1.ReasonBackoff)}},
			wantPhase: fleetv1alpha1.MemberRestarting, wantReady: metav1.ConditionFalse, reason: fleetv1alpha1.ReasonBackoff,
		},
		"deleting": {deleting: true, wantPhase: fleetv1alpha1.MemberTerminating, wantReady: metav1.ConditionFalse, reason: fleetv1alpha1.ReasonDeleting},
		"herdr down before any pane": {
			status:    fleetv1alpha1.MemberStatus{Conditions: []metav1.Condition{cond(fleetv1alpha1.ConditionHerdrReachable, metav1.ConditionFalse, fleetv1alpha1.ReasonHerdrUnreachable)}},
			wantPhase: fleetv1alpha1.MemberPending, wantReady: metav1.ConditionFalse, reason: fleetv1alpha1.ReasonHerdrUnreachable,
		},
		"a pod asking beyond what a Member may": {
			status:    fleetv1alpha1.MemberStatus{Conditions: []metav1.Condition{cond(fleetv1alpha1.ConditionPaneReady, metav1.ConditionFalse, fleetv1alpha1.ReasonPodForbidden)}},
			wantPhase: fleetv1alpha1.MemberFailed, wantReady: metav1.ConditionFalse, reason: fleetv1alpha1.ReasonPodForbidden,
		},
		"a refused start": {
			status:    fleetv1alpha1.MemberStatus{Restarts: 1, Conditions: []metav1.Condition{cond(fleetv1alpha1.ConditionPaneReady, metav1.ConditionFalse, fleetv1alpha1.ReasonAgentStartFailed)}},
			wantPhase: fleetv1alpha1.MemberFailed, wantReady: metav1.ConditionFalse, reason: fleetv1alpha1.ReasonAgentStartFailed,
		},
		"a first pod still starting": {
			status:    fleetv1alpha1.MemberStatus{Conditions: []metav1.Condition{cond(fleetv1alpha1.ConditionPaneReady, metav1.ConditionFalse, fleetv1alpha1.ReasonPodStarting)}},
			wantPhase: fleetv1alpha1.MemberPending, wantReady: metav1.ConditionFalse, reason: fleetv1alpha1.ReasonPodStarting,
		},
		"a pane whose agent no pass spoke of": {
			status:    fleetv1alpha1.MemberStatus{PaneID: "w1:p1", Conditions: []metav1.Condition{cond(fleetv1alpha1.ConditionPaneReady, metav1.ConditionTrue, fleetv1alpha1.ReasonPaneAdopted)}},
			wantPhase: fleetv1alpha1.MemberStarting, wantReady: metav1.ConditionFalse, reason: fleetv1alpha1.ReasonAgentStarting,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			st := tc.status
			rollUp(&st, 3, tc.deleting, metav1.Now())
			var ready *metav1.Condition
			for i := range st.Conditions {
				if st.Conditions[i].Type == fleetv1alpha1.ConditionReady {
					ready = &st.Conditions[i]
				}
			}
			got := []any{st.Phase, ready.Status, ready.Reason, st.ObservedGeneration}
			want := []any{tc.wantPhase, tc.wantReady, tc.reason, int64(3)}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("rollUp (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSetConditions: what a pass found out, and the conditions it leaves the
// Member with. The conditions are a table of "when is a Member Ready".
func TestSetConditions(t *testing.T) {
	earlier := metav1.NewTime(time.Date(2026, 1, 1, 11, 0, 0, 0, time.UTC))
	now := metav1.NewTime(earlier.Add(time.Hour))
	type c = metav1.Condition
	cond := func(typ string, status metav1.ConditionStatus, reason, msg string) c {
		return c{Type: typ, Status: status, Reason: reason, Message: msg}
	}
	const (
		paneReady  = fleetv1alpha1.ConditionPaneReady
		agentReady = fleetv1alpha1.ConditionAgentReady
		hooks      = fleetv1alpha1.ConditionAgentHooks
		reachable  = fleetv1alpha1.ConditionHerdrReachable
		ready      = fleetv1alpha1.ConditionReady
		yes        = metav1.ConditionTrue
		no         = metav1.ConditionFalse
		unknown    = metav1.ConditionUnknown
	)
	idle := &herdr.AgentInfo{Agent: ptr.To("claude"), AgentStatus: herdr.AgentStatusIdle}
	launching := &herdr.AgentInfo{Agent: ptr.To("claude"), LaunchPending: true, AgentStatus: herdr.AgentStatusBlocked}
	theirs := &herdr.AgentInfo{Agent: ptr.To("claude"), AgentStatus: herdr.AgentStatusWorking, AgentSession: &herdr.AgentSessionInfo{Source: "herdr:claude", Value: "s1"}}
	answers := &herdrReach{reachable: true, detail: "/run/herdr.sock"}
	withPane := func(st fleetv1alpha1.MemberStatus) fleetv1alpha1.MemberStatus {
		st.PaneID, st.WorkspaceID = "w1:p1", "w1"
		return st
	}
	cases := map[string]struct {
		status    fleetv1alpha1.MemberStatus
		facts     memberFacts
		want      []c
		wantPhase fleetv1alpha1.MemberPhase
	}{
		"its profile does not exist": {
			facts: memberFacts{unresolved: &missingError{fleetv1alpha1.ReasonProfileNotFound, `profile "p" does not exist in namespace ns`}},
			want: []c{
				cond(paneReady, no, fleetv1alpha1.ReasonProfileNotFound, `profile "p" does not exist in namespace ns`),
				cond(ready, no, fleetv1alpha1.ReasonProfileNotFound, `profile "p" does not exist in namespace ns`),
			},
			wantPhase: fleetv1alpha1.MemberPending,
		},
		"across the subscription boundary": {
			facts: memberFacts{boundary: "the command line sets ANTHROPIC_BASE_URL"},
			want: []c{
				cond(paneReady, no, fleetv1alpha1.ReasonSubscriptionBoundary, "the command line sets ANTHROPIC_BASE_URL"),
				cond(agentReady, no, fleetv1alpha1.ReasonSubscriptionBoundary, "no agent is started across the subscription boundary"),
				cond(ready, no, fleetv1alpha1.ReasonSubscriptionBoundary, "the command line sets ANTHROPIC_BASE_URL"),
			},
			wantPhase: fleetv1alpha1.MemberFailed,
		},
		"its own pod asks for more than a Member may": {
			facts: memberFacts{podForbidden: "spec.pod.image: Forbidden: only a Profile may name another image"},
			want: []c{
				cond(paneReady, no, fleetv1alpha1.ReasonPodForbidden, "spec.pod.image: Forbidden: only a Profile may name another image"),
				cond(agentReady, no, fleetv1alpha1.ReasonPodForbidden, "no Pod is made for a Member that asks for more than a Member may"),
				cond(ready, no, fleetv1alpha1.ReasonPodForbidden, "spec.pod.image: Forbidden: only a Profile may name another image"),
			},
			wantPhase: fleetv1alpha1.MemberFailed,
		},
		"the agent was started in a new pane": {
			status: withPane(fleetv1alpha1.MemberStatus{}),
			facts:  memberFacts{started: &startedPane{"w1:p1", "w1"}, herdr: answers},
			want: []c{
				cond(paneReady, yes, fleetv1alpha1.ReasonPaneCreated, "pane w1:p1 in workspace w1"),
				cond(agentReady, no, fleetv1alpha1.ReasonAgentStarting, "the agent was started and has not reported yet"),
				cond(reachable, yes, fleetv1alpha1.ReasonHerdrReachable, "herdr answers at /run/herdr.sock"),
				cond(ready, no, fleetv1alpha1.ReasonAgentStarting, "the agent was started and has not reported yet"),
			},
			wantPhase: fleetv1alpha1.MemberStarting,
		},
		"herdr refused to start the agent": {
			facts: memberFacts{startRefused: "agent_name_taken: the name is taken", herdr: answers},
			want: []c{
				cond(paneReady, no, fleetv1alpha1.ReasonAgentStartFailed, "agent_name_taken: the name is taken"),
				cond(reachable, yes, fleetv1alpha1.ReasonHerdrReachable, "herdr answers at /run/herdr.sock"),
				cond(ready, no, fleetv1alpha1.ReasonAgentStartFailed, "agent_name_taken: the name is taken"),
			},
			wantPhase: fleetv1alpha1.MemberFailed,
		},
		"an adopted pane whose agent is idle": {
			status: withPane(fleetv1alpha1.MemberStatus{AgentStatus: fleetv1alpha1.AgentIdle}),
			facts:  memberFacts{adopted: "w1:p1", observed: &PaneObservation{Exists: true, Agent: idle}, herdr: answers},
			want: []c{
				cond(paneReady, yes, fleetv1alpha1.ReasonPaneAdopted, "adopted pane w1:p1"),
				cond(agentReady, yes, fleetv1alpha1.ReasonReady, "the agent is idle"),
				cond(reachable, yes, fleetv1alpha1.ReasonHerdrReachable, "herdr answers at /run/herdr.sock"),
				cond(ready, yes, fleetv1alpha1.ReasonReady, "the agent runs in pane w1:p1"),
			},
			wantPhase: fleetv1alpha1.MemberReady,
		},
		"a pane that was ready keeps what made it so": {
			status: withPane(fleetv1alpha1.MemberStatus{AgentStatus: fleetv1alpha1.AgentIdle, Conditions: []c{
				cond(paneReady, yes, fleetv1alpha1.ReasonPaneCreated, "pane w1:p1 in workspace w1"),
			}}),
			facts: memberFacts{observed: &PaneObservation{Exists: true, Agent: idle}},
			want: []c{
				cond(paneReady, yes, fleetv1alpha1.ReasonPaneCreated, "pane w1:p1 in workspace w1"),
				cond(agentReady, yes, fleetv1alpha1.ReasonReady, "the agent is idle"),
				cond(ready, yes, fleetv1alpha1.ReasonReady, "the agent runs in pane w1:p1"),
			},
			wantPhase: fleetv1alpha1.MemberReady,
		},
		"a pane seen alive again is ready": {
			status: withPane(fleetv1alpha1.MemberStatus{Restarts: 1, Conditions: []c{
				cond(paneReady, no, fleetv1alpha1.ReasonBackoff, "the agent exited; recreating in 1s"),
			}}),
			facts: memberFacts{observed: &PaneObservation{Exists: true}},
			want: []c{
				cond(paneReady, yes, fleetv1alpha1.ReasonReady, "pane w1:p1 in workspace w1"),
				cond(agentReady, no, fleetv1alpha1.ReasonAgentStarting, "the agent was started and has not reported yet"),
				cond(ready, no, fleetv1alpha1.ReasonAgentStarting, "the agent was started and has not reported yet"),
			},
			wantPhase: fleetv1alpha1.MemberStarting,
		},
		"a dialog before the agent was ever ready": {
			status: withPane(fleetv1alpha1.MemberStatus{AgentStatus: fleetv1alpha1.AgentBlocked, AgentMessage: "Do you trust this folder?"}),
			facts:  memberFacts{observed: &PaneObservation{Exists: true, Agent: launching}},
			want: []c{
				cond(paneReady, yes, fleetv1alpha1.ReasonReady, "pane w1:p1 in workspace w1"),
				cond(agentReady, no, fleetv1alpha1.ReasonBlockedAtStart, "the agent shows a dialog before it was ever ready, and waits for someone to answer it: Do you trust this folder?"),
				cond(ready, no, fleetv1alpha1.ReasonBlockedAtStart, "the agent shows a dialog before it was ever ready, and waits for someone to answer it: Do you trust this folder?"),
			},
			wantPhase: fleetv1alpha1.MemberStarting,
		},
		"the hooks of a hooked agent report": {
			status: withPane(fleetv1alpha1.MemberStatus{AgentKind: fleetv1alpha1.AgentClaude, AgentStatus: fleetv1alpha1.AgentIdle}),
			facts:  memberFacts{observed: &PaneObservation{Exists: true, Agent: idle}, hookRecord: &agents.HookStatus{Event: "Stop"}},
			want: []c{
				cond(paneReady, yes, fleetv1alpha1.ReasonReady, "pane w1:p1 in workspace w1"),
				cond(hooks, yes, fleetv1alpha1.ReasonHooksReporting, "the agent's hooks report its status to herdr as fleetd; last: Stop"),
				cond(agentReady, yes, fleetv1alpha1.ReasonReady, "the agent is idle"),
				cond(ready, yes, fleetv1alpha1.ReasonReady, "the agent runs in pane w1:p1"),
			},
			wantPhase: fleetv1alpha1.MemberReady,
		},
		"no hook has run yet": {
			status: withPane(fleetv1alpha1.MemberStatus{AgentKind: fleetv1alpha1.AgentCodex, AgentStatus: fleetv1alpha1.AgentIdle}),
			facts:  memberFacts{observed: &PaneObservation{Exists: true, Agent: idle}},
			want: []c{
				cond(paneReady, yes, fleetv1alpha1.ReasonReady, "pane w1:p1 in workspace w1"),
				cond(hooks, unknown, fleetv1alpha1.ReasonAwaitingHooks, "no hook of the agent has run yet"),
				cond(agentReady, yes, fleetv1alpha1.ReasonReady, "the agent is idle"),
				cond(ready, yes, fleetv1alpha1.ReasonReady, "the agent runs in pane w1:p1"),
			},
			wantPhase: fleetv1alpha1.MemberReady,
		},
		"another source owns the pane's status": {
			status: withPane(fleetv1alpha1.MemberStatus{AgentKind: fleetv1alpha1.AgentClaude, AgentStatus: fleetv1alpha1.AgentWorking}),
			facts:  memberFacts{observed: &PaneObservation{Exists: true, Agent: theirs}, hookRecord: &agents.HookStatus{Event: "Stop"}},
			want: []c{
				cond(paneReady, yes, fleetv1alpha1.ReasonReady, "pane w1:p1 in workspace w1"),
				cond(hooks, no, fleetv1alpha1.ReasonOtherStatusSource, "herdr's status for this pane belongs to herdr:claude (session s1) and drops fleetd's reports; the status shown is that source's"),
				cond(agentReady, yes, fleetv1alpha1.ReasonReady, "the agent is working"),
				cond(ready, yes, fleetv1alpha1.ReasonReady, "the agent runs in pane w1:p1"),
			},
			wantPhase: fleetv1alpha1.MemberReady,
		},
		"a plain command has no hooks": {
			status: withPane(fleetv1alpha1.MemberStatus{AgentStatus: fleetv1alpha1.AgentIdle}),
			facts:  memberFacts{observed: &PaneObservation{Exists: true, Agent: idle}, hookRecord: &agents.HookStatus{Event: "Stop"}},
			want: []c{
				cond(paneReady, yes, fleetv1alpha1.ReasonReady, "pane w1:p1 in workspace w1"),
				cond(agentReady, yes, fleetv1alpha1.ReasonReady, "the agent is idle"),
				cond(ready, yes, fleetv1alpha1.ReasonReady, "the agent runs in pane w1:p1"),
			},
			wantPhase: fleetv1alpha1.MemberReady,
		},
		"a lost pane waits out the backoff": {
			status: withPane(fleetv1alpha1.MemberStatus{Restarts: 2, Conditions: []c{
				cond(paneReady, yes, fleetv1alpha1.ReasonReady, "pane w1:p1 in workspace w1"),
				cond(agentReady, yes, fleetv1alpha1.ReasonReady, "the agent is idle"),
			}}),
			facts: memberFacts{waiting: &paneWait{why: "the agent exited and left a bare shell", left: 3400 * time.Millisecond}, herdr: answers},
			want: []c{
				cond(paneReady, no, fleetv1alpha1.ReasonBackoff, "the agent exited and left a bare shell; recreating in 3s"),
				cond(agentReady, no, fleetv1alpha1.ReasonPaneLost, "the agent exited and left a bare shell"),
				cond(reachable, yes, fleetv1alpha1.ReasonHerdrReachable, "herdr answers at /run/herdr.sock"),
				cond(ready, no, fleetv1alpha1.ReasonBackoff, "the agent exited and left a bare shell; recreating in 3s"),
			},
			wantPhase: fleetv1alpha1.MemberRestarting,
		},
		"a recreated pane starts without the old one's conditions": {
			status: withPane(fleetv1alpha1.MemberStatus{Restarts: 1, Conditions: []c{
				cond(reachable, yes, fleetv1alpha1.ReasonHerdrReachable, "herdr answers at /run/herdr.sock"),
				cond(paneReady, yes, fleetv1alpha1.ReasonReady, "pane w1:p0 in workspace w0"),
				cond(agentReady, yes, fleetv1alpha1.ReasonReady, "the agent is idle"),
			}}),
			facts: memberFacts{recreated: true, started: &startedPane{"w1:p1", "w1"}, herdr: answers},
			want: []c{
				cond(reachable, yes, fleetv1alpha1.ReasonHerdrReachable, "herdr answers at /run/herdr.sock"),
				cond(paneReady, yes, fleetv1alpha1.ReasonPaneCreated, "pane w1:p1 in workspace w1"),
				cond(agentReady, no, fleetv1alpha1.ReasonAgentStarting, "the agent was started and has not reported yet"),
				cond(ready, no, fleetv1alpha1.ReasonAgentStarting, "the agent was started and has not reported yet"),
			},
			wantPhase: fleetv1alpha1.MemberStarting,
		},
		"herdr does not answer": {
			status: withPane(fleetv1alpha1.MemberStatus{Conditions: []c{
				cond(paneReady, yes, fleetv1alpha1.ReasonReady, "pane w1:p1 in workspace w1"),
				cond(agentReady, yes, fleetv1alpha1.ReasonReady, "the agent is idle"),
			}}),
			facts: memberFacts{herdr: &herdrReach{detail: "herdr is unavailable"}},
			want: []c{
				cond(paneReady, yes, fleetv1alpha1.ReasonReady, "pane w1:p1 in workspace w1"),
				cond(agentReady, yes, fleetv1alpha1.ReasonReady, "the agent is idle"),
				cond(reachable, no, fleetv1alpha1.ReasonHerdrUnreachable, "herdr is unavailable"),
				cond(ready, no, fleetv1alpha1.ReasonHerdrUnreachable, "herdr is unavailable"),
			},
			wantPhase: fleetv1alpha1.MemberRestarting,
		},
		"a pass that failed on the way changes nothing but the rollup": {
			status: withPane(fleetv1alpha1.MemberStatus{Conditions: []c{
				cond(paneReady, yes, fleetv1alpha1.ReasonReady, "pane w1:p1 in workspace w1"),
				cond(agentReady, yes, fleetv1alpha1.ReasonReady, "the agent is idle"),
			}}),
			want: []c{
				cond(paneReady, yes, fleetv1alpha1.ReasonReady, "pane w1:p1 in workspace w1"),
				cond(agentReady, yes, fleetv1alpha1.ReasonReady, "the agent is idle"),
				cond(ready, yes, fleetv1alpha1.ReasonReady, "the agent runs in pane w1:p1"),
			},
			wantPhase: fleetv1alpha1.MemberReady,
		},
		"being deleted": {
			status: withPane(fleetv1alpha1.MemberStatus{Conditions: []c{
				cond(paneReady, yes, fleetv1alpha1.ReasonReady, "pane w1:p1 in workspace w1"),
				cond(agentReady, yes, fleetv1alpha1.ReasonReady, "the agent is idle"),
			}}),
			facts: memberFacts{deleting: true},
			want: []c{
				cond(paneReady, yes, fleetv1alpha1.ReasonReady, "pane w1:p1 in workspace w1"),
				cond(agentReady, yes, fleetv1alpha1.ReasonReady, "the agent is idle"),
				cond(ready, no, fleetv1alpha1.ReasonDeleting, "the member is being deleted"),
			},
			wantPhase: fleetv1alpha1.MemberTerminating,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			st := *tc.status.DeepCopy()
			for i := range st.Conditions {
				st.Conditions[i].LastTransitionTime = earlier
			}
			setConditions(&st, 7, tc.facts, now)
			got := make([]c, 0, len(st.Conditions))
			for _, cd := range st.Conditions {
				got = append(got, cond(cd.Type, cd.Status, cd.Reason, cd.Message))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if st.Phase != tc.wantPhase {
				t.Errorf("phase %s, want %s", st.Phase, tc.wantPhase)
			}
			before := map[string]c{}
			for _, cd := range tc.status.Conditions {
				before[cd.Type] = cd
			}
			for _, cd := range st.Conditions {
				// A condition that changed status, or that a recreated
				// pane starts anew, moves to now; any other keeps its time.
				old, had := before[cd.Type]
				renewed := tc.facts.recreated && (cd.Type == paneReady || cd.Type == agentReady)
				wantTime := earlier
				if !had || old.Status != cd.Status || renewed {
					wantTime = now
				}
				if !cd.LastTransitionTime.Equal(&wantTime) {
					t.Errorf("%s moved at %v, want %v", cd.Type, cd.LastTransitionTime, wantTime)
				}
			}
		})
	}
}

func TestHoldWorking(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	agent := func(status herdr.AgentStatus, terminal string) *herdr.AgentInfo {
		return &herdr.AgentInfo{AgentStatus: status, TerminalID: terminal}
	}
	shows := func(status fleetv1alpha1.AgentStatus) *fleetv1alpha1.MemberStatus {
		return &fleetv1alpha1.MemberStatus{AgentStatus: status, TerminalID: "t1"}
	}
	cases := map[string]struct {
		st   *fleetv1alpha1.MemberStatus
		a    *herdr.AgentInfo
		now  time.Time
		want time.Duration
	}{
		"a turn just begun is held":          {shows(fleetv1alpha1.AgentIdle), agent(herdr.AgentStatusWorking, "t1"), start, workingMirrorDelay},
		"held for what is left of the delay": {shows(fleetv1alpha1.AgentDone), agent(herdr.AgentStatusWorking, "t1"), start.Add(200 * time.Millisecond), workingMirrorDelay - 200*time.Millisecond},
		"a turn that lasted is shown":        {shows(fleetv1alpha1.AgentIdle), agent(herdr.AgentStatusWorking, "t1"), start.Add(workingMirrorDelay), 0},
		"blocked is shown at once":           {shows(fleetv1alpha1.AgentIdle), agent(herdr.AgentStatusBlocked, "t1"), start, 0},
		"idle is shown at once":              {shows(fleetv1alpha1.AgentWorking), agent(herdr.AgentStatusIdle, "t1"), start, 0},
		"working after blocked is shown":     {shows(fleetv1alpha1.AgentBlocked), agent(herdr.AgentStatusWorking, "t1"), start, 0},
		"a starting agent's status is shown": {shows(fleetv1alpha1.AgentUnknown), agent(herdr.AgentStatusWorking, "t1"), start, 0},
		"another terminal is shown at once":  {shows(fleetv1alpha1.AgentIdle), agent(herdr.AgentStatusWorking, "t2"), start, 0},
		"no agent is shown at once":          {shows(fleetv1alpha1.AgentIdle), nil, start, 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := holdWorking(tc.st, tc.a, start, tc.now); got != tc.want {
				t.Errorf("holdWorking = %v, want %v", got, tc.want)
			}
		})
	}
}

// conditionCase is one row of a per-condition table: the status a pass
// starts from, its facts, and the verdict on one condition.
type conditionCase struct {
	status fleetv1alpha1.MemberStatus
	facts  memberFacts
	want   conditionVerdict
}

func runConditionCases(t *testing.T, compute func(*fleetv1alpha1.MemberStatus, memberFacts) conditionVerdict, cases map[string]conditionCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := compute(&tc.status, tc.facts)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(conditionVerdict{})); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPaneReadyCondition(t *testing.T) {
	yes, no := metav1.ConditionTrue, metav1.ConditionFalse
	wasReady := fleetv1alpha1.MemberStatus{PaneID: "w1:p1", WorkspaceID: "w1", Conditions: []metav1.Condition{
		{Type: fleetv1alpha1.ConditionPaneReady, Status: yes, Reason: fleetv1alpha1.ReasonPaneCreated, Message: "pane w1:p1 in workspace w1"},
	}}
	alive := &PaneObservation{Exists: true}
	runConditionCases(t, paneReadyCondition, map[string]conditionCase{
		"no fact keeps what it said": {},
		"something the spec needs is missing": {
			facts: memberFacts{unresolved: &missingError{fleetv1alpha1.ReasonSecretNotFound, "no secret"}},
			want:  verdict(no, fleetv1alpha1.ReasonSecretNotFound, "no secret"),
		},
		"the boundary outranks what is missing": {
			facts: memberFacts{unresolved: &missingError{fleetv1alpha1.ReasonSecretNotFound, "no secret"}, boundary: "ANTHROPIC_BASE_URL"},
			want:  verdict(no, fleetv1alpha1.ReasonSubscriptionBoundary, "ANTHROPIC_BASE_URL"),
		},
		"a workspace claim of another Member outranks the boundary": {
			facts: memberFacts{boundary: "ANTHROPIC_BASE_URL", claimTaken: "claim w1-workspace belongs to another w1"},
			want:  verdict(no, fleetv1alpha1.ReasonWorkspaceClaimTaken, "claim w1-workspace belongs to another w1"),
		},
		"a pod asking beyond what a Member may": {
			facts: memberFacts{claimTaken: "claim w1-workspace belongs to another w1", podForbidden: "spec.pod.hostNetwork: Forbidden"},
			want:  verdict(no, fleetv1alpha1.ReasonPodForbidden, "spec.pod.hostNetwork: Forbidden"),
		},
		"an adopted pane": {
			facts: memberFacts{adopted: "w1:p1"},
			want:  verdict(yes, fleetv1alpha1.ReasonPaneAdopted, "adopted pane w1:p1"),
		},
		"a backoff": {
			facts: memberFacts{waiting: &paneWait{why: "gone", left: 1500 * time.Millisecond}},
			want:  verdict(no, fleetv1alpha1.ReasonBackoff, "gone; recreating in 2s"),
		},
		"a recreation alone forgets the old pane": {
			status: wasReady,
			facts:  memberFacts{recreated: true},
			want:   conditionVerdict{renew: true},
		},
		"a recreation forgets a backoff of the same pass": {
			facts: memberFacts{waiting: &paneWait{why: "gone"}, recreated: true},
			want:  conditionVerdict{renew: true},
		},
		"a pod not scheduled": {
			facts: memberFacts{pod: &podStart{unschedulable: "0/3 nodes are available"}},
			want:  verdict(no, fleetv1alpha1.ReasonUnschedulable, "no node fits the member's pod: 0/3 nodes are available"),
		},
		"a pod starting": {
			status: fleetv1alpha1.MemberStatus{PodName: "w1-abc"},
			facts:  memberFacts{pod: &podStart{waiting: "ContainerCreating"}},
			want:   verdict(no, fleetv1alpha1.ReasonPodStarting, "pod w1-abc: ContainerCreating"),
		},
		"a refused start": {
			facts: memberFacts{recreated: true, startRefused: "agent_name_taken"},
			want:  conditionVerdict{status: no, reason: fleetv1alpha1.ReasonAgentStartFailed, message: "agent_name_taken", renew: true},
		},
		"a started agent outranks everything before it": {
			facts: memberFacts{recreated: true, waiting: &paneWait{why: "gone"}, started: &startedPane{"w1:p2", "w1"}},
			want:  conditionVerdict{status: yes, reason: fleetv1alpha1.ReasonPaneCreated, message: "pane w1:p2 in workspace w1", renew: true},
		},
		"a pane seen alive keeps what made it ready": {
			status: wasReady,
			facts:  memberFacts{observed: alive},
		},
		"a pane seen alive keeps the adoption of the same pass": {
			facts: memberFacts{adopted: "w1:p1", observed: alive},
			want:  verdict(yes, fleetv1alpha1.ReasonPaneAdopted, "adopted pane w1:p1"),
		},
		"a pane seen alive after a backoff is ready": {
			status: fleetv1alpha1.MemberStatus{PaneID: "w1:p1", WorkspaceID: "w1", Conditions: []metav1.Condition{
				{Type: fleetv1alpha1.ConditionPaneReady, Status: no, Reason: fleetv1alpha1.ReasonBackoff},
			}},
			facts: memberFacts{observed: alive},
			want:  verdict(yes, fleetv1alpha1.ReasonReady, "pane w1:p1 in workspace w1"),
		},
		"a pane seen alive overrides a pod still said to start": {
			status: fleetv1alpha1.MemberStatus{PaneID: "w1:p1", WorkspaceID: "w1", PodName: "w1-abc"},
			facts:  memberFacts{pod: &podStart{waiting: "ContainerCreating"}, observed: alive},
			want:   verdict(yes, fleetv1alpha1.ReasonReady, "pane w1:p1 in workspace w1"),
		},
		"a pane seen alive in a pass that recreated one starts afresh": {
			status: wasReady,
			facts:  memberFacts{recreated: true, observed: alive},
			want:   conditionVerdict{status: yes, reason: fleetv1alpha1.ReasonReady, message: "pane w1:p1 in workspace w1", renew: true},
		},
	})
}

func TestAgentReadyCondition(t *testing.T) {
	no := metav1.ConditionFalse
	idle := &herdr.AgentInfo{Agent: ptr.To("claude"), AgentStatus: herdr.AgentStatusIdle}
	launching := &herdr.AgentInfo{Agent: ptr.To("claude"), LaunchPending: true, AgentStatus: herdr.AgentStatusBlocked}
	runConditionCases(t, agentReadyCondition, map[string]conditionCase{
		"no fact keeps what it said": {},
		"across the boundary": {
			facts: memberFacts{boundary: "ANTHROPIC_BASE_URL"},
			want:  verdict(no, fleetv1alpha1.ReasonSubscriptionBoundary, "no agent is started across the subscription boundary"),
		},
		"something missing says nothing of the agent": {
			facts: memberFacts{unresolved: &missingError{fleetv1alpha1.ReasonSecretNotFound, "no secret"}},
		},
		"a workspace claim of another Member": {
			facts: memberFacts{boundary: "ANTHROPIC_BASE_URL", claimTaken: "claim w1-workspace belongs to another w1"},
			want:  verdict(no, fleetv1alpha1.ReasonWorkspaceClaimTaken, "no Pod is made with another Member's workspace claim"),
		},
		"a pod asking beyond what a Member may": {
			facts: memberFacts{claimTaken: "claim w1-workspace belongs to another w1", podForbidden: "spec.pod.hostNetwork: Forbidden"},
			want:  verdict(no, fleetv1alpha1.ReasonPodForbidden, "no Pod is made for a Member that asks for more than a Member may"),
		},
		"a lost pane": {
			facts: memberFacts{waiting: &paneWait{why: "gone"}},
			want:  verdict(no, fleetv1alpha1.ReasonPaneLost, "gone"),
		},
		"a lost Pod": {
			facts: memberFacts{waiting: &paneWait{why: "evicted", reason: fleetv1alpha1.ReasonPodLost}},
			want:  verdict(no, fleetv1alpha1.ReasonPodLost, "evicted"),
		},
		"a recreation forgets the old agent": {
			facts: memberFacts{waiting: &paneWait{why: "gone"}, recreated: true},
			want:  conditionVerdict{renew: true},
		},
		"a started agent": {
			facts: memberFacts{recreated: true, started: &startedPane{"w1:p1", "w1"}},
			want:  conditionVerdict{status: no, reason: fleetv1alpha1.ReasonAgentStarting, message: agentStartingMessage, renew: true},
		},
		"an agent seen idle": {
			status: fleetv1alpha1.MemberStatus{AgentStatus: fleetv1alpha1.AgentIdle},
			facts:  memberFacts{started: &startedPane{"w1:p1", "w1"}, observed: &PaneObservation{Exists: true, Agent: idle}},
			want:   verdict(metav1.ConditionTrue, fleetv1alpha1.ReasonReady, "the agent is idle"),
		},
		"an agent seen idle just after its start": {
			status: fleetv1alpha1.MemberStatus{AgentStatus: fleetv1alpha1.AgentIdle},
			facts:  memberFacts{observed: &PaneObservation{Exists: true, Agent: idle}, settling: time.Second},
			want:   verdict(no, fleetv1alpha1.ReasonAgentStarting, "the agent is up, and connecting to its MCP servers"),
		},
		"a dialog before it was ever ready": {
			status: fleetv1alpha1.MemberStatus{AgentStatus: fleetv1alpha1.AgentBlocked},
			facts:  memberFacts{observed: &PaneObservation{Exists: true, Agent: launching}},
			want:   verdict(no, fleetv1alpha1.ReasonBlockedAtStart, "the agent shows a dialog before it was ever ready, and waits for someone to answer it: (no text)"),
		},
		"a dialog before it was ever ready, with its text": {
			status: fleetv1alpha1.MemberStatus{AgentStatus: fleetv1alpha1.AgentBlocked, AgentMessage: "Do you trust the files in this folder?"},
			facts:  memberFacts{observed: &PaneObservation{Exists: true, Agent: launching}},
			want:   verdict(no, fleetv1alpha1.ReasonBlockedAtStart, "the agent shows a dialog before it was ever ready, and waits for someone to answer it: Do you trust the files in this folder?"),
		},
		"a bare shell seen alive": {
			facts: memberFacts{observed: &PaneObservation{Exists: true}},
			want:  verdict(no, fleetv1alpha1.ReasonAgentStarting, agentStartingMessage),
		},
	})
}

func TestPodScheduledCondition(t *testing.T) {
	onNode := fleetv1alpha1.MemberStatus{PodName: "w1-abc", NodeName: "node-2"}
	runConditionCases(t, podScheduledCondition, map[string]conditionCase{
		"a shared member has none": {},
		"no node fits": {
			facts: memberFacts{pod: &podStart{unschedulable: "0/3 nodes are available"}},
			want:  verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonUnschedulable, "0/3 nodes are available"),
		},
		"a Pod on a node, still starting": {
			status: onNode,
			facts:  memberFacts{pod: &podStart{waiting: "ContainerCreating"}},
			want:   verdict(metav1.ConditionTrue, fleetv1alpha1.ReasonPodScheduled, "pod w1-abc runs on node node-2"),
		},
		"a Pod not on a node yet says nothing": {
			facts: memberFacts{pod: &podStart{waiting: "Pending"}},
		},
		"a Pod up": {
			status: onNode,
			facts:  memberFacts{podScheduled: true},
			want:   verdict(metav1.ConditionTrue, fleetv1alpha1.ReasonPodScheduled, "pod w1-abc runs on node node-2"),
		},
	})
}

func TestIsolatedCondition(t *testing.T) {
	runConditionCases(t, func(_ *fleetv1alpha1.MemberStatus, f memberFacts) conditionVerdict { return isolatedCondition(f) }, map[string]conditionCase{
		"not found out": {},
		"a user of its own": {
			facts: memberFacts{isolation: &isolation{reason: fleetv1alpha1.ReasonOwnUser, message: "own"}},
			want:  verdict(metav1.ConditionTrue, fleetv1alpha1.ReasonOwnUser, "own"),
		},
		"one user for all": {
			facts: memberFacts{isolation: &isolation{shared: true, reason: fleetv1alpha1.ReasonSharedUser, message: "shared"}},
			want:  verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonSharedUser, "shared"),
		},
	})
}

func TestAgentHooksCondition(t *testing.T) {
	idle := &herdr.AgentInfo{Agent: ptr.To("claude"), AgentStatus: herdr.AgentStatusIdle}
	claude := fleetv1alpha1.MemberStatus{AgentKind: fleetv1alpha1.AgentClaude}
	withSession := func(source string) *herdr.AgentInfo {
		a := *idle
		a.AgentSession = &herdr.AgentSessionInfo{Source: source, Agent: "claude", Kind: herdr.AgentSessionRefID, Value: "s1"}
		return &a
	}
	fleetdSession, otherSession := withSession(agents.ReportSource), withSession("claude-code")
	runConditionCases(t, agentHooksCondition, map[string]conditionCase{
		"a pane not seen says nothing": {status: claude, facts: memberFacts{hookRecord: &agents.HookStatus{Event: "Stop"}}},
		"a plain command has no hooks": {facts: memberFacts{observed: &PaneObservation{Exists: true, Agent: idle}}},
		"no hook yet": {
			status: claude,
			facts:  memberFacts{observed: &PaneObservation{Exists: true, Agent: idle}},
			want:   verdict(metav1.ConditionUnknown, fleetv1alpha1.ReasonAwaitingHooks, "no hook of the agent has run yet"),
		},
		"hooks report": {
			status: claude,
			facts:  memberFacts{observed: &PaneObservation{Exists: true, Agent: idle}, hookRecord: &agents.HookStatus{Event: "Stop"}},
			want:   verdict(metav1.ConditionTrue, fleetv1alpha1.ReasonHooksReporting, "the agent's hooks report its status to herdr as fleetd; last: Stop"),
		},
		"hooks report under fleetd's own session": {
			status: claude,
			facts:  memberFacts{observed: &PaneObservation{Exists: true, Agent: fleetdSession}, hookRecord: &agents.HookStatus{Event: "Stop"}},
			want:   verdict(metav1.ConditionTrue, fleetv1alpha1.ReasonHooksReporting, "the agent's hooks report its status to herdr as fleetd; last: Stop"),
		},
		"another source owns herdr's status": {
			status: claude,
			facts:  memberFacts{observed: &PaneObservation{Exists: true, Agent: otherSession}, hookRecord: &agents.HookStatus{Event: "Stop"}},
			want: verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonOtherStatusSource,
				"herdr's status for this pane belongs to claude-code (session s1) and drops fleetd's reports; the status shown is that source's"),
		},
	})
}

func TestHerdrReachableCondition(t *testing.T) {
	runConditionCases(t, func(_ *fleetv1alpha1.MemberStatus, f memberFacts) conditionVerdict { return herdrReachableCondition(f) }, map[string]conditionCase{
		"not asked": {},
		"answers": {
			facts: memberFacts{herdr: &herdrReach{reachable: true, detail: "/run/herdr.sock"}},
			want:  verdict(metav1.ConditionTrue, fleetv1alpha1.ReasonHerdrReachable, "herdr answers at /run/herdr.sock"),
		},
		"does not answer": {
			facts: memberFacts{herdr: &herdrReach{detail: "refused"}},
			want:  verdict(metav1.ConditionFalse, fleetv1alpha1.ReasonHerdrUnreachable, "refused"),
		},
	})
}
