package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/testutil"
)

// TestSendReply: the primary's bridge_send is held until the worker's
// bridge_reply, and the Delegation records both.
func TestSendReply(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	_, workerToken := addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	worker := h.connect(t, workerToken, nil)

	sent := async[SendOutput](t, context.Background(), primary, "bridge_send", map[string]any{"content": "write the tests", "timeoutMs": 120000})
	d := waitDelegation(t, ns, "w1", nil)
	want := fleetv1alpha1.DelegationSpec{
		From:           fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "primary"},
		To:             "w1",
		Content:        "write the tests",
		Wait:           ptr.To(true),
		TimeoutSeconds: 120,
	}
	if diff := cmp.Diff(want, d.Spec); diff != "" {
		t.Errorf("delegation spec (-want +got):\n%s", diff)
	}
	if got, want := d.Labels[fleetv1alpha1.LabelSender], delegation.SenderLabel(want.From); got != want {
		t.Errorf("sender label = %q, want %q", got, want)
	}
	if _, err := time.Parse(time.RFC3339Nano, d.Annotations[fleetv1alpha1.AnnotationSequence]); err != nil {
		t.Errorf("sequence annotation: %v", err)
	}

	// Nothing is in flight until the controller delivers it.
	wantCode(t, callTool[ReplyOutput](t, worker, "bridge_reply", map[string]any{"content": "too early"}), toolerr.NotFound)

	deliver(t, ns, d.Name)
	reply := wantOK(t, callTool[ReplyOutput](t, worker, "bridge_reply", map[string]any{"content": "all green"}))
	if diff := cmp.Diff(ReplyOutput{DispatchID: d.Name}, reply, exportAll); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}

	got := wantOK(t, receive(t, sent))
	if diff := cmp.Diff(SendOutput{Outcome: "reply", Text: "all green", DispatchID: d.Name, Member: "w1"}, got, exportAll); diff != "" {
		t.Errorf("bridge_send (-want +got):\n%s", diff)
	}
	final := env.Delegation(t, ns, d.Name)
	if final.Status.Phase != fleetv1alpha1.DelegationReplied || final.Status.Outcome != fleetv1alpha1.OutcomeReply ||
		deref(final.Status.Reply) != "all green" || final.Status.RepliedAt == nil || final.Status.SettledAt == nil {
		t.Errorf("status after the reply: %+v", final.Status)
	}
	if final.Status.DetachedAt != nil {
		t.Errorf("a waiter that got its outcome must not detach: %v", final.Status.DetachedAt)
	}
	// The same reply sent again (its answer lost when a replica died) is
	// the one recorded: it succeeds, and nothing changes.
	if again := wantOK(t, callTool[ReplyOutput](t, worker, "bridge_reply", map[string]any{"content": "all green"})); again.DispatchID != d.Name || again.Late {
		t.Errorf("the same reply again = %+v, want %s, in time", again, d.Name)
	}
	if after := env.Delegation(t, ns, d.Name); after.ResourceVersion != final.ResourceVersion {
		t.Errorf("the same reply again wrote the Delegation (resourceVersion %s to %s)", final.ResourceVersion, after.ResourceVersion)
	}
}

// TestReplyAfterAFalseTurnDoneIsKept: an agent that reports idle falsely
// (with the real herdr any agent can report any pane's status) makes a
// message settle turn_done while its worker still works on it. The
// worker's real bridge_reply is not lost: it is kept as a late reply, and
// reaches the sender through bridge_poll and a re-attached bridge_send.
func TestReplyAfterAFalseTurnDoneIsKept(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	_, workerToken := addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	worker := h.connect(t, workerToken, nil)

	sent := async[SendOutput](t, context.Background(), primary, "bridge_send", map[string]any{"content": "take your time"})
	d := waitDelegation(t, ns, "w1", nil)
	env.Settle(t, ns, d.Name, typed, pickedUp, func(d *fleetv1alpha1.Delegation, now time.Time) { delegation.TurnDone(d, now, "$ ") })
	if got := wantOK(t, receive(t, sent)); got.Outcome != "turn_done" {
		t.Fatalf("bridge_send = %+v, want the false turn_done", got)
	}
	got := wantOK(t, callTool[ReplyOutput](t, worker, "bridge_reply", map[string]any{"content": "the real answer"}))
	if got.DispatchID != d.Name || !got.Late {
		t.Fatalf("bridge_reply = %+v, want a late reply to %s", got, d.Name)
	}
	if st := env.Delegation(t, ns, d.Name).Status; st.Phase != fleetv1alpha1.DelegationTurnDone || ptr.Deref(st.Reply, "") != "the real answer" {
		t.Errorf("after the late reply: phase %s reply %v, want TurnDone with the reply kept", st.Phase, st.Reply)
	}
	testutil.Eventually(t, "the late reply in bridge_poll", func() error {
		poll := wantOK(t, callTool[PollOutput](t, primary, "bridge_poll", nil))
		for _, o := range poll.Outcomes {
			if o.DispatchID == d.Name && o.Outcome == "reply" && o.Text == "the real answer" {
				return nil
			}
		}
		return fmt.Errorf("bridge_poll shows %+v", poll.Outcomes)
	})
	if again := wantOK(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"dispatchId": d.Name})); again.Outcome != "reply" || again.Text != "the real answer" {
		t.Errorf("re-attached bridge_send = %+v, want the reply", again)
	}
	// One reply per message: a second one is refused, while the same one
	// sent again (its answer lost on the way) is the same reply, and
	// succeeds again without a change.
	wantCode(t, callTool[ReplyOutput](t, worker, "bridge_reply", map[string]any{"content": "again"}), toolerr.NotFound)
	before := env.Delegation(t, ns, d.Name)
	if again := wantOK(t, callTool[ReplyOutput](t, worker, "bridge_reply", map[string]any{"content": "the real answer"})); again.DispatchID != d.Name || !again.Late {
		t.Errorf("the same late reply again = %+v, want %s, late", again, d.Name)
	}
	if after := env.Delegation(t, ns, d.Name); after.ResourceVersion != before.ResourceVersion {
		t.Errorf("the same reply again wrote the Delegation (resourceVersion %s to %s)", before.ResourceVersion, after.ResourceVersion)
	}
}

// TestSendQuestion: the worker's bridge_ask surfaces as a question outcome;
// the primary's answer (bridge_send with turnId) reaches the held ask, and
// the answering call waits on the same Delegation for the reply.
func TestSendQuestion(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	_, workerToken := addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	worker := h.connect(t, workerToken, nil)
	ctx := context.Background()

	sent := async[SendOutput](t, ctx, primary, "bridge_send", map[string]any{"content": "deploy it"})
	d := waitDelegation(t, ns, "w1", nil)
	deliver(t, ns, d.Name)

	asked := async[AskOutput](t, ctx, worker, "bridge_ask", map[string]any{"content": "which cluster?"})
	q := wantOK(t, receive(t, sent))
	turn := d.Name + ".q1"
	if diff := cmp.Diff(SendOutput{Outcome: "question", Text: "which cluster?", TurnID: turn, DispatchID: d.Name, Member: "w1"}, q, exportAll); diff != "" {
		t.Fatalf("question (-want +got):\n%s", diff)
	}
	if got := env.Delegation(t, ns, d.Name).Status.Phase; got != fleetv1alpha1.DelegationAsking {
		t.Errorf("phase while asking = %s, want Asking", got)
	}

	answered := async[SendOutput](t, ctx, primary, "bridge_send", map[string]any{"content": "staging", "turnId": turn})
	a := wantOK(t, receive(t, asked))
	if a.Answer == nil || *a.Answer != "staging" || a.TurnID != turn {
		t.Fatalf("bridge_ask = %+v, want answer staging for %s", a, turn)
	}
	st := env.Delegation(t, ns, d.Name).Status
	if st.Phase != fleetv1alpha1.DelegationWorking || st.Questions[0].AnsweredAt == nil {
		t.Errorf("after the answer: phase %s, question %+v", st.Phase, st.Questions[0])
	}
	// A retried answer is accepted; a different one is not.
	wantOK(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "staging", "turnId": turn, "wait": false}))
	wantCode(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "prod", "turnId": turn}), toolerr.Conflict)

	wantOK(t, callTool[ReplyOutput](t, worker, "bridge_reply", map[string]any{"content": "deployed to staging"}))
	got := wantOK(t, receive(t, answered))
	if diff := cmp.Diff(SendOutput{Outcome: "reply", Text: "deployed to staging", DispatchID: d.Name, Member: "w1"}, got, exportAll); diff != "" {
		t.Errorf("after the answer (-want +got):\n%s", diff)
	}
}

// TestSendOutcomes: every way the controller can settle a Delegation
// reaches the held bridge_send as the documented outcome or error.
func TestSendOutcomes(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)

	cases := map[string]struct {
		settle   []func(*fleetv1alpha1.Delegation, time.Time)
		want     SendOutput
		wantCode toolerr.Code
	}{
		"turn done": {
			settle: []func(*fleetv1alpha1.Delegation, time.Time){typed, func(d *fleetv1alpha1.Delegation, now time.Time) { delegation.TurnDone(d, now, "$ make\nok") }},
			want:   SendOutput{Outcome: "turn_done", Text: "$ make\nok", Member: "w1"},
		},
		"timed out": {
			settle: []func(*fleetv1alpha1.Delegation, time.Time){typed, timedOut},
			want:   SendOutput{Outcome: "timeout", Member: "w1"},
		},
		"worker gone": {
			settle:   []func(*fleetv1alpha1.Delegation, time.Time){func(d *fleetv1alpha1.Delegation, now time.Time) { delegation.WorkerGone(d, now, "gone") }},
			wantCode: toolerr.WorkerGone,
		},
		"delivery failed": {
			settle: []func(*fleetv1alpha1.Delegation, time.Time){typed, func(d *fleetv1alpha1.Delegation, now time.Time) {
				delegation.Fail(d, now, fleetv1alpha1.ReasonDeliveryRefused, "refused")
			}},
			wantCode: toolerr.DeliveryFailed,
		},
		"cancelled": {
			settle: []func(*fleetv1alpha1.Delegation, time.Time){func(d *fleetv1alpha1.Delegation, now time.Time) { delegation.Cancel(d, now, "withdrawn") }},
			want:   SendOutput{Outcome: "cancelled", Text: "withdrawn", Member: "w1"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			content := "task " + name
			sent := async[SendOutput](t, context.Background(), primary, "bridge_send", map[string]any{"content": content})
			d := waitDelegation(t, ns, "w1", func(d *fleetv1alpha1.Delegation) bool { return d.Spec.Content == content })
			env.Settle(t, ns, d.Name, tc.settle...)
			got := receive(t, sent)
			if tc.wantCode != "" {
				wantCode(t, got, tc.wantCode)
				return
			}
			tc.want.DispatchID = d.Name
			if diff := cmp.Diff(tc.want, wantOK(t, got), exportAll); diff != "" {
				t.Errorf("outcome (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSendTimeout: a waiter whose own timeout passes returns timeout and
// records detachedAt, so a later reply takes the detached path.
func TestSendTimeout(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	_, workerToken := addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	worker := h.connect(t, workerToken, nil)

	got := wantOK(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "slow work", "timeoutMs": 300}))
	if got.Outcome != "timeout" || got.DispatchID == "" {
		t.Fatalf("bridge_send = %+v, want a timeout with a dispatchId", got)
	}
	d := env.Delegation(t, ns, got.DispatchID)
	if d.Spec.TimeoutSeconds != 1 || d.Status.DetachedAt == nil {
		t.Errorf("timeoutSeconds %d (want 1), detachedAt %v (want set)", d.Spec.TimeoutSeconds, d.Status.DetachedAt)
	}

	// The controller times it out after delivery; the worker replies late.
	env.Settle(t, ns, d.Name, typed, timedOut)
	testutil.Eventually(t, "", func() error {
		poll := wantOK(t, callTool[PollOutput](t, primary, "bridge_poll", nil))
		return errIf(len(poll.Outcomes) != 1 || poll.Outcomes[0].Outcome != "timeout", "poll before the late reply = %+v", poll)
	})
	wantOK(t, callTool[AckOutput](t, primary, "bridge_ack", map[string]any{"dispatchId": d.Name}))
	testutil.Eventually(t, "", func() error {
		return errIf(len(wantOK(t, callTool[PollOutput](t, primary, "bridge_poll", nil)).Outcomes) != 0, "acknowledged outcome still polled")
	})

	late := wantOK(t, callTool[ReplyOutput](t, worker, "bridge_reply", map[string]any{"content": "done after all"}))
	if !late.Late || late.DispatchID != d.Name {
		t.Fatalf("late reply = %+v", late)
	}
	d = env.Delegation(t, ns, d.Name)
	if d.Status.Phase != fleetv1alpha1.DelegationTimedOut || deref(d.Status.Reply) != "done after all" || d.Status.AcknowledgedAt != nil {
		t.Errorf("after the late reply: %+v", d.Status)
	}
	testutil.Eventually(t, "", func() error {
		poll := wantOK(t, callTool[PollOutput](t, primary, "bridge_poll", nil))
		return errIf(len(poll.Outcomes) != 1 || poll.Outcomes[0].Outcome != "reply" || poll.Outcomes[0].Text != "done after all", "poll = %+v", poll)
	})
}

// TestSendDetached: wait:false returns at once; the outcome is collected
// with bridge_poll and cleared with bridge_ack.
func TestSendDetached(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)

	got := wantOK(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "fire and forget", "wait": false}))
	if got.Outcome != "dispatched" || got.DispatchID == "" {
		t.Fatalf("bridge_send = %+v", got)
	}
	d := env.Delegation(t, ns, got.DispatchID)
	if d.Spec.Wait == nil || *d.Spec.Wait {
		t.Errorf("spec.wait = %v, want false", d.Spec.Wait)
	}
	wantCode(t, callTool[AckOutput](t, primary, "bridge_ack", map[string]any{"dispatchId": d.Name}), toolerr.Conflict)

	env.Settle(t, ns, d.Name, typed, replied("forgotten? no"))
	testutil.Eventually(t, "", func() error {
		poll := wantOK(t, callTool[PollOutput](t, primary, "bridge_poll", nil))
		want := []PolledOutcome{{DispatchID: d.Name, Member: "w1", Outcome: "reply", Text: "forgotten? no", Content: "fire and forget"}}
		return diffErr(want, poll.Outcomes, cmpopts.IgnoreFields(PolledOutcome{}, "SettledAt"))
	})
	acked := wantOK(t, callTool[AckOutput](t, primary, "bridge_ack", nil))
	if diff := cmp.Diff([]string{d.Name}, acked.Acknowledged); diff != "" {
		t.Errorf("acknowledged (-want +got):\n%s", diff)
	}
	if env.Delegation(t, ns, d.Name).Status.AcknowledgedAt == nil {
		t.Error("acknowledgedAt not set")
	}
	testutil.Eventually(t, "", func() error {
		return errIf(len(wantOK(t, callTool[PollOutput](t, primary, "bridge_poll", nil)).Outcomes) != 0, "still polled after ack")
	})
}

// TestSendIdempotencyKey: a retried send with the same key meets the first
// Delegation instead of sending again.
func TestSendIdempotencyKey(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)

	args := map[string]any{"content": "once only", "wait": false, "idempotencyKey": "job-42"}
	first := wantOK(t, callTool[SendOutput](t, primary, "bridge_send", args))
	second := wantOK(t, callTool[SendOutput](t, primary, "bridge_send", args))
	if first.DispatchID != second.DispatchID || first.DispatchID != idempotentName(ns, fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "primary"}, "job-42") {
		t.Fatalf("dispatch ids %q and %q, want the same deterministic one", first.DispatchID, second.DispatchID)
	}
	var list fleetv1alpha1.DelegationList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Spec.IdempotencyKey != "job-42" {
		t.Fatalf("want exactly one delegation with the key, got %d", len(list.Items))
	}
	wantCode(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "something else", "idempotencyKey": "job-42"}), toolerr.Conflict)

	// Waiting on it by key returns its outcome once it has one.
	env.Settle(t, ns, first.DispatchID, typed, replied("done once"))
	got := wantOK(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "once only", "idempotencyKey": "job-42"}))
	if got.Outcome != "reply" || got.Text != "done once" || got.DispatchID != first.DispatchID {
		t.Errorf("re-attached send = %+v", got)
	}
}

// TestSendCancelled: a cancelled call ends the wait, never the Delegation;
// the Delegation records that its waiter left.
func TestSendCancelled(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)

	ctx, cancel := context.WithCancel(context.Background())
	sent := async[SendOutput](t, ctx, primary, "bridge_send", map[string]any{"content": "never mind"})
	d := waitDelegation(t, ns, "w1", nil)
	testutil.Eventually(t, "", func() error { return errIf(h.gw.svc.rv.held() != 1, "%d held calls", h.gw.svc.rv.held()) })
	cancel()
	if got := receive(t, sent); got.err == nil {
		t.Fatalf("a cancelled call returned %+v", got.out)
	}
	testutil.Eventually(t, "", func() error {
		return errIf(env.Delegation(t, ns, d.Name).Status.DetachedAt == nil, "detachedAt not set")
	})
	testutil.Eventually(t, "", func() error { return errIf(h.gw.svc.rv.held() != 0, "%d held calls", h.gw.svc.rv.held()) })
	if st := env.Delegation(t, ns, d.Name).Status; delegation.Settled(st.Phase) {
		t.Errorf("cancelling the call settled the delegation: %+v", st)
	}
}

// TestGatewayRestart: the gateway stops while a bridge_send is held; the
// call ends with outcome interrupted and its dispatch id; after a new
// gateway starts, the sender waits again by that dispatch id alone (or the
// same idempotency key), and bridge_poll shows the outcome meanwhile.
func TestGatewayRestart(t *testing.T) {
	ns := env.Namespace(t)
	first := startGateway(t, ns, Options{})
	_, workerToken := addMember(t, member("w1", ns).Obj())
	primary := first.connect(t, staticToken, nil)
	args := map[string]any{"content": "survive a restart", "idempotencyKey": "restart-1"}

	sent := async[SendOutput](t, context.Background(), primary, "bridge_send", args)
	d := waitDelegation(t, ns, "w1", nil)
	testutil.Eventually(t, "", func() error { return errIf(first.gw.svc.rv.held() != 1, "not held yet") })
	first.stop()
	got := wantOK(t, receive(t, sent))
	if got.Outcome != outcomeInterrupted || got.DispatchID != d.Name || !strings.Contains(got.Text, `"dispatchId": "`+d.Name+`"`) {
		t.Fatalf("the held call of a stopping gateway returned %+v", got)
	}
	if env.Delegation(t, ns, d.Name).Status.DetachedAt == nil {
		t.Fatal("stopping the gateway did not record the departed waiter")
	}

	second := startGateway(t, ns, Options{})
	primary = second.connect(t, staticToken, nil)
	worker := second.connect(t, workerToken, nil)
	rejoined := async[SendOutput](t, context.Background(), primary, "bridge_send", map[string]any{"dispatchId": d.Name})
	testutil.Eventually(t, "", func() error { return errIf(second.gw.svc.rv.held() != 1, "the re-attached call is not held") })
	deliver(t, ns, d.Name)
	wantOK(t, callTool[ReplyOutput](t, worker, "bridge_reply", map[string]any{"content": "still here"}))
	if got := wantOK(t, receive(t, rejoined)); got.Outcome != "reply" || got.Text != "still here" || got.DispatchID != d.Name {
		t.Fatalf("bridge_send by dispatchId = %+v", got)
	}
	// The same key finds the outcome too.
	if got := wantOK(t, callTool[SendOutput](t, primary, "bridge_send", args)); got.Outcome != "reply" || got.DispatchID != d.Name {
		t.Fatalf("re-called bridge_send = %+v", got)
	}
	// Handed over by the re-attached send, it is not polled.
	testutil.Eventually(t, "", func() error {
		poll := wantOK(t, callTool[PollOutput](t, primary, "bridge_poll", nil))
		return errIf(len(poll.Outcomes) != 0, "still polled: %+v", poll)
	})
	// Only its sender re-attaches, and only to a message that exists.
	wantCode(t, callTool[SendOutput](t, worker, "bridge_send", map[string]any{"dispatchId": d.Name}), toolerr.Forbidden)
	wantCode(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"dispatchId": "no-such-message"}), toolerr.NotFound)
	wantCode(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"dispatchId": d.Name, "turnId": d.Name + ".q1"}), toolerr.InvalidArgument)
}

// TestSendReattachWaits: a re-call with the key before the outcome waits
// again, clearing detachedAt so the reply goes to the waiter.
func TestSendReattachWaits(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	_, workerToken := addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	worker := h.connect(t, workerToken, nil)
	args := map[string]any{"content": "keep waiting", "idempotencyKey": "k"}
	name := idempotentName(ns, fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "primary"}, "k")

	ctx, cancel := context.WithCancel(context.Background())
	first := async[SendOutput](t, ctx, primary, "bridge_send", args)
	testutil.Eventually(t, "", func() error { return errIf(h.gw.svc.rv.held() != 1, "not held yet") })
	cancel()
	receive(t, first)
	testutil.Eventually(t, "", func() error {
		return errIf(env.Delegation(t, ns, name).Status.DetachedAt == nil, "detachedAt not set")
	})
	sent := async[SendOutput](t, context.Background(), primary, "bridge_send", args)
	testutil.Eventually(t, "", func() error {
		return errIf(env.Delegation(t, ns, name).Status.DetachedAt != nil, "detachedAt still set")
	})
	deliver(t, ns, name)
	wantOK(t, callTool[ReplyOutput](t, worker, "bridge_reply", map[string]any{"content": "here you go"}))
	if got := wantOK(t, receive(t, sent)); got.Outcome != "reply" || got.Text != "here you go" {
		t.Fatalf("re-attached call = %+v", got)
	}
}

// TestSendTargets: sessionId addressing, the sole-member default, the
// ambiguous case, and auto-spawn from the default Profile.
func TestSendTargets(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	primary := h.connect(t, staticToken, nil)
	ctx := context.Background()

	wantCode(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "anyone?", "wait": false}), toolerr.NotFound)

	create(t, testutil.MakeProfile("scripted", ns).Command("scripted-agent").Default().Obj())
	testutil.Eventually(t, "", func() error {
		got := callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "spawn one", "wait": false})
		if got.err != nil {
			return got.err
		}
		d := env.Delegation(t, ns, got.out.DispatchID)
		var m fleetv1alpha1.Member
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: d.Spec.To}, &m); err != nil {
			return err
		}
		if m.Spec.Profile != "scripted" || m.Annotations[fleetv1alpha1.AnnotationSpawnedBy] != "Static:primary" {
			return fmt.Errorf("spawned member %+v", m)
		}
		return nil
	})

	w2, _ := addMember(t, member("w2", ns).Obj())
	env.SetMemberStatus(t, w2, func(s *fleetv1alpha1.MemberStatus) {
		s.PaneID, s.TerminalID, s.AgentSessionID, s.AgentStatus = "pane-7", "term-7", "sess-7", fleetv1alpha1.AgentIdle
	})
	testutil.Eventually(t, "", func() error {
		got := callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "who?", "wait": false})
		return errIf(got.err == nil || got.err.Code != toolerr.InvalidArgument, "two members, no sessionId: %+v", got)
	})
	for _, id := range []string{"w2", "pane-7", "term-7", "sess-7"} {
		testutil.Eventually(t, "", func() error {
			got := callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "to " + id, "sessionId": id, "wait": false})
			if got.err != nil {
				return got.err
			}
			return errIf(got.out.Member != "w2", "sessionId %s went to %s", id, got.out.Member)
		})
	}
	wantCode(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "x", "sessionId": "nobody", "wait": false}), toolerr.NotFound)
}

// TestSendProgress: a held call with a progress token gets progress
// notifications.
func TestSendProgress(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{ProgressInterval: 20 * time.Millisecond})
	addMember(t, member("w1", ns).Obj())
	var progress atomic.Int32
	primary := h.connect(t, staticToken, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			if req.Params.ProgressToken == "tok-1" {
				progress.Add(1)
			}
		},
	})
	sent := make(chan toolCall[SendOutput], 1)
	go func() {
		params := &mcp.CallToolParams{Name: "bridge_send", Arguments: map[string]any{"content": "report in"}}
		params.SetProgressToken("tok-1")
		res, err := primary.CallTool(context.Background(), params)
		if err != nil {
			sent <- toolCall[SendOutput]{err: &toolerr.Error{Code: "transport", Message: err.Error()}}
			return
		}
		sent <- decodeResult[SendOutput](t, "bridge_send", res)
	}()
	testutil.Eventually(t, "", func() error { return errIf(progress.Load() < 2, "%d progress notifications", progress.Load()) })
	d := waitDelegation(t, ns, "w1", nil)
	env.Settle(t, ns, d.Name, typed, replied("ok"))
	// The held call still ends with the reply: progress never replaces the
	// result.
	if got := wantOK(t, <-sent); got.Outcome != "reply" || got.Text != "ok" || got.DispatchID != d.Name {
		t.Fatalf("bridge_send = %+v, want the reply", got)
	}
}

// TestRefusalsNameNoMembersToACallerWhoMayNotSee: a service account
// allowed only to send (create delegations, not get members) learns no
// member's name or status from bridge_send's refusals; granted get members,
// the same refusals list them, so a model can pick one.
func TestRefusalsNameNoMembersToACallerWhoMayNotSee(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	addMember(t, member("secret-w1", ns).Obj())
	addMember(t, member("secret-w2", ns).Obj())
	token := env.ServiceAccountToken(t, ns, "sender", fleetv1alpha1.GatewayAudience)
	env.AllowDelegations(t, ns, "sender")
	cs := h.connect(t, token, nil)

	refusals := map[string]map[string]any{
		"no such member":   {"content": "hi", "sessionId": "nobody"},
		"several to pick":  {"content": "hi"},
		"not a member yet": {"content": "hi", "sessionId": "secret"},
	}
	for name, args := range refusals {
		got := callTool[SendOutput](t, cs, "bridge_send", args)
		if got.err == nil {
			t.Fatalf("%s: sent %+v", name, got.out)
		}
		if strings.Contains(got.err.Message, "secret-w") || strings.Contains(got.err.Message, "idle") {
			t.Errorf("%s: a caller without get members reads %q", name, got.err.Message)
		}
	}

	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "see-members", Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{fleetv1alpha1.GroupVersion.Group}, Resources: []string{"members"}, Verbs: []string{"get"}}},
	}
	create(t, role, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "see-members", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "sender", Namespace: ns}},
	})
	// The refusal of get members is remembered a few seconds.
	testutil.Eventually(t, "the members listed once get members is granted", func() error {
		got := callTool[SendOutput](t, cs, "bridge_send", refusals["no such member"])
		return errIf(got.err == nil || !strings.Contains(got.err.Message, "secret-w1"), "%v", got.err)
	}, testutil.Within(time.Minute))
}

// TestSendProgressWhileResuming: a held call to a suspended member says in
// its progress that the member is being resumed for it, and still ends
// with the reply.
func TestSendProgressWhileResuming(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{ProgressInterval: 20 * time.Millisecond})
	w, _ := addMember(t, member("w1", ns).Obj())
	at := metav1.Now()
	env.SetMemberStatus(t, w, func(st *fleetv1alpha1.MemberStatus) {
		st.Phase, st.SuspendedAt = fleetv1alpha1.MemberSuspended, &at
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: fleetv1alpha1.ConditionSuspended, Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonIdle, Message: "suspended"})
	})
	messages := make(chan string, 64)
	primary := h.connect(t, staticToken, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			select {
			case messages <- req.Params.Message:
			default:
			}
		},
	})
	sent := make(chan toolCall[SendOutput], 1)
	go func() {
		params := &mcp.CallToolParams{Name: "bridge_send", Arguments: map[string]any{"content": "wake up", "sessionId": "w1"}}
		params.SetProgressToken("tok-1")
		res, err := primary.CallTool(context.Background(), params)
		if err != nil {
			sent <- toolCall[SendOutput]{err: &toolerr.Error{Code: "transport", Message: err.Error()}}
			return
		}
		sent <- decodeResult[SendOutput](t, "bridge_send", res)
	}()
	waitProgress := func(want string) {
		t.Helper()
		var last string
		testutil.Eventually(t, "progress saying "+want, func() (bool, string) {
			for {
				select {
				case last = <-messages:
					if strings.Contains(last, want) {
						return true, ""
					}
				default:
					return false, "last: " + last
				}
			}
		})
	}
	waitProgress("the member is suspended; resuming it for this message")
	env.SetMemberStatus(t, w, func(st *fleetv1alpha1.MemberStatus) {
		st.Phase, st.SuspendedAt = fleetv1alpha1.MemberStarting, nil
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: fleetv1alpha1.ConditionSuspended, Status: metav1.ConditionFalse, Reason: fleetv1alpha1.ReasonResuming, Message: "resuming"})
	})
	waitProgress("resuming the member (starting)")
	d := waitDelegation(t, ns, "w1", nil)
	env.Settle(t, ns, d.Name, typed, replied("awake"))
	if got := wantOK(t, <-sent); got.Outcome != "reply" || got.Text != "awake" {
		t.Fatalf("bridge_send = %+v, want the reply", got)
	}
}
