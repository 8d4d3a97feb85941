package agents

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPrimaryStop(t *testing.T) {
	reply := PrimaryOutcome{DispatchID: "d1", Member: "w1", Outcome: "reply", Text: "the tests pass", Content: "run the tests"}
	turnDone := PrimaryOutcome{DispatchID: "d2", Member: "w2", Outcome: "turn_done", Text: "$ make\nok"}
	gone := PrimaryOutcome{DispatchID: "d3", Member: "w3", Outcome: "worker_gone", Error: &PrimaryError{Code: "worker_gone", Message: "member w3 was deleted"}}
	question := PrimaryQuestion{TurnID: "d4.q1", Member: "w4", Text: "Which branch?"}
	cases := map[string]struct {
		active    bool
		outcomes  []PrimaryOutcome
		questions []PrimaryQuestion
		wantBlock bool
		wantAck   []string
		wantIn    []string
	}{
		"nothing waits: the turn ends": {},
		"a reply keeps the turn going": {
			outcomes: []PrimaryOutcome{reply}, wantBlock: true, wantAck: []string{"d1"},
			wantIn: []string{"w1 replied to d1", "the tests pass", `"run the tests"`, "acknowledged"},
		},
		"every kind of outcome, newest first": {
			outcomes: []PrimaryOutcome{reply, turnDone, gone}, wantBlock: true, wantAck: []string{"d3", "d2", "d1"},
			wantIn: []string{"w2 ended its turn on d2", "$ make\nok", "d3 failed: worker_gone: member w3 was deleted"},
		},
		"a question once per turn": {
			questions: []PrimaryQuestion{question}, wantBlock: true,
			wantIn: []string{"w4 asks (turnId d4.q1): Which branch?", "bridge_send {turnId, content}"},
		},
		"a question again in the same turn lets it end": {active: true, questions: []PrimaryQuestion{question}},
		"outcomes after a block keep it going": {
			active: true, outcomes: []PrimaryOutcome{reply}, questions: []PrimaryQuestion{question}, wantBlock: true, wantAck: []string{"d1"},
			wantIn: []string{"the tests pass"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d, ack := PrimaryStop(tc.active, tc.outcomes, tc.questions, SessionSends{})
			if d.Block() != tc.wantBlock || !slices.Equal(ack, tc.wantAck) {
				t.Fatalf("PrimaryStop() = %+v, ack %q; want block %v, ack %q", d, ack, tc.wantBlock, tc.wantAck)
			}
			if !tc.wantBlock && d != (StopDecision{}) {
				t.Errorf("a turn let end says %+v, want nothing", d)
			}
			for _, s := range tc.wantIn {
				if !strings.Contains(d.Reason, s) {
					t.Errorf("reason %q lacks %q", d.Reason, s)
				}
			}
		})
	}
}

// TestPrimaryStopBoundsItsReason: outcomes that do not fit wait for the next
// stop, unacknowledged; one always goes, however long.
func TestPrimaryStopBoundsItsReason(t *testing.T) {
	var outcomes []PrimaryOutcome
	for i := range 10 {
		outcomes = append(outcomes, PrimaryOutcome{DispatchID: "d" + string(rune('0'+i)), Member: "w", Outcome: "reply", Text: strings.Repeat("x", maxStopText)})
	}
	d, ack := PrimaryStop(false, outcomes, nil, SessionSends{})
	if len(d.Reason) > maxStopReason+100 || len(ack) == 0 || len(ack) == len(outcomes) {
		t.Fatalf("reason of %d bytes acknowledging %d of %d", len(d.Reason), len(ack), len(outcomes))
	}
	if !strings.Contains(d.Reason, "more outcomes wait in bridge_poll") {
		t.Errorf("the reason does not say that more wait")
	}
	huge := []PrimaryOutcome{{DispatchID: "big", Member: "w", Outcome: "reply", Text: strings.Repeat("y", 1<<20)}}
	if d, ack := PrimaryStop(false, huge, nil, SessionSends{}); len(ack) != 1 || len(d.Reason) > maxStopReason {
		t.Errorf("one huge reply: %d bytes, ack %q", len(d.Reason), ack)
	}
}

// pile is n outcomes of other clients' messages, settled a minute apart
// from start, oldest first as bridge_poll lists them.
func pile(n int, start time.Time) []PrimaryOutcome {
	var out []PrimaryOutcome
	for i := range n {
		out = append(out, PrimaryOutcome{
			DispatchID: fmt.Sprintf("old-%02d", i), Member: "w", Outcome: "reply", Text: "old",
			SettledAt: start.Add(time.Duration(i) * time.Minute).Format(time.RFC3339),
		})
	}
	return out
}

// TestPrimaryStopHandsOverABoundedShare: one stop hands over at most
// maxStopOutcomes, newest first, and only this session's when its
// transcript tells; it acknowledges exactly what it hands over and says
// how many more wait.
func TestPrimaryStopHandsOverABoundedShare(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	old := pile(30, start)
	mine := PrimaryOutcome{DispatchID: "mine", Member: "w1", Outcome: "reply", Text: "the tests pass", SettledAt: start.Add(-time.Hour).Format(time.RFC3339)}
	withMine := append(slices.Clone(old), mine)
	var newest20 []string
	for i := 29; i >= 10; i-- {
		newest20 = append(newest20, fmt.Sprintf("old-%02d", i))
	}
	cases := map[string]struct {
		outcomes  []PrimaryOutcome
		sends     SessionSends
		wantAck   []string
		wantIn    []string
		wantBlock bool
	}{
		"no transcript: the newest of the token's, bounded": {
			outcomes: withMine, wantBlock: true, wantAck: newest20,
			wantIn: []string{"11 more outcomes wait in bridge_poll"},
		},
		"the transcript names this session's: only those": {
			outcomes: withMine, sends: SessionSends{Known: true, DispatchIDs: map[string]bool{"mine": true, "in-flight": true}}, wantBlock: true, wantAck: []string{"mine"},
			wantIn: []string{"w1 replied to mine", "30 more outcomes wait in bridge_poll: 0 of messages this session sent, 30 of messages sent before it"},
		},
		"this session's not settled yet: the turn ends": {
			outcomes: old, sends: SessionSends{Known: true, DispatchIDs: map[string]bool{"in-flight": true}},
		},
		"more of this session's than fit": {
			outcomes: old, sends: SessionSends{Known: true, DispatchIDs: allIDs(old)}, wantBlock: true, wantAck: newest20,
			wantIn: []string{"10 more outcomes wait in bridge_poll: 10 of messages this session sent, 0 of"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d, ack := PrimaryStop(false, tc.outcomes, nil, tc.sends)
			if d.Block() != tc.wantBlock || !slices.Equal(ack, tc.wantAck) {
				t.Fatalf("PrimaryStop() = %+v, ack %q; want block %v, ack %q", d, ack, tc.wantBlock, tc.wantAck)
			}
			for _, s := range tc.wantIn {
				if !strings.Contains(d.Reason, s) {
					t.Errorf("reason %q lacks %q", d.Reason, s)
				}
			}
			if n := strings.Count(d.Reason, "\n- "); n != len(ack) {
				t.Errorf("the reason shows %d outcomes and acknowledges %d", n, len(ack))
			}
		})
	}
}

func allIDs(outcomes []PrimaryOutcome) map[string]bool {
	ids := map[string]bool{}
	for _, o := range outcomes {
		ids[o.DispatchID] = true
	}
	return ids
}
