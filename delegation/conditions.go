package delegation

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// notDelivered are the reasons a settled Delegation was never typed.
var notDelivered = map[string]bool{
	fleetv1alpha1.ReasonDeliveryRefused:     true,
	fleetv1alpha1.ReasonDeliveryUnconfirmed: true,
	fleetv1alpha1.ReasonLoopGuard:           true,
}

// setConditions sets d's conditions from its phase, with reason and msg for
// the step that got it there. Every transition calls it, so conditions and
// phase are always written together.
//   - Delivered: True once d was typed (its intent recorded); False while it
//     waits (with why, when a delivery was put off), or with why it never
//     was.
//   - Settled: True in a terminal phase, with how it settled.
//   - Ready: True once settled with an outcome its sender can use (a reply
//     or turn_done).
func setConditions(d *fleetv1alpha1.Delegation, reason, msg string) {
	set := func(typ string, ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&d.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: d.Generation})
	}
	switch {
	case Typed(d) && !notDelivered[reason]:
		set(fleetv1alpha1.ConditionDelivered, true, fleetv1alpha1.ReasonDelivered, "typed into pane "+d.Status.PaneID)
	case notDelivered[reason] || Settled(d.Status.Phase):
		// It never will be, and this is why.
		set(fleetv1alpha1.ConditionDelivered, false, reason, msg)
	case msg != "":
		set(fleetv1alpha1.ConditionDelivered, false, fleetv1alpha1.ReasonQueued, msg)
	default:
		set(fleetv1alpha1.ConditionDelivered, false, fleetv1alpha1.ReasonQueued, "waiting for member "+d.Spec.To)
	}
	settled := Settled(d.Status.Phase)
	settledReason, readyReason := fleetv1alpha1.ReasonInProgress, fleetv1alpha1.ReasonInProgress
	if settled {
		settledReason, readyReason = reason, reason
	}
	set(fleetv1alpha1.ConditionSettled, settled, settledReason, msg)
	good := d.Status.Outcome == fleetv1alpha1.OutcomeReply || d.Status.Outcome == fleetv1alpha1.OutcomeTurnDone
	set(fleetv1alpha1.ConditionReady, settled && good, readyReason, msg)
	d.Status.ObservedGeneration = d.Generation
}
