// Package delegation owns a Delegation's life: its phases, what counts as
// in flight, the outcome and conditions of each phase, and every transition
// from one to the next. The Delegation controller (the injector) and the
// gateway both move Delegations only through the transitions here, so the
// two can never drift apart; and Decide, the injector's decision over one
// member's queue, lives here too.
//
// Nothing here talks to an API server or to herdr: every function takes a
// Delegation and what is known, and changes the Delegation in memory or
// says what to do. The callers write.
//
// A Delegation's life:
//
//	queued ── BeginDelivery ──> Delivered ── Pickup ──> Working <──> Asking
//	   │                            │                       │
//	   │                            └─────── Reply / TurnDone / TimeOut ──> settled
//	   └── Cancel, WorkerGone, Fail, and after the deadline it stays queued
//
// A queued Delegation has no phase yet, or Pending or Queued (the API
// server's default for a new one). Settled phases are Replied, TurnDone,
// TimedOut, Failed, WorkerGone and Cancelled; a reply may still come to a
// TimedOut or TurnDone one (LateReply).
package delegation

import (
	"cmp"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// Settled reports whether a phase is terminal: Replied, TurnDone, TimedOut,
// Failed, WorkerGone or Cancelled.
func Settled(p fleetv1alpha1.DelegationPhase) bool {
	switch p {
	case fleetv1alpha1.DelegationReplied, fleetv1alpha1.DelegationTurnDone, fleetv1alpha1.DelegationTimedOut,
		fleetv1alpha1.DelegationFailed, fleetv1alpha1.DelegationWorkerGone, fleetv1alpha1.DelegationCancelled:
		return true
	}
	return false
}

// Phase is d's phase, Pending for a Delegation nothing has happened to.
func Phase(d *fleetv1alpha1.Delegation) fleetv1alpha1.DelegationPhase {
	return cmp.Or(d.Status.Phase, fleetv1alpha1.DelegationPending)
}

// Typed reports whether d was typed into a pane, or is being: the intent to
// type it was recorded.
func Typed(d *fleetv1alpha1.Delegation) bool { return d.Status.DeliveringAt != nil }

// Queued reports whether d waits in its member's queue: neither typed nor
// settled.
func Queued(d *fleetv1alpha1.Delegation) bool { return !Typed(d) && !Settled(d.Status.Phase) }

// InFlight reports whether d is in its member's hands: typed and not
// settled. A worker's reply or question applies to it.
func InFlight(d *fleetv1alpha1.Delegation) bool { return Typed(d) && !Settled(d.Status.Phase) }

// PickedUp reports whether the member was seen working on d: its status
// was working (or blocked on a dialog) at a state_change_seq after d was
// typed. A status that only flickered (idle, unknown, idle) is no pickup.
func PickedUp(d *fleetv1alpha1.Delegation, workingSeq int64) bool {
	return Typed(d) && workingSeq > d.Status.DeliveringSeq
}

// LateReplyAllowed reports whether a worker's reply would still be
// recorded on d: it was typed, settled without a reply because its
// deadline passed or its turn was seen to end (TimedOut, TurnDone), and has
// none yet. A turn seen to end may not have: herdr's status says so, and
// with the real herdr any agent can report any pane's. The worker's real
// reply then reaches the sender late, never lost.
func LateReplyAllowed(d *fleetv1alpha1.Delegation) bool {
	return lateReplyPhase(d.Status.Phase) && Typed(d) && d.Status.Reply == nil
}

// LatestTyped is the one of ds that keep passes that was typed last, by
// typing, then creation, then name, so that every replica picks the same.
func LatestTyped(ds []fleetv1alpha1.Delegation, keep func(*fleetv1alpha1.Delegation) bool) *fleetv1alpha1.Delegation {
	var best *fleetv1alpha1.Delegation
	for i := range ds {
		d := &ds[i]
		if keep(d) && (best == nil || typedAfter(d, best)) {
			best = d
		}
	}
	return best
}

func typedAfter(a, b *fleetv1alpha1.Delegation) bool {
	if c := a.Status.DeliveringAt.Compare(b.Status.DeliveringAt.Time); c != 0 {
		return c > 0
	}
	// Typed within the same second: the queue's order is the typing's.
	return QueuedBefore(b, a)
}

// Superseded is the set of the ds that stay (all to one member; stay nil
// keeps every one) that a late reply can no longer reach: every one typed
// but the last. A worker's reply goes to the message it was handling, the
// last typed to it (see LateReplyAllowed).
func Superseded(ds []fleetv1alpha1.Delegation, stay func(*fleetv1alpha1.Delegation) bool) map[string]bool {
	typed := func(d *fleetv1alpha1.Delegation) bool { return Typed(d) && (stay == nil || stay(d)) }
	last := LatestTyped(ds, typed)
	out := map[string]bool{}
	for i := range ds {
		if d := &ds[i]; d != last && typed(d) {
			out[d.Name] = true
		}
	}
	return out
}

// lateReplyPhase says whether a reply may still come to a Delegation that
// settled in phase p.
func lateReplyPhase(p fleetv1alpha1.DelegationPhase) bool {
	return p == fleetv1alpha1.DelegationTimedOut || p == fleetv1alpha1.DelegationTurnDone
}

// RepliedWith reports whether d was typed and has text as its reply.
func RepliedWith(d *fleetv1alpha1.Delegation, text string) bool {
	return Typed(d) && d.Status.Reply != nil && *d.Status.Reply == text
}

// LateReplied reports whether d has a reply that came after it settled.
func LateReplied(d *fleetv1alpha1.Delegation) bool {
	return lateReplyPhase(d.Status.Phase) && d.Status.Reply != nil
}

// Deadline is when d times out: its timeoutSeconds (the default when unset)
// counted from its creation.
func Deadline(d *fleetv1alpha1.Delegation) time.Time {
	timeout := d.Spec.TimeoutSeconds
	if timeout <= 0 {
		timeout = fleetv1alpha1.DefaultTimeoutSeconds
	}
	return d.CreationTimestamp.Add(time.Duration(timeout) * time.Second)
}

// Waits reports whether d's sender blocks on its outcome (bridge_send, the
// default) rather than dispatching it detached.
func Waits(d *fleetv1alpha1.Delegation) bool { return d.Spec.Wait == nil || *d.Spec.Wait }

// Unclaimed reports whether a settled outcome is still owed to its sender,
// who collects it with bridge_poll and bridge_ack: nobody held a call for it
// (it was sent detached, the waiter left, or the reply came late, after the
// timeout or the end of the turn) and it was not acknowledged (by bridge_ack, a re-attached
// bridge_send, or the controller once the reply was typed into a member
// sender's pane). A Delegation that carries a reply back (inReplyTo) is
// plumbing and owed to nobody.
func Unclaimed(d *fleetv1alpha1.Delegation) bool {
	if !Settled(d.Status.Phase) || d.Status.AcknowledgedAt != nil || d.Spec.InReplyTo != "" {
		return false
	}
	return !Waits(d) || d.Status.DetachedAt != nil || LateReplied(d)
}

// LastChange is the latest moment a settled d changed: when it settled,
// when a (late) reply came, when its sender acknowledged it. Zero while it
// has not settled.
func LastChange(d *fleetv1alpha1.Delegation) time.Time {
	var last time.Time
	for _, t := range []*metav1.Time{d.Status.SettledAt, d.Status.RepliedAt, d.Status.AcknowledgedAt} {
		if t != nil && t.After(last) {
			last = t.Time
		}
	}
	return last
}

// Outcome is what d's sender gets for a settled d: its recorded outcome, or
// the one its phase implies for a Delegation an older writer settled
// without one.
func Outcome(d *fleetv1alpha1.Delegation) fleetv1alpha1.Outcome {
	if d.Status.Outcome != "" {
		return d.Status.Outcome
	}
	switch d.Status.Phase {
	case fleetv1alpha1.DelegationReplied:
		return fleetv1alpha1.OutcomeReply
	case fleetv1alpha1.DelegationTurnDone:
		return fleetv1alpha1.OutcomeTurnDone
	case fleetv1alpha1.DelegationTimedOut:
		return fleetv1alpha1.OutcomeTimeout
	case fleetv1alpha1.DelegationFailed:
		return fleetv1alpha1.OutcomeDeliveryFailed
	case fleetv1alpha1.DelegationWorkerGone:
		return fleetv1alpha1.OutcomeWorkerGone
	case fleetv1alpha1.DelegationCancelled:
		return fleetv1alpha1.OutcomeCancelled
	}
	return ""
}

// OpenQuestion is d's open question: the last one without an answer that
// its worker still waits for; nil when there is none or d has settled.
func OpenQuestion(d *fleetv1alpha1.Delegation) *fleetv1alpha1.Question {
	if Settled(d.Status.Phase) {
		return nil
	}
	qs := d.Status.Questions
	for i := len(qs) - 1; i >= 0; i-- {
		if qs[i].Answer == nil && qs[i].WithdrawnAt == nil {
			return &qs[i]
		}
	}
	return nil
}

// FindQuestion returns d's question with turnID, nil when there is none.
func FindQuestion(d *fleetv1alpha1.Delegation, turnID string) *fleetv1alpha1.Question {
	for i := range d.Status.Questions {
		if d.Status.Questions[i].TurnID == turnID {
			return &d.Status.Questions[i]
		}
	}
	return nil
}

// SettledMessage is how d settled, as its conditions explain it, or
// fallback.
func SettledMessage(d *fleetv1alpha1.Delegation, fallback string) string {
	for _, c := range d.Status.Conditions {
		if c.Type == fleetv1alpha1.ConditionSettled && c.Status == metav1.ConditionTrue && c.Message != "" {
			return c.Message
		}
	}
	for _, c := range d.Status.Conditions {
		if c.Type == fleetv1alpha1.ConditionDelivered && c.Status == metav1.ConditionFalse && c.Message != "" {
			return c.Message
		}
	}
	return fallback
}
