package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/internal/testenv"
	"github.com/fleetd/fleetd/internal/testutil"
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
	wantCode(t, callTool[ReplyOutput](t, a, "bridge_reply", map[string]any{"content": "I am b"}), CodeNotFound)
	wantCode(t, callTool[AskOutput](t, a, "bridge_ask", map[string]any{"content": "me?"}), CodeNotFound)
	// A cannot answer the primary's question, nor acknowledge its message.
	wantCode(t, callTool[SendOutput](t, a, "bridge_send", map[string]any{"content": "yes", "turnId": q.TurnID}), CodeForbidden)
	wantCode(t, callTool[AckOutput](t, a, "bridge_ack", map[string]any{"dispatchId": d.Name}), CodeForbidden)
	wantCode(t, callTool[AckOutput](t, a, "bridge_ack", map[string]any{"ids": []string{"no-such-thing"}}), CodeNotFound)
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
	wantCode(t, callTool[ReplyOutput](t, primary, "bridge_reply", map[string]any{"content": "x"}), CodeForbidden)
}

// TestBridgeMembers covers bridge_list, bridge_status, bridge_profiles,
// bridge_spawn (with the subscription boundary) and bridge_stop (with its
// ownership rules).
func TestBridgeMembers(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	ctx := context.Background()
	create(t,
		testutil.MakeProfile("sub", ns).Agent(fleetv1alpha1.AgentClaude).Default().Obj(),
		testutil.MakeProfile("api", ns).Agent(fleetv1alpha1.AgentClaude).Billing(fleetv1alpha1.BillingAPI).Env("ANTHROPIC_BASE_URL", "http://llm.invalid").Obj(),
	)
	lead, leadToken := addMember(t, testutil.MakeMember("lead", ns).Profile("sub").Team("core", fleetv1alpha1.RoleLead).Obj())
	_, workerToken := addMember(t, testutil.MakeMember("worker", ns).Profile("sub").Team("core", fleetv1alpha1.RoleMember).Obj())
	setMemberStatus(t, lead, func(s *fleetv1alpha1.MemberStatus) {
		s.Phase, s.PaneID, s.AgentStatus = fleetv1alpha1.MemberReady, "pane-lead", fleetv1alpha1.AgentWorking
	})
	primary := h.connect(t, staticToken, nil)
	leadS := h.connect(t, leadToken, nil)
	workerS := h.connect(t, workerToken, nil)

	eventually(t, func() error {
		list := wantOK(t, callTool[ListOutput](t, leadS, "bridge_list", nil))
		want := []MemberSummary{
			{Name: "lead", Status: "working", Team: "core", Profile: "sub", Self: true},
			{Name: "worker", Status: "pending", Team: "core", Profile: "sub"},
		}
		return diffErr(want, list.Members)
	})
	// Filters and pages.
	for name, tc := range map[string]struct {
		args      map[string]any
		want      []string
		wantTotal int
		wantMore  string
	}{
		"by status":             {args: map[string]any{"status": "working"}, want: []string{"lead"}, wantTotal: 1},
		"by name prefix":        {args: map[string]any{"namePrefix": "wo"}, want: []string{"worker"}, wantTotal: 1},
		"by team and profile":   {args: map[string]any{"team": "core", "profile": "sub"}, want: []string{"lead", "worker"}, wantTotal: 2},
		"by another profile":    {args: map[string]any{"profile": "api"}, wantTotal: 0},
		"first page of one":     {args: map[string]any{"limit": 1}, want: []string{"lead"}, wantTotal: 2, wantMore: "lead"},
		"next page of one":      {args: map[string]any{"limit": 1, "continue": "lead"}, want: []string{"worker"}, wantTotal: 2},
		"after the last member": {args: map[string]any{"continue": "worker"}, wantTotal: 2},
	} {
		list := wantOK(t, callTool[ListOutput](t, primary, "bridge_list", tc.args))
		var got []string
		for _, m := range list.Members {
			got = append(got, m.Name)
		}
		if !slices.Equal(got, tc.want) || list.Total != tc.wantTotal || list.Continue != tc.wantMore {
			t.Errorf("%s: members %v total %d continue %q; want %v %d %q", name, got, list.Total, list.Continue, tc.want, tc.wantTotal, tc.wantMore)
		}
	}
	wantCode(t, callTool[ListOutput](t, primary, "bridge_list", map[string]any{"limit": 501}), CodeInvalidArgument)
	status := wantOK(t, callTool[StatusOutput](t, primary, "bridge_status", map[string]any{"sessionId": "pane-lead"}))
	if len(status.Members) != 1 || status.Members[0].Name != "lead" || status.Members[0].PaneID != "pane-lead" {
		t.Errorf("bridge_status by pane id = %+v", status)
	}
	if self := wantOK(t, callTool[StatusOutput](t, workerS, "bridge_status", nil)); len(self.Members) != 1 || self.Members[0].Name != "worker" || !self.Members[0].Self {
		t.Errorf("a member's bridge_status without sessionId shows %+v, want itself", self.Members)
	}
	if all := wantOK(t, callTool[StatusOutput](t, primary, "bridge_status", nil)); len(all.Members) != 0 {
		t.Errorf("a primary's bridge_status without sessionId shows members %+v; bridge_list lists them", all.Members)
	}
	wantCode(t, callTool[StatusOutput](t, primary, "bridge_status", map[string]any{"sessionId": "nope"}), CodeNotFound)

	profiles := wantOK(t, callTool[ProfilesOutput](t, workerS, "bridge_profiles", nil))
	wantProfiles := []ProfileView{
		{Name: "api", Agent: "claude", Billing: "api"},
		{Name: "sub", Agent: "claude", Billing: "subscription", Default: true},
	}
	if diff := cmp.Diff(wantProfiles, profiles.Profiles); diff != "" {
		t.Errorf("bridge_profiles (-want +got):\n%s", diff)
	}
	if raw, _ := json.Marshal(profiles); bytes.Contains(raw, []byte("llm.invalid")) {
		t.Errorf("bridge_profiles leaks environment values: %s", raw)
	}

	// A member on a subscription may not spawn an API-billed worker; a
	// primary may.
	wantCode(t, callTool[SpawnOutput](t, workerS, "bridge_spawn", map[string]any{"profile": "api"}), CodeSubscriptionBoundary)
	wantOK(t, callTool[SpawnOutput](t, primary, "bridge_spawn", map[string]any{"profile": "api"}))
	wantCode(t, callTool[SpawnOutput](t, workerS, "bridge_spawn", map[string]any{"profile": "missing"}), CodeNotFound)
	spawned := wantOK(t, callTool[SpawnOutput](t, workerS, "bridge_spawn", nil)).Member
	if spawned == nil || spawned.Profile != "sub" || spawned.SpawnedBy != "Member:worker" {
		t.Fatalf("spawned %+v", spawned)
	}
	other := wantOK(t, callTool[SpawnOutput](t, primary, "bridge_spawn", nil)).Member

	// Stop: the spawner may; another member may not; the lead may stop its
	// team; a primary may stop anyone.
	eventually(t, func() error {
		got := callTool[StopOutput](t, workerS, "bridge_stop", map[string]any{"paneId": other.Name})
		return errIf(got.err == nil || got.err.Code != CodeForbidden, "worker stopping the primary's member: %+v", got)
	})
	wantOK(t, callTool[StopOutput](t, workerS, "bridge_stop", map[string]any{"paneId": spawned.Name}))
	wantCode(t, callTool[StopOutput](t, workerS, "bridge_stop", map[string]any{"paneId": "lead"}), CodeForbidden)
	wantOK(t, callTool[StopOutput](t, leadS, "bridge_stop", map[string]any{"paneId": "worker"}))
	wantOK(t, callTool[StopOutput](t, primary, "bridge_stop", map[string]any{"paneId": other.Name}))
	var m fleetv1alpha1.Member
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "worker"}, &m); err == nil {
		t.Error("worker still exists after bridge_stop")
	}
}

// TestTeamTools covers team_status, team_message and team_manage under the
// lead/member policy.
func TestTeamTools(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	create(t, testutil.MakeProfile("sub", ns).Command("scripted-agent").Default().Obj())
	_, leadToken := addMember(t, member("lead", ns).Team("core", fleetv1alpha1.RoleLead).Obj())
	_, m1Token := addMember(t, member("m1", ns).Team("core", fleetv1alpha1.RoleMember).Obj())
	addMember(t, member("m2", ns).Team("core", fleetv1alpha1.RoleMember).Obj())
	addMember(t, member("outsider", ns).Obj())
	lead := h.connect(t, leadToken, nil)
	m1 := h.connect(t, m1Token, nil)
	primary := h.connect(t, staticToken, nil)

	eventually(t, func() error {
		st := wantOK(t, callTool[TeamStatusOutput](t, m1, "team_status", nil))
		return errIf(st.Team != "core" || len(st.Members) != 3, "team_status = %+v", st)
	})
	wantCode(t, callTool[TeamStatusOutput](t, m1, "team_status", map[string]any{"team": "other"}), CodeNotTeamMember)
	wantCode(t, callTool[TeamStatusOutput](t, primary, "team_status", nil), CodeInvalidArgument)
	wantOK(t, callTool[TeamStatusOutput](t, primary, "team_status", map[string]any{"team": "core"}))

	sent := wantOK(t, callTool[TeamMessageOutput](t, lead, "team_message", map[string]any{"recipient": "broadcast", "content": "standup"}))
	if diff := cmp.Diff([]string{"m1", "m2"}, sent.Recipients); diff != "" {
		t.Errorf("broadcast recipients (-want +got):\n%s", diff)
	}
	for _, id := range sent.DispatchIDs {
		d := getDelegation(t, ns, id)
		if delegation.Waits(d) || d.Labels[fleetv1alpha1.LabelTeam] != "core" || d.Spec.From.Name != "lead" {
			t.Errorf("team message %s: %+v %v", id, d.Spec, d.Labels)
		}
	}
	sent = wantOK(t, callTool[TeamMessageOutput](t, lead, "team_message", map[string]any{"recipient": "broadcast", "content": "all hands", "includeSelf": true}))
	if diff := cmp.Diff([]string{"lead", "m1", "m2"}, sent.Recipients); diff != "" {
		t.Errorf("broadcast with includeSelf (-want +got):\n%s", diff)
	}
	wantOK(t, callTool[TeamMessageOutput](t, m1, "team_message", map[string]any{"recipient": "lead", "content": "done"}))
	wantCode(t, callTool[TeamMessageOutput](t, m1, "team_message", map[string]any{"recipient": "outsider", "content": "psst"}), CodeNotFound)

	// Members may not manage the team by default; the lead may.
	wantCode(t, callTool[TeamManageOutput](t, m1, "team_manage", map[string]any{"action": "add"}), CodeForbidden)
	added := wantOK(t, callTool[TeamManageOutput](t, lead, "team_manage", map[string]any{"action": "add", "name": "m3"}))
	if added.Member == nil || added.Member.Name != "m3" || added.Member.Team != "core" || added.Member.Profile != "sub" {
		t.Fatalf("team_manage add = %+v", added)
	}
	wantCode(t, callTool[TeamManageOutput](t, lead, "team_manage", map[string]any{"action": "remove", "name": "outsider"}), CodeNotFound)
	wantCode(t, callTool[TeamManageOutput](t, lead, "team_manage", map[string]any{"action": "promote"}), CodeInvalidArgument)
	eventually(t, func() error {
		got := callTool[TeamManageOutput](t, lead, "team_manage", map[string]any{"action": "remove", "name": "m3"})
		return errIf(got.err != nil, "removing m3: %v", got.err)
	})

	// Where the policy allows, members remove too (never the lead), and
	// adding is a switch of its own.
	h2 := startGateway(t, ns, Options{TeamPolicy: TeamPolicy{NonLeadCanRemove: true}})
	wantCode(t, callTool[TeamManageOutput](t, h2.connect(t, m1Token, nil), "team_manage", map[string]any{"action": "add"}), CodeForbidden)
	wantCode(t, callTool[TeamManageOutput](t, h2.connect(t, m1Token, nil), "team_manage", map[string]any{"action": "remove", "removeAgentIds": []string{"m2", "lead"}}), CodeForbidden)
	eventually(t, func() error {
		got := callTool[TeamManageOutput](t, h2.connect(t, m1Token, nil), "team_manage", map[string]any{"action": "remove", "removeAgentIds": []string{"m2"}})
		return errIf(got.err != nil || !slices.Equal(got.out.Removed, []string{"m2"}), "member removing m2 under a permissive policy: %v %+v", got.err, got.out)
	})
}

// TestProcessTools: the process namespace is off by default; when on, a
// caller runs, watches, reads and kills its own processes only.
func TestProcessTools(t *testing.T) {
	ns := env.Namespace(t)
	off := startGateway(t, ns, Options{})
	wantCode(t, callTool[ProcessOutput](t, off.connect(t, staticToken, nil), "process_run", map[string]any{"command": []string{"true"}}), CodeFeatureDisabled)

	h := startGateway(t, ns, Options{Features: map[ToolNamespace]bool{ToolNamespaceProcess: true, ToolNamespaceTeam: false}})
	_, memberToken := addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	other := h.connect(t, memberToken, nil)
	wantCode(t, callTool[TeamStatusOutput](t, primary, "team_status", map[string]any{"team": "x"}), CodeFeatureDisabled)

	run := wantOK(t, callTool[ProcessOutput](t, primary, "process_run", map[string]any{"command": []string{"sh", "-c", "echo out; echo err >&2; exit 3"}}))
	id := run.Process.ProcessID
	eventually(t, func() error {
		st := wantOK(t, callTool[ProcessStatusOutput](t, primary, "process_status", map[string]any{"processId": id}))
		p := st.Processes[0]
		return errIf(p.State != "exited" || p.ExitCode == nil || *p.ExitCode != 3, "process = %+v", p)
	})
	logs := wantOK(t, callTool[ProcessLogsOutput](t, primary, "process_logs", map[string]any{"processId": id}))
	if !strings.Contains(logs.Output, "out\n") || !strings.Contains(logs.Output, "err\n") || logs.Truncated {
		t.Errorf("logs = %+v", logs)
	}
	if tail := wantOK(t, callTool[ProcessLogsOutput](t, primary, "process_logs", map[string]any{"processId": id, "tailBytes": 2})); len(tail.Output) != 2 || !tail.Truncated {
		t.Errorf("tail of 2 bytes = %+v", tail)
	}
	wantCode(t, callTool[ProcessLogsOutput](t, other, "process_logs", map[string]any{"processId": id}), CodeForbidden)
	wantCode(t, callTool[ProcessLogsOutput](t, other, "process_logs", map[string]any{"processId": "no-such-process"}), CodeNotFound)
	if st := wantOK(t, callTool[ProcessStatusOutput](t, other, "process_status", nil)); len(st.Processes) != 0 {
		t.Errorf("another caller sees %+v", st.Processes)
	}

	sleeper := wantOK(t, callTool[ProcessOutput](t, primary, "process_run", map[string]any{"command": []string{"sleep", "60"}}))
	killed := wantOK(t, callTool[ProcessOutput](t, primary, "process_kill", map[string]any{"processId": sleeper.Process.ProcessID}))
	if killed.Process.State != "exited" {
		t.Errorf("after process_kill: %+v", killed.Process)
	}
	wantCode(t, callTool[ProcessOutput](t, primary, "process_run", map[string]any{"command": []string{"/no/such/program"}}), CodeInvalidArgument)
	wantCode(t, callTool[ProcessOutput](t, primary, "process_run", map[string]any{"command": []string{}}), CodeInvalidArgument)
}

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
	if status != http.StatusForbidden || json.Unmarshal(raw, &refused) != nil || refused.Error.Code != CodeSubscriptionBoundary {
		t.Errorf("crossing the boundary over REST: %d %s", status, raw)
	}
	if status, raw := do(staticToken, http.MethodPost, "/members", `{"profile":`); status != http.StatusBadRequest {
		t.Errorf("malformed body: %d %s", status, raw)
	}
	eventually(t, func() error {
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
		eventually(t, func() error { // until the cache shows api-1 deleted
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

// TestToolList: the MCP surface has the documented names; switched-off
// namespaces are not listed.
func TestToolList(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	res, err := h.connect(t, staticToken, nil).ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" || tool.OutputSchema == nil {
			t.Errorf("%s lacks a description or output schema", tool.Name)
		}
	}
	want := []string{"bridge_send", "bridge_reply", "bridge_ask", "bridge_poll", "bridge_ack", "bridge_status", "bridge_spawn", "bridge_list", "bridge_stop", "bridge_profiles", "bridge_whoami", "bridge_read", "bridge_cancel", "team_status", "team_message", "team_manage"}
	if diff := cmp.Diff(want, names, cmpSorted); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
}

// TestREADMEListsEveryTool: the README's tool table has a row for every
// tool the gateway serves, process tools included, and no other.
func TestREADMEListsEveryTool(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile("(?m)^\\| `((?:bridge|team|process)_[a-z]+)` \\|").FindAllStringSubmatch(string(readme), -1)
	var documented []string
	for _, r := range rows {
		documented = append(documented, r[1])
	}
	g := &Gateway{opts: Options{Features: map[ToolNamespace]bool{ToolNamespaceProcess: true}}, toolNamespaces: map[string]ToolNamespace{}, server: mcp.NewServer(&mcp.Implementation{Name: "t"}, nil)}
	g.registerTools()
	if diff := cmp.Diff(g.toolOrder, documented, cmpSorted); diff != "" {
		t.Errorf("the README's tool table (-served +documented):\n%s", diff)
	}
}

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
