package controllers

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/sets"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// DeliveryPolicy tunes the injector's decisions.
type DeliveryPolicy struct {
	// SettleWindow is how long a member must stay idle after a pickup before a
	// turn without a reply settles TurnDone, so a bridge_reply racing the
	// idle transition wins.
	SettleWindow time.Duration
	// ConfirmWindow is how long an interrupted delivery (intent recorded,
	// confirmation missing) waits for a pickup to prove it was typed.
	ConfirmWindow time.Duration
	// MaxHops bounds detached replies chained without a primary's message.
	MaxHops int32
	// Retention is how long a settled Delegation stays after its last change
	// before it is deleted; 0 keeps every Delegation. Outcomes their sender
	// has not collected stay until acknowledged (see expiry).
	Retention time.Duration
}

// DefaultDeliveryPolicy is the policy fleetd runs with.
var DefaultDeliveryPolicy = DeliveryPolicy{SettleWindow: 3 * time.Second, ConfirmWindow: 10 * time.Second, MaxHops: 20, Retention: 24 * time.Hour}

// MemberView is what the injector needs to know of a member.
type MemberView struct {
	// Gone is true when the member was deleted or is being deleted.
	Gone bool
	// Ready is the member's Ready condition.
	Ready bool
	// PaneID is the member's current pane, and TerminalID the terminal
	// behind it.
	PaneID     string
	TerminalID string
	// Status is the agent's status and Since when it holds.
	Status fleetv1alpha1.AgentStatus
	Since  time.Time
	// Seq is herdr's state_change_seq for the agent.
	Seq int64
	// Command is true for a member that runs a plain command, not an agent
	// herdr knows: herdr's agent.prompt refuses it, so it is typed.
	Command bool
}

// canTakeInput says whether typing now would reach an idle prompt.
func (m MemberView) canTakeInput() bool {
	return !m.Gone && m.Ready && m.PaneID != "" && (m.Status == fleetv1alpha1.AgentIdle || m.Status == fleetv1alpha1.AgentDone)
}

// StepKind is one thing the injector does to a Delegation.
type StepKind string

// Steps, in the order the controller carries them out.
const (
	// StepQueue moves a Pending Delegation into the queue.
	StepQueue StepKind = "Queue"
	// StepSettle ends a Delegation in a terminal phase.
	StepSettle StepKind = "Settle"
	// StepPickup records that the member picked the Delegation up.
	StepPickup StepKind = "Pickup"
	// StepConfirm records that an interrupted delivery was typed after all.
	StepConfirm StepKind = "Confirm"
	// StepTurnDone settles TurnDone with the terminal's tail, which the
	// controller reads first.
	StepTurnDone StepKind = "TurnDone"
	// StepDetachedReply carries a reply nobody waits for back into the
	// sender's pane.
	StepDetachedReply StepKind = "DetachedReply"
	// StepRecord brings the conditions of a Delegation the gateway settled
	// (a reply) in line with its phase.
	StepRecord StepKind = "Record"
	// StepExpire deletes a settled Delegation past its retention.
	StepExpire StepKind = "Expire"
	// StepDeliver types the Delegation into the pane.
	StepDeliver StepKind = "Deliver"
)

// Step is one decision about one Delegation.
type Step struct {
	Kind StepKind
	Name string
	// Phase, Outcome, Reason and Message describe a StepSettle.
	Phase   fleetv1alpha1.DelegationPhase
	Outcome fleetv1alpha1.Outcome
	Reason  string
	Message string
}

// Decision is what to do for one member's queue now.
type Decision struct {
	Steps []Step
	// RequeueAfter is when to look again (0: only on the next event).
	RequeueAfter time.Duration
	// QueueDepth and InFlight go to the member's status.
	QueueDepth int32
	InFlight   string
}

func inFlight(p fleetv1alpha1.DelegationPhase) bool {
	return p == fleetv1alpha1.DelegationDelivered || p == fleetv1alpha1.DelegationWorking || p == fleetv1alpha1.DelegationAsking
}

// SortQueue orders Delegations by creation: timestamp, then the gateway's
// nanosecond sequence, then name.
func SortQueue(ds []fleetv1alpha1.Delegation) {
	sort.SliceStable(ds, func(i, j int) bool {
		a, b := &ds[i], &ds[j]
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
	})
}

// Decide is the injector: given a member, every Delegation addressed to it
// and the time, it says what settles, what is picked up, what to deliver and
// when to look again. goneSenders names the Members that sent some of ds and
// no longer exist. It is pure; the controller carries the steps out.
func Decide(m MemberView, ds []fleetv1alpha1.Delegation, now time.Time, policy DeliveryPolicy, goneSenders sets.Set[string]) Decision {
	ds = append([]fleetv1alpha1.Delegation(nil), ds...)
	SortQueue(ds)
	var dec Decision
	later := func(at time.Time) {
		if d := at.Sub(now); d > 0 && (dec.RequeueAfter == 0 || d < dec.RequeueAfter) {
			dec.RequeueAfter = d
		}
	}
	settle := func(d *fleetv1alpha1.Delegation, phase fleetv1alpha1.DelegationPhase, outcome fleetv1alpha1.Outcome, reason, format string, args ...any) {
		dec.Steps = append(dec.Steps, Step{Kind: StepSettle, Name: d.Name, Phase: phase, Outcome: outcome, Reason: reason, Message: fmt.Sprintf(format, args...)})
	}

	var (
		flying       *fleetv1alpha1.Delegation // delivered, not settled
		lastDelivery *fleetv1alpha1.Delegation // most recently typed, any phase
		queue        []*fleetv1alpha1.Delegation
	)
	for i := range ds {
		d := &ds[i]
		if d.Status.DeliveringAt != nil && (lastDelivery == nil || !d.Status.DeliveringAt.Before(lastDelivery.Status.DeliveringAt)) {
			lastDelivery = d
		}
		if d.Status.Phase.IsTerminal() {
			if !meta.IsStatusConditionTrue(d.Status.Conditions, fleetv1alpha1.ConditionSettled) {
				dec.Steps = append(dec.Steps, Step{Kind: StepRecord, Name: d.Name})
			}
			if needsDetachedReply(d) {
				dec.Steps = append(dec.Steps, Step{Kind: StepDetachedReply, Name: d.Name})
			}
			continue
		}
		deadline := d.Deadline()
		typed := d.Status.DeliveringAt != nil
		switch {
		case m.Gone:
			settle(d, fleetv1alpha1.DelegationWorkerGone, fleetv1alpha1.OutcomeWorkerGone, fleetv1alpha1.ReasonWorkerGone, "member %s is gone", d.Spec.To)
		case typed && d.Status.PaneID != "" && m.PaneID != "" && !typedInto(d, m):
			settle(d, fleetv1alpha1.DelegationWorkerGone, fleetv1alpha1.OutcomeWorkerGone, fleetv1alpha1.ReasonWorkerGone, "pane %s was lost while the message was in it", d.Status.PaneID)
		case !now.Before(deadline):
			msg := "the deadline passed before the message was delivered; it was withdrawn"
			if typed {
				msg = "the deadline passed; a later reply takes the detached path"
			}
			settle(d, fleetv1alpha1.DelegationTimedOut, fleetv1alpha1.OutcomeTimeout, fleetv1alpha1.ReasonTimedOut, "%s", msg)
		case !typed && d.Annotations[fleetv1alpha1.AnnotationCancel] == "true":
			settle(d, fleetv1alpha1.DelegationCancelled, fleetv1alpha1.OutcomeCancelled, fleetv1alpha1.ReasonCancelled, "withdrawn before delivery")
		case !typed && d.Spec.Hops > policy.MaxHops:
			settle(d, fleetv1alpha1.DelegationFailed, fleetv1alpha1.OutcomeDeliveryFailed, fleetv1alpha1.ReasonLoopGuard,
				"refused: %d detached replies in a row without a primary's message (limit %d)", d.Spec.Hops, policy.MaxHops)
		case typed && d.Status.DeliveredAt == nil:
			// The intent was recorded and the confirmation was not: a
			// controller stopped in between. A pickup proves it was typed;
			// without one it is never typed again.
			if m.Seq > d.Status.DeliveringSeq {
				dec.Steps = append(dec.Steps, Step{Kind: StepConfirm, Name: d.Name})
				flying = d
			} else if waitUntil := d.Status.DeliveringAt.Add(policy.ConfirmWindow); now.Before(waitUntil) {
				flying = d
				later(waitUntil)
			} else {
				settle(d, fleetv1alpha1.DelegationFailed, fleetv1alpha1.OutcomeDeliveryFailed, fleetv1alpha1.ReasonDeliveryUnconfirmed,
					"delivery was interrupted and no pickup proves it was typed; it is not typed again")
			}
		case inFlight(d.Status.Phase):
			flying = d
			later(deadline)
			if d.Status.Phase == fleetv1alpha1.DelegationDelivered && m.Seq > d.Status.DeliveringSeq {
				dec.Steps = append(dec.Steps, Step{Kind: StepPickup, Name: d.Name})
			}
			if d.Status.Phase != fleetv1alpha1.DelegationAsking && m.Seq > d.Status.DeliveringSeq &&
				(m.Status == fleetv1alpha1.AgentIdle || m.Status == fleetv1alpha1.AgentDone) {
				if settled := m.Since.Add(policy.SettleWindow); now.Before(settled) {
					later(settled)
				} else {
					dec.Steps = append(dec.Steps, Step{Kind: StepTurnDone, Name: d.Name})
					flying = nil
				}
			}
		default:
			later(deadline)
			if d.Status.Phase == "" || d.Status.Phase == fleetv1alpha1.DelegationPending {
				dec.Steps = append(dec.Steps, Step{Kind: StepQueue, Name: d.Name})
			}
			queue = append(queue, d)
		}
	}

	for i := range ds {
		d := &ds[i]
		if d == lastDelivery && !m.Gone && gates(d, m) {
			// It still holds back the next delivery until its pickup shows.
			continue
		}
		// A Kubernetes user reads outcomes with kubectl: none is owed to it
		// through the gateway.
		senderGone := (d.Spec.From.Kind == fleetv1alpha1.PrincipalMember && goneSenders.Has(d.Spec.From.Name)) ||
			d.Spec.From.Kind == fleetv1alpha1.PrincipalUser
		if at, keep := expiry(d, policy.Retention, senderGone); !keep {
			if now.Before(at) {
				later(at)
			} else {
				dec.Steps = append(dec.Steps, Step{Kind: StepExpire, Name: d.Name})
			}
		}
	}

	dec.QueueDepth = int32(len(queue))
	if flying != nil {
		dec.InFlight = flying.Name
		return dec
	}
	if len(queue) == 0 || !m.canTakeInput() {
		return dec
	}
	// One delivery per turn: the last message typed must have been picked up
	// (herdr's seq moved past it) before the next is typed.
	if lastDelivery != nil && gates(lastDelivery, m) {
		return dec
	}
	// Delivering records the queueing too: no separate write for the head.
	dec.Steps = slices.DeleteFunc(dec.Steps, func(s Step) bool { return s.Kind == StepQueue && s.Name == queue[0].Name })
	dec.Steps = append(dec.Steps, Step{Kind: StepDeliver, Name: queue[0].Name})
	dec.InFlight = queue[0].Name
	dec.QueueDepth--
	return dec
}

// gates says whether the last delivery attempt d holds back the next one:
// it awaits a pickup that herdr's seq for the member's pane has not shown.
// A message typed into an earlier pane gates nothing: that pane's agent is
// gone, and the new agent's seq starts again from zero.
func gates(d *fleetv1alpha1.Delegation, m MemberView) bool {
	return awaitsPickup(d) && typedInto(d, m) && m.Seq <= d.Status.DeliveringSeq
}

// typedInto says whether d was typed into the member's current terminal.
// herdr reuses pane ids after a restart, so the terminal id decides where
// both are known.
func typedInto(d *fleetv1alpha1.Delegation, m MemberView) bool {
	if d.Status.PaneID != m.PaneID {
		return false
	}
	return d.Status.TerminalID == "" || m.TerminalID == "" || d.Status.TerminalID == m.TerminalID
}

// awaitsPickup says whether the last delivery attempt still gates the next:
// a typed Delegation until its pickup shows, and a refused one until herdr
// reports a new status (herdr knew something the member's status did not).
// Settled ones whose turn is known to be over do not gate.
func awaitsPickup(d *fleetv1alpha1.Delegation) bool {
	switch d.Status.Phase {
	case fleetv1alpha1.DelegationFailed:
		c := meta.FindStatusCondition(d.Status.Conditions, fleetv1alpha1.ConditionDelivered)
		return c != nil && c.Reason == fleetv1alpha1.ReasonDeliveryRefused
	case fleetv1alpha1.DelegationTurnDone, fleetv1alpha1.DelegationTimedOut,
		fleetv1alpha1.DelegationWorkerGone, fleetv1alpha1.DelegationCancelled:
		return false
	}
	return true
}

// needsDetachedReply says whether a reply waits to be carried into its
// member sender's pane: nobody waits for it and it was not carried yet.
func needsDetachedReply(d *fleetv1alpha1.Delegation) bool {
	// An acknowledged outcome reached its sender already (a re-attached
	// bridge_send got it).
	if d.Status.Reply == nil || d.Status.ReplyDeliveredAs != "" || d.Status.AcknowledgedAt != nil || d.Spec.From.Kind != fleetv1alpha1.PrincipalMember {
		return false
	}
	return !d.Waits() || d.Status.DetachedAt != nil || d.Status.Phase == fleetv1alpha1.DelegationTimedOut
}
