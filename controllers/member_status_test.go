package controllers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

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
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			st := tc.status
			rollUp(&st, 3, tc.deleting)
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
