package gateway

import (
	"bytes"
	"io"
	"net/http"
	"testing"
)

// TestMetrics: the metrics endpoint serves the gateway's own registry.
func TestMetrics(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	mcpStatus(t, h, "Bearer nope")
	wantOK(t, callTool[WhoamiOutput](t, h.connect(t, staticToken, nil), "bridge_whoami", nil))
	resp, err := http.Get(h.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`fleetd_gateway_tool_calls_total{outcome="ok",tool="bridge_whoami"} 1`,
		`fleetd_gateway_auth_failures_total{reason="unknown_token"} 1`,
		`go_goroutines`,
	} {
		if !bytes.Contains(raw, []byte(want)) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
