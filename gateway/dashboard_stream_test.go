package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/testutil"
)

// dashboardEvent is one event of a dashboard stream, as a client reads it.
type dashboardEvent struct {
	name string
	data json.RawMessage
}

// openDashboardEvents opens a dashboard stream with token and returns its events,
// which end when the stream does.
func openDashboardEvents(t *testing.T, url, token string) <-chan dashboardEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET %s: %s %s", url, resp.Status, body)
	}
	events := make(chan dashboardEvent, 64)
	go func() {
		defer close(events)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		var ev dashboardEvent
		for sc.Scan() {
			switch line := sc.Text(); {
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = json.RawMessage(strings.TrimPrefix(line, "data: "))
			case line == "" && ev.name != "":
				events <- ev
				ev = dashboardEvent{}
			}
		}
	}()
	return events
}

// nextEvent is the stream's next event other than those named in skip.
func nextEvent(t *testing.T, events <-chan dashboardEvent, skip ...string) (dashboardEvent, bool) {
	t.Helper()
	for {
		select {
		case ev, ok := <-events:
			if ok && slices.Contains(skip, ev.name) {
				continue
			}
			return ev, ok
		case <-time.After(30 * time.Second):
			t.Fatal("no event for 30s")
		}
	}
}

// TestDashboardStreamEndsWhenItsViewerLosesItsRights: a stream resolves its
// token again on the gateway's clock; a member deleted meanwhile (its token
// dead) gets an error event and the end of the stream, and its viewer is
// gone from the gateway.
func TestDashboardStreamEndsWhenItsViewerLosesItsRights(t *testing.T) {
	ns := env.Namespace(t)
	clk := testclock.NewFakeClock(time.Now())
	h := startGateway(t, ns, Options{Clock: clk})
	lead, token := addMember(t, member("lead", ns).Team("core", fleetv1alpha1.RoleLead).Obj())
	addMember(t, member("coder", ns).Team("core", fleetv1alpha1.RoleMember).Obj())

	events := openDashboardEvents(t, h.url+"/ui/api/fleet", token)
	hello, _ := nextEvent(t, events)
	var who DashboardHello
	if err := json.Unmarshal(hello.data, &who); err != nil || hello.name != "hello" || who.Name != "lead" || who.Team != "core" || who.Screens {
		t.Fatalf("first event %s %s, want the lead's hello without screens", hello.name, hello.data)
	}
	snap, _ := nextEvent(t, events)
	var members DashboardMembers
	if err := json.Unmarshal(snap.data, &members); err != nil || !members.Reset || len(members.Members) != 2 {
		t.Fatalf("snapshot %s %s, want both of team core", snap.name, snap.data)
	}
	// The snapshot's pools follow its members, none in this namespace.
	if ev, _ := nextEvent(t, events); ev.name != "pools" || string(ev.data) != `{"reset":true,"pools":[]}` {
		t.Fatalf("after the members: %s %s, want an empty reset of the pools", ev.name, ev.data)
	}
	testutil.Eventually(t, "the stream's tickers on the clock", func() error { return errIf(!clk.HasWaiters(), "none") })

	if err := env.Client.Delete(context.Background(), lead); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the deleted member gone from the cache", func() error {
		var list fleetv1alpha1.MemberList
		if err := h.gw.svc.cache.List(context.Background(), &list); err != nil {
			return err
		}
		for _, m := range list.Items {
			if m.Name == "lead" {
				return fmt.Errorf("still cached")
			}
		}
		return nil
	})
	// Its own row goes, as any deleted member's does.
	ev, _ := nextEvent(t, events)
	var gone DashboardMembers
	if err := json.Unmarshal(ev.data, &gone); err != nil || ev.name != "members" || len(gone.Removed) != 1 || gone.Removed[0] != "lead" {
		t.Fatalf("after the delete: %s %s, want lead removed", ev.name, ev.data)
	}
	// The next look at the token, on the clock, ends the stream.
	clk.Step(rescopeInterval)
	ev, _ = nextEvent(t, events)
	var refused errorBody
	if err := json.Unmarshal(ev.data, &refused); err != nil || ev.name != "error" || refused.Error == nil || refused.Error.Code != "unauthorized" {
		t.Fatalf("after the rescope: %s %s, want an unauthorized error", ev.name, ev.data)
	}
	if ev, ok := nextEvent(t, events); ok {
		t.Fatalf("the stream goes on after its error: %s %s", ev.name, ev.data)
	}
	testutil.Eventually(t, "the viewer gone", func() error {
		return errIf(h.gw.dashboard.viewers.count() != 0, "%d viewers", h.gw.dashboard.viewers.count())
	})
}

// fleetShown is what a fleet view shows, built from its stream's events as
// the browser builds it: members and warm pools by name.
type fleetShown struct {
	members map[string]DashboardMember
	pools   map[string]DashboardPool
}

// apply shows one event of a fleet stream.
func (f *fleetShown) apply(t *testing.T, ev dashboardEvent) {
	t.Helper()
	switch ev.name {
	case "members":
		var b DashboardMembers
		if err := json.Unmarshal(ev.data, &b); err != nil {
			t.Fatalf("decoding %s: %v", ev.data, err)
		}
		if b.Reset || f.members == nil {
			f.members = map[string]DashboardMember{}
		}
		for _, name := range b.Removed {
			delete(f.members, name)
		}
		for _, m := range b.Members {
			f.members[m.Name] = m
		}
	case "pools":
		var b DashboardPools
		if err := json.Unmarshal(ev.data, &b); err != nil {
			t.Fatalf("decoding %s: %v", ev.data, err)
		}
		if b.Reset || f.pools == nil {
			f.pools = map[string]DashboardPool{}
		}
		for _, name := range b.Removed {
			delete(f.pools, name)
		}
		for _, p := range b.Pools {
			f.pools[p.Name] = p
		}
	case "error":
		t.Fatalf("the stream failed: %s", ev.data)
	}
}

// waitShown reads a fleet stream into f until check passes.
func waitShown(t *testing.T, events <-chan dashboardEvent, f *fleetShown, what string, check func(*fleetShown) error) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for err := check(f); err != nil; err = check(f) {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended before showing %s: %v", what, err)
			}
			f.apply(t, ev)
		case <-deadline:
			t.Fatalf("%s not shown after 30s: %v", what, err)
		}
	}
}

// wantPools checks the pools a fleet view shows.
func wantPools(want ...DashboardPool) func(*fleetShown) error {
	return func(f *fleetShown) error {
		byName := map[string]DashboardPool{}
		for _, p := range want {
			byName[p.Name] = p
		}
		return diffErr(byName, f.pools)
	}
}

// TestDashboardFleetShowsWarmPools: the fleet stream shows the warm pool of
// every Profile of the namespace that has one, and none of a Profile
// without: in its snapshot, then each change to a Profile while it is
// open (its pool's figures, a new pool, a Profile deleted).
func TestDashboardFleetShowsWarmPools(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{Clock: testclock.NewFakeClock(time.Now())})
	pooled := testutil.MakeProfile("pooled", ns).Command("true").WarmPool(3).Obj()
	create(t, pooled, testutil.MakeProfile("plain", ns).Command("true").Obj())
	env.SetProfileStatus(t, pooled, func(st *fleetv1alpha1.ProfileStatus) {
		st.WarmPool = &fleetv1alpha1.WarmPoolStatus{Free: 1, Starting: 2}
	})
	testutil.Eventually(t, "the pool's status in the cache", func() error {
		var p fleetv1alpha1.Profile
		if err := h.gw.svc.cache.Get(context.Background(), client.ObjectKeyFromObject(pooled), &p); err != nil {
			return err
		}
		return errIf(p.Status.WarmPool == nil, "no status yet")
	})

	events := openDashboardEvents(t, h.url+"/ui/api/fleet", staticToken)
	if ev, _ := nextEvent(t, events); ev.name != "hello" {
		t.Fatalf("first event %s %s, want hello", ev.name, ev.data)
	}
	var shown fleetShown
	for shown.pools == nil {
		ev, _ := nextEvent(t, events)
		shown.apply(t, ev)
	}
	if err := wantPools(DashboardPool{Name: "pooled", Size: 3, Free: 1, Starting: 2})(&shown); err != nil {
		t.Fatalf("the snapshot's pools: %v", err)
	}

	env.SetProfileStatus(t, pooled, func(st *fleetv1alpha1.ProfileStatus) {
		st.WarmPool = &fleetv1alpha1.WarmPoolStatus{Free: 2, Starting: 1, Claimed: 4}
	})
	waitShown(t, events, &shown, "the pool's new figures", wantPools(DashboardPool{Name: "pooled", Size: 3, Free: 2, Starting: 1, Claimed: 4}))

	create(t, testutil.MakeProfile("second", ns).Command("true").WarmPool(1).Obj())
	waitShown(t, events, &shown, "a new profile's pool", wantPools(
		DashboardPool{Name: "pooled", Size: 3, Free: 2, Starting: 1, Claimed: 4},
		DashboardPool{Name: "second", Size: 1},
	))

	if err := env.Client.Delete(context.Background(), pooled); err != nil {
		t.Fatal(err)
	}
	waitShown(t, events, &shown, "the deleted profile's pool gone", wantPools(DashboardPool{Name: "second", Size: 1}))
}

// TestDashboardShowsSuspendedAndPooledMembers: a suspended member reads as
// suspended, with when and why, on the fleet view and on its page; a
// member in a Pod claimed from a warm pool says which pool.
func TestDashboardShowsSuspendedAndPooledMembers(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{Clock: testclock.NewFakeClock(time.Now())})
	create(t, testutil.MakeProfile("pooled", ns).Command("true").WarmPool(2).Obj())
	claimed := testutil.MakeMember("claimed", ns).Profile("pooled").Obj()
	asleep := member("asleep", ns).Obj()
	create(t, claimed, asleep)

	events := openDashboardEvents(t, h.url+"/ui/api/fleet", staticToken)
	var shown fleetShown
	waitShown(t, events, &shown, "both members", func(f *fleetShown) error {
		return errIf(len(f.members) != 2, "%d members", len(f.members))
	})

	suspendedAt := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	env.SetMemberStatus(t, asleep, func(st *fleetv1alpha1.MemberStatus) {
		st.Phase, st.SuspendedAt, st.AgentSessionID = fleetv1alpha1.MemberSuspended, &suspendedAt, "s-1"
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: fleetv1alpha1.ConditionSuspended, Status: metav1.ConditionTrue,
			Reason: fleetv1alpha1.ReasonIdle, Message: "idle for 30m", LastTransitionTime: suspendedAt,
		})
	})
	env.SetMemberStatus(t, claimed, func(st *fleetv1alpha1.MemberStatus) {
		st.Phase, st.AgentStatus = fleetv1alpha1.MemberReady, fleetv1alpha1.AgentIdle
		st.Runtime, st.PodName, st.PodPool, st.NodeName = fleetv1alpha1.RuntimePod, "pooled-warm-x7k2q", "pooled", "node-a"
	})
	wantAt := suspendedAt.UTC().Format(time.RFC3339)
	isSuspended := func(m DashboardMember) error {
		if m.Status != "suspended" || m.SuspendedAt != wantAt || m.SuspendedReason != fleetv1alpha1.ReasonIdle {
			return fmt.Errorf("status %q, suspended at %q for %q; want suspended at %s for Idle", m.Status, m.SuspendedAt, m.SuspendedReason, wantAt)
		}
		return nil
	}
	waitShown(t, events, &shown, "the suspended and the pooled member", func(f *fleetShown) error {
		if err := isSuspended(f.members["asleep"]); err != nil {
			return fmt.Errorf("asleep: %w", err)
		}
		c := f.members["claimed"]
		return errIf(c.Status != "idle" || c.PodPool != "pooled" || c.PodName != "pooled-warm-x7k2q", "claimed: status %q, pod %q from pool %q", c.Status, c.PodName, c.PodPool)
	})
	if got := shown.members["claimed"].SuspendedAt; got != "" {
		t.Errorf("a running member shows suspended at %q", got)
	}

	page := openDashboardEvents(t, h.url+"/ui/api/members/asleep", staticToken)
	for {
		ev, ok := nextEvent(t, page, "hello", "messages", "screen")
		if !ok {
			t.Fatal("the member page's stream ended")
		}
		var p DashboardMemberPage
		if err := json.Unmarshal(ev.data, &p); err != nil || ev.name != "member" || p.Member == nil {
			t.Fatalf("member page: %s %s, want the member", ev.name, ev.data)
		}
		if isSuspended(*p.Member) == nil {
			break
		}
	}

	// Resumed: the suspension is no longer shown.
	env.SetMemberStatus(t, asleep, func(st *fleetv1alpha1.MemberStatus) {
		st.Phase, st.SuspendedAt = fleetv1alpha1.MemberStarting, nil
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: fleetv1alpha1.ConditionSuspended, Status: metav1.ConditionFalse, Reason: fleetv1alpha1.ReasonResuming, Message: "resuming"})
	})
	waitShown(t, events, &shown, "the resumed member", func(f *fleetShown) error {
		m := f.members["asleep"]
		return errIf(m.Status != "starting" || m.SuspendedAt != "" || m.SuspendedReason != "", "status %q, suspended at %q for %q", m.Status, m.SuspendedAt, m.SuspendedReason)
	})
}
