package gateway

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/testutil"
)

func TestCurrentDelegation(t *testing.T) {
	working := func(name string, typed time.Duration) fleetv1alpha1.Delegation {
		return *withStatus(name, fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationWorking, DeliveringAt: mtime(typed)})
	}
	queued := *withStatus("queued", fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationQueued})
	replied := *withStatus("replied", fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationReplied, DeliveringAt: mtime(time.Hour)})
	cases := map[string]struct {
		ds   []fleetv1alpha1.Delegation
		want string
	}{
		"none":              {ds: []fleetv1alpha1.Delegation{queued, replied}},
		"the one in flight": {ds: []fleetv1alpha1.Delegation{queued, working("a", 0), replied}, want: "a"},
		"the latest typed":  {ds: []fleetv1alpha1.Delegation{working("a", 0), working("b", time.Minute)}, want: "b"},
		"being typed": {ds: []fleetv1alpha1.Delegation{*withStatus("c", fleetv1alpha1.DelegationStatus{
			Phase: fleetv1alpha1.DelegationDelivered, DeliveringAt: mtime(0)})}, want: "c"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ""
			if d := currentDelegation(tc.ds); d != nil {
				got = d.Name
			}
			if got != tc.want {
				t.Errorf("current = %q, want %q", got, tc.want)
			}
		})
	}
}

// sentAt gives d the creation second of every Delegation here and the
// gateway's sequence seq, as two messages sent within one second have.
func sentAt(d *fleetv1alpha1.Delegation, seq string) *fleetv1alpha1.Delegation {
	d.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations[fleetv1alpha1.AnnotationSequence] = seq
	return d
}

func TestLateReplyTarget(t *testing.T) {
	timedOut := func(name string, typed *metav1.Time, reply *string) fleetv1alpha1.Delegation {
		return *withStatus(name, fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationTimedOut, DeliveringAt: typed, Reply: reply})
	}
	cases := map[string]struct {
		ds   []fleetv1alpha1.Delegation
		want string
	}{
		"never typed":        {ds: []fleetv1alpha1.Delegation{timedOut("a", nil, nil)}},
		"already replied":    {ds: []fleetv1alpha1.Delegation{timedOut("a", mtime(0), ptr.To("x"))}},
		"the latest one":     {ds: []fleetv1alpha1.Delegation{timedOut("a", mtime(0), nil), timedOut("b", mtime(time.Second), nil)}, want: "b"},
		"a turn seen to end": {ds: []fleetv1alpha1.Delegation{*withStatus("c", fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationTurnDone, DeliveringAt: mtime(0)})}, want: "c"},
		"not an older one behind the last": {ds: []fleetv1alpha1.Delegation{
			timedOut("a", mtime(0), nil),
			*withStatus("b", fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationReplied, DeliveringAt: mtime(time.Second), Reply: ptr.To("done")}),
		}},
		"not other phases": {ds: []fleetv1alpha1.Delegation{*withStatus("d", fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationCancelled, DeliveringAt: mtime(0)})}},
		// A turn ended and the next message was typed within the same
		// second, which is all a status timestamp holds: the next one in
		// the queue was typed last, whatever the names say.
		"typed within one second: the later in the queue": {ds: []fleetv1alpha1.Delegation{
			*sentAt(withStatus("w1-hhhhh", fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationTurnDone, DeliveringAt: mtime(0)}), "2026-01-01T00:00:00.1Z"),
			*sentAt(ptr.To(timedOut("w1-ddddd", mtime(0), nil)), "2026-01-01T00:00:00.2Z"),
		}, want: "w1-ddddd"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ""
			if d := lateReplyTarget(tc.ds); d != nil {
				got = d.Name
			}
			if got != tc.want {
				t.Errorf("late target = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestAskTimeout: an unanswered bridge_ask returns timeout after its own
// timeout, and the question is withdrawn.
func TestAskTimeout(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	_, workerToken := addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	worker := h.connect(t, workerToken, nil)

	wantCode(t, callTool[AskOutput](t, worker, "bridge_ask", map[string]any{"content": "anyone?"}), toolerr.NotFound)
	sent := async[SendOutput](t, context.Background(), primary, "bridge_send", map[string]any{"content": "work", "wait": false})
	d := waitDelegation(t, ns, "w1", nil)
	wantOK(t, receive(t, sent))
	deliver(t, ns, d.Name)
	got := wantOK(t, callTool[AskOutput](t, worker, "bridge_ask", map[string]any{"content": "really?", "timeoutMs": 200}))
	if got.Outcome != "timeout" || got.Answer != nil || got.TurnID != d.Name+".q1" {
		t.Errorf("bridge_ask = %+v, want a timeout", got)
	}
	// The worker went on without the answer: the question is withdrawn, the
	// message is worked on again, and a late answer is refused.
	st := env.Delegation(t, ns, d.Name).Status
	if len(st.Questions) != 1 || st.Questions[0].WithdrawnAt == nil || st.Phase != fleetv1alpha1.DelegationWorking {
		t.Errorf("after the ask timed out: phase %s questions %+v, want Working and the question withdrawn", st.Phase, st.Questions)
	}
	if poll := wantOK(t, callTool[PollOutput](t, primary, "bridge_poll", nil)); len(poll.Questions) != 0 {
		t.Errorf("a withdrawn question is polled: %+v", poll.Questions)
	}
	wantCode(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "yes", "turnId": d.Name + ".q1"}), toolerr.Conflict)
}

// TestAbandonedAskIsWithdrawn: a worker's bridge_ask whose connection
// drops leaves no open question behind to hold the message (and its
// member's queue) until the deadline: the question is withdrawn and the
// message is worked on again, so the turn's own end settles it.
func TestAbandonedAskIsWithdrawn(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	_, workerToken := addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	worker := h.connect(t, workerToken, nil)
	async[SendOutput](t, context.Background(), primary, "bridge_send", map[string]any{"content": "work", "wait": false})
	d := waitDelegation(t, ns, "w1", nil)
	deliver(t, ns, d.Name)

	ctx, cancel := context.WithCancel(context.Background())
	async[AskOutput](t, ctx, worker, "bridge_ask", map[string]any{"content": "which one?"})
	testutil.Eventually(t, "", func() error {
		cur := env.Delegation(t, ns, d.Name)
		return errIf(cur.Status.Phase != fleetv1alpha1.DelegationAsking, "phase %s", cur.Status.Phase)
	})
	cancel()
	testutil.Eventually(t, "", func() error {
		cur := env.Delegation(t, ns, d.Name)
		if cur.Status.Phase != fleetv1alpha1.DelegationWorking {
			return errIf(true, "phase %s, want Working once the asker left", cur.Status.Phase)
		}
		q := cur.Status.Questions[0]
		return errIf(q.WithdrawnAt == nil || q.Answer != nil, "question %+v, want it withdrawn", q)
	})
	// The primary's answer now comes too late, and says so.
	got := callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "the first", "turnId": d.Name + ".q1"})
	wantCode(t, got, toolerr.Conflict)
}
