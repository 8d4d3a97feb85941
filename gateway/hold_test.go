package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	testclock "k8s.io/utils/clock/testing"

	"github.com/fleetd/fleetd/internal/testutil"
)

// TestLegacyProtocolCancel: a client on a pre-2026 protocol revision, where
// the SDK does not tie the handler to the HTTP request, still ends the hold
// when it hangs up.
func TestLegacyProtocolCancel(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	addMember(t, member("w1", ns).Obj())
	transport := &mcp.StreamableClientTransport{Endpoint: h.url + "/mcp", HTTPClient: httpClient(staticToken), DisableStandaloneSSE: true}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "legacy", Version: "v0"}, nil).Connect(context.Background(), transport, &mcp.ClientSessionOptions{ProtocolVersion: "2025-06-18"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != "2025-06-18" {
		t.Fatalf("negotiated %s", v)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sent := async[SendOutput](t, ctx, cs, "bridge_send", map[string]any{"content": "hang up on me"})
	d := waitDelegation(t, ns, "w1", nil)
	testutil.Eventually(t, "", func() error { return errIf(h.gw.svc.rv.held() != 1, "not held") })
	cancel()
	receive(t, sent)
	testutil.Eventually(t, "", func() error { return errIf(h.gw.svc.rv.held() != 0, "still held after the client hung up") })
	testutil.Eventually(t, "", func() error {
		return errIf(env.Delegation(t, ns, d.Name).Status.DetachedAt == nil, "detachedAt not set")
	})
}

// TestHoldDeadlineRunsOnTheClock: a held call's deadline is the gateway's
// clock's, so stepping an injected clock past it ends the call with a
// timeout, while a clock that does not move holds it.
func TestHoldDeadlineRunsOnTheClock(t *testing.T) {
	ns := env.Namespace(t)
	clk := testclock.NewFakeClock(time.Now())
	h := startGateway(t, ns, Options{Clock: clk})
	addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)

	sent := async[SendOutput](t, context.Background(), primary, "bridge_send", map[string]any{"content": "take your time", "timeoutMs": 600000})
	d := waitDelegation(t, ns, "w1", nil)
	testutil.Eventually(t, "", func() error {
		return errIf(h.gw.svc.rv.held() != 1 || !clk.HasWaiters(), "the call is not held on the clock yet")
	})
	// A fake clock fires a timer inside Step: one still waiting after the
	// step has not fired.
	clk.Step(9 * time.Minute)
	if !clk.HasWaiters() {
		t.Fatal("the call's deadline fired 9 minutes into a 10-minute hold")
	}
	clk.Step(time.Minute)
	if got := wantOK(t, receive(t, sent)); got.Outcome != "timeout" || got.DispatchID != d.Name {
		t.Fatalf("bridge_send = %+v, want a timeout for %s", got, d.Name)
	}
}
