package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/testutil"
)

func TestResolveTarget(t *testing.T) {
	w1 := withState(member("w1", "ns").Obj(), "p1", "t1", "s1")
	w2 := withState(member("w2", "ns").Obj(), "p2", "t2", "s2")
	shared := withState(member("w3", "ns").Obj(), "p1", "", "")
	leaving := *member("old", "ns").Obj()
	leaving.DeletionTimestamp = mtime(0)
	caller := memberOf(member("me", "ns").Obj())
	me := *caller.Member
	sonnet1 := *member("s-1", "ns").Profile("sonnet").Obj()
	sonnet2 := *member("s-2", "ns").Profile("sonnet").Obj()
	sonnetLeaving := *member("s-3", "ns").Profile("sonnet").Obj()
	sonnetLeaving.DeletionTimestamp = mtime(0)

	cases := map[string]struct {
		members   []fleetv1alpha1.Member
		sessionID string
		caller    *identity.Principal
		want      target
		wantCode  toolerr.Code
	}{
		"sole member":                           {members: []fleetv1alpha1.Member{w1}, caller: staticP, want: target{member: "w1"}},
		"sole member besides the caller":        {members: []fleetv1alpha1.Member{me, w1}, caller: caller, want: target{member: "w1"}},
		"terminating members don't count":       {members: []fleetv1alpha1.Member{leaving, w1}, caller: staticP, want: target{member: "w1"}},
		"none: spawn":                           {caller: staticP, want: target{spawn: true}},
		"only the caller: spawn":                {members: []fleetv1alpha1.Member{me}, caller: caller, want: target{spawn: true}},
		"several: choose":                       {members: []fleetv1alpha1.Member{w1, w2}, caller: staticP, wantCode: toolerr.InvalidArgument},
		"by name":                               {members: []fleetv1alpha1.Member{w1, w2}, sessionID: "w2", caller: staticP, want: target{member: "w2"}},
		"by pane id":                            {members: []fleetv1alpha1.Member{w1, w2}, sessionID: "p2", caller: staticP, want: target{member: "w2"}},
		"by terminal id":                        {members: []fleetv1alpha1.Member{w1, w2}, sessionID: "t1", caller: staticP, want: target{member: "w1"}},
		"by agent session id":                   {members: []fleetv1alpha1.Member{w1, w2}, sessionID: "s2", caller: staticP, want: target{member: "w2"}},
		"unknown id":                            {members: []fleetv1alpha1.Member{w1}, sessionID: "nope", caller: staticP, wantCode: toolerr.NotFound},
		"unknown id, no members":                {sessionID: "nope", caller: staticP, wantCode: toolerr.NotFound},
		"ambiguous id":                          {members: []fleetv1alpha1.Member{w1, shared}, sessionID: "p1", caller: staticP, wantCode: toolerr.InvalidArgument},
		"a name wins over an id":                {members: []fleetv1alpha1.Member{withState(member("p9", "ns").Obj(), "", "", ""), withState(member("w9", "ns").Obj(), "p9", "", "")}, sessionID: "p9", caller: staticP, want: target{member: "p9"}},
		"yourself":                              {members: []fleetv1alpha1.Member{me, w1}, sessionID: "me", caller: caller, wantCode: toolerr.InvalidArgument},
		"a terminating member":                  {members: []fleetv1alpha1.Member{leaving}, sessionID: "old", caller: staticP, wantCode: toolerr.WorkerGone},
		"a profile without members":             {members: []fleetv1alpha1.Member{w1}, sessionID: "sonnet", caller: staticP, want: target{spawn: true, profile: "sonnet"}},
		"a profile's one member":                {members: []fleetv1alpha1.Member{w1, sonnet1}, sessionID: "sonnet", caller: staticP, want: target{member: "s-1"}},
		"a profile's several members":           {members: []fleetv1alpha1.Member{sonnet1, sonnet2}, sessionID: "sonnet", caller: staticP, wantCode: toolerr.InvalidArgument},
		"a profile's member leaving":            {members: []fleetv1alpha1.Member{sonnetLeaving}, sessionID: "sonnet", caller: staticP, want: target{spawn: true, profile: "sonnet"}},
		"a member's name wins over a profile's": {members: []fleetv1alpha1.Member{w1}, sessionID: "w1", caller: staticP, want: target{member: "w1"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := resolveTarget(tc.members, []string{"sonnet", "w1"}, tc.sessionID, tc.caller, showMembers)
			if codeOf(err) != tc.wantCode {
				t.Fatalf("error %v, want code %q", err, tc.wantCode)
			}
			if diff := cmp.Diff(tc.want, got, exportAll); diff != "" {
				t.Errorf("target (-want +got):\n%s", diff)
			}
			// To a caller who may not see members, the same refusal names
			// none of them.
			hidden := func([]*fleetv1alpha1.Member) (string, bool) { return "", false }
			_, err = resolveTarget(tc.members, []string{"sonnet", "w1"}, tc.sessionID, tc.caller, hidden)
			if codeOf(err) != tc.wantCode {
				t.Fatalf("to a caller who may not see members: error %v, want code %q", err, tc.wantCode)
			}
			for _, m := range tc.members {
				if err != nil && m.Name != tc.sessionID && !isCaller(&m, tc.caller) && strings.Contains(err.Message, m.Name) {
					t.Errorf("to a caller who may not see members, %q names member %s", err.Message, m.Name)
				}
			}
		})
	}
}

func TestCheckSpawnBoundary(t *testing.T) {
	sub := testutil.MakeProfile("sub", "ns").Obj()
	api := testutil.MakeProfile("api", "ns").Billing(fleetv1alpha1.BillingAPI).Obj()
	onSub := memberOf(testutil.MakeMember("a", "ns").Profile("sub").Obj())
	onAPI := memberOf(testutil.MakeMember("b", "ns").Profile("api").Obj())
	inline := memberOf(member("c", "ns").Obj())
	orphan := memberOf(testutil.MakeMember("d", "ns").Profile("deleted").Obj())
	cases := map[string]struct {
		caller   *identity.Principal
		from, to *fleetv1alpha1.Profile
		wantCode toolerr.Code
	}{
		"primary, any":           {caller: staticP, to: api},
		"subscription to same":   {caller: onSub, from: sub, to: sub},
		"subscription to api":    {caller: onSub, from: sub, to: api, wantCode: toolerr.SubscriptionBoundary},
		"api to subscription":    {caller: onAPI, from: api, to: sub, wantCode: toolerr.SubscriptionBoundary},
		"api to api":             {caller: onAPI, from: api, to: api},
		"inline is subscription": {caller: inline, to: sub},
		"inline to api":          {caller: inline, to: api, wantCode: toolerr.SubscriptionBoundary},
		"profile gone":           {caller: orphan, to: sub, wantCode: toolerr.SubscriptionBoundary},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := codeOf(checkSpawnBoundary(tc.caller, tc.from, tc.to)); got != tc.wantCode {
				t.Errorf("code %q, want %q", got, tc.wantCode)
			}
		})
	}
}

func TestMayStop(t *testing.T) {
	lead := memberOf(member("lead", "ns").Team("core", fleetv1alpha1.RoleLead).Obj())
	plain := memberOf(member("plain", "ns").Team("core", fleetv1alpha1.RoleMember).Obj())
	spawned := member("kid", "ns").Team("core", fleetv1alpha1.RoleMember).Obj()
	spawned.Annotations = map[string]string{fleetv1alpha1.AnnotationSpawnedBy: "Member:plain"}
	stranger := member("x", "ns").Team("other", fleetv1alpha1.RoleMember).Obj()
	cases := map[string]struct {
		caller   *identity.Principal
		target   *fleetv1alpha1.Member
		wantCode toolerr.Code
	}{
		"primary":              {caller: staticP, target: stranger},
		"spawner":              {caller: plain, target: spawned},
		"lead of the team":     {caller: lead, target: spawned},
		"lead of another team": {caller: lead, target: stranger, wantCode: toolerr.Forbidden},
		"plain member":         {caller: plain, target: lead.Member, wantCode: toolerr.Forbidden},
		"itself":               {caller: plain, target: plain.Member, wantCode: toolerr.Forbidden},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := codeOf(mayStop(tc.caller, tc.target)); got != tc.wantCode {
				t.Errorf("code %q, want %q", got, tc.wantCode)
			}
		})
	}
}

func TestDefaultProfile(t *testing.T) {
	at := func(p *fleetv1alpha1.Profile, d time.Duration) fleetv1alpha1.Profile {
		p.CreationTimestamp = metav1.NewTime(t0.Add(d))
		return *p
	}
	cases := map[string]struct {
		profiles []fleetv1alpha1.Profile
		want     string
	}{
		"none marked":     {profiles: []fleetv1alpha1.Profile{at(testutil.MakeProfile("a", "ns").Obj(), 0)}},
		"the marked one":  {profiles: []fleetv1alpha1.Profile{at(testutil.MakeProfile("a", "ns").Obj(), 0), at(testutil.MakeProfile("b", "ns").Default().Obj(), time.Hour)}, want: "b"},
		"the oldest wins": {profiles: []fleetv1alpha1.Profile{at(testutil.MakeProfile("new", "ns").Default().Obj(), time.Hour), at(testutil.MakeProfile("old", "ns").Default().Obj(), 0)}, want: "old"},
		"ties by name":    {profiles: []fleetv1alpha1.Profile{at(testutil.MakeProfile("z", "ns").Default().Obj(), 0), at(testutil.MakeProfile("y", "ns").Default().Obj(), 0)}, want: "y"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ""
			if p := defaultProfile(tc.profiles); p != nil {
				got = p.Name
			}
			if got != tc.want {
				t.Errorf("default = %q, want %q", got, tc.want)
			}
		})
	}
}
