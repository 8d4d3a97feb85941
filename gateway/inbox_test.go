package gateway

import (
	"context"
	"testing"

	"github.com/fleetd/fleetd/gateway/toolerr"
)

// TestOwnership: a caller only acts on its own delegations: member A cannot
// reply to, acknowledge, answer or poll what belongs to others.
func TestOwnership(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	_, aToken := addMember(t, member("a", ns).Obj())
	_, bToken := addMember(t, member("b", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	a := h.connect(t, aToken, nil)
	b := h.connect(t, bToken, nil)
	ctx := context.Background()

	sent := async[SendOutput](t, ctx, primary, "bridge_send", map[string]any{"content": "for b", "sessionId": "b"})
	d := waitDelegation(t, ns, "b", nil)
	deliver(t, ns, d.Name)
	asked := async[AskOutput](t, ctx, b, "bridge_ask", map[string]any{"content": "really b?"})
	q := wantOK(t, receive(t, sent))
	if q.Outcome != "question" {
		t.Fatalf("want the question, got %+v", q)
	}

	// A has nothing in flight: its reply and ask cannot reach B's message.
	wantCode(t, callTool[ReplyOutput](t, a, "bridge_reply", map[string]any{"content": "I am b"}), toolerr.NotFound)
	wantCode(t, callTool[AskOutput](t, a, "bridge_ask", map[string]any{"content": "me?"}), toolerr.NotFound)
	// A cannot answer the primary's question, nor acknowledge its message.
	wantCode(t, callTool[SendOutput](t, a, "bridge_send", map[string]any{"content": "yes", "turnId": q.TurnID}), toolerr.Forbidden)
	wantCode(t, callTool[AckOutput](t, a, "bridge_ack", map[string]any{"dispatchId": d.Name}), toolerr.Forbidden)
	wantCode(t, callTool[AckOutput](t, a, "bridge_ack", map[string]any{"ids": []string{"no-such-thing"}}), toolerr.NotFound)
	// Nor does it see the primary's open question.
	if poll := wantOK(t, callTool[PollOutput](t, a, "bridge_poll", nil)); len(poll.Questions)+len(poll.Outcomes) != 0 {
		t.Errorf("a polls someone else's messages: %+v", poll)
	}

	answered := async[SendOutput](t, ctx, primary, "bridge_send", map[string]any{"content": "yes, b", "turnId": q.TurnID})
	if got := wantOK(t, receive(t, asked)); got.Answer == nil || *got.Answer != "yes, b" {
		t.Fatalf("b's ask = %+v", got)
	}
	wantOK(t, callTool[ReplyOutput](t, b, "bridge_reply", map[string]any{"content": "done by b"}))
	if got := wantOK(t, receive(t, answered)); got.Text != "done by b" {
		t.Fatalf("after the answer: %+v", got)
	}
	// Only members reply.
	wantCode(t, callTool[ReplyOutput](t, primary, "bridge_reply", map[string]any{"content": "x"}), toolerr.Forbidden)
}
