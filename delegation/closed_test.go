package delegation

import (
	"testing"

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
		d    *dlg
		want bool
	}{
		"queued":                  {mk("a", 0).queued(), false},
		"in flight":               {mk("a", 0).typed(1), false},
		"replied to a waiter":     {mk("a", 0).typed(1).then(replyAt(60, "done")), true},
		"replied, detached":       {mk("a", 0).detached().typed(1).then(replyAt(60, "done")), false},
		"replied, collected":      {mk("a", 0).detached().typed(1).then(replyAt(60, "done")).then(ack), true},
		"turn done, no reply yet": {mk("a", 0).typed(1).then(turnDone), false},
		"turn done, late reply, collected": {mk("a", 0).typed(1).then(turnDone).then(func(d *fleetv1alpha1.Delegation) {
			if err := LateReply(d, at(80).Time, "late"); err != nil {
				panic(err)
			}
		}).then(ack), true},
		"a reply to carry to a member sender": {mk("a", 0).from(fleetv1alpha1.PrincipalMember, "lead").detached().typed(1).then(replyAt(60, "done")), false},
		"cancelled before typing":             {mk("a", 0).queued().then(func(d *fleetv1alpha1.Delegation) { Cancel(d, at(5).Time, "withdrawn") }), true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := tc.d.obj()
			if got := Closed(&d); got != tc.want {
				t.Errorf("Closed = %v, want %v (status %+v)", got, tc.want, d.Status)
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
	if !MarkClosed(&d) {
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
	if MarkClosed(&d) {
		t.Error("marked twice")
	}

	forged := mk("b", 0).queued().obj()
	forged.Labels = map[string]string{fleetv1alpha1.LabelClosed: "true"}
	if !MarkClosed(&forged) || forged.Labels[fleetv1alpha1.LabelClosed] != "" {
		t.Errorf("a queued Delegation keeps a closed label: %v", forged.Labels)
	}
	if MarkClosed(&forged) {
		t.Error("an unmarked queued Delegation changed")
	}

	// spec.to allows a name no label value may be: the marks leave it out.
	odd := mk("c", 0).typed(1).then(replyAt(60, "done")).obj()
	odd.Spec.To = "w-"
	if !MarkClosed(&odd) || odd.Labels[fleetv1alpha1.LabelMember] != "" || odd.Labels[fleetv1alpha1.LabelClosed] != "true" {
		t.Errorf("marks of a Delegation to %q: %v", odd.Spec.To, odd.Labels)
	}
	if _, ok := MarkedBytes(map[string]string{fleetv1alpha1.AnnotationBytes: "-3"}); ok {
		t.Error("negative marked bytes accepted")
	}
}
