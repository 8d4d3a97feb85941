package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/testutil"
)

// TestStartFailure: the latest condition that is False for a start
// failure is the member's start failure; other False conditions are not.
func TestStartFailure(t *testing.T) {
	at := func(s int) metav1.Time { return metav1.NewTime(t0.Add(time.Duration(s) * time.Second)) }
	cond := func(typ, reason string, status metav1.ConditionStatus, s int) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: reason + " says why", LastTransitionTime: at(s)}
	}
	cases := map[string]struct {
		conds []metav1.Condition
		want  *StartFailure
	}{
		"healthy": {conds: []metav1.Condition{cond(fleetv1alpha1.ConditionReady, fleetv1alpha1.ReasonReady, metav1.ConditionTrue, 1)}},
		"starting is no failure": {conds: []metav1.Condition{
			cond(fleetv1alpha1.ConditionAgentReady, fleetv1alpha1.ReasonAgentStarting, metav1.ConditionFalse, 1),
		}},
		"herdr refused the agent": {
			conds: []metav1.Condition{
				cond(fleetv1alpha1.ConditionReady, fleetv1alpha1.ReasonAgentStarting, metav1.ConditionFalse, 1),
				cond(fleetv1alpha1.ConditionPaneReady, fleetv1alpha1.ReasonAgentStartFailed, metav1.ConditionFalse, 2),
			},
			want: &StartFailure{Condition: fleetv1alpha1.ConditionPaneReady, Reason: fleetv1alpha1.ReasonAgentStartFailed, Message: "AgentStartFailed says why", Since: "2026-01-02T03:04:07Z"},
		},
		"the latest of two": {
			conds: []metav1.Condition{
				cond(fleetv1alpha1.ConditionReady, fleetv1alpha1.ReasonSecretNotFound, metav1.ConditionFalse, 5),
				cond(fleetv1alpha1.ConditionHerdrReachable, fleetv1alpha1.ReasonHerdrUnreachable, metav1.ConditionFalse, 3),
			},
			want: &StartFailure{Condition: fleetv1alpha1.ConditionReady, Reason: fleetv1alpha1.ReasonSecretNotFound, Message: "SecretNotFound says why", Since: "2026-01-02T03:04:10Z"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m := testutil.MakeMember("w", "ns").Obj()
			m.Status.Conditions = tc.conds
			if diff := cmp.Diff(tc.want, startFailure(m)); diff != "" {
				t.Errorf("startFailure (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAgentKindOf: a member's agent is the kind it started as, else its
// spec's, else its Profile's; a plain command has none.
func TestAgentKindOf(t *testing.T) {
	profiles := map[string]*fleetv1alpha1.Profile{
		"cc":    testutil.MakeProfile("cc", "ns").Agent(fleetv1alpha1.AgentClaude).Obj(),
		"plain": testutil.MakeProfile("plain", "ns").Command("scripted-agent").Obj(),
	}
	started := testutil.MakeMember("a", "ns").Profile("cc").Obj()
	started.Status.AgentKind = fleetv1alpha1.AgentCodex
	cases := map[string]struct {
		m    *fleetv1alpha1.Member
		want fleetv1alpha1.AgentKind
	}{
		"started":                 {m: started, want: fleetv1alpha1.AgentCodex},
		"inline agent":            {m: testutil.MakeMember("b", "ns").Agent(fleetv1alpha1.AgentCodex).Obj(), want: fleetv1alpha1.AgentCodex},
		"inline command":          {m: testutil.MakeMember("c", "ns").Command("true").Obj()},
		"from its profile":        {m: testutil.MakeMember("d", "ns").Profile("cc").Obj(), want: fleetv1alpha1.AgentClaude},
		"a plain command profile": {m: testutil.MakeMember("e", "ns").Profile("plain").Obj()},
		"a missing profile":       {m: testutil.MakeMember("f", "ns").Profile("nope").Obj()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := agentKindOf(tc.m, profiles); got != tc.want {
				t.Errorf("agentKindOf = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestDiagnosticsProviders: GET /v1/diagnostics/providers says, per agent,
// whether its CLI is on PATH and its version, which Profiles use it and how
// they bill (never an env value), and which members run it with their last
// start failure; plain commands' programs are looked for per Profile. It
// takes the same authentication as the capabilities.
func TestDiagnosticsProviders(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "claude"), []byte("#!/bin/sh\necho '9.9.9 (Claude Code)'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "scripted-agent"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// No codex on this PATH.
	t.Setenv("PATH", bin+string(os.PathListSeparator)+"/usr/bin:/bin")

	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	const secretValue = "sk-secret-value-never-shown-0123456789"
	create(t,
		testutil.MakeProfile("cc-api", ns).Agent(fleetv1alpha1.AgentClaude).Billing(fleetv1alpha1.BillingAPI).
			Env("ANTHROPIC_BASE_URL", "http://llm.invalid").Env("ANTHROPIC_API_KEY", secretValue).Obj(),
		testutil.MakeProfile("cx", ns).Agent(fleetv1alpha1.AgentCodex).Default().Obj(),
		testutil.MakeProfile("plain", ns).Command("scripted-agent", "--fast").Obj(),
		testutil.MakeProfile("missing", ns).Command("no-such-program-here").Obj(),
	)
	w1, _ := addMember(t, testutil.MakeMember("w1", ns).Profile("cc-api").Obj())
	env.SetMemberStatus(t, w1, func(st *fleetv1alpha1.MemberStatus) {
		st.Phase, st.AgentKind = fleetv1alpha1.MemberPhase("Restarting"), fleetv1alpha1.AgentClaude
		st.Conditions = []metav1.Condition{{Type: fleetv1alpha1.ConditionPaneReady, Status: metav1.ConditionFalse, Reason: fleetv1alpha1.ReasonAgentStartFailed,
			Message: "herdr refused to start the agent: claude not found", LastTransitionTime: metav1.Now()}}
	})
	addMember(t, testutil.MakeMember("p1", ns).Profile("plain").Obj())

	get := func(token string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, h.url+"/v1/diagnostics/providers", nil)
		resp, err := httpClient(token).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, raw
	}
	if status, _ := get(""); status != http.StatusUnauthorized {
		t.Errorf("without a token: %d", status)
	}
	var diag ProvidersDiagnostics
	testutil.Eventually(t, "", func() error {
		status, raw := get(staticToken)
		diag = ProvidersDiagnostics{}
		if status != http.StatusOK || json.Unmarshal(raw, &diag) != nil {
			return errIf(true, "GET: %d %s", status, raw)
		}
		if strings.Contains(string(raw), secretValue) || strings.Contains(string(raw), "llm.invalid") {
			t.Fatalf("the diagnostics show a Profile's environment: %s", raw)
		}
		n := 0
		for _, p := range diag.Providers {
			n += len(p.Members)
		}
		return errIf(n != 2 || len(diag.Providers) != 3, "providers: %s", raw)
	})
	by := map[string]ProviderView{}
	var order []string
	for _, p := range diag.Providers {
		by[p.Agent] = p
		order = append(order, p.Agent)
	}
	if diff := cmp.Diff([]string{"claude", "codex", "command"}, order); diff != "" {
		t.Errorf("providers (-want +got):\n%s", diff)
	}
	cc := by["claude"]
	if cc.CLI == nil || !cc.CLI.Found || cc.CLI.Version != "9.9.9 (Claude Code)" || cc.CLI.Path != filepath.Join(bin, "claude") {
		t.Errorf("claude's CLI: %+v", cc.CLI)
	}
	if diff := cmp.Diff([]ProviderProfile{{Name: "cc-api", Billing: "api"}}, cc.Profiles); diff != "" {
		t.Errorf("claude's profiles (-want +got):\n%s", diff)
	}
	if len(cc.Members) != 1 || cc.Members[0].Name != "w1" || cc.Members[0].LastStartFailure == nil ||
		cc.Members[0].LastStartFailure.Reason != fleetv1alpha1.ReasonAgentStartFailed || !strings.Contains(cc.Members[0].LastStartFailure.Message, "claude not found") {
		t.Errorf("claude's members: %+v", cc.Members)
	}
	cx := by["codex"]
	if cx.CLI == nil || cx.CLI.Found || cx.CLI.Error == "" || len(cx.Profiles) != 1 || !cx.Profiles[0].Default || cx.Profiles[0].Billing != "subscription" {
		t.Errorf("codex: %+v %+v", cx.CLI, cx.Profiles)
	}
	cmd := by["command"]
	if cmd.CLI != nil || len(cmd.Profiles) != 2 || len(cmd.Members) != 1 || cmd.Members[0].Name != "p1" {
		t.Fatalf("plain commands: %+v", cmd)
	}
	if p := cmd.Profiles[0]; p.Name != "missing" || p.Program == nil || p.Program.Found {
		t.Errorf("a Profile whose program is not on PATH: %+v %+v", p, p.Program)
	}
	if p := cmd.Profiles[1]; p.Name != "plain" || p.Program == nil || !p.Program.Found || p.Program.Command != "scripted-agent" {
		t.Errorf("a Profile whose program is on PATH: %+v %+v", p, p.Program)
	}
}
