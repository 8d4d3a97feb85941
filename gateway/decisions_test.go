package gateway

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/testutil"
)

var (
	t0       = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	staticP  = &Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "primary", Namespace: "ns"}
	memberOf = func(m *fleetv1alpha1.Member) *Principal {
		return &Principal{Kind: fleetv1alpha1.PrincipalMember, Name: m.Name, Namespace: m.Namespace, Member: m}
	}
	codeOf    = func(e *ToolError) Code { return ptr.Deref(e, ToolError{}).Code }
	mtime     = func(d time.Duration) *metav1.Time { return ptr.To(metav1.NewTime(t0.Add(d))) }
	withState = func(m *fleetv1alpha1.Member, pane, terminal, session string) fleetv1alpha1.Member {
		m.Status.PaneID, m.Status.TerminalID, m.Status.AgentSessionID = pane, terminal, session
		return *m
	}
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
		caller    *Principal
		want      target
		wantCode  Code
	}{
		"sole member":                           {members: []fleetv1alpha1.Member{w1}, caller: staticP, want: target{member: "w1"}},
		"sole member besides the caller":        {members: []fleetv1alpha1.Member{me, w1}, caller: caller, want: target{member: "w1"}},
		"terminating members don't count":       {members: []fleetv1alpha1.Member{leaving, w1}, caller: staticP, want: target{member: "w1"}},
		"none: spawn":                           {caller: staticP, want: target{spawn: true}},
		"only the caller: spawn":                {members: []fleetv1alpha1.Member{me}, caller: caller, want: target{spawn: true}},
		"several: choose":                       {members: []fleetv1alpha1.Member{w1, w2}, caller: staticP, wantCode: CodeInvalidArgument},
		"by name":                               {members: []fleetv1alpha1.Member{w1, w2}, sessionID: "w2", caller: staticP, want: target{member: "w2"}},
		"by pane id":                            {members: []fleetv1alpha1.Member{w1, w2}, sessionID: "p2", caller: staticP, want: target{member: "w2"}},
		"by terminal id":                        {members: []fleetv1alpha1.Member{w1, w2}, sessionID: "t1", caller: staticP, want: target{member: "w1"}},
		"by agent session id":                   {members: []fleetv1alpha1.Member{w1, w2}, sessionID: "s2", caller: staticP, want: target{member: "w2"}},
		"unknown id":                            {members: []fleetv1alpha1.Member{w1}, sessionID: "nope", caller: staticP, wantCode: CodeNotFound},
		"unknown id, no members":                {sessionID: "nope", caller: staticP, wantCode: CodeNotFound},
		"ambiguous id":                          {members: []fleetv1alpha1.Member{w1, shared}, sessionID: "p1", caller: staticP, wantCode: CodeInvalidArgument},
		"a name wins over an id":                {members: []fleetv1alpha1.Member{withState(member("p9", "ns").Obj(), "", "", ""), withState(member("w9", "ns").Obj(), "p9", "", "")}, sessionID: "p9", caller: staticP, want: target{member: "p9"}},
		"yourself":                              {members: []fleetv1alpha1.Member{me, w1}, sessionID: "me", caller: caller, wantCode: CodeInvalidArgument},
		"a terminating member":                  {members: []fleetv1alpha1.Member{leaving}, sessionID: "old", caller: staticP, wantCode: CodeWorkerGone},
		"a profile without members":             {members: []fleetv1alpha1.Member{w1}, sessionID: "sonnet", caller: staticP, want: target{spawn: true, profile: "sonnet"}},
		"a profile's one member":                {members: []fleetv1alpha1.Member{w1, sonnet1}, sessionID: "sonnet", caller: staticP, want: target{member: "s-1"}},
		"a profile's several members":           {members: []fleetv1alpha1.Member{sonnet1, sonnet2}, sessionID: "sonnet", caller: staticP, wantCode: CodeInvalidArgument},
		"a profile's member leaving":            {members: []fleetv1alpha1.Member{sonnetLeaving}, sessionID: "sonnet", caller: staticP, want: target{spawn: true, profile: "sonnet"}},
		"a member's name wins over a profile's": {members: []fleetv1alpha1.Member{w1}, sessionID: "w1", caller: staticP, want: target{member: "w1"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := resolveTarget(tc.members, []string{"sonnet", "w1"}, tc.sessionID, tc.caller)
			if codeOf(err) != tc.wantCode {
				t.Fatalf("error %v, want code %q", err, tc.wantCode)
			}
			if diff := cmp.Diff(tc.want, got, exportAll); diff != "" {
				t.Errorf("target (-want +got):\n%s", diff)
			}
		})
	}
}

// withStatus builds a Delegation with a status.
func withStatus(name string, status fleetv1alpha1.DelegationStatus) *fleetv1alpha1.Delegation {
	d := testutil.MakeDelegation(name, "ns", "w1", "do it").Obj()
	d.Status = status
	return d
}

func TestOutcomeOf(t *testing.T) {
	open := []fleetv1alpha1.Question{{TurnID: "d.q1", Text: "which?", Answer: ptr.To("that")}, {TurnID: "d.q2", Text: "and then?"}}
	cases := map[string]struct {
		status   fleetv1alpha1.DelegationStatus
		answered sets.Set[string]
		want     *SendOutput
		wantCode Code
		wantDone bool
	}{
		"pending":                         {status: fleetv1alpha1.DelegationStatus{}},
		"working":                         {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationWorking}},
		"replied":                         {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationReplied, Outcome: fleetv1alpha1.OutcomeReply, Reply: ptr.To("hi")}, want: &SendOutput{Outcome: "reply", Text: "hi"}, wantDone: true},
		"replied without outcome written": {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationReplied, Reply: ptr.To("hi")}, want: &SendOutput{Outcome: "reply", Text: "hi"}, wantDone: true},
		"turn done":                       {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationTurnDone, Tail: ptr.To("$ ")}, want: &SendOutput{Outcome: "turn_done", Text: "$ "}, wantDone: true},
		"timed out":                       {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationTimedOut}, want: &SendOutput{Outcome: "timeout"}, wantDone: true},
		"timed out with a late reply":     {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationTimedOut, Reply: ptr.To("late")}, want: &SendOutput{Outcome: "reply", Text: "late"}, wantDone: true},
		"failed":                          {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationFailed}, wantCode: CodeDeliveryFailed, wantDone: true},
		"worker gone":                     {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationWorkerGone}, wantCode: CodeWorkerGone, wantDone: true},
		"cancelled":                       {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationCancelled}, want: &SendOutput{Outcome: "cancelled", Text: "the message was withdrawn"}, wantDone: true},
		"open question": {
			status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationAsking, Questions: open}, want: &SendOutput{Outcome: "question", Text: "and then?", TurnID: "d.q2"}, wantDone: true,
		},
		"open question the waiter answered": {
			status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationAsking, Questions: open}, answered: sets.New("d.q2"),
		},
		"settled with an open question": {
			status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationWorkerGone, Questions: open}, wantCode: CodeWorkerGone, wantDone: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err, done := outcomeOf(withStatus("d", tc.status), tc.answered)
			if done != tc.wantDone || codeOf(err) != tc.wantCode {
				t.Fatalf("done %v, error %v; want %v, %q", done, err, tc.wantDone, tc.wantCode)
			}
			if tc.want != nil {
				tc.want.DispatchID, tc.want.Member = "d", "w1"
			}
			if diff := cmp.Diff(tc.want, got, exportAll); diff != "" {
				t.Errorf("outcome (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSettledMessage(t *testing.T) {
	d := withStatus("d", fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationFailed, Conditions: []metav1.Condition{
		{Type: fleetv1alpha1.ConditionDelivered, Status: metav1.ConditionFalse, Reason: fleetv1alpha1.ReasonDeliveryRefused, Message: "herdr: agent_blocked"},
	}})
	_, err, _ := outcomeOf(d, nil)
	if err == nil || err.Message != "herdr: agent_blocked" {
		t.Errorf("error = %v, want the Delivered condition's message", err)
	}
}

func TestAnswerOf(t *testing.T) {
	qs := []fleetv1alpha1.Question{{TurnID: "d.q1", Text: "which?", Answer: ptr.To("that")}, {TurnID: "d.q2", Text: "and?"}}
	cases := map[string]struct {
		status   fleetv1alpha1.DelegationStatus
		turn     string
		want     *AskOutput
		wantCode Code
		wantDone bool
	}{
		"answered":          {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationWorking, Questions: qs}, turn: "d.q1", want: &AskOutput{Answer: ptr.To("that"), TurnID: "d.q1"}, wantDone: true},
		"not yet":           {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationAsking, Questions: qs}, turn: "d.q2"},
		"not in the cache":  {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationWorking}, turn: "d.q3"},
		"timed out":         {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationTimedOut, Questions: qs}, turn: "d.q2", want: &AskOutput{Outcome: "timeout", TurnID: "d.q2"}, wantDone: true},
		"settled otherwise": {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationCancelled, Questions: qs}, turn: "d.q2", wantCode: CodeCancelled, wantDone: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err, done := answerOf(withStatus("d", tc.status), tc.turn)
			if done != tc.wantDone || codeOf(err) != tc.wantCode {
				t.Fatalf("done %v, error %v; want %v, %q", done, err, tc.wantDone, tc.wantCode)
			}
			if diff := cmp.Diff(tc.want, got, exportAll); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCurrentDelegation(t *testing.T) {
	working := func(name string, typed time.Duration) fleetv1alpha1.Delegation {
		return *withStatus(name, fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationWorking, DeliveringAt: mtime(typed)})
	}
	queued := *withStatus("queued", fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationQueued})
	replied := *withStatus("replied", fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationReplied, DeliveringAt: mtime(time.Hour)})
	cases := map[string]struct {
		ds   []fleetv1alpha1.Delegation
		want string
	}{
		"none":              {ds: []fleetv1alpha1.Delegation{queued, replied}},
		"the one in flight": {ds: []fleetv1alpha1.Delegation{queued, working("a", 0), replied}, want: "a"},
		"the latest typed":  {ds: []fleetv1alpha1.Delegation{working("a", 0), working("b", time.Minute)}, want: "b"},
		"being typed": {ds: []fleetv1alpha1.Delegation{*withStatus("c", fleetv1alpha1.DelegationStatus{
			Phase: fleetv1alpha1.DelegationDelivered, DeliveringAt: mtime(0)})}, want: "c"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ""
			if d := currentDelegation(tc.ds); d != nil {
				got = d.Name
			}
			if got != tc.want {
				t.Errorf("current = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLateReplyTarget(t *testing.T) {
	timedOut := func(name string, typed *metav1.Time, reply *string) fleetv1alpha1.Delegation {
		return *withStatus(name, fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationTimedOut, DeliveringAt: typed, Reply: reply})
	}
	cases := map[string]struct {
		ds   []fleetv1alpha1.Delegation
		want string
	}{
		"never typed":      {ds: []fleetv1alpha1.Delegation{timedOut("a", nil, nil)}},
		"already replied":  {ds: []fleetv1alpha1.Delegation{timedOut("a", mtime(0), ptr.To("x"))}},
		"the latest one":   {ds: []fleetv1alpha1.Delegation{timedOut("a", mtime(0), nil), timedOut("b", mtime(time.Second), nil)}, want: "b"},
		"not other phases": {ds: []fleetv1alpha1.Delegation{*withStatus("c", fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationTurnDone, DeliveringAt: mtime(0)})}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ""
			if d := lateReplyTarget(tc.ds); d != nil {
				got = d.Name
			}
			if got != tc.want {
				t.Errorf("late target = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestHoldTimeout(t *testing.T) {
	cases := map[string]struct {
		ms       *int64
		max      time.Duration
		want     time.Duration
		wantSecs int32
		wantCode Code
	}{
		"default":         {max: time.Hour, want: 10 * time.Minute, wantSecs: 600},
		"zero is default": {ms: ptr.To[int64](0), max: time.Hour, want: 10 * time.Minute, wantSecs: 600},
		"given":           {ms: ptr.To[int64](1500), max: time.Hour, want: 1500 * time.Millisecond, wantSecs: 2},
		"capped":          {ms: ptr.To[int64](7_200_000), max: time.Hour, want: time.Hour, wantSecs: 3600},
		"default capped":  {max: time.Minute, want: time.Minute, wantSecs: 60},
		"huge":            {ms: ptr.To[int64](1 << 62), max: 48 * time.Hour, want: 24 * time.Hour, wantSecs: 86400},
		"one millisecond": {ms: ptr.To[int64](1), max: time.Hour, want: time.Millisecond, wantSecs: 1},
		"negative":        {ms: ptr.To[int64](-5), max: time.Hour, wantCode: CodeInvalidArgument},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := holdTimeout(tc.ms, tc.max)
			if codeOf(err) != tc.wantCode {
				t.Fatalf("error %v, want %q", err, tc.wantCode)
			}
			if err != nil {
				return
			}
			if got != tc.want || timeoutSeconds(got) != tc.wantSecs {
				t.Errorf("timeout %v (%ds), want %v (%ds)", got, timeoutSeconds(got), tc.want, tc.wantSecs)
			}
		})
	}
}

func TestIdempotentName(t *testing.T) {
	p := fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "primary"}
	base := idempotentName("ns", p, "k")
	if base != idempotentName("ns", p, "k") {
		t.Fatal("not stable")
	}
	others := []string{
		idempotentName("other", p, "k"),
		idempotentName("ns", fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: "primary"}, "k"),
		idempotentName("ns", p, "k2"),
	}
	for _, o := range others {
		if o == base {
			t.Errorf("collision: %s", o)
		}
	}
	if !regexp.MustCompile(`^d-[0-9a-f]{32}$`).MatchString(base) {
		t.Errorf("name %q is not a valid, fixed-size object name", base)
	}
}

func TestCheckBoundary(t *testing.T) {
	sub := testutil.MakeProfile("sub", "ns").Obj()
	api := testutil.MakeProfile("api", "ns").Billing(fleetv1alpha1.BillingAPI).Obj()
	onSub := memberOf(testutil.MakeMember("a", "ns").Profile("sub").Obj())
	onAPI := memberOf(testutil.MakeMember("b", "ns").Profile("api").Obj())
	inline := memberOf(member("c", "ns").Obj())
	orphan := memberOf(testutil.MakeMember("d", "ns").Profile("deleted").Obj())
	cases := map[string]struct {
		caller   *Principal
		from, to *fleetv1alpha1.Profile
		wantCode Code
	}{
		"primary, any":           {caller: staticP, to: api},
		"subscription to same":   {caller: onSub, from: sub, to: sub},
		"subscription to api":    {caller: onSub, from: sub, to: api, wantCode: CodeSubscriptionBoundary},
		"api to subscription":    {caller: onAPI, from: api, to: sub, wantCode: CodeSubscriptionBoundary},
		"api to api":             {caller: onAPI, from: api, to: api},
		"inline is subscription": {caller: inline, to: sub},
		"inline to api":          {caller: inline, to: api, wantCode: CodeSubscriptionBoundary},
		"profile gone":           {caller: orphan, to: sub, wantCode: CodeSubscriptionBoundary},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := codeOf(checkBoundary(tc.caller, tc.from, tc.to)); got != tc.wantCode {
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
		caller   *Principal
		target   *fleetv1alpha1.Member
		wantCode Code
	}{
		"primary":              {caller: staticP, target: stranger},
		"spawner":              {caller: plain, target: spawned},
		"lead of the team":     {caller: lead, target: spawned},
		"lead of another team": {caller: lead, target: stranger, wantCode: CodeForbidden},
		"plain member":         {caller: plain, target: lead.Member, wantCode: CodeForbidden},
		"itself":               {caller: plain, target: plain.Member, wantCode: CodeForbidden},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := codeOf(mayStop(tc.caller, tc.target)); got != tc.wantCode {
				t.Errorf("code %q, want %q", got, tc.wantCode)
			}
		})
	}
}

func TestTeamPolicy(t *testing.T) {
	lead := memberOf(member("lead", "ns").Team("core", fleetv1alpha1.RoleLead).Obj())
	plain := memberOf(member("plain", "ns").Team("core", fleetv1alpha1.RoleMember).Obj())
	loner := memberOf(member("loner", "ns").Obj())
	adders := TeamPolicy{NonLeadCanAdd: true}
	removers := TeamPolicy{NonLeadCanRemove: true}
	cases := map[string]struct {
		caller       *Principal
		requested    string
		policy       TeamPolicy
		wantTeam     string
		wantTeamCode Code
		// wantAdd and wantRemove are the codes of team_manage add and remove.
		wantAdd, wantRemove Code
	}{
		"lead":                          {caller: lead, wantTeam: "core"},
		"member":                        {caller: plain, wantTeam: "core", wantAdd: CodeForbidden, wantRemove: CodeForbidden},
		"member where non-leads add":    {caller: plain, policy: adders, wantTeam: "core", wantRemove: CodeForbidden},
		"member where non-leads remove": {caller: plain, policy: removers, wantTeam: "core", wantAdd: CodeForbidden},
		"member naming its own team":    {caller: plain, requested: "core", wantTeam: "core", wantAdd: CodeForbidden, wantRemove: CodeForbidden},
		"member naming another team":    {caller: plain, requested: "other", wantTeamCode: CodeNotTeamMember},
		"member without a team":         {caller: loner, wantTeamCode: CodeNotTeamMember},
		"lead of another team":          {caller: lead, requested: "other", policy: TeamPolicy{NonLeadCanAdd: true, NonLeadCanRemove: true}, wantTeamCode: CodeNotTeamMember},
		"primary naming a team":         {caller: staticP, requested: "core", wantTeam: "core"},
		"primary without a team":        {caller: staticP, wantTeamCode: CodeInvalidArgument},
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

func TestMemberGenerateName(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	for _, profile := range []string{"scripted", "claude.sonnet", "9lives", strings.Repeat("x", 253), "a_b", "---"} {
		name := memberGenerateName(profile) + "abcde"
		if !valid.MatchString(name) {
			t.Errorf("profile %q gives member name %q", profile, name)
		}
	}
	if got := delegationGenerateName("my_worker"); got != "my-worker-" {
		t.Errorf("delegation generateName = %q", got)
	}
}

func TestVerdictOf(t *testing.T) {
	sa := authnv1.UserInfo{Username: "system:serviceaccount:team-a:bot", Groups: []string{"system:serviceaccounts"}}
	cases := map[string]struct {
		status     authnv1.TokenReviewStatus
		want       *Principal
		wantReason string
	}{
		"service account": {
			status: authnv1.TokenReviewStatus{Authenticated: true, User: sa, Audiences: []string{fleetv1alpha1.GatewayAudience}},
			want:   &Principal{Kind: fleetv1alpha1.PrincipalServiceAccount, Name: sa.Username, Namespace: "team-a", user: &sa},
		},
		"rejected":          {status: authnv1.TokenReviewStatus{Error: "invalid bearer token"}, wantReason: "invalid_token"},
		"rejected audience": {status: authnv1.TokenReviewStatus{Error: `token audiences ["x"] is invalid for the target audiences ["fleetd"]`}, wantReason: "wrong_audience"},
		"audience not ours": {status: authnv1.TokenReviewStatus{Authenticated: true, User: sa, Audiences: []string{"other"}}, wantReason: "wrong_audience"},
		"not a service account": {
			status:     authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "alice"}, Audiences: []string{fleetv1alpha1.GatewayAudience}},
			wantReason: "not_service_account",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := verdictOf(&authnv1.TokenReview{Status: tc.status})
			reason := ""
			if got.failure != nil {
				reason = got.failure.reason
			}
			if reason != tc.wantReason {
				t.Fatalf("reason %q, want %q", reason, tc.wantReason)
			}
			if diff := cmp.Diff(tc.want, got.principal, cmp.AllowUnexported(Principal{})); diff != "" {
				t.Errorf("principal (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSplitServiceAccount(t *testing.T) {
	cases := map[string]struct {
		user         string
		wantNS, want string
		wantOK       bool
	}{
		"ok":          {user: "system:serviceaccount:ns:sa", wantNS: "ns", want: "sa", wantOK: true},
		"not an sa":   {user: "system:node:n1"},
		"no name":     {user: "system:serviceaccount:ns:"},
		"extra colon": {user: "system:serviceaccount:ns:sa:x"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ns, n, ok := splitServiceAccount(tc.user)
			if ns != tc.wantNS || n != tc.want || ok != tc.wantOK {
				t.Errorf("got %q %q %v", ns, n, ok)
			}
		})
	}
}

func TestLooksLikeJWT(t *testing.T) {
	cases := map[string]bool{
		"eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln": true,
		"static-token":                false,
		"a..c":                        false,
		"a.b.c.d":                     false,
		"a.b.c d":                     false,
		strings.Repeat("a.", 2) + "ä": false,
	}
	for token, want := range cases {
		if got := looksLikeJWT(token); got != want {
			t.Errorf("looksLikeJWT(%q) = %v, want %v", token, got, want)
		}
	}
}

func TestRing(t *testing.T) {
	cases := map[string]struct {
		writes        []string
		n             int
		want          string
		wantTruncated bool
	}{
		"empty":            {n: 8, want: ""},
		"fits":             {writes: []string{"ab", "cd"}, n: 8, want: "abcd"},
		"tail of it":       {writes: []string{"abcd"}, n: 2, want: "cd", wantTruncated: true},
		"wraps":            {writes: []string{"abcdef", "ghij"}, n: 8, want: "cdefghij", wantTruncated: true},
		"exactly full":     {writes: []string{"abcdefgh"}, n: 8, want: "abcdefgh"},
		"larger than ring": {writes: []string{"0123456789abc"}, n: 8, want: "56789abc", wantTruncated: true},
		"many small":       {writes: strings.Split("abcdefghijklmnop", ""), n: 8, want: "ijklmnop", wantTruncated: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := newRing(8)
			for _, w := range tc.writes {
				if n, err := r.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			got, truncated := r.tail(tc.n)
			if string(got) != tc.want || truncated != tc.wantTruncated {
				t.Errorf("tail(%d) = %q, %v; want %q, %v", tc.n, got, truncated, tc.want, tc.wantTruncated)
			}
		})
	}
}

func TestRendezvous(t *testing.T) {
	rv := newRendezvous()
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	wa1, wa2, wb := rv.subscribe(a), rv.subscribe(a), rv.subscribe(b)
	rv.notify(a)
	rv.notify(a) // coalesces: one pending signal is enough
	for _, w := range []*waiter{wa1, wa2} {
		select {
		case <-w.wake:
		default:
			t.Error("a waiter of a was not woken")
		}
	}
	select {
	case <-wb.wake:
		t.Error("the waiter of b was woken by a")
	default:
	}
	rv.unsubscribe(a, wa1)
	rv.unsubscribe(a, wa2)
	rv.unsubscribe(b, wb)
	if n := rv.held(); n != 0 {
		t.Errorf("%d waiters left", n)
	}
	// The handler understands tombstones.
	w := rv.subscribe(a)
	rv.handler().OnDelete(withStatus("a", fleetv1alpha1.DelegationStatus{}))
	select {
	case <-w.wake:
	default:
		t.Error("delete did not wake the waiter")
	}
}

func TestBearerToken(t *testing.T) {
	cases := map[string]struct {
		header string
		want   string
		wantOK bool
	}{
		"bearer":      {header: "Bearer abc", want: "abc", wantOK: true},
		"case":        {header: "bearer abc", want: "abc", wantOK: true},
		"missing":     {header: ""},
		"basic":       {header: "Basic abc"},
		"empty token": {header: "Bearer "},
		"no space":    {header: "Bearerabc"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := httptestRequest(tc.header)
			got, ok := bearerToken(r)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("bearerToken = %q, %v", got, ok)
			}
		})
	}
}
