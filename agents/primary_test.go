package agents

import (
	"slices"
	"strings"
	"testing"
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
		"every kind of outcome": {
			outcomes: []PrimaryOutcome{reply, turnDone, gone}, wantBlock: true, wantAck: []string{"d1", "d2", "d3"},
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
			d, ack := PrimaryStop(tc.active, tc.outcomes, tc.questions)
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
	d, ack := PrimaryStop(false, outcomes, nil)
	if len(d.Reason) > maxStopReason+100 || len(ack) == 0 || len(ack) == len(outcomes) {
		t.Fatalf("reason of %d bytes acknowledging %d of %d", len(d.Reason), len(ack), len(outcomes))
	}
	if !strings.Contains(d.Reason, "more outcomes wait in bridge_poll") {
		t.Errorf("the reason does not say that more wait")
	}
	huge := []PrimaryOutcome{{DispatchID: "big", Member: "w", Outcome: "reply", Text: strings.Repeat("y", 1<<20)}}
	if d, ack := PrimaryStop(false, huge, nil); len(ack) != 1 || len(d.Reason) > maxStopReason {
		t.Errorf("one huge reply: %d bytes, ack %q", len(d.Reason), ack)
	}
}
