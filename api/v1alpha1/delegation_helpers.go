package v1alpha1

import "time"

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
