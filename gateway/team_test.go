package gateway

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/testutil"
)

func TestTeamPolicy(t *testing.T) {
	lead := memberOf(member("lead", "ns").Team("core", fleetv1alpha1.RoleLead).Obj())
	plain := memberOf(member("plain", "ns").Team("core", fleetv1alpha1.RoleMember).Obj())
	loner := memberOf(member("loner", "ns").Obj())
	adders := TeamPolicy{NonLeadCanAdd: true}
	removers := TeamPolicy{NonLeadCanRemove: true}
	cases := map[string]struct {
		caller       *identity.Principal
		requested    string
		policy       TeamPolicy
		wantTeam     string
		wantTeamCode toolerr.Code
		// wantAdd and wantRemove are the codes of team_manage add and remove.
		wantAdd, wantRemove toolerr.Code
	}{
		"lead":                          {caller: lead, wantTeam: "core"},
		"member":                        {caller: plain, wantTeam: "core", wantAdd: toolerr.Forbidden, wantRemove: toolerr.Forbidden},
		"member where non-leads add":    {caller: plain, policy: adders, wantTeam: "core", wantRemove: toolerr.Forbidden},
		"member where non-leads remove": {caller: plain, policy: removers, wantTeam: "core", wantAdd: toolerr.Forbidden},
		"member naming its own team":    {caller: plain, requested: "core", wantTeam: "core", wantAdd: toolerr.Forbidden, wantRemove: toolerr.Forbidden},
		"member naming another team":    {caller: plain, requested: "other", wantTeamCode: toolerr.NotTeamMember},
		"member without a team":         {caller: loner, wantTeamCode: toolerr.NotTeamMember},
		"lead of another team":          {caller: lead, requested: "other", policy: TeamPolicy{NonLeadCanAdd: true, NonLeadCanRemove: true}, wantTeamCode: toolerr.NotTeamMember},
		"primary naming a team":         {caller: staticP, requested: "core", wantTeam: "core"},
		"primary without a team":        {caller: staticP, wantTeamCode: toolerr.InvalidArgument},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			team, err := teamOf(tc.caller, tc.requested)
			if codeOf(err) != tc.wantTeamCode || team != tc.wantTeam {
				t.Fatalf("teamOf = %q, %v; want %q, %q", team, err, tc.wantTeam, tc.wantTeamCode)
			}
			if err != nil {
				return
			}
			if got := codeOf(mayManage(tc.caller, team, "add", tc.policy)); got != tc.wantAdd {
				t.Errorf("add: code %q, want %q", got, tc.wantAdd)
			}
			if got := codeOf(mayManage(tc.caller, team, "remove", tc.policy)); got != tc.wantRemove {
				t.Errorf("remove: code %q, want %q", got, tc.wantRemove)
			}
		})
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

	testutil.Eventually(t, "", func() error {
		st := wantOK(t, callTool[TeamStatusOutput](t, m1, "team_status", nil))
		return errIf(st.Team != "core" || len(st.Members) != 3, "team_status = %+v", st)
	})
	wantCode(t, callTool[TeamStatusOutput](t, m1, "team_status", map[string]any{"team": "other"}), toolerr.NotTeamMember)
	wantCode(t, callTool[TeamStatusOutput](t, primary, "team_status", nil), toolerr.InvalidArgument)
	wantOK(t, callTool[TeamStatusOutput](t, primary, "team_status", map[string]any{"team": "core"}))

	sent := wantOK(t, callTool[TeamMessageOutput](t, lead, "team_message", map[string]any{"recipient": "broadcast", "content": "standup"}))
	if diff := cmp.Diff([]string{"m1", "m2"}, sent.Recipients); diff != "" {
		t.Errorf("broadcast recipients (-want +got):\n%s", diff)
	}
	for _, id := range sent.DispatchIDs {
		d := env.Delegation(t, ns, id)
		if delegation.Waits(d) || d.Labels[fleetv1alpha1.LabelTeam] != "core" || d.Spec.From.Name != "lead" {
			t.Errorf("team message %s: %+v %v", id, d.Spec, d.Labels)
		}
	}
	sent = wantOK(t, callTool[TeamMessageOutput](t, lead, "team_message", map[string]any{"recipient": "broadcast", "content": "all hands", "includeSelf": true}))
	if diff := cmp.Diff([]string{"lead", "m1", "m2"}, sent.Recipients); diff != "" {
		t.Errorf("broadcast with includeSelf (-want +got):\n%s", diff)
	}
	wantOK(t, callTool[TeamMessageOutput](t, m1, "team_message", map[string]any{"recipient": "lead", "content": "done"}))
	wantCode(t, callTool[TeamMessageOutput](t, m1, "team_message", map[string]any{"recipient": "outsider", "content": "psst"}), toolerr.NotFound)

	// Members may not manage the team by default; the lead may.
	wantCode(t, callTool[TeamManageOutput](t, m1, "team_manage", map[string]any{"action": "add"}), toolerr.Forbidden)
	added := wantOK(t, callTool[TeamManageOutput](t, lead, "team_manage", map[string]any{"action": "add", "name": "m3"}))
	if added.Member == nil || added.Member.Name != "m3" || added.Member.Team != "core" || added.Member.Profile != "sub" {
		t.Fatalf("team_manage add = %+v", added)
	}
	wantCode(t, callTool[TeamManageOutput](t, lead, "team_manage", map[string]any{"action": "remove", "name": "outsider"}), toolerr.NotFound)
	wantCode(t, callTool[TeamManageOutput](t, lead, "team_manage", map[string]any{"action": "promote"}), toolerr.InvalidArgument)
	testutil.Eventually(t, "", func() error {
		got := callTool[TeamManageOutput](t, lead, "team_manage", map[string]any{"action": "remove", "name": "m3"})
		return errIf(got.err != nil, "removing m3: %v", got.err)
	})

	// Where the policy allows, members remove too (never the lead), and
	// adding is a switch of its own.
	h2 := startGateway(t, ns, Options{TeamPolicy: TeamPolicy{NonLeadCanRemove: true}})
	wantCode(t, callTool[TeamManageOutput](t, h2.connect(t, m1Token, nil), "team_manage", map[string]any{"action": "add"}), toolerr.Forbidden)
	wantCode(t, callTool[TeamManageOutput](t, h2.connect(t, m1Token, nil), "team_manage", map[string]any{"action": "remove", "removeAgentIds": []string{"m2", "lead"}}), toolerr.Forbidden)
	testutil.Eventually(t, "", func() error {
		got := callTool[TeamManageOutput](t, h2.connect(t, m1Token, nil), "team_manage", map[string]any{"action": "remove", "removeAgentIds": []string{"m2"}})
		return errIf(got.err != nil || !slices.Equal(got.out.Removed, []string{"m2"}), "member removing m2 under a permissive policy: %v %+v", got.err, got.out)
	})
}
