package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/internal/testutil"
)

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
	wantCode(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "something else", "idempotencyKey": "job-42"}), CodeConflict)

	// Waiting on it by key returns its outcome once it has one.
	settle(t, ns, first.DispatchID, typed, replied("done once"))
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
	eventually(t, func() error { return errIf(h.gw.rv.held() != 1, "%d held calls", h.gw.rv.held()) })
	cancel()
	if got := receive(t, sent); got.err == nil {
		t.Fatalf("a cancelled call returned %+v", got.out)
	}
	eventually(t, func() error {
		return errIf(getDelegation(t, ns, d.Name).Status.DetachedAt == nil, "detachedAt not set")
	})
	eventually(t, func() error { return errIf(h.gw.rv.held() != 0, "%d held calls", h.gw.rv.held()) })
	if st := getDelegation(t, ns, d.Name).Status; delegation.Settled(st.Phase) {
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
	eventually(t, func() error { return errIf(first.gw.rv.held() != 1, "not held yet") })
	first.stop()
	got := wantOK(t, receive(t, sent))
	if got.Outcome != outcomeInterrupted || got.DispatchID != d.Name || !strings.Contains(got.Text, `"dispatchId": "`+d.Name+`"`) {
		t.Fatalf("the held call of a stopping gateway returned %+v", got)
	}
	if getDelegation(t, ns, d.Name).Status.DetachedAt == nil {
		t.Fatal("stopping the gateway did not record the departed waiter")
	}

	second := startGateway(t, ns, Options{})
	primary = second.connect(t, staticToken, nil)
	worker := second.connect(t, workerToken, nil)
	rejoined := async[SendOutput](t, context.Background(), primary, "bridge_send", map[string]any{"dispatchId": d.Name})
	eventually(t, func() error { return errIf(second.gw.rv.held() != 1, "the re-attached call is not held") })
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
	eventually(t, func() error {
		poll := wantOK(t, callTool[PollOutput](t, primary, "bridge_poll", nil))
		return errIf(len(poll.Outcomes) != 0, "still polled: %+v", poll)
	})
	// Only its sender re-attaches, and only to a message that exists.
	wantCode(t, callTool[SendOutput](t, worker, "bridge_send", map[string]any{"dispatchId": d.Name}), CodeForbidden)
	wantCode(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"dispatchId": "no-such-message"}), CodeNotFound)
	wantCode(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"dispatchId": d.Name, "turnId": d.Name + ".q1"}), CodeInvalidArgument)
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
	eventually(t, func() error { return errIf(h.gw.rv.held() != 1, "not held yet") })
	cancel()
	receive(t, first)
	eventually(t, func() error {
		return errIf(getDelegation(t, ns, name).Status.DetachedAt == nil, "detachedAt not set")
	})
	sent := async[SendOutput](t, context.Background(), primary, "bridge_send", args)
	eventually(t, func() error {
		return errIf(getDelegation(t, ns, name).Status.DetachedAt != nil, "detachedAt still set")
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

	wantCode(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "anyone?", "wait": false}), CodeNotFound)

	create(t, testutil.MakeProfile("scripted", ns).Command("scripted-agent").Default().Obj())
	eventually(t, func() error {
		got := callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "spawn one", "wait": false})
		if got.err != nil {
			return got.err
		}
		d := getDelegation(t, ns, got.out.DispatchID)
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
	setMemberStatus(t, w2, func(s *fleetv1alpha1.MemberStatus) {
		s.PaneID, s.TerminalID, s.AgentSessionID, s.AgentStatus = "pane-7", "term-7", "sess-7", fleetv1alpha1.AgentIdle
	})
	eventually(t, func() error {
		got := callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "who?", "wait": false})
		return errIf(got.err == nil || got.err.Code != CodeInvalidArgument, "two members, no sessionId: %+v", got)
	})
	for _, id := range []string{"w2", "pane-7", "term-7", "sess-7"} {
		eventually(t, func() error {
			got := callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "to " + id, "sessionId": id, "wait": false})
			if got.err != nil {
				return got.err
			}
			return errIf(got.out.Member != "w2", "sessionId %s went to %s", id, got.out.Member)
		})
	}
	wantCode(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "x", "sessionId": "nobody", "wait": false}), CodeNotFound)
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
	sent := make(chan error, 1)
	go func() {
		params := &mcp.CallToolParams{Name: "bridge_send", Arguments: map[string]any{"content": "report in"}}
		params.SetProgressToken("tok-1")
		_, err := primary.CallTool(context.Background(), params)
		sent <- err
	}()
	eventually(t, func() error { return errIf(progress.Load() < 2, "%d progress notifications", progress.Load()) })
	d := waitDelegation(t, ns, "w1", nil)
	settle(t, ns, d.Name, typed, replied("ok"))
	if err := <-sent; err != nil {
		t.Fatal(err)
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

	wantCode(t, callTool[AskOutput](t, worker, "bridge_ask", map[string]any{"content": "anyone?"}), CodeNotFound)
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
	st := getDelegation(t, ns, d.Name).Status
	if len(st.Questions) != 1 || st.Questions[0].WithdrawnAt == nil || st.Phase != fleetv1alpha1.DelegationWorking {
		t.Errorf("after the ask timed out: phase %s questions %+v, want Working and the question withdrawn", st.Phase, st.Questions)
	}
	if poll := wantOK(t, callTool[PollOutput](t, primary, "bridge_poll", nil)); len(poll.Questions) != 0 {
		t.Errorf("a withdrawn question is polled: %+v", poll.Questions)
	}
	wantCode(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "yes", "turnId": d.Name + ".q1"}), CodeConflict)
}

var _ = metav1.Now
