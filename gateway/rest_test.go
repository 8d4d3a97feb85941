package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/testutil"
)

// TestREST covers the REST surface: spawn, stop, agents, capabilities, and
// subscription_boundary as 403.
func TestREST(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	create(t,
		testutil.MakeProfile("sub", ns).Agent(fleetv1alpha1.AgentClaude).Default().Obj(),
		testutil.MakeProfile("api", ns).Agent(fleetv1alpha1.AgentClaude).Billing(fleetv1alpha1.BillingAPI).Env("ANTHROPIC_BASE_URL", "http://llm.invalid").Obj(),
	)
	_, memberToken := addMember(t, testutil.MakeMember("w1", ns).Profile("sub").Obj())

	do := func(token, method, path, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := httpClient(token).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, raw
	}

	if status, _ := do("", http.MethodGet, "/agents", ""); status != http.StatusUnauthorized {
		t.Errorf("GET /agents without a token: %d", status)
	}
	status, raw := do(staticToken, http.MethodPost, "/members", `{"profile":"api","name":"api-1"}`)
	var created MemberView
	if status != http.StatusCreated || json.Unmarshal(raw, &created) != nil || created.Name != "api-1" || created.Profile != "api" {
		t.Fatalf("POST /members: %d %s", status, raw)
	}
	status, raw = do(memberToken, http.MethodPost, "/members", `{"profile":"api"}`)
	var refused errorBody
	if status != http.StatusForbidden || json.Unmarshal(raw, &refused) != nil || refused.Error.Code != toolerr.SubscriptionBoundary {
		t.Errorf("crossing the boundary over REST: %d %s", status, raw)
	}
	if status, raw := do(staticToken, http.MethodPost, "/members", `{"profile":`); status != http.StatusBadRequest {
		t.Errorf("malformed body: %d %s", status, raw)
	}
	testutil.Eventually(t, "", func() error {
		status, raw := do(staticToken, http.MethodGet, "/agents", "")
		var agents struct{ Agents []MemberView }
		if status != http.StatusOK || json.Unmarshal(raw, &agents) != nil {
			return errIf(true, "GET /agents: %d %s", status, raw)
		}
		return errIf(len(agents.Agents) != 2, "agents = %s", raw)
	})
	if status, raw := do(staticToken, http.MethodDelete, "/members/api-1", ""); status != http.StatusOK {
		t.Errorf("DELETE /members/api-1: %d %s", status, raw)
	}
	// Stopping is idempotent: stopping again, or a member that never was,
	// succeeds and says there was nothing left to stop.
	for _, id := range []string{"api-1", "nobody"} {
		testutil.Eventually(t, "", func() error { // until the cache shows api-1 deleted
			status, raw := do(staticToken, http.MethodDelete, "/members/"+id, "")
			var got StopResponse
			err := json.Unmarshal(raw, &got)
			return errIf(status != http.StatusOK || err != nil || !got.AlreadyGone || got.Stopped != id, "DELETE of a gone member %s: %d %s", id, status, raw)
		})
	}

	status, raw = do(staticToken, http.MethodGet, "/v1/mcp/capabilities", "")
	var caps Capabilities
	if status != http.StatusOK || json.Unmarshal(raw, &caps) != nil {
		t.Fatalf("capabilities: %d %s", status, raw)
	}
	enabled := map[ToolNamespace]bool{}
	for _, n := range caps.Namespaces {
		enabled[n.Name] = n.Enabled
		if n.Enabled == (len(n.Tools) == 0) {
			t.Errorf("namespace %s (enabled %v) lists tools %v", n.Name, n.Enabled, n.Tools)
		}
	}
	if diff := cmp.Diff(map[ToolNamespace]bool{"bridge": true, "team": true, "process": false}, enabled); diff != "" {
		t.Errorf("namespaces (-want +got):\n%s", diff)
	}
	if caps.ProcessEnabled || !caps.TeamEnabled || !slices.Equal(caps.SupportedNamespaces, []ToolNamespace{"bridge", "team"}) ||
		slices.Contains(caps.Tools, "process_run") || !slices.Contains(caps.Tools, "team_manage") || caps.TeamManagePermissions != (TeamManagePermissions{}) {
		t.Errorf("capabilities: %s", raw)
	}
	if len(caps.TeamModelPresets) != 2 || caps.TeamModelPresets[0].Name != "api" || caps.TeamModelPresets[0].Billing != "api" {
		t.Errorf("team model presets, want the namespace's two profiles: %s", raw)
	}
}
