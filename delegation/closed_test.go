package delegation

import (
	"maps"
	"testing"
	"time"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

func TestClosed(t *testing.T) {
	ack := func(d *fleetv1alpha1.Delegation) {
		if _, err := Acknowledge(d, at(90).Time); err != nil {
			panic(err)
		}
	}
	turnDone := func(d *fleetv1alpha1.Delegation) { TurnDone(d, at(60).Time, "tail") }
	cases := map[string]struct {
		d          *dlg
		superseded bool
		want       bool
	}{
		"queued":                  {mk("a", 0).queued(), false, false},
		"in flight":               {mk("a", 0).typed(1), false, false},
		"replied to a waiter":     {mk("a", 0).typed(1).then(replyAt(60, "done")), false, true},
		"replied, detached":       {mk("a", 0).detached().typed(1).then(replyAt(60, "done")), false, false},
		"replied, collected":      {mk("a", 0).detached().typed(1).then(replyAt(60, "done")).then(ack), false, true},
		"turn done, no reply yet": {mk("a", 0).typed(1).then(turnDone), false, false},
		// A later message took the worker's reply: none can come to it.
		"turn done, superseded":               {mk("a", 0).typed(1).then(turnDone), true, true},
		"turn done, superseded, outcome owed": {mk("a", 0).detached().typed(1).then(turnDone), true, false},
		"in flight, superseded":               {mk("a", 0).typed(1), true, false},
		"turn done, late reply, collected": {mk("a", 0).typed(1).then(turnDone).then(func(d *fleetv1alpha1.Delegation) {
			if err := LateReply(d, at(80).Time, "late"); err != nil {
				panic(err)
			}
		}).then(ack), false, true},
		"a reply to carry to a member sender": {mk("a", 0).from(fleetv1alpha1.PrincipalMember, "lead").detached().typed(1).then(replyAt(60, "done")), false, false},
		"cancelled before typing":             {mk("a", 0).queued().then(func(d *fleetv1alpha1.Delegation) { Cancel(d, at(5).Time, "withdrawn") }), false, true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := tc.d.obj()
			if got := Closed(&d, tc.superseded); got != tc.want {
				t.Errorf("Closed(superseded %v) = %v, want %v (status %+v)", tc.superseded, got, tc.want, d.Status)
			}
		})
	}
}

// TestMarkClosed: a closed Delegation is marked with what the gateway
// reads of it without its message; the marks are written once; a closed
// label on one that is not closed, whoever set it, is taken off.
func TestMarkClosed(t *testing.T) {
	d := mk("a", 0).typed(1).then(replyAt(60, "done")).obj()
	d.Spec.Content = "twelve bytes"
	if !MarkClosed(&d, false) {
		t.Fatal("a closed Delegation was not marked")
	}
	want := map[string]string{
		fleetv1alpha1.LabelClosed: "true",
		fleetv1alpha1.LabelMember: "w",
		fleetv1alpha1.LabelSender: SenderLabel(d.Spec.From),
	}
	for k, v := range want {
		if d.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, d.Labels[k], v)
		}
	}
	if n, ok := MarkedBytes(d.Annotations); !ok || n != 12 {
		t.Errorf("marked bytes = %d, %v; want 12", n, ok)
	}
	if MarkClosed(&d, false) {
		t.Error("marked twice")
	}

	forged := mk("b", 0).queued().obj()
	forged.Labels = map[string]string{fleetv1alpha1.LabelClosed: "true"}
	if !MarkClosed(&forged, false) || forged.Labels[fleetv1alpha1.LabelClosed] != "" {
		t.Errorf("a queued Delegation keeps a closed label: %v", forged.Labels)
	}
	if MarkClosed(&forged, false) {
		t.Error("an unmarked queued Delegation changed")
	}

	// spec.to allows a name no label value may be: the marks leave it out.
	odd := mk("c", 0).typed(1).then(replyAt(60, "done")).obj()
	odd.Spec.To = "w-"
	if !MarkClosed(&odd, false) || odd.Labels[fleetv1alpha1.LabelMember] != "" || odd.Labels[fleetv1alpha1.LabelClosed] != "true" {
		t.Errorf("marks of a Delegation to %q: %v", odd.Spec.To, odd.Labels)
	}
	if _, ok := MarkedBytes(map[string]string{fleetv1alpha1.AnnotationBytes: "-3"}); ok {
		t.Error("negative marked bytes accepted")
	}
}

// TestSuperseded: every message typed to a member but the last is
// superseded, by typing time first, then queue order; one that leaves
// (stay) supersedes nothing.
func TestSuperseded(t *testing.T) {
	turnDone := func(d *fleetv1alpha1.Delegation) { TurnDone(d, at(60).Time, "tail") }
	ds := []fleetv1alpha1.Delegation{
		mk("a", 0).typed(1).then(turnDone).obj(),
		mk("b", time.Second).typed(2).obj(),
		mk("c", 2*time.Second).queued().obj(),
	}
	if got := Superseded(ds, nil); !maps.Equal(got, map[string]bool{"a": true}) {
		t.Errorf("Superseded = %v, want a", got)
	}
	withoutB := func(d *fleetv1alpha1.Delegation) bool { return d.Name != "b" }
	if got := Superseded(ds, withoutB); len(got) != 0 {
		t.Errorf("Superseded without b = %v, want none", got)
	}
	// Typed later though queued first: the typing decides.
	ds[0].Status.DeliveringAt = at(30)
	if got := Superseded(ds, nil); !maps.Equal(got, map[string]bool{"b": true}) {
		t.Errorf("Superseded with a typed last = %v, want b", got)
	}
}
