package delegation

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

var (
	t0     = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	policy = Policy{ConfirmWindow: 10 * time.Second, MaxHops: 3}
)

func at(seconds int) *metav1.Time {
	return &metav1.Time{Time: t0.Add(time.Duration(seconds) * time.Second)}
}

// dlg builds Delegations for tables: created at t0+offset, sent by a
// static principal to member w with a 60 s deadline.
type dlg struct{ fleetv1alpha1.Delegation }

func mk(name string, offset time.Duration) *dlg {
	d := &dlg{}
	d.Name = name
	d.CreationTimestamp = metav1.NewTime(t0.Add(offset))
	d.Spec = fleetv1alpha1.DelegationSpec{From: fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "p"}, To: "w", Content: "hi", TimeoutSeconds: 60}
	return d
}

// queued is a new Delegation as the API server shows it.
func (d *dlg) queued() *dlg { d.Status.Phase = fleetv1alpha1.DelegationQueued; return d }

// typed records the intent to type it into pane w1:p1 (terminal term-1) at
// t0 and seq, as BeginDelivery does.
func (d *dlg) typed(seq int64) *dlg {
	BeginDelivery(&d.Delegation, t0, Target{PaneID: "w1:p1", TerminalID: "term-1", Seq: seq})
	return d
}

// then applies a transition.
func (d *dlg) then(f func(*fleetv1alpha1.Delegation)) *dlg { f(&d.Delegation); return d }

func (d *dlg) seqAnno(ns int) *dlg {
	d.Annotations = map[string]string{fleetv1alpha1.AnnotationSequence: t0.Add(time.Duration(ns)).Format(time.RFC3339Nano)}
	return d
}

func (d *dlg) from(kind fleetv1alpha1.PrincipalKind, name string) *dlg {
	d.Spec.From = fleetv1alpha1.Principal{Kind: kind, Name: name}
	return d
}

func (d *dlg) detached() *dlg { f := false; d.Spec.Wait = &f; return d }

func (d *dlg) obj() fleetv1alpha1.Delegation { return d.Delegation }

// replyAt is a transition that replies text at t0+seconds.
func replyAt(seconds int, text string) func(*fleetv1alpha1.Delegation) {
	return func(d *fleetv1alpha1.Delegation) {
		if err := Reply(d, at(seconds).Time, text); err != nil {
			panic(err)
		}
	}
}

// askAt is a transition that asks text at t0+seconds.
func askAt(seconds int, text string) func(*fleetv1alpha1.Delegation) {
	return func(d *fleetv1alpha1.Delegation) {
		if _, err := Ask(d, at(seconds).Time, text); err != nil {
			panic(err)
		}
	}
}

func idle(seq int64) Member {
	return Member{Ready: true, PaneID: "w1:p1", TerminalID: "term-1", Status: fleetv1alpha1.AgentIdle, Seq: seq}
}

// working is a member seen working at seq.
func working(seq int64) Member {
	m := idle(seq)
	m.Status, m.WorkingSeq = fleetv1alpha1.AgentWorking, seq
	return m
}

// idleAfterWork is a member idle at seq, last seen working at seq-1.
func idleAfterWork(seq int64) Member {
	m := idle(seq)
	m.WorkingSeq = seq - 1
	return m
}

func with(m Member, f func(*Member)) Member { f(&m); return m }

// typedNames is what a controller that typed them all remembers.
func typedNames(ds []fleetv1alpha1.Delegation) sets.Set[string] {
	s := sets.New[string]()
	for i := range ds {
		if Typed(&ds[i]) {
			s.Insert(ds[i].Name)
		}
	}
	return s
}
