package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/toolerr"
)

// Field indexes the gateway registers on the shared cache. The names are
// the gateway's own so they never collide with a controller's. Delegation
// index values join a state and a member or principal, so that a lookup
// returns the few Delegations in that state however long the history grows.
const (
	// indexReceiverState indexes Delegations by where they are in their
	// receiver's queue: stateQueued, stateActive or stateLate, then spec.to.
	indexReceiverState = "gateway.fleetd.dev/receiver-state"
	// indexSenderState indexes Delegations by what their sender may see:
	// statePending or statePollable, then identity.Key(spec.from).
	indexSenderState = "gateway.fleetd.dev/sender-state"
)

// Delegation states in index values.
const (
	// stateQueued: waiting in the member's queue.
	stateQueued = "queued"
	// stateActive: in flight to the member (a reply or question applies).
	stateActive = "active"
	// stateLate: settled after delivery with no reply yet, its deadline
	// passed or its turn seen to end (a late reply applies).
	stateLate = "late"
	// statePending: not settled.
	statePending = "pending"
	// statePollable: settled, unacknowledged, nobody waiting (bridge_poll).
	statePollable = "pollable"
)

// indexValue joins a state and a name.
func indexValue(state, name string) string { return state + "/" + name }

// maxStatusAttempts bounds the optimistic-concurrency retries of one status
// write; each retry re-reads the Delegation from the API server.
const maxStatusAttempts = 8

// errStale says a status mutation no longer applies to the Delegation as it
// is now, and the caller should decide again from fresh data.
var errStale = errors.New("delegation changed")

// indexReceiverStateFunc indexes a Delegation for its receiver.
func indexReceiverStateFunc(o client.Object) []string {
	d, ok := o.(*fleetv1alpha1.Delegation)
	if !ok || d.Spec.To == "" {
		return nil
	}
	switch {
	case delegation.Queued(d):
		return []string{indexValue(stateQueued, d.Spec.To)}
	case delegation.InFlight(d):
		return []string{indexValue(stateActive, d.Spec.To)}
	case delegation.LateReplyAllowed(d):
		return []string{indexValue(stateLate, d.Spec.To)}
	}
	return nil
}

// indexSenderStateFunc indexes a Delegation for its sender.
func indexSenderStateFunc(o client.Object) []string {
	d, ok := o.(*fleetv1alpha1.Delegation)
	if !ok || d.Spec.From.Name == "" {
		return nil
	}
	key := identity.Key(d.Spec.From)
	switch {
	case !delegation.Settled(d.Status.Phase):
		return []string{indexValue(statePending, key)}
	case delegation.Unclaimed(d):
		return []string{indexValue(statePollable, key)}
	}
	return nil
}

// getDelegation reads a Delegation from the cache, and from the API server
// when the cache has not seen it yet (it may have been created a moment
// ago, or by another replica).
func (s *service) getDelegation(ctx context.Context, key types.NamespacedName) (*fleetv1alpha1.Delegation, error) {
	var d fleetv1alpha1.Delegation
	err := s.cache.Get(ctx, key, &d)
	if apierrors.IsNotFound(err) {
		err = s.live.Get(ctx, key, &d)
	}
	if err != nil {
		return nil, err
	}
	return &d, nil
}

// message reads the Delegation a caller in namespace names by its dispatch
// id; not_found when there is none (a malformed id names none either).
func (s *service) message(ctx context.Context, namespace, id string) (*fleetv1alpha1.Delegation, error) {
	d, err := s.getDelegation(ctx, types.NamespacedName{Namespace: namespace, Name: id})
	if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		return nil, toolerr.New(toolerr.NotFound, "no message %s in namespace %s", id, namespace)
	}
	return d, err
}

// delegationsTo lists the Delegations in state sent to a member, from the
// cache.
func (s *service) delegationsTo(ctx context.Context, namespace, member, state string) ([]fleetv1alpha1.Delegation, error) {
	var list fleetv1alpha1.DelegationList
	if err := s.cache.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{indexReceiverState: indexValue(state, member)}); err != nil {
		return nil, fmt.Errorf("listing delegations to %s/%s: %w", namespace, member, err)
	}
	return list.Items, nil
}

// queueOf is what member's queue holds, from the cache.
func (s *service) queueOf(ctx context.Context, namespace, member string) (queue, error) {
	queued, err := s.delegationsTo(ctx, namespace, member, stateQueued)
	if err != nil {
		return queue{}, err
	}
	q := queue{depth: int32(len(queued))}
	active, err := s.delegationsTo(ctx, namespace, member, stateActive)
	if err != nil {
		return queue{}, err
	}
	if d := currentDelegation(active); d != nil {
		q.inFlight = d.Name
	}
	return q, nil
}

// liveDelegationsTo lists the Delegations sent to a member from the API
// server, the answer when the cache may trail: those not closed, or the
// closed ones (the member's history in the retention window, which a
// caller lists only when it must).
func (s *service) liveDelegationsTo(ctx context.Context, namespace, member string, closed bool) ([]fleetv1alpha1.Delegation, error) {
	op := selection.DoesNotExist
	if closed {
		op = selection.Exists
	}
	mark, err := labels.NewRequirement(fleetv1alpha1.LabelClosed, op, nil)
	if err != nil {
		return nil, err
	}
	sel := labels.SelectorFromSet(labels.Set{fleetv1alpha1.LabelMember: member}).Add(*mark)
	var list fleetv1alpha1.DelegationList
	if err := s.live.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing delegations to %s/%s: %w", namespace, member, err)
	}
	// The label is a convenience; the spec is the truth.
	items := list.Items[:0]
	for _, d := range list.Items {
		if d.Spec.To == member {
			items = append(items, d)
		}
	}
	return items, nil
}

// delegationsFrom lists the Delegations in state a principal sent.
func (s *service) delegationsFrom(ctx context.Context, p *identity.Principal, state string) ([]fleetv1alpha1.Delegation, error) {
	var list fleetv1alpha1.DelegationList
	if err := s.cache.List(ctx, &list, client.InNamespace(p.Namespace), client.MatchingFields{indexSenderState: indexValue(state, p.Key())}); err != nil {
		return nil, fmt.Errorf("listing delegations from %s: %w", p.Key(), err)
	}
	return list.Items, nil
}

// members lists the Members of a namespace.
func (s *service) members(ctx context.Context, namespace string) ([]fleetv1alpha1.Member, error) {
	var list fleetv1alpha1.MemberList
	if err := s.cache.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing members in %s: %w", namespace, err)
	}
	return list.Items, nil
}

// profiles lists the Profiles of a namespace.
func (s *service) profiles(ctx context.Context, namespace string) ([]fleetv1alpha1.Profile, error) {
	var list fleetv1alpha1.ProfileList
	if err := s.cache.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing profiles in %s: %w", namespace, err)
	}
	return list.Items, nil
}

// updateStatus applies mutate to a copy of d and writes the status with d's
// resourceVersion, so a concurrent writer (the controller, another replica)
// is never overwritten. On a conflict it re-reads the Delegation from the
// API server and applies mutate again. mutate returns false to write
// nothing, or an error (errStale among them) to give up.
func (s *service) updateStatus(ctx context.Context, d *fleetv1alpha1.Delegation, mutate func(*fleetv1alpha1.Delegation) (bool, error)) (*fleetv1alpha1.Delegation, error) {
	key := types.NamespacedName{Namespace: d.Namespace, Name: d.Name}
	for attempt := 0; ; attempt++ {
		next := d.DeepCopy()
		write, err := mutate(next)
		if err != nil || !write {
			return d, err
		}
		err = s.client.Status().Update(ctx, next)
		if err == nil {
			return next, nil
		}
		if !apierrors.IsConflict(err) || attempt+1 >= maxStatusAttempts {
			return d, fmt.Errorf("updating the status of delegation %s: %w", key, err)
		}
		fresh := &fleetv1alpha1.Delegation{}
		if err := s.live.Get(ctx, key, fresh); err != nil {
			return d, fmt.Errorf("re-reading delegation %s: %w", key, err)
		}
		d = fresh
	}
}

// delegationGenerateName is the generateName of a Delegation to member:
// readable in kubectl, and a valid object name (member names may hold '_').
func delegationGenerateName(member string) string {
	return strings.ReplaceAll(member, "_", "-") + "-"
}

// memberGenerateName is the generateName of a Member spawned from profile:
// it satisfies the Member name rule (a letter, then at most 31 of [a-z0-9_-])
// once the API server appends its five random characters.
func memberGenerateName(profile string) string {
	var b strings.Builder
	for _, r := range profile {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		case r == '.' || r == '_':
			b.WriteByte('-')
		}
		if b.Len() >= 20 {
			break
		}
	}
	base := strings.Trim(b.String(), "-")
	if base == "" || base[0] < 'a' || base[0] > 'z' {
		base = "w" + base
	}
	if len(base) > 20 {
		base = base[:20]
	}
	return base + "-"
}
