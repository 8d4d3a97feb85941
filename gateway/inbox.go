package gateway

import (
	"context"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/toolerr"
)

// poll lists the caller's outcomes that nobody waited for, and the
// open questions addressed to it.
func (s *service) poll(ctx context.Context, c *call, _ PollInput) (*PollOutput, error) {
	out, _, err := s.inbox(ctx, c.who)
	return out, err
}

// inbox is what waits for p: the outcomes nobody waited for and the open
// questions (bridge_poll), and p's messages still in progress, in poll
// order.
func (s *service) inbox(ctx context.Context, p *identity.Principal) (*PollOutput, []*fleetv1alpha1.Delegation, error) {
	done, err := s.delegationsFrom(ctx, p, statePollable)
	if err != nil {
		return nil, nil, err
	}
	ds, err := s.delegationsFrom(ctx, p, statePending)
	if err != nil {
		return nil, nil, err
	}
	out := &PollOutput{Outcomes: []PolledOutcome{}, Questions: []OpenQuestion{}}
	var ready, pending []*fleetv1alpha1.Delegation
	for i := range done {
		ready = append(ready, &done[i])
	}
	for i := range ds {
		pending = append(pending, &ds[i])
	}
	sortForPoll(ready)
	sortForPoll(pending)
	for _, d := range ready {
		out.Outcomes = append(out.Outcomes, polledOutcome(d))
	}
	for _, d := range pending {
		if delegation.OpenQuestion(d) != nil {
			out.Questions = append(out.Questions, openQuestionView(d))
		}
	}
	return out, pending, nil
}

// polledOutcome shows a settled Delegation to its sender.
func polledOutcome(d *fleetv1alpha1.Delegation) PolledOutcome {
	po := PolledOutcome{DispatchID: d.Name, Member: d.Spec.To, Content: excerpt(d.Spec.Content, 200), SettledAt: timeString(d.Status.SettledAt)}
	out, terr, _ := outcomeOf(d, nil)
	switch {
	case terr != nil:
		po.Outcome, po.Error = string(terr.Code), terr
	case out != nil:
		po.Outcome, po.Text = out.Outcome, out.Text
	}
	return po
}

// openQuestionView shows a Delegation's open question to its sender.
func openQuestionView(d *fleetv1alpha1.Delegation) OpenQuestion {
	q := delegation.OpenQuestion(d)
	return OpenQuestion{DispatchID: d.Name, TurnID: q.TurnID, Member: d.Spec.To, Text: q.Text, AskedAt: q.AskedAt.UTC().Format(time.RFC3339)}
}

// ack acknowledges settled outcomes of the caller's Delegations. All
// ids are checked before any is written, so a refused id changes nothing.
func (s *service) ack(ctx context.Context, c *call, in AckInput) (*AckOutput, error) {
	ids := slices.Clone(in.IDs)
	if in.DispatchID != "" {
		ids = append(ids, in.DispatchID)
	}
	var targets []*fleetv1alpha1.Delegation
	if len(ids) == 0 {
		ds, err := s.delegationsFrom(ctx, c.who, statePollable)
		if err != nil {
			return nil, err
		}
		for i := range ds {
			targets = append(targets, &ds[i])
		}
	} else {
		if len(ids) > 1000 {
			return nil, toolerr.New(toolerr.InvalidArgument, "at most 1000 ids per call, got %d", len(ids))
		}
		seen := sets.New[string]()
		for _, id := range ids {
			if seen.Has(id) {
				continue
			}
			seen.Insert(id)
			if id == "" {
				return nil, toolerr.New(toolerr.InvalidArgument, "ids must not be empty")
			}
			d, err := s.message(ctx, c.who.Namespace, id)
			if err != nil {
				return nil, err
			}
			if identity.Key(d.Spec.From) != c.who.Key() {
				return nil, toolerr.New(toolerr.Forbidden, "message %s was not sent by you", id)
			}
			if !delegation.Settled(d.Status.Phase) {
				return nil, toolerr.New(toolerr.Conflict, "message %s has no outcome yet (phase %s); acknowledge it once bridge_poll shows it", id, delegation.Phase(d))
			}
			targets = append(targets, d)
		}
	}
	now := s.opts.Clock.Now()
	out := &AckOutput{Acknowledged: []string{}}
	for _, d := range targets {
		if _, err := s.updateStatus(ctx, d, func(d *fleetv1alpha1.Delegation) (bool, error) {
			return delegation.Acknowledge(d, now)
		}); err != nil {
			return nil, err
		}
		out.Acknowledged = append(out.Acknowledged, d.Name)
	}
	// A bridge_poll right after the ack reads the cache: wait until it shows
	// the acks, so the caller never sees an acknowledged outcome again.
	for _, d := range targets {
		s.awaitCache(ctx, client.ObjectKeyFromObject(d), func(d *fleetv1alpha1.Delegation) bool { return d.Status.AcknowledgedAt != nil })
	}
	slices.Sort(out.Acknowledged)
	return out, nil
}

// cacheCatchUp bounds how long a call waits for the cache to show its own
// write.
const cacheCatchUp = 2 * time.Second

// awaitCache waits, at most cacheCatchUp, until the cached Delegation at key
// satisfies shows.
func (s *service) awaitCache(ctx context.Context, key types.NamespacedName, shows func(*fleetv1alpha1.Delegation) bool) {
	w := s.rv.subscribe(key)
	defer s.rv.unsubscribe(key, w)
	limit := time.NewTimer(cacheCatchUp)
	defer limit.Stop()
	for {
		var d fleetv1alpha1.Delegation
		if err := s.cache.Get(ctx, key, &d); err != nil || shows(&d) {
			return
		}
		select {
		case <-w.wake:
		case <-limit.C:
			return
		case <-ctx.Done():
			return
		}
	}
}
