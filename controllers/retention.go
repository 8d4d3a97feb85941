package controllers

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// expiry says when retention may delete a Delegation: retention after its
// last change. keep is true while it must stay whatever its age: not settled
// yet, settled by the gateway and not recorded yet, a reply still to be
// carried to its member sender, or an outcome its sender has not collected
// (bridge_poll shows it until bridge_ack, and nothing else holds it), unless
// that sender is a Member that no longer exists and so never will.
func expiry(d *fleetv1alpha1.Delegation, retention time.Duration, senderGone bool) (at time.Time, keep bool) {
	if retention <= 0 || !d.Status.Phase.IsTerminal() ||
		!meta.IsStatusConditionTrue(d.Status.Conditions, fleetv1alpha1.ConditionSettled) ||
		needsDetachedReply(d) || (d.Unclaimed() && !senderGone) {
		return time.Time{}, true
	}
	last := d.LastChange()
	if last.IsZero() {
		// Settled by an older writer that did not stamp the time.
		last = d.CreationTimestamp.Time
	}
	return last.Add(retention), false
}

// handedOver lists the carriers in ds that were typed into their member's
// pane: the replies they carry reached their senders.
func handedOver(ds []fleetv1alpha1.Delegation) []*fleetv1alpha1.Delegation {
	var out []*fleetv1alpha1.Delegation
	for i := range ds {
		if ds[i].Spec.InReplyTo != "" && ds[i].Status.DeliveredAt != nil {
			out = append(out, &ds[i])
		}
	}
	return out
}
