package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/internal/testutil"
)

// The dashboard's decisions, without a server: what a message's timeline
// shows, who sees what, and what the feed wakes.

func TestMessageSteps(t *testing.T) {
	created := time.Date(2026, 3, 1, 12, 0, 0, 250_000_000, time.UTC)
	at := func(s int) time.Time { return created.Truncate(time.Second).Add(time.Duration(s) * time.Second) }
	base := func() *fleetv1alpha1.Delegation {
		d := testutil.MakeDelegation("d1", "ns", "w1", "do it").Obj()
		d.CreationTimestamp = metav1.NewTime(created.Truncate(time.Second))
		d.Annotations = map[string]string{fleetv1alpha1.AnnotationSequence: created.Format(time.RFC3339Nano)}
		return d
	}
	delivered := func(d *fleetv1alpha1.Delegation) {
		delegation.BeginDelivery(d, at(1), delegation.Target{PaneID: "w1:p1"})
	}
	working := func(d *fleetv1alpha1.Delegation) { delivered(d); delegation.Pickup(d, at(2)) }
	step := func(name string, s int, text string) DashboardStep {
		return DashboardStep{Step: name, At: at(s).Format(time.RFC3339), Text: text}
	}
	first := []DashboardStep{{Step: "created", At: "2026-03-01T12:00:00.25Z"}, step("queued", 0, "")}
	// A Delegation nothing has happened to is queued since it was created.
	firstUnrecorded := []DashboardStep{{Step: "created", At: "2026-03-01T12:00:00.25Z"}, {Step: "queued", At: "2026-03-01T12:00:00.25Z"}}
	cases := map[string]struct {
		change func(*fleetv1alpha1.Delegation)
		want   []DashboardStep
	}{
		"new":       {change: func(*fleetv1alpha1.Delegation) {}, want: firstUnrecorded},
		"delivered": {change: delivered, want: append(first, step("delivered", 1, ""))},
		"working":   {change: working, want: append(first, step("delivered", 1, ""), step("working", 2, ""))},
		"asked and answered": {
			change: func(d *fleetv1alpha1.Delegation) {
				working(d)
				turn, _ := delegation.Ask(d, at(3), "which branch?")
				_, _ = delegation.Answer(d, at(4), turn, "main")
			},
			want: append(first, step("delivered", 1, ""), step("working", 2, ""),
				DashboardStep{Step: "asked", At: at(3).Format(time.RFC3339), Text: "which branch?", TurnID: "d1.q1"},
				DashboardStep{Step: "answered", At: at(4).Format(time.RFC3339), Text: "main", TurnID: "d1.q1"}),
		},
		"replied": {
			change: func(d *fleetv1alpha1.Delegation) { working(d); _ = delegation.Reply(d, at(5), "done") },
			want:   append(first, step("delivered", 1, ""), step("working", 2, ""), step("replied", 5, "done")),
		},
		"turn done": {
			change: func(d *fleetv1alpha1.Delegation) { working(d); delegation.TurnDone(d, at(5), "$ ") },
			want:   append(first, step("delivered", 1, ""), step("working", 2, ""), step("turn_done", 5, "$ ")),
		},
		"timed out, then a late reply": {
			change: func(d *fleetv1alpha1.Delegation) {
				working(d)
				delegation.TimeOut(d, at(5))
				_ = delegation.LateReply(d, at(6), "late")
			},
			want: append(first, step("delivered", 1, ""), step("working", 2, ""), step("timed_out", 5, ""), step("late_reply", 6, "late")),
		},
		"worker gone": {
			change: func(d *fleetv1alpha1.Delegation) {
				delivered(d)
				delegation.WorkerGone(d, at(3), "member w1 was deleted")
			},
			want: append(first, step("delivered", 1, ""), step("worker_gone", 3, "member w1 was deleted")),
		},
		"delivery failed": {
			change: func(d *fleetv1alpha1.Delegation) {
				delegation.Fail(d, at(3), fleetv1alpha1.ReasonDeliveryRefused, "herdr refused it")
			},
			want: append(firstUnrecorded, step("failed", 3, "herdr refused it")),
		},
		"cancelled in the member's hands": {
			change: func(d *fleetv1alpha1.Delegation) {
				working(d)
				delegation.RequestCancel(d, at(3))
				delegation.Cancel(d, at(4), "withdrawn")
			},
			want: append(first, step("delivered", 1, ""), step("working", 2, ""), step("cancel_requested", 3, ""), step("cancelled", 4, "withdrawn")),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := base()
			tc.change(d)
			if diff := cmp.Diff(tc.want, messageSteps(d)); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDashboardScope(t *testing.T) {
	lead := &identity.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: "lead", Namespace: "ns", Member: member("lead", "ns").Team("core", fleetv1alpha1.RoleLead).Obj()}
	loner := &identity.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: "loner", Namespace: "ns", Member: member("loner", "ns").Obj()}
	primary := &identity.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "primary", Namespace: "ns"}
	sa := &identity.Principal{Kind: fleetv1alpha1.PrincipalServiceAccount, Name: "system:serviceaccount:ns:bot", Namespace: "ns"}
	coder := member("coder", "ns").Team("core", fleetv1alpha1.RoleMember).Obj()
	other := member("other", "ns").Team("web", fleetv1alpha1.RoleMember).Obj()
	msg := func(from *identity.Principal, to string) *fleetv1alpha1.Delegation {
		return testutil.MakeDelegation("d", "ns", to, "x").From(from.Kind, from.Name).Obj()
	}
	cases := map[string]struct {
		scope      dashboardScope
		member     *fleetv1alpha1.Member
		message    *fleetv1alpha1.Delegation
		wantMember bool
		wantRead   bool
		wantCancel bool
	}{
		"a lead sees its team":                                         {scope: dashboardScope{who: lead}, member: coder, message: msg(primary, "coder"), wantMember: true},
		"a lead reads its own messages":                                {scope: dashboardScope{who: lead}, member: coder, message: msg(lead, "coder"), wantMember: true, wantRead: true, wantCancel: true},
		"a member reads messages to it":                                {scope: dashboardScope{who: lead}, member: lead.Member, message: msg(primary, "lead"), wantMember: true, wantRead: true},
		"a member sees no other team":                                  {scope: dashboardScope{who: lead}, member: other, message: msg(primary, "other")},
		"a member without a team sees itself":                          {scope: dashboardScope{who: loner}, member: loner.Member, message: msg(primary, "loner"), wantMember: true, wantRead: true},
		"a member without a team sees no one else":                     {scope: dashboardScope{who: loner}, member: coder, message: msg(primary, "coder")},
		"a primary sees and reads all":                                 {scope: dashboardScope{who: primary, othersMessages: true, cancelOthers: true}, member: other, message: msg(sa, "other"), wantMember: true, wantRead: true, wantCancel: true},
		"a service account without get delegations reads its own only": {scope: dashboardScope{who: sa}, member: other, message: msg(primary, "other"), wantMember: true},
		"a service account cancels its own":                            {scope: dashboardScope{who: sa}, member: other, message: msg(sa, "other"), wantMember: true, wantRead: true, wantCancel: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.scope.showsMember(tc.member); got != tc.wantMember {
				t.Errorf("showsMember = %v, want %v", got, tc.wantMember)
			}
			if got := tc.scope.showsMessage(tc.message); got != tc.wantRead {
				t.Errorf("showsMessage = %v, want %v", got, tc.wantRead)
			}
			if got := tc.scope.mayCancel(tc.message); got != tc.wantCancel {
				t.Errorf("mayCancel = %v, want %v", got, tc.wantCancel)
			}
		})
	}
	settled := msg(primary, "other")
	settled.Status.Phase = fleetv1alpha1.DelegationReplied
	if (&dashboardScope{who: primary, cancelOthers: true}).mayCancel(settled) {
		t.Error("a settled message may be cancelled")
	}
}

func TestDashboardMember(t *testing.T) {
	profiles := map[string]*fleetv1alpha1.Profile{"claude": testutil.MakeProfile("claude", "ns").Agent(fleetv1alpha1.AgentClaude).Obj()}
	scope := &dashboardScope{who: &identity.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "primary", Namespace: "ns"}, othersMessages: true}
	cases := map[string]struct {
		member   *fleetv1alpha1.Member
		status   func(*fleetv1alpha1.MemberStatus)
		inFlight *fleetv1alpha1.Delegation
		want     func(*DashboardMember)
	}{
		"a command": {member: member("w1", "ns").Obj(), want: func(v *DashboardMember) { v.Status, v.Agent = "pending", "true" }},
		"a profile's agent, blocked on a dialog": {
			member: testutil.MakeMember("w1", "ns").Profile("claude").Obj(),
			status: func(st *fleetv1alpha1.MemberStatus) {
				st.Phase, st.AgentStatus, st.AgentMessage = fleetv1alpha1.MemberReady, fleetv1alpha1.AgentBlocked, "Allow?"
			},
			want: func(v *DashboardMember) {
				v.Status, v.Agent, v.Profile, v.Phase, v.AgentStatus, v.Waiting = "blocked", "claude", "claude", "Ready", "blocked", "Allow?"
			},
		},
		"a message left over from a dialog is not shown": {
			member: member("w1", "ns").Obj(),
			status: func(st *fleetv1alpha1.MemberStatus) {
				st.Phase, st.AgentStatus, st.AgentMessage = fleetv1alpha1.MemberReady, fleetv1alpha1.AgentWorking, "Allow?"
			},
			want: func(v *DashboardMember) {
				v.Status, v.Agent, v.Phase, v.AgentStatus = "working", "true", "Ready", "working"
			},
		},
		"in a pod, restarted, with a message in flight": {
			member: member("w1", "ns").Obj(),
			status: func(st *fleetv1alpha1.MemberStatus) {
				st.AgentKind, st.Restarts, st.LastRestartReason, st.NodeName, st.PodName = fleetv1alpha1.AgentCodex, 3, "pane lost", "n1", "w1-abc"
				st.ContextRemainingPercent = ptr.To[int32](7)
			},
			inFlight: testutil.MakeDelegation("w1-x", "ns", "w1", "fix it\nthen more").Obj(),
			want: func(v *DashboardMember) {
				v.Status, v.Agent, v.Restarts, v.LastRestartReason, v.NodeName, v.PodName = "pending", "codex", 3, "pane lost", "n1", "w1-abc"
				v.ContextRemainingPercent, v.InFlight, v.InFlightContent = ptr.To[int32](7), "w1-x", "fix it"
			},
		},
		"suspended for being idle": {
			member: member("w1", "ns").Obj(),
			status: func(st *fleetv1alpha1.MemberStatus) {
				st.Phase, st.SuspendedAt, st.AgentSessionID = fleetv1alpha1.MemberSuspended, mtime(0), "s-1"
				st.Conditions = []metav1.Condition{{Type: fleetv1alpha1.ConditionSuspended, Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonIdle}}
			},
			want: func(v *DashboardMember) {
				v.Status, v.Agent, v.Phase, v.SessionID = "suspended", "true", "Suspended", "s-1"
				v.SuspendedAt, v.SuspendedReason = "2026-01-02T03:04:05Z", fleetv1alpha1.ReasonIdle
			},
		},
		"resuming: no longer suspended": {
			member: member("w1", "ns").Obj(),
			status: func(st *fleetv1alpha1.MemberStatus) {
				st.Phase = fleetv1alpha1.MemberStarting
				st.Conditions = []metav1.Condition{{Type: fleetv1alpha1.ConditionSuspended, Status: metav1.ConditionFalse, Reason: fleetv1alpha1.ReasonResuming}}
			},
			want: func(v *DashboardMember) { v.Status, v.Agent, v.Phase = "starting", "true", "Starting" },
		},
		"in a pod claimed from a warm pool": {
			member: testutil.MakeMember("w1", "ns").Profile("claude").Obj(),
			status: func(st *fleetv1alpha1.MemberStatus) {
				st.Phase, st.AgentStatus = fleetv1alpha1.MemberReady, fleetv1alpha1.AgentIdle
				st.PodName, st.PodPool = "claude-warm-x7k2q", "claude"
			},
			want: func(v *DashboardMember) {
				v.Status, v.Agent, v.Profile, v.Phase, v.AgentStatus = "idle", "claude", "claude", "Ready", "idle"
				v.PodName, v.PodPool = "claude-warm-x7k2q", "claude"
			},
		},
		"with tokens used and priced": {
			member: member("w1", "ns").Obj(),
			status: func(st *fleetv1alpha1.MemberStatus) {
				st.Usage = &fleetv1alpha1.MemberUsage{
					TokenUsage: fleetv1alpha1.TokenUsage{InputTokens: 3000, OutputTokens: 120, CachedTokens: 6000, CacheCreationTokens: 900, Calls: 3},
					Cost:       "0.0123", Currency: "USD",
				}
			},
			want: func(v *DashboardMember) {
				v.Status, v.Agent = "pending", "true"
				v.Usage, v.Cost = "3 calls · 3000 in · 120 out · 6000 cached · 900 cache writes", "0.0123 USD"
			},
		},
		"with tokens used and no pricing": {
			member: member("w1", "ns").Obj(),
			status: func(st *fleetv1alpha1.MemberStatus) {
				st.Usage = &fleetv1alpha1.MemberUsage{TokenUsage: fleetv1alpha1.TokenUsage{InputTokens: 1000, OutputTokens: 40, Calls: 1}}
			},
			want: func(v *DashboardMember) {
				v.Status, v.Agent, v.Usage = "pending", "true", "1 call · 1000 in · 40 out · 0 cached"
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m := tc.member
			if tc.status != nil {
				tc.status(&m.Status)
			}
			q := queue{}
			if tc.inFlight != nil {
				q.inFlight = tc.inFlight.Name
			}
			want := DashboardMember{MemberView: MemberView{Name: "w1", Role: "member", Profile: m.Spec.Profile}}
			tc.want(&want)
			if diff := cmp.Diff(want, dashboardMember(m, scope, q, tc.inFlight, profiles)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestDashboardPool: a Profile's pool is shown while its spec or its
// status has one, with the spec's size and the status's figures.
func TestDashboardPool(t *testing.T) {
	figures := &fleetv1alpha1.WarmPoolStatus{Free: 1, Starting: 2, Claimed: 3}
	cases := map[string]struct {
		profile *fleetv1alpha1.Profile
		want    *DashboardPool
	}{
		"no pool":                {profile: testutil.MakeProfile("p", "ns").Obj()},
		"a pool not counted yet": {profile: testutil.MakeProfile("p", "ns").WarmPool(4).Obj(), want: &DashboardPool{Name: "p", Size: 4}},
		"a pool counted": {
			profile: func() *fleetv1alpha1.Profile {
				p := testutil.MakeProfile("p", "ns").WarmPool(4).Obj()
				p.Status.WarmPool = figures
				return p
			}(),
			want: &DashboardPool{Name: "p", Size: 4, Free: 1, Starting: 2, Claimed: 3},
		},
		"a pool taken out of the spec, its claims still counted": {
			profile: func() *fleetv1alpha1.Profile {
				p := testutil.MakeProfile("p", "ns").Obj()
				p.Status.WarmPool = figures
				return p
			}(),
			want: &DashboardPool{Name: "p", Free: 1, Starting: 2, Claimed: 3},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, shown := dashboardPool(tc.profile)
			if shown != (tc.want != nil) {
				t.Fatalf("shown = %v, want %v", shown, tc.want != nil)
			}
			if tc.want != nil {
				if diff := cmp.Diff(*tc.want, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestViewersWakeWhatTheyShow: a change marks and wakes the viewers that
// show it: a member's on the fleet view and on its page, a message's on
// its member's page, a Profile's (its warm pool) on the fleet view only.
func TestViewersWakeWhatTheyShow(t *testing.T) {
	vs := newViewers()
	fleet := vs.subscribe("ns", "")
	page := vs.subscribe("ns", "w1")
	otherPage := vs.subscribe("ns", "w3")
	elsewhere := vs.subscribe("other", "")
	vs.memberChanged(member("w2", "ns").Obj())
	vs.messageChanged(testutil.MakeDelegation("d1", "ns", "w1", "x").Obj())
	vs.poolChanged(testutil.MakeProfile("pooled", "ns").Obj())
	for name, tc := range map[string]struct {
		v                                *viewer
		woken                            bool
		wantMembers, wantMsgs, wantPools []string
	}{
		"the fleet view":      {v: fleet, woken: true, wantMembers: []string{"w1", "w2"}, wantPools: []string{"pooled"}},
		"w1's page":           {v: page, woken: true, wantMembers: []string{"w1"}, wantMsgs: []string{"d1"}},
		"w3's page":           {v: otherPage},
		"another namespace's": {v: elsewhere},
	} {
		t.Run(name, func(t *testing.T) {
			select {
			case <-tc.v.wake:
				if !tc.woken {
					t.Error("woken")
				}
			default:
				if tc.woken {
					t.Error("not woken")
				}
			}
			got := tc.v.take()
			if diff := cmp.Diff(sets.New(tc.wantMembers...), got.members); diff != "" {
				t.Errorf("members (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(sets.New(tc.wantMsgs...), got.messages); diff != "" {
				t.Errorf("messages (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(sets.New(tc.wantPools...), got.pools); diff != "" {
				t.Errorf("pools (-want +got):\n%s", diff)
			}
		})
	}
	for _, v := range []*viewer{fleet, page, otherPage, elsewhere} {
		vs.unsubscribe(v)
	}
	if n := vs.count(); n != 0 {
		t.Errorf("%d viewers left", n)
	}
}

func TestDashboardAssets(t *testing.T) {
	mux := http.NewServeMux()
	(&dashboard{}).routes(mux, func(h http.Handler) http.Handler { return h })
	get := func(path string, header ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec
	}
	if rec := get("/ui"); rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/ui/" {
		t.Errorf("/ui: %d to %q", rec.Code, rec.Header().Get("Location"))
	}
	page := get("/ui/")
	if page.Code != http.StatusOK || !strings.Contains(page.Body.String(), `src="app.js"`) {
		t.Fatalf("/ui/: %d %s", page.Code, page.Body)
	}
	for h, want := range map[string]string{"Content-Type": "text/html; charset=utf-8", "Content-Security-Policy": dashboardCSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"} {
		if got := page.Header().Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	if rec := get("/ui/app.js"); rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/javascript") {
		t.Errorf("/ui/app.js: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	if rec := get("/ui/", "If-None-Match", page.Header().Get("ETag")); rec.Code != http.StatusNotModified {
		t.Errorf("an unchanged page is answered %d, want 304", rec.Code)
	}
	if rec := get("/ui/nothing-here.js"); rec.Code != http.StatusNotFound {
		t.Errorf("a missing file is answered %d", rec.Code)
	}
	// A state-changing request from another site's page is refused before
	// it reaches authentication.
	req := httptest.NewRequest(http.MethodPost, "/ui/api/messages/d1/cancel", nil)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Errorf("a cross-site cancel is answered %d, want 403", rec.Code)
	}
}

func TestEventStreamFrames(t *testing.T) {
	rec := httptest.NewRecorder()
	es, err := startEventStream(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := es.send("screen", DashboardScreen{Text: "line 1\nline 2"}); err != nil {
		t.Fatal(err)
	}
	if err := es.keepalive(); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.Body.String(), "event: screen\ndata: {\"text\":\"line 1\\nline 2\"}\n\n:\n\n"; got != want {
		t.Errorf("frames %q, want %q", got, want)
	}
	if got := rec.Header().Get("Content-Type"); got != "text/event-stream" {
		t.Errorf("Content-Type %q", got)
	}
}

// TestQueuesOfAgreesWithTheIndex: the one-pass queues a snapshot shows
// are the queues queueOf reads from the receiver index, member by member.
func TestQueuesOfAgreesWithTheIndex(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var ds []fleetv1alpha1.Delegation
	add := func(name, to string, change func(*fleetv1alpha1.Delegation)) {
		d := testutil.MakeDelegation(name, "ns", to, "x").Obj()
		d.CreationTimestamp = metav1.NewTime(now)
		change(d)
		ds = append(ds, *d)
	}
	typedAt := func(s int) func(*fleetv1alpha1.Delegation) {
		return func(d *fleetv1alpha1.Delegation) {
			delegation.BeginDelivery(d, now.Add(time.Duration(s)*time.Second), delegation.Target{PaneID: "p"})
		}
	}
	add("q1", "w1", func(*fleetv1alpha1.Delegation) {})
	add("q2", "w1", func(*fleetv1alpha1.Delegation) {})
	add("old", "w1", typedAt(1))
	add("new", "w1", typedAt(2))
	add("done", "w1", func(d *fleetv1alpha1.Delegation) { typedAt(3)(d); _ = delegation.Reply(d, now, "ok") })
	add("q3", "w2", func(*fleetv1alpha1.Delegation) {})
	add("gone", "w3", func(d *fleetv1alpha1.Delegation) { delegation.WorkerGone(d, now, "gone") })

	got := queuesOf(ds)
	for _, member := range []string{"w1", "w2", "w3", "w4"} {
		var want queue
		var active []fleetv1alpha1.Delegation
		for _, d := range ds {
			for _, v := range indexReceiverStateFunc(&d) {
				switch v {
				case indexValue(stateQueued, member):
					want.depth++
				case indexValue(stateActive, member):
					active = append(active, d)
				}
			}
		}
		if cur := currentDelegation(active); cur != nil {
			want.inFlight = cur.Name
		}
		if got[member].queue != want {
			t.Errorf("%s: queuesOf says %+v, the index %+v", member, got[member].queue, want)
		}
	}
	if got["w1"].inFlight != "new" || got["w1"].current.Name != "new" {
		t.Errorf("w1's message in flight is %+v, want the latest typed", got["w1"])
	}
}

// TestDashboardMessageUsage: a message's card says what its turn used and
// cost, and nothing before the member's first call for it.
func TestDashboardMessageUsage(t *testing.T) {
	scope := &dashboardScope{who: &identity.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "primary", Namespace: "ns"}, othersMessages: true}
	d := testutil.MakeDelegation("w1-x", "ns", "w1", "fix it").Obj()
	if m := dashboardMessage(d, scope); m.Usage != "" || m.Cost != "" {
		t.Errorf("before any call: usage %q, cost %q; want none", m.Usage, m.Cost)
	}
	d.Status.Usage = &fleetv1alpha1.DelegationUsage{TokenUsage: fleetv1alpha1.TokenUsage{InputTokens: 200, OutputTokens: 30, CachedTokens: 900, Calls: 2}, Cost: "0.0014", Currency: "EUR"}
	m := dashboardMessage(d, scope)
	if m.Usage != "2 calls · 200 in · 30 out · 900 cached" || m.Cost != "0.0014 EUR" {
		t.Errorf("usage %q, cost %q", m.Usage, m.Cost)
	}
}
