package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IsTerminal reports whether a Delegation in phase p has settled: Replied,
// TurnDone, TimedOut, Failed, WorkerGone or Cancelled.
func (p DelegationPhase) IsTerminal() bool {
	switch p {
	case DelegationReplied, DelegationTurnDone, DelegationTimedOut,
		DelegationFailed, DelegationWorkerGone, DelegationCancelled:
		return true
	}
	return false
}

// Deadline is when the Delegation times out: its timeoutSeconds (the
// default when unset) counted from its creation.
func (d *Delegation) Deadline() time.Time {
	timeout := d.Spec.TimeoutSeconds
	if timeout <= 0 {
		timeout = DefaultTimeoutSeconds
	}
	return d.CreationTimestamp.Add(time.Duration(timeout) * time.Second)
}

// Waits reports whether the sender blocks on the Delegation's outcome
// (bridge_send, the default) rather than dispatching it detached.
func (d *Delegation) Waits() bool { return d.Spec.Wait == nil || *d.Spec.Wait }

// Unclaimed reports whether a settled outcome is still owed to its sender,
// who collects it with bridge_poll and bridge_ack: nobody held a call for it
// (it was sent detached, the waiter left, or the reply came after the
// timeout) and it was not acknowledged (by bridge_ack, a re-attached
// bridge_send, or the controller once the reply was typed into a member
// sender's pane). A Delegation that carries a reply back (inReplyTo) is
// plumbing, not something its nominal sender sent, and is never owed to
// anyone.
func (d *Delegation) Unclaimed() bool {
	if !d.Status.Phase.IsTerminal() || d.Status.AcknowledgedAt != nil || d.Spec.InReplyTo != "" {
		return false
	}
	late := d.Status.Phase == DelegationTimedOut && d.Status.Reply != nil
	return !d.Waits() || d.Status.DetachedAt != nil || late
}

// LastChange is the latest of the moments a settled Delegation last changed:
// when it settled, when a (late) reply arrived, when its sender acknowledged
// it. Zero while it has not settled.
func (d *Delegation) LastChange() time.Time {
	var last time.Time
	for _, t := range []*metav1.Time{d.Status.SettledAt, d.Status.RepliedAt, d.Status.AcknowledgedAt} {
		if t != nil && t.After(last) {
			last = t.Time
		}
	}
	return last
}
