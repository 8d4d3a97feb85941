package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fleetd/fleetd/internal/mcpclient"
	"github.com/fleetd/fleetd/internal/testutil"
)

// providers is GET /v1/diagnostics/providers as a client reads it.
type providers struct {
	Providers []struct {
		Agent string `json:"agent"`
		CLI   *struct {
			Found   bool   `json:"found"`
			Version string `json:"version"`
		} `json:"cli"`
		Profiles []struct {
			Name    string `json:"name"`
			Billing string `json:"billing"`
			Program *struct {
				Found bool `json:"found"`
			} `json:"program"`
		} `json:"profiles"`
		Members []struct {
			Name             string `json:"name"`
			LastStartFailure *struct {
				Reason  string `json:"reason"`
				Message string `json:"message"`
			} `json:"lastStartFailure"`
		} `json:"members"`
	} `json:"providers"`
}

// getProviders reads the diagnostics with token, and the raw body.
func getProviders(t *testing.T, token string) (int, providers, string) {
	t.Helper()
	url := strings.TrimSuffix(w.gatewayURL, "/mcp") + "/v1/diagnostics/providers"
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := mcpclient.BearerClient(token).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var p providers
	_ = json.Unmarshal(raw, &p)
	return resp.StatusCode, p, string(raw)
}

// TestDiagnosticsProviders: the primary asks fleetd which agents it can
// run. The pinned CLIs are found with their versions, the sample Profiles
// show under their agents with their billing and never a key, and a member
// whose agent herdr will not start shows that failure and why.
func TestDiagnosticsProviders(t *testing.T) {
	dumpOnFailure(t)
	apply(t, fmt.Sprintf("apiVersion: fleet.fleetd.dev/v1alpha1\nkind: Member\nmetadata: {name: e2e-noagent, namespace: %s}\nspec: {agent: nosuchagent}\n", ns))
	t.Cleanup(func() { _, _ = w.kubectl("delete", "member", "-n", ns, "e2e-noagent", "--wait=false") })
	if status, _, _ := getProviders(t, "not-a-token"); status != http.StatusUnauthorized {
		t.Errorf("with a bad token: %d, want 401", status)
	}
	testutil.Eventually(t, "the failed start in the diagnostics", func() (bool, string) {
		status, p, raw := getProviders(t, w.token)
		if status != http.StatusOK {
			return false, raw
		}
		if strings.Contains(raw, "llm-gateway.llm.svc") || strings.Contains(raw, "api-key") {
			t.Fatalf("the diagnostics show a Profile's environment: %s", raw)
		}
		found := map[string]bool{}
		for _, pv := range p.Providers {
			switch pv.Agent {
			case "claude", "codex":
				// In a cluster the CLIs are in the worker image, not beside
				// fleetd.
				if _, local := w.mode.(*local); local && w.realAgents() == nil && (pv.CLI == nil || !pv.CLI.Found || pv.CLI.Version == "") {
					t.Fatalf("%s's CLI is not found, though make agents installed it: %s", pv.Agent, raw)
				}
				for _, pr := range pv.Profiles {
					found["profile "+pr.Name+" "+pr.Billing] = true
				}
			case "command":
				for _, pr := range pv.Profiles {
					found["program of "+pr.Name] = pr.Program != nil && pr.Program.Found
				}
			case "nosuchagent":
				for _, m := range pv.Members {
					found["failure"] = m.Name == "e2e-noagent" && m.LastStartFailure != nil && m.LastStartFailure.Reason == "AgentStartFailed"
				}
			}
		}
		return found["profile claude-api api"] && found["profile claude-sonnet subscription"] && found["program of scripted"] && found["failure"], raw
	})
}
