package delegation

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// Errors of transitions that do not apply to a Delegation as it is.
var (
	// ErrNotInFlight: the Delegation is not in its member's hands (not yet
	// typed, or settled), so a reply or question does not apply to it.
	ErrNotInFlight = errors.New("the message is not in flight")
	// ErrTooManyQuestions: the Delegation carries the most questions one can.
	ErrTooManyQuestions = fmt.Errorf("a message carries at most %d questions", fleetv1alpha1.MaxQuestions)
	// ErrNoQuestion: there is no question with that turn id.
	ErrNoQuestion = errors.New("no such question")
	// ErrAnsweredDifferently: the question already has another answer.
	ErrAnsweredDifferently = errors.New("the question was already answered differently")
	// ErrWithdrawn: the worker stopped waiting for the answer.
	ErrWithdrawn = errors.New("the question was withdrawn: the worker stopped waiting for the answer")
)

// Target is where a Delegation is typed: the member's pane as herdr knows
// it, and herdr's state_change_seq for it before the typing.
type Target struct {
	PaneID, TerminalID string
	Seq                int64
}

// BeginDelivery records the intent to type d into the member's pane, before
// it is typed: a controller that stops in between never types it twice (a
// pickup proves the typing, see Decide). It is the one write of delivery.
func BeginDelivery(d *fleetv1alpha1.Delegation, now time.Time, to Target) {
	t := metav1.NewTime(now)
	s := &d.Status
	s.Phase = fleetv1alpha1.DelegationDelivered
	s.DeliveringAt, s.DeliveringSeq = &t, to.Seq
	s.PaneID, s.TerminalID = to.PaneID, to.TerminalID
	if s.QueuedAt == nil {
		s.QueuedAt = &metav1.Time{Time: d.CreationTimestamp.Time}
	}
	s.Deadline = &metav1.Time{Time: Deadline(d)}
	setConditions(d, fleetv1alpha1.ReasonDelivered, "typed into pane "+to.PaneID)
}

// DeliveryPostponed takes back an intent to type d that herdr refused for a
// reason of the moment (a dialog on screen that the member's status did not
// show yet): d waits in the queue again.
func DeliveryPostponed(d *fleetv1alpha1.Delegation, msg string) {
	s := &d.Status
	s.Phase = fleetv1alpha1.DelegationQueued
	s.DeliveringAt, s.DeliveringSeq, s.PaneID, s.TerminalID = nil, 0, "", ""
	setConditions(d, fleetv1alpha1.ReasonQueued, msg)
}

// Pickup records that the member was seen working on d.
func Pickup(d *fleetv1alpha1.Delegation, now time.Time) {
	markPickedUp(d, now)
	if d.Status.Phase == fleetv1alpha1.DelegationDelivered {
		d.Status.Phase = fleetv1alpha1.DelegationWorking
	}
	setConditions(d, fleetv1alpha1.ReasonDelivered, "the member picked it up")
}

func markPickedUp(d *fleetv1alpha1.Delegation, now time.Time) {
	s := &d.Status
	if s.DeliveredAt == nil {
		// The pickup proves the typing that the intent announced.
		s.DeliveredAt = s.DeliveringAt.DeepCopy()
	}
	if s.PickedUpAt == nil {
		t := metav1.NewTime(now)
		s.PickedUpAt = &t
	}
}

// TurnDone settles d because the member ended the turn in which it picked
// d up without replying; tail is the terminal's last lines. A reply that
// comes later is still recorded (LateReply).
func TurnDone(d *fleetv1alpha1.Delegation, now time.Time, tail string) {
	markPickedUp(d, now)
	d.Status.Tail = &tail
	settle(d, now, fleetv1alpha1.DelegationTurnDone, fleetv1alpha1.OutcomeTurnDone, fleetv1alpha1.ReasonTurnDone, "the member ended its turn without replying")
}

// TimeOut settles d because its deadline passed after it was typed. A reply
// that comes later is still recorded (LateReply).
func TimeOut(d *fleetv1alpha1.Delegation, now time.Time) {
	settle(d, now, fleetv1alpha1.DelegationTimedOut, fleetv1alpha1.OutcomeTimeout, fleetv1alpha1.ReasonTimedOut, "the deadline passed; a later reply takes the detached path")
}

// WorkerGone settles d because its member, or the pane d was typed into,
// went away.
func WorkerGone(d *fleetv1alpha1.Delegation, now time.Time, msg string) {
	settle(d, now, fleetv1alpha1.DelegationWorkerGone, fleetv1alpha1.OutcomeWorkerGone, fleetv1alpha1.ReasonWorkerGone, msg)
}

// Fail settles d because it could not be delivered: herdr refused it
// (ReasonDeliveryRefused), a restart left its typing unproven
// (ReasonDeliveryUnconfirmed), or the loop guard stopped it
// (ReasonLoopGuard).
func Fail(d *fleetv1alpha1.Delegation, now time.Time, reason, msg string) {
	settle(d, now, fleetv1alpha1.DelegationFailed, fleetv1alpha1.OutcomeDeliveryFailed, reason, msg)
}

// Cancel settles d because it was withdrawn.
func Cancel(d *fleetv1alpha1.Delegation, now time.Time, msg string) {
	settle(d, now, fleetv1alpha1.DelegationCancelled, fleetv1alpha1.OutcomeCancelled, fleetv1alpha1.ReasonCancelled, msg)
}

func settle(d *fleetv1alpha1.Delegation, now time.Time, phase fleetv1alpha1.DelegationPhase, outcome fleetv1alpha1.Outcome, reason, msg string) {
	t := metav1.NewTime(now)
	s := &d.Status
	s.Phase, s.Outcome, s.SettledAt = phase, outcome, &t
	if s.Deadline == nil {
		s.Deadline = &metav1.Time{Time: Deadline(d)}
	}
	setConditions(d, reason, msg)
}

// CancelRequested reports whether d's sender withdrew it: bridge_cancel, or
// the cancel annotation a kubectl user sets.
func CancelRequested(d *fleetv1alpha1.Delegation) bool {
	return d.Status.CancelRequestedAt != nil || d.Annotations[fleetv1alpha1.AnnotationCancel] == "true"
}

// RequestCancel withdraws d on its sender's behalf. A queued d settles
// Cancelled at once; one in its member's hands is marked, and the injector
// interrupts the member's turn and settles it (Interrupted). A settled d
// stays as it is: whatever settled it first wins. It reports whether
// anything changed.
func RequestCancel(d *fleetv1alpha1.Delegation, now time.Time) bool {
	switch {
	case Settled(d.Status.Phase):
		return false
	case !Typed(d):
		Cancel(d, now, "its sender withdrew it before it was delivered")
		return true
	case d.Status.CancelRequestedAt != nil:
		return false
	}
	t := metav1.NewTime(now)
	d.Status.CancelRequestedAt = &t
	setConditions(d, fleetv1alpha1.ReasonDelivered, "its sender withdrew it; the member's turn is being interrupted")
	return true
}

// Interrupted settles d Cancelled once its member's turn was interrupted,
// with key, on its sender's request.
func Interrupted(d *fleetv1alpha1.Delegation, now time.Time, key string) {
	Cancel(d, now, "its sender withdrew it; the member's turn was interrupted with "+key)
}

// Reply settles an in-flight d with the worker's reply. It refuses a d that
// is not in flight: a turn that ended (TurnDone) or a message not typed yet
// has nothing to reply to, which is how a reply and the end of its turn
// never both settle one message.
func Reply(d *fleetv1alpha1.Delegation, now time.Time, text string) error {
	if !InFlight(d) {
		return ErrNotInFlight
	}
	t := metav1.NewTime(now)
	d.Status.Reply, d.Status.RepliedAt = ptr.To(text), &t
	markPickedUp(d, now)
	settle(d, now, fleetv1alpha1.DelegationReplied, fleetv1alpha1.OutcomeReply, fleetv1alpha1.ReasonReplied, "the member replied")
	return nil
}

// LateReply records a reply to d that came after it settled without one
// (its deadline passed, or its turn was seen to end): the sender gets it
// through bridge_poll (or typed into its pane), even if it had
// acknowledged the first outcome already.
func LateReply(d *fleetv1alpha1.Delegation, now time.Time, text string) error {
	if !LateReplyAllowed(d) {
		return ErrNotInFlight
	}
	t := metav1.NewTime(now)
	d.Status.Reply, d.Status.RepliedAt = ptr.To(text), &t
	d.Status.AcknowledgedAt = nil
	return nil
}

// Ask records the worker's question on an in-flight d and returns its turn
// id, by which the sender answers.
func Ask(d *fleetv1alpha1.Delegation, now time.Time, text string) (string, error) {
	if !InFlight(d) {
		return "", ErrNotInFlight
	}
	n := len(d.Status.Questions) + 1
	if n > fleetv1alpha1.MaxQuestions {
		return "", ErrTooManyQuestions
	}
	turn := TurnID(d.Name, n)
	d.Status.Questions = append(d.Status.Questions, fleetv1alpha1.Question{TurnID: turn, Text: text, AskedAt: metav1.NewTime(now)})
	markPickedUp(d, now)
	d.Status.Phase = fleetv1alpha1.DelegationAsking
	setConditions(d, fleetv1alpha1.ReasonDelivered, "the member asked a question")
	return turn, nil
}

// Answer records the sender's answer to question turn of d. It reports
// false, with no error, when nothing changes: the same answer again, or a
// d that settled meanwhile (its outcome is the answer the sender waits for).
func Answer(d *fleetv1alpha1.Delegation, now time.Time, turn, text string) (bool, error) {
	q := FindQuestion(d, turn)
	switch {
	case q == nil:
		return false, ErrNoQuestion
	case Settled(d.Status.Phase):
		return false, nil
	case q.Answer != nil && *q.Answer == text:
		return false, nil
	case q.Answer != nil:
		return false, ErrAnsweredDifferently
	case q.WithdrawnAt != nil:
		return false, ErrWithdrawn
	}
	t := metav1.NewTime(now)
	q.Answer, q.AnsweredAt = ptr.To(text), &t
	resumeIfAnswered(d)
	return true, nil
}

// WithdrawQuestion records that the worker stopped waiting for the answer
// to turn (its bridge_ask ended): d is worked on again, and the end of its
// turn settles it. It reports whether anything changed.
func WithdrawQuestion(d *fleetv1alpha1.Delegation, now time.Time, turn string) bool {
	q := FindQuestion(d, turn)
	if q == nil || q.Answer != nil || q.WithdrawnAt != nil || Settled(d.Status.Phase) {
		return false
	}
	t := metav1.NewTime(now)
	q.WithdrawnAt = &t
	resumeIfAnswered(d)
	return true
}

func resumeIfAnswered(d *fleetv1alpha1.Delegation) {
	if d.Status.Phase == fleetv1alpha1.DelegationAsking && OpenQuestion(d) == nil {
		d.Status.Phase = fleetv1alpha1.DelegationWorking
		setConditions(d, fleetv1alpha1.ReasonDelivered, "the member works on it")
	}
}

// Detach records that the blocking sender stopped waiting (its call timed
// out or went away): a reply then takes the detached path. It reports
// whether anything changed.
func Detach(d *fleetv1alpha1.Delegation, now time.Time) bool {
	if d.Status.DetachedAt != nil {
		return false
	}
	t := metav1.NewTime(now)
	d.Status.DetachedAt = &t
	return true
}

// Reattach records that the sender waits on d again (a retried
// bridge_send, or an answer), so a reply goes to the waiter.
func Reattach(d *fleetv1alpha1.Delegation) bool {
	if d.Status.DetachedAt == nil || Settled(d.Status.Phase) || !Waits(d) {
		return false
	}
	d.Status.DetachedAt = nil
	return true
}

// Acknowledge records that d's outcome reached its sender: bridge_ack, a
// re-attached bridge_send, or the typing of the Delegation that carried its
// reply. It refuses a d that has not settled.
func Acknowledge(d *fleetv1alpha1.Delegation, now time.Time) (bool, error) {
	if !Settled(d.Status.Phase) {
		return false, ErrNotInFlight
	}
	if d.Status.AcknowledgedAt != nil {
		return false, nil
	}
	t := metav1.NewTime(now)
	d.Status.AcknowledgedAt = &t
	return true, nil
}

// ReplyCarried records the Delegation that carries d's reply into its
// member sender's pane.
func ReplyCarried(d *fleetv1alpha1.Delegation, carrier string) { d.Status.ReplyDeliveredAs = carrier }

// NeedsCarrying reports whether d's reply waits to be carried into its
// member sender's pane: nobody waits for it and it was not carried yet.
func NeedsCarrying(d *fleetv1alpha1.Delegation) bool {
	if d.Status.Reply == nil || d.Status.ReplyDeliveredAs != "" || d.Status.AcknowledgedAt != nil || d.Spec.From.Kind != fleetv1alpha1.PrincipalMember {
		return false
	}
	return !Waits(d) || d.Status.DetachedAt != nil || LateReplied(d)
}

// QuestionCarried records the Delegation that carries d's open question
// into its member sender's pane.
func QuestionCarried(d *fleetv1alpha1.Delegation, carrier string) {
	if q := OpenQuestion(d); q != nil {
		q.CarriedAs = carrier
	}
}

// QuestionNeedsCarrying reports whether d's open question waits to be
// carried into its member sender's pane: nobody waits for it (the message
// was sent detached, or its sender's call ended) and it was not carried yet.
func QuestionNeedsCarrying(d *fleetv1alpha1.Delegation) bool {
	q := OpenQuestion(d)
	if q == nil || q.CarriedAs != "" || d.Spec.From.Kind != fleetv1alpha1.PrincipalMember {
		return false
	}
	return !Waits(d) || d.Status.DetachedAt != nil
}

// CarriedQuestion says what became of the question a carrier types into
// d's sender's pane.
type CarriedQuestion int

const (
	// NotAQuestionCarrier: carrier carries no question of d (its reply,
	// say).
	NotAQuestionCarrier CarriedQuestion = iota
	// QuestionOpen: the question still waits for its answer.
	QuestionOpen
	// QuestionMoot: it was answered or withdrawn, or d settled.
	QuestionMoot
)

// CarriesOpenQuestion says whether carrier carries one of d's questions,
// and whether that question is still open.
func CarriesOpenQuestion(d *fleetv1alpha1.Delegation, carrier string) CarriedQuestion {
	for i := range d.Status.Questions {
		q := &d.Status.Questions[i]
		if q.CarriedAs != carrier {
			continue
		}
		if q.Answer != nil || q.WithdrawnAt != nil || Settled(d.Status.Phase) {
			return QuestionMoot
		}
		return QuestionOpen
	}
	return NotAQuestionCarrier
}

// TurnID is the id of a Delegation's n-th question (counting from 1): any
// gateway replica finds the Delegation from it, with no state of its own.
func TurnID(delegation string, n int) string { return fmt.Sprintf("%s.q%d", delegation, n) }

// ParseTurnID returns the Delegation a turn id belongs to.
func ParseTurnID(id string) (string, bool) {
	i := strings.LastIndex(id, ".q")
	if i <= 0 {
		return "", false
	}
	n, err := strconv.Atoi(id[i+2:])
	if err != nil || n < 1 || n > fleetv1alpha1.MaxQuestions || strconv.Itoa(n) != id[i+2:] {
		return "", false
	}
	name := id[:i]
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		return "", false
	}
	return name, true
}
