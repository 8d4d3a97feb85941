package controllers

import (
	"testing"
	"time"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/herdr/detect"
)

// TestJudgeScreen steps a pane's samples through judgeScreen and checks
// what it reports to herdr, and when.
func TestJudgeScreen(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	dialog := detect.Verdict{State: detect.StateBlocked, Visible: true, Rule: "permission_prompt", Text: "───\n Bash command\n\n Do you want to proceed?\n ❯ 1. Yes\n"}
	prompt := detect.Verdict{State: detect.StateIdle, Visible: true, Rule: "prompt_box"}
	turn := detect.Verdict{State: detect.StateWorking, Visible: true, Rule: "turn_in_progress"}
	fallback := detect.Verdict{State: detect.StateIdle}
	type step struct {
		after   time.Duration
		status  herdr.AgentStatus
		seq     uint64
		verdict detect.Verdict
		want    herdr.AgentState // "" for no report
	}
	cases := map[string][]step{
		"a dialog herdr does not show is reported blocked on the second look": {
			{0, herdr.AgentStatusWorking, 5, dialog, ""},
			{500 * time.Millisecond, herdr.AgentStatusWorking, 5, dialog, herdr.AgentStateBlocked},
		},
		"a dialog herdr already shows is left alone": {
			{0, herdr.AgentStatusBlocked, 5, dialog, ""},
			{time.Second, herdr.AgentStatusBlocked, 5, dialog, ""},
		},
		"a dialog seen once is not enough": {
			{0, herdr.AgentStatusIdle, 5, dialog, ""},
			{time.Second, herdr.AgentStatusIdle, 5, prompt, ""},
			{2 * time.Second, herdr.AgentStatusIdle, 5, dialog, ""},
		},
		"blocked in herdr while the screen shows the prompt again": {
			{0, herdr.AgentStatusBlocked, 5, prompt, ""},
			{time.Second, herdr.AgentStatusBlocked, 5, prompt, herdr.AgentStateIdle},
		},
		"blocked in herdr while the screen shows the turn going on": {
			{0, herdr.AgentStatusBlocked, 5, turn, ""},
			{time.Second, herdr.AgentStatusBlocked, 5, turn, herdr.AgentStateWorking},
		},
		"a stuck turn ends once herdr held working long enough": {
			{0, herdr.AgentStatusWorking, 7, prompt, ""},
			{time.Second, herdr.AgentStatusWorking, 7, prompt, ""},
			{stuckAfter, herdr.AgentStatusWorking, 7, prompt, ""},
			{stuckAfter + 500*time.Millisecond, herdr.AgentStatusWorking, 7, prompt, herdr.AgentStateIdle},
		},
		"a fresh turn is not ended by a screen that has not caught up": {
			{0, herdr.AgentStatusIdle, 7, prompt, ""},
			{time.Second, herdr.AgentStatusWorking, 8, prompt, ""},
			{2 * time.Second, herdr.AgentStatusWorking, 8, prompt, ""},
			{3 * time.Second, herdr.AgentStatusWorking, 8, turn, ""},
		},
		"the idle fallback is not a visible prompt": {
			{0, herdr.AgentStatusWorking, 7, fallback, ""},
			{stuckAfter * 2, herdr.AgentStatusWorking, 7, fallback, ""},
			{stuckAfter * 3, herdr.AgentStatusWorking, 7, fallback, ""},
		},
		"a streak that herdr interrupted starts over": {
			{0, herdr.AgentStatusIdle, 1, dialog, ""},
			{time.Second, herdr.AgentStatusIdle, 2, dialog, ""},
			{2 * time.Second, herdr.AgentStatusIdle, 2, dialog, herdr.AgentStateBlocked},
		},
	}
	for name, steps := range cases {
		t.Run(name, func(t *testing.T) {
			var track screenTrack
			for i, st := range steps {
				var r *screenReport
				at := t0.Add(st.after)
				track, r = judgeScreen(track, screenSample{status: st.status, seq: st.seq, verdict: st.verdict, at: at})
				var got herdr.AgentState
				if r != nil {
					got = r.state
				}
				if got != st.want {
					t.Fatalf("step %d: report %q, want %q", i, got, st.want)
				}
				if r != nil && r.observedAt.After(at) {
					t.Errorf("step %d: observed at %v, after the sample itself", i, r.observedAt)
				}
				if r != nil && r.state == herdr.AgentStateBlocked && r.message != "Bash command\nDo you want to proceed?\n❯ 1. Yes" {
					t.Errorf("step %d: dialog text %q", i, r.message)
				}
			}
		})
	}
}
