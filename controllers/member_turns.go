package controllers

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/textcut"
)

// Tokens per message. An agent's transcript is a run of turns, each begun
// by a prompt: the model calls after a prompt, up to the next one, are
// what the message typed as that prompt cost. The turn under way, and the
// message that began it, are kept on the Member's status beside the
// transcript cursor, written with it; each Delegation's status.usage is
// set (never added to) from them, so counting the same lines again after
// a failed write gives the same figures.

// promptKeyBytes is how much of a message's text, its whitespace folded,
// must appear in a prompt for the prompt to be that message.
const promptKeyBytes = 160

// attributeTurns counts a reading of the transcript into the turn under
// way (cur) and the turns it saw start, naming each new turn's message
// from candidates (the member's messages in the order they were typed,
// see typingOrder). It returns the turn under way after the reading, and
// each turn of a message the reading added to, with its whole usage so
// far, in order.
func attributeTurns(cur fleetv1alpha1.TurnUsage, count agents.TokenCount, candidates []fleetv1alpha1.Delegation) (fleetv1alpha1.TurnUsage, []fleetv1alpha1.TurnUsage) {
	var touched []fleetv1alpha1.TurnUsage
	if continued := count.Continued(); continued != (fleetv1alpha1.TokenUsage{}) {
		cur.TokenUsage = cur.Plus(continued)
		if cur.Delegation != "" {
			touched = append(touched, cur)
		}
	}
	for _, t := range count.Turns {
		cur = fleetv1alpha1.TurnUsage{Delegation: promptMessage(t.Prompt, cur.Delegation, candidates)}
		cur.TokenUsage = cur.Plus(t.Added)
		if cur.Delegation != "" {
			touched = append(touched, cur)
		}
	}
	return cur, touched
}

// promptMessage names the message prompt was: the first candidate typed
// after the message of the turn before (after), whose turn has not been
// counted, and whose text the prompt holds. "" when none is.
func promptMessage(prompt, after string, candidates []fleetv1alpha1.Delegation) string {
	from := 0
	if i := slices.IndexFunc(candidates, func(d fleetv1alpha1.Delegation) bool { return d.Name == after }); i >= 0 {
		from = i + 1
	}
	folded := foldSpace(prompt)
	for _, d := range candidates[from:] {
		if d.Status.Usage != nil {
			continue
		}
		if key := textcut.Head(foldSpace(d.Spec.Content), promptKeyBytes); key != "" && strings.Contains(folded, key) {
			return d.Name
		}
	}
	return ""
}

// foldSpace is s with each run of white space one space, and none at
// either end: the agent may store a typed message's line breaks and
// indentation otherwise than they were sent.
func foldSpace(s string) string { return strings.Join(strings.Fields(s), " ") }

// typingOrder sorts a member's messages in the order they reach its
// pane: those typed by when, then those still queued by when they were
// sent (the cache may not show an intent to type yet when the prompt is
// already in the transcript).
func typingOrder(ds []fleetv1alpha1.Delegation) {
	slices.SortStableFunc(ds, func(a, b fleetv1alpha1.Delegation) int {
		switch at, bt := a.Status.DeliveringAt, b.Status.DeliveringAt; {
		case at != nil && bt != nil:
			if c := at.Time.Compare(bt.Time); c != 0 {
				return c
			}
		case at != nil:
			return -1
		case bt != nil:
			return 1
		}
		return cmp.Or(a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
	})
}

// countTurns attributes a count of m's transcript to its messages: each
// Delegation whose turn the count added to gets its usage so far, priced.
// It returns the turn under way, to be written with the count's cursor;
// an error leaves both unwritten, so the next pass counts the same lines
// again.
func (r *MemberReconciler) countTurns(ctx context.Context, m *fleetv1alpha1.Member, count agents.TokenCount, pricing *fleetv1alpha1.Pricing) (*fleetv1alpha1.TurnUsage, error) {
	var cur fleetv1alpha1.TurnUsage
	if m.Status.Usage != nil && m.Status.Usage.Turn != nil {
		cur = *m.Status.Usage.Turn
	}
	var candidates []fleetv1alpha1.Delegation
	if len(count.Turns) > 0 {
		var list fleetv1alpha1.DelegationList
		if err := r.Client.List(ctx, &list, client.InNamespace(m.Namespace), client.MatchingFields{IndexDelegationTo: m.Name}); err != nil {
			return nil, fmt.Errorf("listing the messages to %s: %w", m.Name, err)
		}
		candidates = list.Items
		typingOrder(candidates)
	}
	next, touched := attributeTurns(cur, count, candidates)
	for _, t := range touched {
		if err := r.recordTurn(ctx, types.NamespacedName{Namespace: m.Namespace, Name: t.Delegation}, t.TokenUsage, pricing); err != nil {
			return nil, err
		}
	}
	if next == (fleetv1alpha1.TurnUsage{}) {
		return nil, nil
	}
	return &next, nil
}

// recordTurn sets the usage of the Delegation key to used, priced. A
// Delegation gone (retention, a user) has nothing to record.
func (r *MemberReconciler) recordTurn(ctx context.Context, key types.NamespacedName, used fleetv1alpha1.TokenUsage, pricing *fleetv1alpha1.Pricing) error {
	var d fleetv1alpha1.Delegation
	if err := r.Client.Get(ctx, key, &d); err != nil {
		return client.IgnoreNotFound(err)
	}
	want := fleetv1alpha1.DelegationUsage{TokenUsage: used}
	want.Cost, want.Currency = pricing.Price(used)
	if d.Status.Usage != nil && *d.Status.Usage == want {
		return nil
	}
	// The whole usage, each field named, so that the patch sets it exactly
	// whatever the cache showed; the rest of the status is the Delegation
	// controller's and the gateway's.
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"usage": map[string]any{
		"inputTokens": used.InputTokens, "outputTokens": used.OutputTokens,
		"cachedTokens": used.CachedTokens, "cacheCreationTokens": used.CacheCreationTokens, "calls": used.Calls,
		"cost": nilIfEmpty(want.Cost), "currency": nilIfEmpty(want.Currency),
	}}})
	if err != nil {
		return err
	}
	if err := r.Client.Status().Patch(ctx, &d, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("recording the usage of delegation %s: %w", key.Name, err)
	}
	return nil
}

// nilIfEmpty is s, or null in a merge patch (which removes the field).
func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
