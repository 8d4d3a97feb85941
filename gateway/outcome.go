package gateway

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// Outcomes a held bridge_send returns, beyond the error results.
const (
	outcomeReply      = string(fleetv1alpha1.OutcomeReply)
	outcomeTurnDone   = string(fleetv1alpha1.OutcomeTurnDone)
	outcomeTimeout    = string(fleetv1alpha1.OutcomeTimeout)
	outcomeQuestion   = "question"
	outcomeDispatched = "dispatched"
)

// defaultTimeout is how long a call is held when it names no timeout.
const defaultTimeout = fleetv1alpha1.DefaultTimeoutSeconds * time.Second

// inFlight reports whether the member has a Delegation in hand: typed into
// its pane and not settled.
func inFlight(d *fleetv1alpha1.Delegation) bool {
	switch d.Status.Phase {
	case fleetv1alpha1.DelegationDelivered, fleetv1alpha1.DelegationWorking, fleetv1alpha1.DelegationAsking:
		return true
	case fleetv1alpha1.DelegationQueued:
		// Being typed: the controller records its intent before typing and
		// the confirmation after, and a quick worker replies in between.
		return d.Status.DeliveringAt != nil
	}
	return false
}

// outcomeOf decides what a waiting sender gets from the Delegation as it is
// now: a settled outcome, an open question, or nothing yet (done false).
// answered holds turn ids the waiter itself answered, so that a cache that
// still shows such a question open does not hand it back.
func outcomeOf(d *fleetv1alpha1.Delegation, answered sets.Set[string]) (out *SendOutput, terr *ToolError, done bool) {
	if d.Status.Phase.IsTerminal() {
		outcome := d.Status.Outcome
		if outcome == "" {
			outcome = outcomeForPhase(d.Status.Phase)
		}
		base := SendOutput{DispatchID: d.Name, Member: d.Spec.To}
		switch outcome {
		case fleetv1alpha1.OutcomeReply:
			base.Outcome, base.Text = outcomeReply, deref(d.Status.Reply)
			return &base, nil, true
		case fleetv1alpha1.OutcomeTurnDone:
			base.Outcome, base.Text = outcomeTurnDone, deref(d.Status.Tail)
			return &base, nil, true
		case fleetv1alpha1.OutcomeTimeout:
			// A reply that came after the deadline is still the answer; a
			// sender that re-attaches gets it.
			if d.Status.Reply != nil {
				base.Outcome, base.Text = outcomeReply, *d.Status.Reply
				return &base, nil, true
			}
			base.Outcome = outcomeTimeout
			return &base, nil, true
		case fleetv1alpha1.OutcomeDeliveryFailed:
			return nil, errorf(CodeDeliveryFailed, "%s", settledMessage(d, "herdr refused to deliver the message to "+d.Spec.To)), true
		case fleetv1alpha1.OutcomeWorkerGone:
			return nil, errorf(CodeWorkerGone, "%s", settledMessage(d, "member "+d.Spec.To+" or its pane went away before it replied")), true
		default:
			return nil, errorf(CodeCancelled, "%s", settledMessage(d, "the delegation was cancelled")), true
		}
	}
	if q := openQuestion(d); q != nil && !answered.Has(q.TurnID) {
		return &SendOutput{Outcome: outcomeQuestion, Text: q.Text, TurnID: q.TurnID, DispatchID: d.Name, Member: d.Spec.To}, nil, true
	}
	return nil, nil, false
}

// outcomeForPhase is the outcome a terminal phase implies, for Delegations
// whose status.outcome was not written.
func outcomeForPhase(p fleetv1alpha1.DelegationPhase) fleetv1alpha1.Outcome {
	switch p {
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
	}
	return fleetv1alpha1.OutcomeCancelled
}

// settledMessage is the controller's explanation of how a Delegation
// settled, or fallback.
func settledMessage(d *fleetv1alpha1.Delegation, fallback string) string {
	if c := meta.FindStatusCondition(d.Status.Conditions, fleetv1alpha1.ConditionSettled); c != nil && c.Message != "" {
		return c.Message
	}
	if c := meta.FindStatusCondition(d.Status.Conditions, fleetv1alpha1.ConditionDelivered); c != nil && c.Message != "" && c.Status == metav1.ConditionFalse {
		return c.Message
	}
	return fallback
}

// openQuestion is the Delegation's open question: the last one without an
// answer that its worker still waits for, nil when there is none.
func openQuestion(d *fleetv1alpha1.Delegation) *fleetv1alpha1.Question {
	if d.Status.Phase.IsTerminal() {
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

// findQuestion returns the question with turnID, nil when there is none.
func findQuestion(d *fleetv1alpha1.Delegation, turnID string) *fleetv1alpha1.Question {
	for i := range d.Status.Questions {
		if d.Status.Questions[i].TurnID == turnID {
			return &d.Status.Questions[i]
		}
	}
	return nil
}

// answerOf decides what a worker's held bridge_ask gets: the answer, or the
// news that none will come because the Delegation settled (done with a
// non-nil outcome).
func answerOf(d *fleetv1alpha1.Delegation, turnID string) (out *AskOutput, terr *ToolError, done bool) {
	if q := findQuestion(d, turnID); q != nil && q.Answer != nil {
		return &AskOutput{Answer: q.Answer, TurnID: turnID}, nil, true
	}
	if !d.Status.Phase.IsTerminal() {
		return nil, nil, false
	}
	if d.Status.Phase == fleetv1alpha1.DelegationTimedOut {
		return &AskOutput{Outcome: outcomeTimeout, TurnID: turnID}, nil, true
	}
	return nil, errorf(CodeCancelled, "delegation %s settled as %s before your question was answered; no answer will come", d.Name, d.Status.Phase), true
}

// currentDelegation is the Delegation a worker is handling, the one its
// bridge_reply and bridge_ask refer to: in flight to it, preferring the one
// the member's status names, else the most recently delivered.
func currentDelegation(ds []fleetv1alpha1.Delegation, named string) *fleetv1alpha1.Delegation {
	var best *fleetv1alpha1.Delegation
	for i := range ds {
		d := &ds[i]
		if !inFlight(d) {
			continue
		}
		if d.Name == named {
			return d
		}
		if best == nil || laterDelivered(d, best) {
			best = d
		}
	}
	return best
}

// lateReplyTarget is the Delegation a worker's reply settles when none is in
// flight: the most recently delivered one that timed out without a reply.
func lateReplyTarget(ds []fleetv1alpha1.Delegation) *fleetv1alpha1.Delegation {
	var best *fleetv1alpha1.Delegation
	for i := range ds {
		d := &ds[i]
		if !lateReplyAllowed(d) {
			continue
		}
		if best == nil || laterDelivered(d, best) {
			best = d
		}
	}
	return best
}

// lateReplyAllowed reports whether a worker's reply would still be recorded
// on a Delegation that timed out: it was delivered and has no reply yet.
func lateReplyAllowed(d *fleetv1alpha1.Delegation) bool {
	return d.Status.Phase == fleetv1alpha1.DelegationTimedOut && d.Status.DeliveredAt != nil && d.Status.Reply == nil
}

// laterDelivered orders Delegations by delivery, then creation, then name,
// so that every replica picks the same one.
func laterDelivered(a, b *fleetv1alpha1.Delegation) bool {
	ta, tb := time.Time{}, time.Time{}
	if a.Status.DeliveredAt != nil {
		ta = a.Status.DeliveredAt.Time
	}
	if b.Status.DeliveredAt != nil {
		tb = b.Status.DeliveredAt.Time
	}
	if c := ta.Compare(tb); c != 0 {
		return c > 0
	}
	if c := a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time); c != 0 {
		return c > 0
	}
	return a.Name > b.Name
}

// sortForPoll orders Delegations oldest first, so a caller handles outcomes
// in the order it sent the messages.
func sortForPoll(ds []*fleetv1alpha1.Delegation) {
	slices.SortFunc(ds, func(a, b *fleetv1alpha1.Delegation) int {
		return cmp.Or(a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
	})
}

// holdTimeout turns a timeoutMs argument into a duration: the default when
// absent or zero, capped at max (and at the API's own bound).
func holdTimeout(ms *int64, max time.Duration) (time.Duration, *ToolError) {
	limit := min(max, fleetv1alpha1.MaxTimeoutSeconds*time.Second)
	if ms == nil || *ms == 0 {
		return min(defaultTimeout, limit), nil
	}
	if *ms < 0 {
		return 0, errorf(CodeInvalidArgument, "timeoutMs must be positive, got %d", *ms)
	}
	if *ms >= limit.Milliseconds() {
		return limit, nil
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

// timeoutSeconds is a Delegation's spec.timeoutSeconds for a hold of d:
// rounded up, so the Delegation never times out before its waiter.
func timeoutSeconds(d time.Duration) int32 {
	s := (d + time.Second - 1) / time.Second
	return int32(max(1, min(s, fleetv1alpha1.MaxTimeoutSeconds)))
}

// turnID is the id of a Delegation's n-th question (counting from 1). Any
// replica can find the Delegation from it without state of its own.
func turnID(delegation string, n int) string { return fmt.Sprintf("%s.q%d", delegation, n) }

// parseTurnID returns the Delegation a turn id belongs to.
func parseTurnID(id string) (string, bool) {
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

// idempotentName is the Delegation name for an idempotency key: the same for
// the same namespace, principal and key on every replica, so a retried send
// meets the first one as AlreadyExists.
func idempotentName(namespace string, p fleetv1alpha1.Principal, key string) string {
	sum := sha256.Sum256([]byte(namespace + "\x00" + string(p.Kind) + "\x00" + p.Name + "\x00" + key))
	return "d-" + hex.EncodeToString(sum[:16])
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
