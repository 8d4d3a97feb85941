package controllers

import (
	"strings"
	"time"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/herdr/detect"
	"github.com/fleetd/fleetd/internal/textcut"
)

// What the screen may overrule, and how sure it must be first.
const (
	// screenConfirmations is how many samples in a row must agree before
	// the screen overrules herdr's status: one frame can be mid-redraw.
	screenConfirmations = 2
	// stuckAfter is how long herdr must have said working, with no change,
	// before a visibly idle screen ends the turn. An agent interrupted with
	// Esc sends no Stop hook, and herdr's reports never expire.
	stuckAfter = 3 * time.Second
	// maxDialogText bounds the dialog text kept for the Member's status.
	maxDialogText = 2048
)

// screenTrack is what the screen watch remembers of one pane between
// samples.
type screenTrack struct {
	// seq and seqSince are herdr's state_change_seq for the pane and when
	// it was first seen at that value.
	seq      uint64
	seqSince time.Time
	// want is the state the screen keeps disagreeing with herdr about,
	// since streakStart, streak samples in a row.
	want        herdr.AgentState
	streak      int
	streakStart time.Time
	// dialog is the dialog on screen, "" when there is none.
	dialog string
}

// screenSample is one look at a pane: herdr's view and the screen's.
type screenSample struct {
	status  herdr.AgentStatus
	seq     uint64
	verdict detect.Verdict
	at      time.Time
}

// screenReport is what the screen says herdr should be told.
type screenReport struct {
	state   herdr.AgentState
	message string
	// observedAt orders the report among the agent's hook reports: the
	// time of the first sample that saw it, so a hook that reported after
	// that wins.
	observedAt time.Time
}

// judgeScreen decides, from one more sample, what the screen tells that
// herdr does not know, and reports it only once screenConfirmations samples
// in a row agree. It overrules herdr in three cases: a dialog herdr does
// not show as blocked; blocked in herdr while the screen visibly shows a
// prompt or a turn instead; and a turn herdr has held as working for
// stuckAfter while the screen shows the idle prompt.
func judgeScreen(t screenTrack, s screenSample) (screenTrack, *screenReport) {
	if s.seq != t.seq || t.seqSince.IsZero() {
		t.seq, t.seqSince = s.seq, s.at
	}
	t.dialog = ""
	if s.verdict.State == detect.StateBlocked && s.verdict.Visible {
		t.dialog = dialogText(s.verdict.Text)
	}
	var want herdr.AgentState
	v := s.verdict
	switch {
	case !v.Visible || v.Skip:
	case v.State == detect.StateBlocked && s.status != herdr.AgentStatusBlocked:
		want = herdr.AgentStateBlocked
	case s.status == herdr.AgentStatusBlocked && v.State == detect.StateIdle:
		want = herdr.AgentStateIdle
	case s.status == herdr.AgentStatusBlocked && v.State == detect.StateWorking:
		want = herdr.AgentStateWorking
	case s.status == herdr.AgentStatusWorking && v.State == detect.StateIdle && s.at.Sub(t.seqSince) >= stuckAfter:
		want = herdr.AgentStateIdle
	}
	switch {
	case want == "":
		t.want, t.streak = "", 0
		return t, nil
	case want != t.want || t.streakStart.Before(t.seqSince):
		// A new disagreement, or herdr changed since it began: count anew.
		t.want, t.streak, t.streakStart = want, 1, s.at
	default:
		t.streak++
	}
	if t.streak < screenConfirmations {
		return t, nil
	}
	r := &screenReport{state: want, observedAt: t.streakStart}
	if want == herdr.AgentStateBlocked {
		r.message = t.dialog
	}
	t.want, t.streak = "", 0
	return t, r
}

// dialogText is a dialog as a person reads it: its non-blank lines,
// trimmed, bounded.
func dialogText(region string) string {
	var lines []string
	for l := range strings.SplitSeq(region, "\n") {
		if l = strings.TrimSpace(l); l != "" && strings.Trim(l, "─╌━═ ") != "" {
			lines = append(lines, l)
		}
	}
	text := strings.Join(lines, "\n")
	if len(text) > maxDialogText {
		text = textcut.Head(text, maxDialogText) + "…"
	}
	return text
}
