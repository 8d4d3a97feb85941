package delegation

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// conds is a Delegation's conditions as status:reason, by type.
func conds(d *fleetv1alpha1.Delegation) map[string]string {
	out := map[string]string{}
	for _, c := range d.Status.Conditions {
		out[c.Type] = string(c.Status) + ":" + c.Reason
	}
	return out
}

func condsOf(delivered, settled, ready string) map[string]string {
	return map[string]string{fleetv1alpha1.ConditionDelivered: delivered, fleetv1alpha1.ConditionSettled: settled, fleetv1alpha1.ConditionReady: ready}
}

const inProgress = "False:" + fleetv1alpha1.ReasonInProgress

// TestTransitions drives each transition from a state and checks the
// phase, outcome, conditions and error it leaves: phase and conditions are
// always set together.
func TestTransitions(t *testing.T) {
	typed := func() *dlg { return mk("a", 0).queued().typed(1) }
	asked := func() *dlg {
		return typed().then(func(d *fleetv1alpha1.Delegation) {
			if _, err := Ask(d, t0, "which?"); err != nil {
				panic(err)
			}
		})
	}
	cases := map[string]struct {
		from      *dlg
		do        func(d *fleetv1alpha1.Delegation) error
		wantErr   error
		wantPhase fleetv1alpha1.DelegationPhase
		wantOut   fleetv1alpha1.Outcome
		wantConds map[string]string
		check     func(t *testing.T, d *fleetv1alpha1.Delegation)
	}{
		"begin delivery": {
			from: mk("a", 0).queued(),
			do: func(d *fleetv1alpha1.Delegation) error {
				BeginDelivery(d, at(1).Time, Target{PaneID: "w1:p1", TerminalID: "t", Seq: 7})
				return nil
			},
			wantPhase: fleetv1alpha1.DelegationDelivered,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, inProgress, inProgress),
			check: func(t *testing.T, d *fleetv1alpha1.Delegation) {
				s := d.Status
				if s.DeliveringSeq != 7 || s.PaneID != "w1:p1" || s.TerminalID != "t" || !s.DeliveringAt.Equal(at(1)) || s.DeliveredAt != nil {
					t.Errorf("delivery record: %+v", s)
				}
				if !s.Deadline.Time.Equal(t0.Add(60e9)) || !s.QueuedAt.Time.Equal(t0) {
					t.Errorf("deadline %v queuedAt %v", s.Deadline, s.QueuedAt)
				}
				if !InFlight(d) || Queued(d) {
					t.Error("a message being typed is in flight")
				}
			},
		},
		"delivery postponed": {
			from:      typed(),
			do:        func(d *fleetv1alpha1.Delegation) error { DeliveryPostponed(d, "a dialog is on screen"); return nil },
			wantPhase: fleetv1alpha1.DelegationQueued,
			wantConds: condsOf("False:"+fleetv1alpha1.ReasonQueued, inProgress, inProgress),
			check: func(t *testing.T, d *fleetv1alpha1.Delegation) {
				if !Queued(d) || d.Status.DeliveringAt != nil || d.Status.PaneID != "" {
					t.Errorf("not back in the queue: %+v", d.Status)
				}
			},
		},
		"pickup": {
			from:      typed(),
			do:        func(d *fleetv1alpha1.Delegation) error { Pickup(d, at(2).Time); return nil },
			wantPhase: fleetv1alpha1.DelegationWorking,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, inProgress, inProgress),
			check: func(t *testing.T, d *fleetv1alpha1.Delegation) {
				if !d.Status.PickedUpAt.Equal(at(2)) || !d.Status.DeliveredAt.Equal(d.Status.DeliveringAt) {
					t.Errorf("pickedUpAt %v deliveredAt %v", d.Status.PickedUpAt, d.Status.DeliveredAt)
				}
			},
		},
		"a pickup leaves a question open": {
			from:      asked(),
			do:        func(d *fleetv1alpha1.Delegation) error { Pickup(d, at(2).Time); return nil },
			wantPhase: fleetv1alpha1.DelegationAsking,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, inProgress, inProgress),
		},
		"turn done": {
			from:      typed(),
			do:        func(d *fleetv1alpha1.Delegation) error { TurnDone(d, at(3).Time, "$ tail"); return nil },
			wantPhase: fleetv1alpha1.DelegationTurnDone, wantOut: fleetv1alpha1.OutcomeTurnDone,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, "True:"+fleetv1alpha1.ReasonTurnDone, "True:"+fleetv1alpha1.ReasonTurnDone),
			check: func(t *testing.T, d *fleetv1alpha1.Delegation) {
				if ptr.Deref(d.Status.Tail, "") != "$ tail" || d.Status.PickedUpAt == nil || !d.Status.SettledAt.Equal(at(3)) {
					t.Errorf("tail %v pickedUpAt %v settledAt %v", d.Status.Tail, d.Status.PickedUpAt, d.Status.SettledAt)
				}
			},
		},
		"time out": {
			from:      typed(),
			do:        func(d *fleetv1alpha1.Delegation) error { TimeOut(d, at(60).Time); return nil },
			wantPhase: fleetv1alpha1.DelegationTimedOut, wantOut: fleetv1alpha1.OutcomeTimeout,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, "True:"+fleetv1alpha1.ReasonTimedOut, "False:"+fleetv1alpha1.ReasonTimedOut),
		},
		"worker gone before delivery": {
			from:      mk("a", 0).queued(),
			do:        func(d *fleetv1alpha1.Delegation) error { WorkerGone(d, at(3).Time, "member w is gone"); return nil },
			wantPhase: fleetv1alpha1.DelegationWorkerGone, wantOut: fleetv1alpha1.OutcomeWorkerGone,
			wantConds: condsOf("False:"+fleetv1alpha1.ReasonWorkerGone, "True:"+fleetv1alpha1.ReasonWorkerGone, "False:"+fleetv1alpha1.ReasonWorkerGone),
		},
		"refused by herdr": {
			from: typed(),
			do: func(d *fleetv1alpha1.Delegation) error {
				Fail(d, at(1).Time, fleetv1alpha1.ReasonDeliveryRefused, "agent_prompt_failed")
				return nil
			},
			wantPhase: fleetv1alpha1.DelegationFailed, wantOut: fleetv1alpha1.OutcomeDeliveryFailed,
			wantConds: condsOf("False:"+fleetv1alpha1.ReasonDeliveryRefused, "True:"+fleetv1alpha1.ReasonDeliveryRefused, "False:"+fleetv1alpha1.ReasonDeliveryRefused),
			check: func(t *testing.T, d *fleetv1alpha1.Delegation) {
				if got := SettledMessage(d, ""); got != "agent_prompt_failed" {
					t.Errorf("SettledMessage = %q", got)
				}
			},
		},
		"stopped by the loop guard": {
			from: mk("a", 0).queued(),
			do: func(d *fleetv1alpha1.Delegation) error {
				Fail(d, at(1).Time, fleetv1alpha1.ReasonLoopGuard, "refused")
				return nil
			},
			wantPhase: fleetv1alpha1.DelegationFailed, wantOut: fleetv1alpha1.OutcomeDeliveryFailed,
			wantConds: condsOf("False:"+fleetv1alpha1.ReasonLoopGuard, "True:"+fleetv1alpha1.ReasonLoopGuard, "False:"+fleetv1alpha1.ReasonLoopGuard),
		},
		"cancel": {
			from:      mk("a", 0).queued(),
			do:        func(d *fleetv1alpha1.Delegation) error { Cancel(d, at(1).Time, "withdrawn"); return nil },
			wantPhase: fleetv1alpha1.DelegationCancelled, wantOut: fleetv1alpha1.OutcomeCancelled,
			wantConds: condsOf("False:"+fleetv1alpha1.ReasonCancelled, "True:"+fleetv1alpha1.ReasonCancelled, "False:"+fleetv1alpha1.ReasonCancelled),
		},
		"cancel a queued message: it settles at once": {
			from: mk("a", 0).queued(),
			do: func(d *fleetv1alpha1.Delegation) error {
				if !RequestCancel(d, at(2).Time) {
					return errors.New("nothing changed")
				}
				return nil
			},
			wantPhase: fleetv1alpha1.DelegationCancelled, wantOut: fleetv1alpha1.OutcomeCancelled,
			wantConds: condsOf("False:"+fleetv1alpha1.ReasonCancelled, "True:"+fleetv1alpha1.ReasonCancelled, "False:"+fleetv1alpha1.ReasonCancelled),
		},
		"cancel a message in flight: it waits for the interrupt": {
			from: typed(),
			do: func(d *fleetv1alpha1.Delegation) error {
				if !RequestCancel(d, at(2).Time) || RequestCancel(d, at(3).Time) {
					return errors.New("want one change")
				}
				return nil
			},
			wantPhase: fleetv1alpha1.DelegationDelivered,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, inProgress, inProgress),
			check: func(t *testing.T, d *fleetv1alpha1.Delegation) {
				if !CancelRequested(d) || !d.Status.CancelRequestedAt.Equal(at(2)) {
					t.Errorf("cancelRequestedAt %v", d.Status.CancelRequestedAt)
				}
			},
		},
		"the interrupt settles it": {
			from:      typed().then(func(d *fleetv1alpha1.Delegation) { RequestCancel(d, at(2).Time) }),
			do:        func(d *fleetv1alpha1.Delegation) error { Interrupted(d, at(3).Time, "esc"); return nil },
			wantPhase: fleetv1alpha1.DelegationCancelled, wantOut: fleetv1alpha1.OutcomeCancelled,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, "True:"+fleetv1alpha1.ReasonCancelled, "False:"+fleetv1alpha1.ReasonCancelled),
		},
		"a reply before the interrupt still wins": {
			from:      typed().then(func(d *fleetv1alpha1.Delegation) { RequestCancel(d, at(2).Time) }),
			do:        func(d *fleetv1alpha1.Delegation) error { return Reply(d, at(3).Time, "done") },
			wantPhase: fleetv1alpha1.DelegationReplied, wantOut: fleetv1alpha1.OutcomeReply,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, "True:"+fleetv1alpha1.ReasonReplied, "True:"+fleetv1alpha1.ReasonReplied),
		},
		"cancelling a settled message changes nothing": {
			from: typed().then(replyAt(3, "done")),
			do: func(d *fleetv1alpha1.Delegation) error {
				if RequestCancel(d, at(4).Time) {
					return errors.New("changed")
				}
				return nil
			},
			wantPhase: fleetv1alpha1.DelegationReplied, wantOut: fleetv1alpha1.OutcomeReply,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, "True:"+fleetv1alpha1.ReasonReplied, "True:"+fleetv1alpha1.ReasonReplied),
		},
		"reply": {
			from:      typed(),
			do:        func(d *fleetv1alpha1.Delegation) error { return Reply(d, at(4).Time, "done") },
			wantPhase: fleetv1alpha1.DelegationReplied, wantOut: fleetv1alpha1.OutcomeReply,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, "True:"+fleetv1alpha1.ReasonReplied, "True:"+fleetv1alpha1.ReasonReplied),
			check: func(t *testing.T, d *fleetv1alpha1.Delegation) {
				if ptr.Deref(d.Status.Reply, "") != "done" || !d.Status.RepliedAt.Equal(at(4)) || d.Status.PickedUpAt == nil {
					t.Errorf("reply record: %+v", d.Status)
				}
			},
		},
		"a reply answers an open question too": {
			from:      asked(),
			do:        func(d *fleetv1alpha1.Delegation) error { return Reply(d, at(4).Time, "done") },
			wantPhase: fleetv1alpha1.DelegationReplied, wantOut: fleetv1alpha1.OutcomeReply,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, "True:"+fleetv1alpha1.ReasonReplied, "True:"+fleetv1alpha1.ReasonReplied),
		},
		"a reply to a message not typed yet is refused": {
			from:      mk("a", 0).queued(),
			do:        func(d *fleetv1alpha1.Delegation) error { return Reply(d, at(4).Time, "done") },
			wantErr:   ErrNotInFlight,
			wantPhase: fleetv1alpha1.DelegationQueued,
		},
		"a reply after the turn ended is refused: exactly one settles it": {
			from:      typed().then(func(d *fleetv1alpha1.Delegation) { TurnDone(d, at(3).Time, "") }),
			do:        func(d *fleetv1alpha1.Delegation) error { return Reply(d, at(4).Time, "done") },
			wantErr:   ErrNotInFlight,
			wantPhase: fleetv1alpha1.DelegationTurnDone, wantOut: fleetv1alpha1.OutcomeTurnDone,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, "True:"+fleetv1alpha1.ReasonTurnDone, "True:"+fleetv1alpha1.ReasonTurnDone),
		},
		"late reply": {
			from: typed().then(func(d *fleetv1alpha1.Delegation) {
				TimeOut(d, at(60).Time)
				if _, err := Acknowledge(d, at(61).Time); err != nil {
					panic(err)
				}
			}),
			do:        func(d *fleetv1alpha1.Delegation) error { return LateReply(d, at(70).Time, "late") },
			wantPhase: fleetv1alpha1.DelegationTimedOut, wantOut: fleetv1alpha1.OutcomeTimeout,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, "True:"+fleetv1alpha1.ReasonTimedOut, "False:"+fleetv1alpha1.ReasonTimedOut),
			check: func(t *testing.T, d *fleetv1alpha1.Delegation) {
				if ptr.Deref(d.Status.Reply, "") != "late" || d.Status.AcknowledgedAt != nil || !Unclaimed(d) {
					t.Errorf("a late reply is owed to its sender again: %+v", d.Status)
				}
			},
		},
		"a late reply after a turn seen to end": {
			from: typed().then(func(d *fleetv1alpha1.Delegation) {
				TurnDone(d, at(3).Time, "$ ")
				if _, err := Acknowledge(d, at(4).Time); err != nil {
					panic(err)
				}
			}),
			do:        func(d *fleetv1alpha1.Delegation) error { return LateReply(d, at(70).Time, "the real answer") },
			wantPhase: fleetv1alpha1.DelegationTurnDone, wantOut: fleetv1alpha1.OutcomeTurnDone,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, "True:"+fleetv1alpha1.ReasonTurnDone, "True:"+fleetv1alpha1.ReasonTurnDone),
			check: func(t *testing.T, d *fleetv1alpha1.Delegation) {
				if ptr.Deref(d.Status.Reply, "") != "the real answer" || d.Status.AcknowledgedAt != nil || !Unclaimed(d) {
					t.Errorf("a late reply is owed to its sender again: %+v", d.Status)
				}
			},
		},
		"a second late reply is refused": {
			from: typed().then(func(d *fleetv1alpha1.Delegation) {
				TimeOut(d, at(60).Time)
				_ = LateReply(d, at(70).Time, "late")
			}),
			do:        func(d *fleetv1alpha1.Delegation) error { return LateReply(d, at(71).Time, "again") },
			wantErr:   ErrNotInFlight,
			wantPhase: fleetv1alpha1.DelegationTimedOut, wantOut: fleetv1alpha1.OutcomeTimeout,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, "True:"+fleetv1alpha1.ReasonTimedOut, "False:"+fleetv1alpha1.ReasonTimedOut),
		},
		"ask": {
			from:      typed(),
			do:        func(d *fleetv1alpha1.Delegation) error { _, err := Ask(d, at(2).Time, "which?"); return err },
			wantPhase: fleetv1alpha1.DelegationAsking,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, inProgress, inProgress),
			check: func(t *testing.T, d *fleetv1alpha1.Delegation) {
				if q := OpenQuestion(d); q == nil || q.TurnID != "a.q1" || q.Text != "which?" {
					t.Errorf("open question %+v", q)
				}
			},
		},
		"ask on a settled message is refused": {
			from:      typed().then(replyAt(3, "done")),
			do:        func(d *fleetv1alpha1.Delegation) error { _, err := Ask(d, at(4).Time, "which?"); return err },
			wantErr:   ErrNotInFlight,
			wantPhase: fleetv1alpha1.DelegationReplied, wantOut: fleetv1alpha1.OutcomeReply,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, "True:"+fleetv1alpha1.ReasonReplied, "True:"+fleetv1alpha1.ReasonReplied),
		},
		"ask past the most questions is refused": {
			from: typed().then(func(d *fleetv1alpha1.Delegation) {
				for range fleetv1alpha1.MaxQuestions {
					d.Status.Questions = append(d.Status.Questions, fleetv1alpha1.Question{Answer: ptr.To("x")})
				}
			}),
			do:        func(d *fleetv1alpha1.Delegation) error { _, err := Ask(d, at(4).Time, "which?"); return err },
			wantErr:   ErrTooManyQuestions,
			wantPhase: fleetv1alpha1.DelegationDelivered,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, inProgress, inProgress),
		},
		"answer": {
			from:      asked(),
			do:        func(d *fleetv1alpha1.Delegation) error { return answer(d, "a.q1", "the blue one", true) },
			wantPhase: fleetv1alpha1.DelegationWorking,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, inProgress, inProgress),
		},
		"the same answer again changes nothing": {
			from:      asked().then(func(d *fleetv1alpha1.Delegation) { _ = answer(d, "a.q1", "blue", true) }),
			do:        func(d *fleetv1alpha1.Delegation) error { return answer(d, "a.q1", "blue", false) },
			wantPhase: fleetv1alpha1.DelegationWorking,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, inProgress, inProgress),
		},
		"another answer is refused": {
			from:      asked().then(func(d *fleetv1alpha1.Delegation) { _ = answer(d, "a.q1", "blue", true) }),
			do:        func(d *fleetv1alpha1.Delegation) error { return answer(d, "a.q1", "red", false) },
			wantErr:   ErrAnsweredDifferently,
			wantPhase: fleetv1alpha1.DelegationWorking,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, inProgress, inProgress),
		},
		"an answer to no such question": {
			from:      asked(),
			do:        func(d *fleetv1alpha1.Delegation) error { return answer(d, "a.q2", "blue", false) },
			wantErr:   ErrNoQuestion,
			wantPhase: fleetv1alpha1.DelegationAsking,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, inProgress, inProgress),
		},
		"an answer after the worker stopped waiting is refused": {
			from:      asked().then(func(d *fleetv1alpha1.Delegation) { WithdrawQuestion(d, at(5).Time, "a.q1") }),
			do:        func(d *fleetv1alpha1.Delegation) error { return answer(d, "a.q1", "blue", false) },
			wantErr:   ErrWithdrawn,
			wantPhase: fleetv1alpha1.DelegationWorking,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, inProgress, inProgress),
		},
		"an answer to a message that settled meanwhile changes nothing": {
			from:      asked().then(replyAt(5, "done")),
			do:        func(d *fleetv1alpha1.Delegation) error { return answer(d, "a.q1", "blue", false) },
			wantPhase: fleetv1alpha1.DelegationReplied, wantOut: fleetv1alpha1.OutcomeReply,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, "True:"+fleetv1alpha1.ReasonReplied, "True:"+fleetv1alpha1.ReasonReplied),
		},
		"withdraw a question": {
			from: asked(),
			do: func(d *fleetv1alpha1.Delegation) error {
				if !WithdrawQuestion(d, at(5).Time, "a.q1") {
					return errors.New("nothing withdrawn")
				}
				return nil
			},
			wantPhase: fleetv1alpha1.DelegationWorking,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, inProgress, inProgress),
			check: func(t *testing.T, d *fleetv1alpha1.Delegation) {
				if OpenQuestion(d) != nil || !d.Status.Questions[0].WithdrawnAt.Equal(at(5)) {
					t.Errorf("questions %+v", d.Status.Questions)
				}
			},
		},
		"detach, then reattach": {
			from: typed(),
			do: func(d *fleetv1alpha1.Delegation) error {
				if !Detach(d, at(5).Time) || Detach(d, at(6).Time) || !d.Status.DetachedAt.Equal(at(5)) {
					return errors.New("detach")
				}
				if !Reattach(d) || d.Status.DetachedAt != nil || Reattach(d) {
					return errors.New("reattach")
				}
				return nil
			},
			wantPhase: fleetv1alpha1.DelegationDelivered,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, inProgress, inProgress),
		},
		"a settled message cannot be reattached": {
			from: typed().then(func(d *fleetv1alpha1.Delegation) { Detach(d, at(5).Time) }).then(replyAt(6, "done")),
			do: func(d *fleetv1alpha1.Delegation) error {
				if Reattach(d) {
					return errors.New("reattached")
				}
				return nil
			},
			wantPhase: fleetv1alpha1.DelegationReplied, wantOut: fleetv1alpha1.OutcomeReply,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, "True:"+fleetv1alpha1.ReasonReplied, "True:"+fleetv1alpha1.ReasonReplied),
			check: func(t *testing.T, d *fleetv1alpha1.Delegation) {
				if !Unclaimed(d) {
					t.Error("a reply after the waiter left is owed to the sender")
				}
			},
		},
		"acknowledge": {
			from: typed().then(replyAt(6, "done")).then(func(d *fleetv1alpha1.Delegation) { Detach(d, at(5).Time) }),
			do: func(d *fleetv1alpha1.Delegation) error {
				if changed, err := Acknowledge(d, at(7).Time); !changed || err != nil {
					return errors.New("not acknowledged")
				}
				if changed, err := Acknowledge(d, at(8).Time); changed || err != nil {
					return errors.New("acknowledged twice")
				}
				return nil
			},
			wantPhase: fleetv1alpha1.DelegationReplied, wantOut: fleetv1alpha1.OutcomeReply,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, "True:"+fleetv1alpha1.ReasonReplied, "True:"+fleetv1alpha1.ReasonReplied),
			check: func(t *testing.T, d *fleetv1alpha1.Delegation) {
				if Unclaimed(d) || !d.Status.AcknowledgedAt.Equal(at(7)) {
					t.Errorf("acknowledgedAt %v", d.Status.AcknowledgedAt)
				}
			},
		},
		"acknowledging a message in flight is refused": {
			from: typed(),
			do: func(d *fleetv1alpha1.Delegation) error {
				_, err := Acknowledge(d, at(7).Time)
				return err
			},
			wantErr:   ErrNotInFlight,
			wantPhase: fleetv1alpha1.DelegationDelivered,
			wantConds: condsOf("True:"+fleetv1alpha1.ReasonDelivered, inProgress, inProgress),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := tc.from.Delegation.DeepCopy()
			if err := tc.do(d); !errors.Is(err, tc.wantErr) {
				t.Fatalf("error = %v, want %v", err, tc.wantErr)
			}
			if got := Phase(d); got != tc.wantPhase {
				t.Errorf("phase = %s, want %s", got, tc.wantPhase)
			}
			if d.Status.Outcome != tc.wantOut || Outcome(d) != tc.wantOut {
				t.Errorf("outcome = %q, want %q", d.Status.Outcome, tc.wantOut)
			}
			if tc.wantConds != nil {
				if diff := cmp.Diff(tc.wantConds, conds(d)); diff != "" {
					t.Errorf("conditions (-want +got):\n%s", diff)
				}
			}
			if Settled(d.Status.Phase) != meta.IsStatusConditionTrue(d.Status.Conditions, fleetv1alpha1.ConditionSettled) && d.Status.Conditions != nil {
				t.Error("the Settled condition disagrees with the phase")
			}
			if tc.check != nil {
				tc.check(t, d)
			}
		})
	}
}

// answer answers turn and checks whether it changed anything.
func answer(d *fleetv1alpha1.Delegation, turn, text string, wantChanged bool) error {
	changed, err := Answer(d, at(5).Time, turn, text)
	if err == nil && changed != wantChanged {
		return errors.New("answer changed the wrong thing")
	}
	return err
}

func TestNeedsCarrying(t *testing.T) {
	lead := func() *dlg { return mk("a", 0).from(fleetv1alpha1.PrincipalMember, "lead").typed(1) }
	cases := map[string]struct {
		d    *dlg
		want bool
	}{
		"a detached reply to a member":                {d: lead().detached().then(replyAt(2, "done")), want: true},
		"a reply the member waits for":                {d: lead().then(replyAt(2, "done"))},
		"a reply after the member stopped":            {d: lead().then(func(d *fleetv1alpha1.Delegation) { Detach(d, t0) }).then(replyAt(2, "done")), want: true},
		"carried already":                             {d: lead().detached().then(replyAt(2, "done")).then(func(d *fleetv1alpha1.Delegation) { ReplyCarried(d, "x") })},
		"a detached reply to a primary":               {d: mk("a", 0).detached().typed(1).then(replyAt(2, "done"))},
		"no reply":                                    {d: lead().detached().then(func(d *fleetv1alpha1.Delegation) { TurnDone(d, t0, "") })},
		"a late reply the member did not see":         {d: lead().then(func(d *fleetv1alpha1.Delegation) { TimeOut(d, t0); _ = LateReply(d, t0, "late") }), want: true},
		"a late reply after its turn was seen to end": {d: lead().then(func(d *fleetv1alpha1.Delegation) { TurnDone(d, t0, ""); _ = LateReply(d, t0, "late") }), want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := NeedsCarrying(&tc.d.Delegation); got != tc.want {
				t.Errorf("NeedsCarrying() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTurnIDs(t *testing.T) {
	for _, n := range []int{1, 2, fleetv1alpha1.MaxQuestions} {
		id := TurnID("d-1.x", n)
		if name, ok := ParseTurnID(id); !ok || name != "d-1.x" {
			t.Errorf("ParseTurnID(%q) = %q, %v", id, name, ok)
		}
	}
	if name, ok := ParseTurnID("a.b.q1"); !ok || name != "a.b" {
		t.Errorf("ParseTurnID(a.b.q1) = %q, %v", name, ok)
	}
	for _, bad := range []string{"", ".q1", "d.q0", "d.q01", "d.q", "d", "D.q1", "D_X.q1", "d.q999", "d.q33", "d.qx", "d.q+1", "\x00.q1"} {
		if name, ok := ParseTurnID(bad); ok {
			t.Errorf("ParseTurnID(%q) = %q, want refused", bad, name)
		}
	}
}

func TestCarriesOpenQuestion(t *testing.T) {
	asked := func(mutate func(d *fleetv1alpha1.Delegation)) *fleetv1alpha1.Delegation {
		d := mk("a", 0).from(fleetv1alpha1.PrincipalMember, "lead").detached().typed(1).then(askAt(1, "which way?")).obj()
		QuestionCarried(&d, "a-q1")
		if mutate != nil {
			mutate(&d)
		}
		return &d
	}
	cases := map[string]struct {
		d       *fleetv1alpha1.Delegation
		carrier string
		want    CarriedQuestion
	}{
		"open":                {d: asked(nil), carrier: "a-q1", want: QuestionOpen},
		"answered":            {d: asked(func(d *fleetv1alpha1.Delegation) { _, _ = Answer(d, t0, TurnID("a", 1), "left") }), carrier: "a-q1", want: QuestionMoot},
		"withdrawn":           {d: asked(func(d *fleetv1alpha1.Delegation) { WithdrawQuestion(d, t0, TurnID("a", 1)) }), carrier: "a-q1", want: QuestionMoot},
		"the message settled": {d: asked(func(d *fleetv1alpha1.Delegation) { Cancel(d, t0, "withdrawn") }), carrier: "a-q1", want: QuestionMoot},
		"the reply's carrier": {d: asked(nil), carrier: "a-reply", want: NotAQuestionCarrier},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := CarriesOpenQuestion(tc.d, tc.carrier); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
