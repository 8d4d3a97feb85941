package delegation

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

func TestOutcomeOfAPhaseSettledWithoutOne(t *testing.T) {
	for phase, want := range map[fleetv1alpha1.DelegationPhase]fleetv1alpha1.Outcome{
		fleetv1alpha1.DelegationReplied: fleetv1alpha1.OutcomeReply, fleetv1alpha1.DelegationTurnDone: fleetv1alpha1.OutcomeTurnDone,
		fleetv1alpha1.DelegationTimedOut: fleetv1alpha1.OutcomeTimeout, fleetv1alpha1.DelegationFailed: fleetv1alpha1.OutcomeDeliveryFailed,
		fleetv1alpha1.DelegationWorkerGone: fleetv1alpha1.OutcomeWorkerGone, fleetv1alpha1.DelegationCancelled: fleetv1alpha1.OutcomeCancelled,
		fleetv1alpha1.DelegationWorking: "", fleetv1alpha1.DelegationQueued: "",
	} {
		d := &fleetv1alpha1.Delegation{Status: fleetv1alpha1.DelegationStatus{Phase: phase}}
		if got := Outcome(d); got != want {
			t.Errorf("Outcome(%s) = %q, want %q", phase, got, want)
		}
		if Settled(phase) != (want != "") {
			t.Errorf("Settled(%s) = %v", phase, Settled(phase))
		}
	}
}

func TestUnclaimed(t *testing.T) {
	replied := func() *dlg { return mk("a", 0).typed(1).then(replyAt(2, "done")) }
	cases := map[string]struct {
		d    *dlg
		want bool
	}{
		"detached, settled":     {d: replied().detached(), want: true},
		"detached, in flight":   {d: mk("a", 0).detached().typed(1)},
		"the waiter got it":     {d: replied()},
		"the waiter left":       {d: replied().then(func(d *fleetv1alpha1.Delegation) { Detach(d, t0) }), want: true},
		"acknowledged":          {d: replied().detached().then(func(d *fleetv1alpha1.Delegation) { _, _ = Acknowledge(d, t0) })},
		"timed out, waiter got": {d: mk("a", 0).typed(1).then(func(d *fleetv1alpha1.Delegation) { TimeOut(d, t0) })},
		"a late reply after the waiter got timeout": {d: mk("a", 0).typed(1).then(func(d *fleetv1alpha1.Delegation) {
			TimeOut(d, t0)
			_ = LateReply(d, t0, "late")
		}), want: true},
		"turn done, waiter got": {d: mk("a", 0).typed(1).then(func(d *fleetv1alpha1.Delegation) { TurnDone(d, t0, "$ ") })},
		"a late reply after the waiter got turn_done": {d: mk("a", 0).typed(1).then(func(d *fleetv1alpha1.Delegation) {
			TurnDone(d, t0, "$ ")
			_ = LateReply(d, t0, "late")
		}), want: true},
		"a reply on its way to the sender's pane": {d: replied().detached().then(func(d *fleetv1alpha1.Delegation) { ReplyCarried(d, "a-reply") }), want: true},
		"a carrier of a reply": {d: mk("a", 0).detached().then(func(d *fleetv1alpha1.Delegation) {
			d.Spec.InReplyTo = "b"
			Fail(d, t0, fleetv1alpha1.ReasonLoopGuard, "")
		})},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Unclaimed(&tc.d.Delegation); got != tc.want {
				t.Errorf("Unclaimed() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLastChange(t *testing.T) {
	cases := map[string]struct {
		status fleetv1alpha1.DelegationStatus
		want   *metav1.Time
	}{
		"not settled":              {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationWorking}, want: &metav1.Time{}},
		"settled":                  {status: fleetv1alpha1.DelegationStatus{SettledAt: at(5), RepliedAt: at(5)}, want: at(5)},
		"a reply after the settle": {status: fleetv1alpha1.DelegationStatus{SettledAt: at(5), RepliedAt: at(9)}, want: at(9)},
		"acknowledged last":        {status: fleetv1alpha1.DelegationStatus{SettledAt: at(5), AcknowledgedAt: at(60)}, want: at(60)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := &fleetv1alpha1.Delegation{Status: tc.status}
			if got := LastChange(d); !got.Equal(tc.want.Time) {
				t.Errorf("LastChange() = %v, want %v", got, tc.want.Time)
			}
		})
	}
}
