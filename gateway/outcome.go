package gateway

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway/toolerr"
)

// Outcomes a held bridge_send returns, beyond the error results.
const (
	outcomeReply      = string(fleetv1alpha1.OutcomeReply)
	outcomeTurnDone   = string(fleetv1alpha1.OutcomeTurnDone)
	outcomeTimeout    = string(fleetv1alpha1.OutcomeTimeout)
	outcomeCancelled  = string(fleetv1alpha1.OutcomeCancelled)
	outcomeQuestion   = "question"
	outcomeDispatched = "dispatched"
	// outcomeInterrupted: this gateway stopped while the call was held; the
	// message carries on.
	outcomeInterrupted = "interrupted"
	// outcomeCancelling: bridge_cancel asked for the member's turn to be
	// interrupted, and it has not settled yet.
	outcomeCancelling = "cancelling"
)

// defaultTimeout is how long a call is held when it names no timeout.
const defaultTimeout = fleetv1alpha1.DefaultTimeoutSeconds * time.Second

// outcomeOf is what a waiting sender gets from the Delegation as it is now:
// a settled outcome, an open question, or nothing yet (done false).
// answered holds turn ids the waiter itself answered, so that a cache that
// still shows such a question open does not hand it back.
func outcomeOf(d *fleetv1alpha1.Delegation, answered sets.Set[string]) (out *SendOutput, terr *toolerr.Error, done bool) {
	if delegation.Settled(d.Status.Phase) {
		base := SendOutput{DispatchID: d.Name, Member: d.Spec.To}
		switch delegation.Outcome(d) {
		case fleetv1alpha1.OutcomeReply:
			base.Outcome, base.Text = outcomeReply, deref(d.Status.Reply)
			return &base, nil, true
		case fleetv1alpha1.OutcomeTurnDone, fleetv1alpha1.OutcomeTimeout:
			// A reply that came after the deadline, or after the turn was
			// seen to end, is still the answer; a sender that re-attaches or
			// polls gets it.
			if d.Status.Reply != nil {
				base.Outcome, base.Text = outcomeReply, *d.Status.Reply
				return &base, nil, true
			}
			base.Outcome = outcomeTimeout
			if delegation.Outcome(d) == fleetv1alpha1.OutcomeTurnDone {
				base.Outcome, base.Text = outcomeTurnDone, deref(d.Status.Tail)
			}
			return &base, nil, true
		case fleetv1alpha1.OutcomeDeliveryFailed:
			return nil, toolerr.New(toolerr.DeliveryFailed, "%s", delegation.SettledMessage(d, "herdr refused to deliver the message to "+d.Spec.To)), true
		case fleetv1alpha1.OutcomeWorkerGone:
			return nil, toolerr.New(toolerr.WorkerGone, "%s", delegation.SettledMessage(d, "member "+d.Spec.To+" or its pane went away before it replied")), true
		default:
			base.Outcome, base.Text = outcomeCancelled, delegation.SettledMessage(d, "the message was withdrawn")
			return &base, nil, true
		}
	}
	if q := delegation.OpenQuestion(d); q != nil && !answered.Has(q.TurnID) {
		return &SendOutput{Outcome: outcomeQuestion, Text: q.Text, TurnID: q.TurnID, DispatchID: d.Name, Member: d.Spec.To}, nil, true
	}
	return nil, nil, false
}

// answerOf is what a worker's held bridge_ask gets: the answer, or the news
// that none will come because the Delegation settled (done with a non-nil
// outcome).
func answerOf(d *fleetv1alpha1.Delegation, turnID string) (out *AskOutput, terr *toolerr.Error, done bool) {
	if q := delegation.FindQuestion(d, turnID); q != nil && q.Answer != nil {
		return &AskOutput{Answer: q.Answer, TurnID: turnID}, nil, true
	}
	if !delegation.Settled(d.Status.Phase) {
		return nil, nil, false
	}
	if delegation.Outcome(d) == fleetv1alpha1.OutcomeTimeout {
		return &AskOutput{Outcome: outcomeTimeout, TurnID: turnID}, nil, true
	}
	return nil, toolerr.New(toolerr.Cancelled, "delegation %s settled as %s before your question was answered; no answer will come", d.Name, d.Status.Phase), true
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
func holdTimeout(ms *int64, max time.Duration) (time.Duration, *toolerr.Error) {
	limit := min(max, fleetv1alpha1.MaxTimeoutSeconds*time.Second)
	if ms == nil || *ms == 0 {
		return min(defaultTimeout, limit), nil
	}
	if *ms < 0 {
		return 0, toolerr.New(toolerr.InvalidArgument, "timeoutMs must be positive, got %d", *ms)
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
