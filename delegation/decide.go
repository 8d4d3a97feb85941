package delegation

import (
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// Policy tunes Decide.
type Policy struct {
	// ConfirmWindow is how long a delivery whose typing nobody saw succeed
	// (the controller stopped in between) waits for a pickup to prove it;
	// and how long a settled message that was never seen picked up gates
	// the next one.
	ConfirmWindow time.Duration
	// MaxHops bounds a chain of messages without a primary's message: a
	// member's message sent while it works on one, and a reply carried
	// back to a member's pane, are each a hop further (spec.hops).
	MaxHops int32
	// Retention is how long a settled Delegation stays after its last change
	// before it is deleted; 0 keeps every Delegation. Outcomes their sender
	// has not collected stay until acknowledged.
	Retention time.Duration
	// CancelledRetention is how long a cancelled Delegation stays after
	// its last change, when shorter than Retention; 0 takes Retention. Its
	// sender withdrew it and got its outcome, and one that sends, cancels
	// and sends again would otherwise keep a day of messages in etcd.
	CancelledRetention time.Duration
}

// DefaultPolicy is the policy fleetd runs with.
var DefaultPolicy = Policy{ConfirmWindow: 10 * time.Second, MaxHops: 20, Retention: 24 * time.Hour, CancelledRetention: 5 * time.Minute}

// Member is what Decide knows of the member a queue belongs to.
type Member struct {
	// Gone is true when the member was deleted or is being deleted.
	Gone bool
	// Ready is the member's Ready condition.
	Ready bool
	// PaneID is the member's current pane, and TerminalID the terminal
	// behind it.
	PaneID, TerminalID string
	// Status is the agent's status.
	Status fleetv1alpha1.AgentStatus
	// Seq is herdr's state_change_seq for the agent now, and WorkingSeq the
	// seq at which it was last seen working or blocked: a later WorkingSeq
	// than a message's typing proves its pickup.
	Seq, WorkingSeq int64
	// MaySuspend says the member may be suspended: the injector reads it
	// live after recording its intent to type, and types nothing into a
	// member written suspended meanwhile. Decide does not look at it.
	MaySuspend bool
	// BlockedAtSeq, when set, is the seq at which herdr refused a delivery
	// for a dialog the status did not show: the queue is blocked, and
	// nothing is typed until the seq moves past it.
	BlockedAtSeq *int64
}

// idle says whether the agent waits for input; done is idle, unseen.
func (m Member) idle() bool {
	return m.Status == fleetv1alpha1.AgentIdle || m.Status == fleetv1alpha1.AgentDone
}

// canTakeInput says whether typing now would reach an idle prompt.
func (m Member) canTakeInput() bool {
	if m.BlockedAtSeq != nil && m.Seq <= *m.BlockedAtSeq {
		return false
	}
	return !m.Gone && m.Ready && m.PaneID != "" && m.idle()
}

// StepKind is one thing the injector does to a Delegation.
type StepKind string

// Steps.
const (
	// StepDeliver records the intent to type the Delegation, then types it.
	StepDeliver StepKind = "Deliver"
	// StepPickup records that the member picked the Delegation up.
	StepPickup StepKind = "Pickup"
	// StepTurnDone settles TurnDone with the terminal's tail, after a live
	// look shows no reply came first.
	StepTurnDone StepKind = "TurnDone"
	// StepTimeOut settles TimedOut.
	StepTimeOut StepKind = "TimeOut"
	// StepWorkerGone settles WorkerGone with Message.
	StepWorkerGone StepKind = "WorkerGone"
	// StepFail settles Failed with Reason and Message.
	StepFail StepKind = "Fail"
	// StepCancel settles Cancelled.
	StepCancel StepKind = "Cancel"
	// StepInterrupt interrupts the member's turn (its agent's interrupt
	// key) and settles Cancelled: the sender withdrew a message in flight.
	StepInterrupt StepKind = "Interrupt"
	// StepCarryReply carries a reply nobody waits for into its member
	// sender's pane.
	StepCarryReply StepKind = "CarryReply"
	// StepCarryQuestion carries a question nobody waits for into its
	// member sender's pane, saying how to answer it.
	StepCarryQuestion StepKind = "CarryQuestion"
	// StepExpire deletes a settled Delegation past its retention.
	StepExpire StepKind = "Expire"
)

// Step is one decision about one Delegation.
type Step struct {
	Kind StepKind
	Name string
	// Reason and Message explain a StepFail, StepWorkerGone or StepCancel.
	Reason, Message string
}

// Decision is what to do for one member's queue now.
type Decision struct {
	Steps []Step
	// RequeueAfter is when to look again (0: only on the next event).
	RequeueAfter time.Duration
}

// SortQueue orders Delegations as their member's queue takes them
// (QueuedBefore).
func SortQueue(ds []fleetv1alpha1.Delegation) {
	sort.SliceStable(ds, func(i, j int) bool { return QueuedBefore(&ds[i], &ds[j]) })
}

// QueuedBefore says whether a comes before b in their member's queue: by
// creation timestamp, then the gateway's nanosecond sequence, then name.
// Messages are typed in this order, so of two typed within the same second
// (the timestamps a Delegation's status keeps have whole seconds) the later
// in the queue was typed later.
func QueuedBefore(a, b *fleetv1alpha1.Delegation) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	sa, sb := a.Annotations[fleetv1alpha1.AnnotationSequence], b.Annotations[fleetv1alpha1.AnnotationSequence]
	if sa != sb {
		ta, ea := time.Parse(time.RFC3339Nano, sa)
		tb, eb := time.Parse(time.RFC3339Nano, sb)
		if ea == nil && eb == nil {
			return ta.Before(tb)
		}
		return sa < sb
	}
	return a.Name < b.Name
}

// Seen is what the controller gathered for Decide beside the Delegations.
type Seen struct {
	// Typed names the Delegations this controller saw typed (it forgets
	// them when it restarts).
	Typed sets.Set[string]
	// GoneSenders names the Members that sent some of the Delegations and
	// no longer exist.
	GoneSenders sets.Set[string]
	// MootCarriers names Delegations that carry a question into its
	// sender's pane, and whose question was answered or withdrawn (or its
	// message settled) before they were typed.
	MootCarriers sets.Set[string]
}

// Decide is the injector: given a member, every Delegation addressed to it,
// the time and what the controller saw, it says what settles, what is
// picked up, what to deliver and when to look again.
//
// The rules, per member:
//   - FIFO by creation; the head is typed only while the member is ready and
//     idle (or done), never while it is blocked (typing would answer the
//     dialog) or its status is unknown.
//   - One message per turn: nothing is typed while the last one typed into
//     the member's current terminal waits for its pickup.
//   - A pickup is the member seen working (or blocked) after the typing;
//     idle again after it ends the turn: a message the worker did not reply
//     to settles TurnDone.
//   - A message typed past its deadline settles TimedOut; a queued one stays
//     queued (bridge_cancel withdraws it).
//   - A message its sender withdrew settles Cancelled: at once while queued,
//     after its member's turn is interrupted once typed.
//   - A message whose typing a controller restart left unproven is never
//     typed again: any status change since the typing confirms it (what
//     happened while nobody watched is unknown), else it fails.
func Decide(m Member, ds []fleetv1alpha1.Delegation, now time.Time, policy Policy, seen Seen) Decision {
	typed, goneSenders := seen.Typed, seen.GoneSenders
	ds = append([]fleetv1alpha1.Delegation(nil), ds...)
	SortQueue(ds)
	var dec Decision
	later := func(at time.Time) {
		if d := at.Sub(now); d > 0 && (dec.RequeueAfter == 0 || d < dec.RequeueAfter) {
			dec.RequeueAfter = d
		}
	}
	step := func(kind StepKind, d *fleetv1alpha1.Delegation, reason, format string, args ...any) {
		dec.Steps = append(dec.Steps, Step{Kind: kind, Name: d.Name, Reason: reason, Message: fmt.Sprintf(format, args...)})
	}

	var (
		flying   *fleetv1alpha1.Delegation // typed, not settled
		lastType *fleetv1alpha1.Delegation // most recently typed, any phase
		queue    []*fleetv1alpha1.Delegation
	)
	for i := range ds {
		d := &ds[i]
		if Typed(d) && (lastType == nil || !d.Status.DeliveringAt.Before(lastType.Status.DeliveringAt)) {
			lastType = d
		}
		if Settled(d.Status.Phase) {
			if NeedsCarrying(d) {
				step(StepCarryReply, d, "", "")
			}
			continue
		}
		deadline := Deadline(d)
		switch {
		case m.Gone:
			step(StepWorkerGone, d, fleetv1alpha1.ReasonWorkerGone, "member %s is gone", d.Spec.To)
		case Typed(d) && d.Status.PaneID != "" && m.PaneID != "" && !typedInto(d, m):
			step(StepWorkerGone, d, fleetv1alpha1.ReasonWorkerGone, "pane %s was lost while the message was in it", d.Status.PaneID)
		case Typed(d) && CancelRequested(d):
			step(StepInterrupt, d, fleetv1alpha1.ReasonCancelled, "")
		case Typed(d) && !now.Before(deadline):
			step(StepTimeOut, d, fleetv1alpha1.ReasonTimedOut, "")
		case !Typed(d) && CancelRequested(d):
			step(StepCancel, d, fleetv1alpha1.ReasonCancelled, "its sender withdrew it before it was delivered")
		case !Typed(d) && seen.MootCarriers.Has(d.Name):
			step(StepCancel, d, fleetv1alpha1.ReasonCancelled, "the question it carries was answered or withdrawn before it could be typed")
		case !Typed(d) && d.Spec.Hops > policy.MaxHops:
			step(StepFail, d, fleetv1alpha1.ReasonLoopGuard, "refused: hop %d of a chain of messages without a primary's message (limit %d)", d.Spec.Hops, policy.MaxHops)
		case Typed(d):
			flying = d
			picked := PickedUp(d, m.WorkingSeq)
			if AwaitsConfirmation(d, m.WorkingSeq, typed.Has(d.Name)) {
				// The intent was recorded and this controller did not see
				// the typing end: it restarted in between, and nobody
				// watched the agent meanwhile. Any status change since the
				// typing proves it reached the agent; without one it is
				// never typed again.
				switch waitUntil := d.Status.DeliveringAt.Add(policy.ConfirmWindow); {
				case m.Seq > d.Status.DeliveringSeq:
					picked = true
				case now.Before(waitUntil):
					later(waitUntil)
					continue
				default:
					step(StepFail, d, fleetv1alpha1.ReasonDeliveryUnconfirmed, "delivery was interrupted and no pickup proves it was typed; it is not typed again")
					flying = nil
					continue
				}
			}
			switch {
			case picked && d.Status.Phase != fleetv1alpha1.DelegationAsking && m.idle() && m.Seq > m.WorkingSeq:
				step(StepTurnDone, d, fleetv1alpha1.ReasonTurnDone, "")
				flying = nil
			case picked && d.Status.Phase == fleetv1alpha1.DelegationDelivered:
				step(StepPickup, d, "", "")
			case QuestionNeedsCarrying(d):
				step(StepCarryQuestion, d, "", "")
			}
			if flying != nil {
				later(deadline)
			}
		default:
			// Queued, even past its deadline: the sender's call timed out,
			// the message may still be delivered.
			queue = append(queue, d)
		}
	}

	for i := range ds {
		d := &ds[i]
		if d == lastType && !m.Gone && gates(d, m, now, policy) {
			// It still gates the next delivery until its pickup shows.
			if Settled(d.Status.Phase) {
				later(LastChange(d).Add(policy.ConfirmWindow))
			}
			continue
		}
		senderGone := (d.Spec.From.Kind == fleetv1alpha1.PrincipalMember && goneSenders.Has(d.Spec.From.Name)) ||
			// A Kubernetes user reads outcomes with kubectl: none is owed
			// to it through the gateway.
			d.Spec.From.Kind == fleetv1alpha1.PrincipalUser
		if at, keep := Expiry(d, RetentionOf(d, policy), senderGone); !keep {
			if now.Before(at) {
				later(at)
			} else {
				step(StepExpire, d, "", "")
			}
		}
	}

	if flying != nil || len(queue) == 0 || !m.canTakeInput() {
		return dec
	}
	// One delivery per turn: the last message typed must have been picked
	// up before the next is typed.
	if lastType != nil && gates(lastType, m, now, policy) {
		if !InFlight(lastType) {
			later(LastChange(lastType).Add(policy.ConfirmWindow))
		}
		return dec
	}
	step(StepDeliver, queue[0], "", "")
	return dec
}

// AwaitsConfirmation reports whether d, typed and not settled, waits for a
// status change of its agent to prove it reached it: its typing was begun
// by a controller that did not see it end (this one before a restart, or
// another replica before the shard changed hands; seen says this one saw
// it), and no pickup shows yet.
func AwaitsConfirmation(d *fleetv1alpha1.Delegation, workingSeq int64, seen bool) bool {
	return InFlight(d) && !seen && d.Status.DeliveredAt == nil && !PickedUp(d, workingSeq)
}

// gates says whether d, the last message typed, keeps the next one waiting: it
// was typed into the member's current terminal and no pickup of it has
// shown. A message that never reached the agent (refused, unconfirmed, its
// pane lost, withdrawn) gates nothing, and neither does one typed into an
// earlier terminal (that agent is gone; the new one's seq starts afresh). A
// settled one never seen picked up (a reply faster than a status sample)
// gates for the confirm window at most.
func gates(d *fleetv1alpha1.Delegation, m Member, now time.Time, policy Policy) bool {
	if !typedInto(d, m) || PickedUp(d, m.WorkingSeq) {
		return false
	}
	switch d.Status.Phase {
	case fleetv1alpha1.DelegationFailed, fleetv1alpha1.DelegationWorkerGone, fleetv1alpha1.DelegationCancelled, fleetv1alpha1.DelegationTurnDone:
		return false
	}
	return InFlight(d) || now.Before(LastChange(d).Add(policy.ConfirmWindow))
}

// typedInto says whether d was typed into the member's current terminal.
// herdr reuses pane ids after a restart, so the terminal id decides where
// both are known.
func typedInto(d *fleetv1alpha1.Delegation, m Member) bool {
	if d.Status.PaneID != m.PaneID {
		return false
	}
	return d.Status.TerminalID == "" || m.TerminalID == "" || d.Status.TerminalID == m.TerminalID
}
