package gateway

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/toolerr"
)

// cancelWait is how long bridge_cancel waits for the member's turn to be
// interrupted before it answers that the cancel is under way.
const cancelWait = 30 * time.Second

// cancel withdraws a message: a queued one settles Cancelled at once;
// for one in its member's hands the injector interrupts the turn first. It
// waits for the message to settle and says how: cancelled, or whatever
// settled it first (a reply that came in the meantime wins).
func (s *service) cancel(ctx context.Context, c *call, in CancelInput) (*CancelOutput, error) {
	if in.DispatchID == "" {
		return nil, toolerr.New(toolerr.InvalidArgument, "dispatchId must name the message to withdraw, as bridge_send returned it")
	}
	d, err := s.message(ctx, c.who.Namespace, in.DispatchID)
	if err != nil {
		return nil, err
	}
	sender := identity.Key(d.Spec.From) == c.who.Key()
	if !sender {
		if c.who.Kind == fleetv1alpha1.PrincipalMember {
			return nil, toolerr.New(toolerr.Forbidden, "message %s was sent by %s, not by you; a member withdraws only its own messages", d.Name, d.Spec.From.Name)
		}
		if err := s.allow(ctx, c.who, identity.CancelDelegations); err != nil {
			return nil, err
		}
	}
	now := s.opts.Clock.Now()
	d, err = s.updateStatus(ctx, d, func(d *fleetv1alpha1.Delegation) (bool, error) {
		return delegation.RequestCancel(d, now), nil
	})
	if err != nil {
		return nil, err
	}
	release, err := s.reserveHold(c)
	if err != nil {
		// The cancel is recorded; a caller with no call to spare does not
		// wait to see it settle.
		return &CancelOutput{DispatchID: d.Name, Outcome: outcomeCancelling}, nil
	}
	last, err := s.hold(ctx, c, types.NamespacedName{Namespace: d.Namespace, Name: d.Name}, d, cancelWait, func(d *fleetv1alpha1.Delegation) bool { return delegation.Settled(d.Status.Phase) })
	release()
	switch {
	case errors.Is(err, errHoldTimeout), errors.Is(err, errGatewayStopping):
		return &CancelOutput{DispatchID: d.Name, Outcome: outcomeCancelling}, nil
	case errors.Is(err, errDelegationDeleted):
		return &CancelOutput{DispatchID: d.Name, Outcome: outcomeCancelled}, nil
	case err != nil:
		return nil, err
	}
	if sender {
		// The outcome reached its sender: bridge_poll need not show it.
		if _, err := s.updateStatus(ctx, last, func(d *fleetv1alpha1.Delegation) (bool, error) {
			return delegation.Acknowledge(d, now)
		}); err != nil {
			return nil, err
		}
	}
	out, terr, _ := outcomeOf(last, nil)
	if terr != nil {
		return &CancelOutput{DispatchID: d.Name, Outcome: string(terr.Code), Text: terr.Message}, nil
	}
	return &CancelOutput{DispatchID: d.Name, Outcome: out.Outcome, Text: out.Text}, nil
}
