package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/testutil"
)

func TestAttributeTurns(t *testing.T) {
	type usage = fleetv1alpha1.TokenUsage
	type turn = fleetv1alpha1.TurnUsage
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	msg := func(name, content string, typedAfter time.Duration, counted bool) fleetv1alpha1.Delegation {
		d := fleetv1alpha1.Delegation{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0)}}
		d.Spec.Content = content
		if typedAfter >= 0 {
			d.Status.DeliveringAt = &metav1.Time{Time: t0.Add(typedAfter)}
		}
		if counted {
			d.Status.Usage = &fleetv1alpha1.DelegationUsage{}
		}
		return d
	}
	one := usage{InputTokens: 10, OutputTokens: 2, Calls: 1}
	cases := map[string]struct {
		cur         turn
		count       agents.TokenCount
		candidates  []fleetv1alpha1.Delegation
		wantCur     turn
		wantTouched []turn
	}{
		"calls continue the turn under way": {
			cur:         turn{Delegation: "d1", TokenUsage: one},
			count:       agents.TokenCount{Added: one},
			wantCur:     turn{Delegation: "d1", TokenUsage: one.Plus(one)},
			wantTouched: []turn{{Delegation: "d1", TokenUsage: one.Plus(one)}},
		},
		"a prompt that is a message starts its turn; the one before ends": {
			cur:         turn{Delegation: "d1", TokenUsage: one},
			count:       agents.TokenCount{Added: one.Plus(one), Turns: []agents.TurnCount{{Prompt: "Refactor\n  the   parser", Added: one}}},
			candidates:  []fleetv1alpha1.Delegation{msg("d1", "first", 0, true), msg("d2", "Refactor the parser", time.Second, false)},
			wantCur:     turn{Delegation: "d2", TokenUsage: one},
			wantTouched: []turn{{Delegation: "d1", TokenUsage: one.Plus(one)}, {Delegation: "d2", TokenUsage: one}},
		},
		"the same text sent twice: the next one typed": {
			cur:         turn{Delegation: "d1"},
			count:       agents.TokenCount{Turns: []agents.TurnCount{{Prompt: "again"}}},
			candidates:  []fleetv1alpha1.Delegation{msg("d0", "again", 0, true), msg("d1", "again", time.Second, false), msg("d2", "again", 2*time.Second, false)},
			wantCur:     turn{Delegation: "d2"},
			wantTouched: []turn{{Delegation: "d2"}},
		},
		"a message the cache shows queued still matches": {
			count:       agents.TokenCount{Added: one, Turns: []agents.TurnCount{{Prompt: "images at /w/a.png\nlook at this", Added: one}}},
			candidates:  []fleetv1alpha1.Delegation{msg("d1", "look at this", -1, false)},
			wantCur:     turn{Delegation: "d1", TokenUsage: one},
			wantTouched: []turn{{Delegation: "d1", TokenUsage: one}},
		},
		"a prompt fleetd did not type counts for no message": {
			cur:         turn{Delegation: "d1", TokenUsage: one},
			count:       agents.TokenCount{Added: one, Turns: []agents.TurnCount{{Prompt: "typed by hand", Added: one}}},
			candidates:  []fleetv1alpha1.Delegation{msg("d1", "first", 0, true), msg("d2", "second", time.Second, false)},
			wantCur:     turn{TokenUsage: one},
			wantTouched: nil,
		},
		"a message whose turn was counted is not matched again": {
			count:      agents.TokenCount{Turns: []agents.TurnCount{{Prompt: "first"}}},
			candidates: []fleetv1alpha1.Delegation{msg("d1", "first", 0, true)},
			wantCur:    turn{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			typingOrder(tc.candidates)
			cur, touched := attributeTurns(tc.cur, tc.count, tc.candidates)
			if diff := cmp.Diff(tc.wantCur, cur); diff != "" {
				t.Errorf("turn under way (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantTouched, touched); diff != "" {
				t.Errorf("turns recorded (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTypingOrder(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	d := func(name string, created time.Duration, typed *time.Duration) fleetv1alpha1.Delegation {
		x := fleetv1alpha1.Delegation{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(created))}}
		if typed != nil {
			x.Status.DeliveringAt = &metav1.Time{Time: t0.Add(*typed)}
		}
		return x
	}
	at := func(d time.Duration) *time.Duration { return &d }
	ds := []fleetv1alpha1.Delegation{d("queued-late", 5*time.Second, nil), d("typed-second", 0, at(4*time.Second)), d("queued-early", time.Second, nil), d("typed-first", 2*time.Second, at(3*time.Second))}
	typingOrder(ds)
	var got []string
	for _, x := range ds {
		got = append(got, x.Name)
	}
	if diff := cmp.Diff([]string{"typed-first", "typed-second", "queued-early", "queued-late"}, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

// TestCountTurnsRecordsEachMessagesUsage: against the API server, a count
// of the transcript sets each message's usage, priced; counting the same
// lines again (a pass whose Member write failed) sets the same figures;
// a message deleted since is passed over.
func TestCountTurnsRecordsEachMessagesUsage(t *testing.T) {
	ns := env.Namespace(t)
	var r *MemberReconciler
	runManager(t, env.Config, ns, func(ctx context.Context, mgr ctrl.Manager) error {
		r = &MemberReconciler{Client: mgr.GetClient()}
		return IndexDelegations(ctx, mgr.GetFieldIndexer())
	})
	m := testutil.MakeMember("w1", ns).Agent(fleetv1alpha1.AgentClaude).Obj()
	first := testutil.MakeDelegation("first", ns, "w1", "write the parser").Obj()
	second := testutil.MakeDelegation("second", ns, "w1", "now its tests").Obj()
	gone := testutil.MakeDelegation("gone", ns, "w1", "never mind").Obj()
	for _, d := range []*fleetv1alpha1.Delegation{first, second, gone} {
		create(t, d)
	}
	call := fleetv1alpha1.TokenUsage{InputTokens: 1_000_000, OutputTokens: 10, Calls: 1}
	pricing := &fleetv1alpha1.Pricing{Currency: "EUR", InputPerMTok: "2", OutputPerMTok: "0"}
	count := agents.TokenCount{Added: call.Plus(call).Plus(call), Turns: []agents.TurnCount{
		{Prompt: "write the parser", Added: call.Plus(call)},
		{Prompt: "now its tests", Added: call},
	}}
	var turn *fleetv1alpha1.TurnUsage
	testutil.Eventually(t, "the messages in the cache and their turns counted", func() (bool, string) {
		var err error
		turn, err = r.countTurns(context.Background(), m, count, pricing)
		if err != nil {
			return false, err.Error()
		}
		return turn != nil && turn.Delegation == "second", fmt.Sprintf("turn under way %+v", turn)
	})
	want := map[string]*fleetv1alpha1.DelegationUsage{
		"first":  {TokenUsage: call.Plus(call), Cost: "4.00", Currency: "EUR"},
		"second": {TokenUsage: call, Cost: "2.00", Currency: "EUR"},
		"gone":   nil,
	}
	check := func() {
		t.Helper()
		for name, w := range want {
			var d fleetv1alpha1.Delegation
			if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(w, d.Status.Usage); diff != "" {
				t.Errorf("%s usage (-want +got):\n%s", name, diff)
			}
		}
	}
	check()
	// The same lines again, before the Member's cursor moved on.
	if _, err := r.countTurns(context.Background(), m, count, pricing); err != nil {
		t.Fatal(err)
	}
	check()
	// The turn goes on; its message was deleted meanwhile.
	m.Status.Usage = &fleetv1alpha1.MemberUsage{Turn: turn}
	if err := env.Client.Delete(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "a deleted message passed over", func() (bool, string) {
		next, err := r.countTurns(context.Background(), m, agents.TokenCount{Added: call}, pricing)
		return err == nil && next != nil && next.Calls == 2, fmt.Sprintf("%+v, %v", next, err)
	})
}
