package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/testutil"
)

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
	env.SetMemberStatus(t, lead, func(s *fleetv1alpha1.MemberStatus) {
		s.Phase, s.PaneID, s.AgentStatus = fleetv1alpha1.MemberReady, "pane-lead", fleetv1alpha1.AgentWorking
	})
	primary := h.connect(t, staticToken, nil)
	leadS := h.connect(t, leadToken, nil)
	workerS := h.connect(t, workerToken, nil)

	testutil.Eventually(t, "", func() error {
		list := wantOK(t, callTool[ListOutput](t, leadS, "bridge_list", nil))
		want := []MemberGroup{{Team: "core", Profile: "sub", Members: []MemberSummary{
			{Name: "lead", Status: "working", Self: true},
			{Name: "worker", Status: "pending"},
		}}}
		return diffErr(want, list.Groups)
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
		if got := listedNames(list); !slices.Equal(got, tc.want) || list.Total != tc.wantTotal || list.Continue != tc.wantMore {
			t.Errorf("%s: members %v total %d continue %q; want %v %d %q", name, got, list.Total, list.Continue, tc.want, tc.wantTotal, tc.wantMore)
		}
	}
	wantCode(t, callTool[ListOutput](t, primary, "bridge_list", map[string]any{"limit": 501}), toolerr.InvalidArgument)
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
	wantCode(t, callTool[StatusOutput](t, primary, "bridge_status", map[string]any{"sessionId": "nope"}), toolerr.NotFound)

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
	wantCode(t, callTool[SpawnOutput](t, workerS, "bridge_spawn", map[string]any{"profile": "api"}), toolerr.SubscriptionBoundary)
	wantOK(t, callTool[SpawnOutput](t, primary, "bridge_spawn", map[string]any{"profile": "api"}))
	wantCode(t, callTool[SpawnOutput](t, workerS, "bridge_spawn", map[string]any{"profile": "missing"}), toolerr.NotFound)
	spawned := wantOK(t, callTool[SpawnOutput](t, workerS, "bridge_spawn", nil)).Member
	if spawned == nil || spawned.Profile != "sub" || spawned.SpawnedBy != "Member:worker" {
		t.Fatalf("spawned %+v", spawned)
	}
	other := wantOK(t, callTool[SpawnOutput](t, primary, "bridge_spawn", nil)).Member

	// Stop: the spawner may; another member may not; the lead may stop its
	// team; a primary may stop anyone.
	testutil.Eventually(t, "", func() error {
		got := callTool[StopOutput](t, workerS, "bridge_stop", map[string]any{"paneId": other.Name})
		return errIf(got.err == nil || got.err.Code != toolerr.Forbidden, "worker stopping the primary's member: %+v", got)
	})
	wantOK(t, callTool[StopOutput](t, workerS, "bridge_stop", map[string]any{"paneId": spawned.Name}))
	wantCode(t, callTool[StopOutput](t, workerS, "bridge_stop", map[string]any{"paneId": "lead"}), toolerr.Forbidden)
	wantOK(t, callTool[StopOutput](t, leadS, "bridge_stop", map[string]any{"paneId": "worker"}))
	wantOK(t, callTool[StopOutput](t, primary, "bridge_stop", map[string]any{"paneId": other.Name}))
	var m fleetv1alpha1.Member
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "worker"}, &m); err == nil {
		t.Error("worker still exists after bridge_stop")
	}
}

// listedNames are the names of the members on a bridge_list page.
func listedNames(list ListOutput) []string {
	var names []string
	for _, g := range list.Groups {
		for _, m := range g.Members {
			names = append(names, m.Name)
		}
	}
	return names
}

// TestListPage: a bridge_list page shows its members by team, then
// profile, each group in name order, in the structured content and in the
// text, which says each team and profile once.
func TestListPage(t *testing.T) {
	mk := func(name, team, profile string) *fleetv1alpha1.Member {
		return testutil.MakeMember(name, "ns").Profile(profile).Team(team, fleetv1alpha1.RoleMember).Obj()
	}
	page := []*fleetv1alpha1.Member{mk("a", "web", "sonnet"), mk("b", "", "sonnet"), mk("c", "web", "opus"), mk("d", "web", "sonnet"), mk("e", "", "")}
	sums := make([]MemberSummary, len(page))
	for i, m := range page {
		sums[i] = MemberSummary{Name: m.Name, Status: "idle", QueueDepth: int32(i)}
	}
	sums[3].Waiting, sums[4].Self = "Allow curl?\n1. Yes", true
	out := &ListOutput{Groups: groupSummaries(page, sums), Total: 7, Continue: "e"}
	want := []MemberGroup{
		{Members: []MemberSummary{sums[4]}},
		{Profile: "sonnet", Members: []MemberSummary{sums[1]}},
		{Team: "web", Profile: "opus", Members: []MemberSummary{sums[2]}},
		{Team: "web", Profile: "sonnet", Members: []MemberSummary{sums[0], sums[3]}},
	}
	if diff := cmp.Diff(want, out.Groups); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
	wantText := `5 of 7 members (name status queueDepth), by team and profile:
team -, profile -:
e idle 4 (you)
team -, profile sonnet:
b idle 1
team web, profile opus:
c idle 2
team web, profile sonnet:
a idle 0
d idle 3
  waiting on: Allow curl?
  1. Yes
more: call bridge_list with continue="e"
`
	if diff := cmp.Diff(wantText, out.text()); diff != "" {
		t.Errorf("text (-want +got):\n%s", diff)
	}
}
