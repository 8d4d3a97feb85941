package gateway

import (
	"context"
	"errors"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/tracing"
)

// cacheGrace is how long a worker's reply or question waits for the cache to
// show its delivery before the API server is asked.
const cacheGrace = 250 * time.Millisecond

// changeAttempts bounds how often a worker's reply or question looks for
// its message again after the message changed underneath.
const changeAttempts = 3

// errNothingInFlight: the worker has no message a reply or question applies
// to.
var errNothingInFlight = errors.New("nothing in flight")

// reply settles the caller's current Delegation with its reply, or
// records a late reply on the last one typed to it, when that one settled
// without one (timed out, or its turn seen to end).
func (s *service) reply(ctx context.Context, c *call, in ReplyInput) (*ReplyOutput, error) {
	if err := requireMember(c); err != nil {
		return nil, err
	}
	if err := checkContent("content", in.Content); err != nil {
		return nil, err
	}
	now := s.opts.Clock.Now()
	started := time.Now()
	var typedAt *metav1.Time
	d, late, err := s.onCurrent(ctx, c.who, true, func(d *fleetv1alpha1.Delegation, late bool) error {
		// A reply that comes before the injector saw the member working is
		// what picks the message up.
		typedAt = nil
		if d.Status.PickedUpAt == nil {
			typedAt = d.Status.DeliveringAt
		}
		if late {
			return delegation.LateReply(d, now, in.Content)
		}
		return delegation.Reply(d, now, in.Content)
	})
	if errors.Is(err, errNothingInFlight) {
		if d != nil && delegation.RepliedWith(d, in.Content) {
			// The same reply again, its answer lost on the way back (a
			// gateway replica died after writing it), sent again by the
			// pod's forwarder or the agent itself: it succeeds again
			// rather than telling the worker its reply went nowhere.
			return &ReplyOutput{DispatchID: d.Name, Late: delegation.LateReplied(d)}, nil
		}
		return nil, toolerr.New(toolerr.NotFound, "no message is in flight to you, so there is nothing to reply to (a reply settles the last message delivered to you, or comes late to it after its deadline or the end of its turn; it has none, or it was replied to, withdrawn or gone)")
	}
	if err != nil {
		return nil, err
	}
	recordReply(ctx, d, started, typedAt, late)
	return &ReplyOutput{DispatchID: d.Name, Late: late}, nil
}

// recordReply records a worker's reply in the trace of the message it
// settles, linked to the bridge_reply call's own; and its pickup, from
// typedAt, when the reply is what picked it up.
func recordReply(ctx context.Context, d *fleetv1alpha1.Delegation, started time.Time, typedAt *metav1.Time, late bool) {
	if !tracing.Carries(d) {
		return
	}
	if typedAt != nil {
		tracing.Record(ctx, d, tracing.SpanPickedUp, typedAt.Time)
	}
	_, span := tracing.Start(ctx, d, tracing.SpanReply, trace.WithTimestamp(started),
		trace.WithLinks(trace.LinkFromContext(ctx)),
		trace.WithAttributes(tracing.AttrMember.String(d.Spec.To), tracing.AttrLate.Bool(late)))
	span.End()
}

// ask records a question on the caller's current Delegation and holds
// the call until the sender answers it.
func (s *service) ask(ctx context.Context, c *call, in AskInput) (*AskOutput, error) {
	if err := requireMember(c); err != nil {
		return nil, err
	}
	if err := checkContent("content", in.Content); err != nil {
		return nil, err
	}
	timeout, terr := holdTimeout(in.TimeoutMs, s.opts.MaxTimeout)
	if terr != nil {
		return nil, terr
	}
	now := s.opts.Clock.Now()
	var turn string
	d, _, err := s.onCurrent(ctx, c.who, false, func(d *fleetv1alpha1.Delegation, _ bool) error {
		var err error
		turn, err = delegation.Ask(d, now, in.Content)
		return err
	})
	switch {
	case errors.Is(err, errNothingInFlight):
		return nil, toolerr.New(toolerr.NotFound, "no message is in flight to you, so there is nobody to ask")
	case errors.Is(err, delegation.ErrTooManyQuestions):
		return nil, toolerr.New(toolerr.Conflict, "message %s already has %d questions, the most one message can carry; decide and reply", d.Name, fleetv1alpha1.MaxQuestions)
	case err != nil:
		return nil, err
	}

	var out *AskOutput
	var aerr *toolerr.Error
	decide := func(d *fleetv1alpha1.Delegation) bool {
		var done bool
		out, aerr, done = answerOf(d, turn)
		return done
	}
	name := d.Name
	return holdThen(s, ctx, c, d, timeout, decide, func(ctx context.Context, last *fleetv1alpha1.Delegation, err error) (*AskOutput, error) {
		if err != nil && !errors.Is(err, errDelegationDeleted) && last != nil {
			// The worker goes on without the answer (it timed out, or its
			// call is gone): an open question would hold the message, and
			// its member's queue, until the deadline.
			s.withdrawQuestion(ctx, last, turn)
		}
		switch {
		case err == nil:
		case errors.Is(err, errHoldTimeout):
			return &AskOutput{Outcome: outcomeTimeout, TurnID: turn}, nil
		case errors.Is(err, errGatewayStopping):
			return &AskOutput{Outcome: outcomeInterrupted, TurnID: turn, Text: "This gateway replica is shutting down and withdrew your question. Ask again with bridge_ask, or go on with your best judgement and say so in your bridge_reply."}, nil
		case errors.Is(err, errDelegationDeleted):
			return nil, toolerr.New(toolerr.Cancelled, "message %s was deleted before your question was answered", name)
		default:
			return nil, err
		}
		if aerr != nil {
			return nil, aerr
		}
		return out, nil
	})
}

// onCurrent applies change, a transition, to the caller's current
// Delegation and writes it: the one in flight to the caller or, when
// allowLate is set and none is, the last one typed to it, settled without
// a reply (late). A transition that no longer applies (the
// Delegation settled or moved on meanwhile) looks again, from the API
// server; errNothingInFlight says there is nothing to apply it to, with
// the last Delegation typed to the caller, if any. It returns the
// Delegation as written, or as last seen with an error.
func (s *service) onCurrent(ctx context.Context, p *identity.Principal, allowLate bool, change func(d *fleetv1alpha1.Delegation, late bool) error) (*fleetv1alpha1.Delegation, bool, error) {
	for attempt := range changeAttempts {
		current, late, last, err := s.replyTarget(ctx, p, attempt > 0)
		if err != nil {
			return nil, false, err
		}
		if current == nil || late && !allowLate {
			return last, false, errNothingInFlight
		}
		d, err := s.updateStatus(ctx, current, func(d *fleetv1alpha1.Delegation) (bool, error) {
			if d.Spec.To != p.Name {
				return false, errStale
			}
			if err := change(d, late); errors.Is(err, delegation.ErrNotInFlight) {
				return false, errStale
			} else if err != nil {
				return false, err
			}
			return true, nil
		})
		if errors.Is(err, errStale) {
			continue
		}
		return d, late, err
	}
	return nil, false, toolerr.New(toolerr.Conflict, "the message in flight to you kept changing; try again")
}

// replyTarget finds the Delegation a reply settles: in flight to the caller,
// else the last one typed to it when that settled without a reply (late). The cache answers
// first; when it shows nothing, or live is set, the API server decides,
// since a worker may reply a moment after its delivery was written. When
// none applies, last is the last one typed to the caller, as the API server
// shows it.
func (s *service) replyTarget(ctx context.Context, p *identity.Principal, live bool) (target *fleetv1alpha1.Delegation, late bool, last *fleetv1alpha1.Delegation, err error) {
	if !live {
		// A worker often replies a moment after its delivery was written,
		// before the cache shows it: wait briefly for the cache to catch up
		// before asking the API server.
		key := receiverKey(p.Namespace, p.Name)
		w := s.rv.subscribe(key)
		defer s.rv.unsubscribe(key, w)
		grace := time.NewTimer(cacheGrace)
		defer grace.Stop()
	wait:
		for {
			ds, err := s.delegationsTo(ctx, p.Namespace, p.Name, stateActive)
			if err != nil {
				return nil, false, nil, err
			}
			if d := currentDelegation(ds); d != nil {
				return d, false, nil, nil
			}
			select {
			case <-w.wake:
			case <-grace.C:
				break wait
			case <-ctx.Done():
				return nil, false, nil, ctx.Err()
			}
		}
	}
	ds, err := s.liveDelegationsTo(ctx, p.Namespace, p.Name, false)
	if err != nil {
		return nil, false, nil, err
	}
	if d := currentDelegation(ds); d != nil {
		return d, false, nil, nil
	}
	// The last one typed may have closed since (a repeated reply to it):
	// the member's history decides which was last.
	closed, err := s.liveDelegationsTo(ctx, p.Namespace, p.Name, true)
	if err != nil {
		return nil, false, nil, err
	}
	ds = union(ds, closed)
	if d := lateReplyTarget(ds); d != nil {
		return d, true, nil, nil
	}
	return nil, false, delegation.LatestTyped(ds, delegation.Typed), nil
}

// withdrawQuestion records that the worker stopped waiting for the answer
// to turn, unless it was answered meanwhile: the message is worked on again,
// so the turn's own end settles it. It writes under a context of its own,
// since the call's may have ended, and returns once this replica's cache
// shows the question closed: once bridge_ask has returned, no bridge_poll
// offers the withdrawn question.
func (s *service) withdrawQuestion(ctx context.Context, d *fleetv1alpha1.Delegation, turn string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), detachTimeout)
	defer cancel()
	now := s.opts.Clock.Now()
	if _, err := s.updateStatus(ctx, d, func(d *fleetv1alpha1.Delegation) (bool, error) {
		return delegation.WithdrawQuestion(d, now, turn), nil
	}); err != nil {
		s.log.Error(err, "Withdrawing an abandoned question", "delegation", klog.KObj(d), "turn", turn)
		return
	}
	s.awaitCache(ctx, client.ObjectKeyFromObject(d), func(d *fleetv1alpha1.Delegation) bool {
		q := delegation.FindQuestion(d, turn)
		return q == nil || q.Answer != nil || q.WithdrawnAt != nil || delegation.Settled(d.Status.Phase)
	})
}

// currentDelegation is the Delegation a worker is handling, the one its
// bridge_reply and bridge_ask refer to: the one in flight to it that was
// typed last. One member has one in flight; after a lost pane, the older
// one is settled as worker_gone once the controller sees it.
func currentDelegation(ds []fleetv1alpha1.Delegation) *fleetv1alpha1.Delegation {
	return delegation.LatestTyped(ds, delegation.InFlight)
}

// union is the Delegations of older and newer, by name, newer's copy of
// one listed in both (it closed between the two listings).
func union(older, newer []fleetv1alpha1.Delegation) []fleetv1alpha1.Delegation {
	listed := make(map[string]bool, len(newer))
	for i := range newer {
		listed[newer[i].Name] = true
	}
	out := slices.DeleteFunc(older, func(d fleetv1alpha1.Delegation) bool { return listed[d.Name] })
	return append(out, newer...)
}

// lateReplyTarget is the Delegation a worker's reply goes to when none is in
// flight: the last one typed to it, when that one settled without a reply
// (its deadline passed, or its turn was seen to end). Never an older one:
// the worker was handling the last.
func lateReplyTarget(ds []fleetv1alpha1.Delegation) *fleetv1alpha1.Delegation {
	if d := delegation.LatestTyped(ds, delegation.Typed); d != nil && delegation.LateReplyAllowed(d) {
		return d
	}
	return nil
}
