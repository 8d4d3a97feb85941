package delegation

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// Expiry says when retention may delete d: retention after its last
// change. keep is true while it must stay whatever its age: not settled
// yet, its settling not recorded, a reply still to be carried to its member
// sender, or an outcome its sender has not collected (bridge_poll shows it
// until bridge_ack, and nothing else holds it), unless that sender will
// never collect it (senderGone: a Member that no longer exists, a kubectl
// user).
func Expiry(d *fleetv1alpha1.Delegation, retention time.Duration, senderGone bool) (at time.Time, keep bool) {
	if retention <= 0 || !Settled(d.Status.Phase) ||
		!meta.IsStatusConditionTrue(d.Status.Conditions, fleetv1alpha1.ConditionSettled) ||
		NeedsCarrying(d) || (Unclaimed(d) && !senderGone) {
		return time.Time{}, true
	}
	last := LastChange(d)
	if last.IsZero() {
		// Settled by an older writer that did not stamp the time.
		last = d.CreationTimestamp.Time
	}
	return last.Add(retention), false
}

// RetentionOf is how long d stays after its last change under policy:
// Retention, or CancelledRetention for a cancelled d when that is shorter.
// 0 keeps d.
func RetentionOf(d *fleetv1alpha1.Delegation, policy Policy) time.Duration {
	if policy.Retention > 0 && d.Status.Phase == fleetv1alpha1.DelegationCancelled && policy.CancelledRetention > 0 {
		return min(policy.Retention, policy.CancelledRetention)
	}
	return policy.Retention
}
