package gateway

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
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
	eventually(t, func() error { return errIf(h.gw.rv.held() != 1, "not held") })
	cancel()
	receive(t, sent)
	eventually(t, func() error { return errIf(h.gw.rv.held() != 0, "still held after the client hung up") })
	eventually(t, func() error {
		return errIf(getDelegation(t, ns, d.Name).Status.DetachedAt == nil, "detachedAt not set")
	})
}
