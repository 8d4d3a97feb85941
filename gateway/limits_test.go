package gateway

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The attack run's floods and loops, each refused with a code of its own
// and nothing sent: a queue flooded past its bound, two members that pass
// every message on to each other, a member that spawns members that spawn,
// and a namespace's ResourceQuota.

// TestQueueIsBounded: a sender that queues message after message to one
// member is refused queue_full once the member's queue is full; nothing
// more reaches the API server, and a message to another member still goes.
func TestQueueIsBounded(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{MaxQueue: 3})
	addMember(t, member("w1", ns).Obj())
	addMember(t, member("w2", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	for i := range 3 {
		wantOK(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"sessionId": "w1", "content": fmt.Sprintf("job %d", i), "wait": false}))
	}
	var refused toolCall[SendOutput]
	testutil.Eventually(t, "the fourth message refused once the cache shows three queued", func() error {
		refused = callTool[SendOutput](t, primary, "bridge_send", map[string]any{"sessionId": "w1", "content": "one too many", "wait": false})
		return errIf(refused.err == nil, "a fourth message was sent: %+v", refused.out)
	})
	wantCode(t, refused, toolerr.QueueFull)
	if !strings.Contains(refused.err.Message, "w1") || !strings.Contains(refused.err.Message, "3 messages waiting") {
		t.Errorf("the refusal does not say whose queue is full and how full: %s", refused.err.Message)
	}
	if n := countDelegations(t, ns, "w1"); n > 3+1 {
		// At most one may slip through before the cache shows the third.
		t.Errorf("%d messages to w1 reached the API server, want at most 4", n)
	}
	wantOK(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"sessionId": "w2", "content": "another member", "wait": false}))

	// Once one is delivered, there is room again.
	d := waitDelegation(t, ns, "w1", func(d *fleetv1alpha1.Delegation) bool { return d.Spec.Content == "job 0" })
	deliver(t, ns, d.Name)
	testutil.Eventually(t, "room once a message left the queue", func() error {
		got := callTool[SendOutput](t, primary, "bridge_send", map[string]any{"sessionId": "w1", "content": "room again", "idempotencyKey": "room-again", "wait": false})
		return errIf(got.err != nil, "after a delivery: %+v", got.err)
	})
}

// TestChainOfMessagesIsBounded: two members that pass every message they
// get on to each other with bridge_send {wait:false}. Each message a
// member sends while it works on one is a hop further than that one, and
// the one past MaxHops is refused hop_limit, with the chain in the error.
func TestChainOfMessagesIsBounded(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{MaxHops: 2})
	_, aToken := addMember(t, member("a", ns).Team("ring", fleetv1alpha1.RoleMember).Obj())
	_, bToken := addMember(t, member("b", ns).Team("ring", fleetv1alpha1.RoleMember).Obj())
	primary := h.connect(t, staticToken, nil)
	members := map[string]*mcp.ClientSession{"a": h.connect(t, aToken, nil), "b": h.connect(t, bToken, nil)}

	// The primary's message starts a chain: hop 0.
	first := wantOK(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"sessionId": "a", "content": "ping", "wait": false}))
	working := workOn(t, h, ns, first.DispatchID)
	if working.Spec.Hops != 0 {
		t.Fatalf("the primary's message is hop %d, want 0", working.Spec.Hops)
	}
	// Each member passes it on while it works on it: hops 1 and 2.
	at, to := "a", "b"
	for hop := int32(1); hop <= 2; hop++ {
		sent := wantOK(t, callTool[SendOutput](t, members[at], "bridge_send", map[string]any{"sessionId": to, "content": "pass it on", "wait": false}))
		d := env.Delegation(t, ns, sent.DispatchID)
		if d.Spec.Hops != hop || d.Annotations[fleetv1alpha1.AnnotationSentWhile] != working.Name {
			t.Fatalf("%s's message while working on %s: hop %d, sent-while %q; want hop %d, sent-while %s",
				at, working.Name, d.Spec.Hops, d.Annotations[fleetv1alpha1.AnnotationSentWhile], hop, working.Name)
		}
		// Its turn ends; the next member works on what it was sent.
		env.Settle(t, ns, working.Name, timedOut)
		working = workOn(t, h, ns, sent.DispatchID)
		at, to = to, at
	}
	// The third would pass the bound: refused, with the chain named.
	before := countDelegations(t, ns, to)
	refused := callTool[SendOutput](t, members[at], "bridge_send", map[string]any{"sessionId": to, "content": "pass it on", "wait": false})
	wantCode(t, refused, toolerr.HopLimit)
	for _, link := range []string{"primary -> a", "a -> b", "b -> a (" + working.Name + ")", "hop 3", "at most 2"} {
		if !strings.Contains(refused.err.Message, link) {
			t.Errorf("the refusal does not name %q: %s", link, refused.err.Message)
		}
	}
	if n := countDelegations(t, ns, to); n != before {
		t.Errorf("the refused message reached the API server: %d messages to %s, was %d", n, to, before)
	}
	// team_message follows the same chain.
	wantCode(t, callTool[TeamMessageOutput](t, members[at], "team_message", map[string]any{"recipient": to, "content": "pass it on"}), toolerr.HopLimit)

	// A member that works on nothing starts a chain of its own.
	env.Settle(t, ns, working.Name, timedOut)
	testutil.Eventually(t, "a member at rest sends at hop 0", func() error {
		got := callTool[SendOutput](t, members[at], "bridge_send", map[string]any{"sessionId": to, "content": "fresh start", "idempotencyKey": "fresh", "wait": false})
		if got.err != nil {
			return fmt.Errorf("%s: %s", got.err.Code, got.err.Message)
		}
		return errIf(env.Delegation(t, ns, got.out.DispatchID).Spec.Hops != 0, "a message sent at rest is not hop 0")
	})
}

// workOn plays the controller delivering Delegation name to its member,
// and waits until the gateway's cache shows it in flight, so that what the
// member sends next is sent while it works on it.
func workOn(t *testing.T, h *harness, ns, name string) *fleetv1alpha1.Delegation {
	t.Helper()
	deliver(t, ns, name)
	testutil.Eventually(t, "the gateway sees "+name+" in flight", func() error {
		var d fleetv1alpha1.Delegation
		if err := h.gw.svc.cache.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
			return err
		}
		return errIf(!delegation.InFlight(&d), "%s is %s in the cache", name, d.Status.Phase)
	})
	return env.Delegation(t, ns, name)
}

// countDelegations counts the Delegations to member on the API server.
func countDelegations(t *testing.T, ns, member string) int {
	t.Helper()
	var list fleetv1alpha1.DelegationList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{fleetv1alpha1.LabelMember: member}); err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// TestSpawnsAreBounded: a member that spawns members, which spawn more,
// answers for all of them; so does a lead for its team. The namespace has
// a bound of its own.
func TestSpawnsAreBounded(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{MaxSpawns: 3, MaxMembers: 8})
	create(t, testutil.MakeProfile("scripted", ns).Command("scripted-agent").Default().Obj())
	_, spawnerToken := addMember(t, member("spawner", ns).Obj())
	spawner := h.connect(t, spawnerToken, nil)

	spawned := wantOK(t, callTool[SpawnOutput](t, spawner, "bridge_spawn", nil)).Member.Name
	// A member it spawned spawns in turn: those count against the spawner.
	child := &fleetv1alpha1.Member{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: spawned}, child); err != nil {
		t.Fatal(err)
	}
	childToken := env.MemberToken(t, caches, child)
	childSession := h.connect(t, childToken, nil)
	wantOK(t, callTool[SpawnOutput](t, childSession, "bridge_spawn", nil))
	wantOK(t, callTool[SpawnOutput](t, spawner, "bridge_spawn", nil))
	// Three now answer to the spawner: neither it nor its child may add
	// one, right after the last spawn (spawns are counted on the API
	// server, not on a cache that may not show it yet).
	refused := callTool[SpawnOutput](t, spawner, "bridge_spawn", nil)
	wantCode(t, refused, toolerr.SpawnLimit)
	if !strings.Contains(refused.err.Message, "you have 3 members") {
		t.Errorf("the spawner's refusal does not say how many it has: %s", refused.err.Message)
	}
	refused = callTool[SpawnOutput](t, childSession, "bridge_spawn", nil)
	wantCode(t, refused, toolerr.SpawnLimit)
	if !strings.Contains(refused.err.Message, "Member:spawner") {
		t.Errorf("the child's refusal does not name the spawner it counts against: %s", refused.err.Message)
	}

	// A lead's team counts against the lead: its team_manage add is a spawn.
	_, leadToken := addMember(t, member("lead", ns).Team("core", fleetv1alpha1.RoleLead).Obj())
	for _, name := range []string{"m1", "m2", "m3"} {
		addMember(t, member(name, ns).Team("core", fleetv1alpha1.RoleMember).Obj())
	}
	addMember(t, member("loner", ns).Obj())
	lead := h.connect(t, leadToken, nil)
	wantCode(t, callTool[TeamManageOutput](t, lead, "team_manage", map[string]any{"action": "add", "name": "m4"}), toolerr.SpawnLimit)

	// The namespace holds 8 members at most: spawner, its 3, lead, m1-m3,
	// loner are 9 already, so even the primary may spawn no more.
	primary := h.connect(t, staticToken, nil)
	got := callTool[SpawnOutput](t, primary, "bridge_spawn", nil)
	wantCode(t, got, toolerr.SpawnLimit)
	if !strings.Contains(got.err.Message, "namespace "+ns) {
		t.Errorf("the namespace's refusal does not name it: %s", got.err.Message)
	}
}

// TestResourceQuotaRefusalIsQuotaExceeded: the API server's own bound, a
// ResourceQuota on count/delegations.fleet.fleetd.dev, comes back to the
// caller as quota_exceeded, saying so.
func TestResourceQuotaRefusalIsQuotaExceeded(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "messages", Namespace: ns},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			"count/delegations.fleet.fleetd.dev": resource.MustParse("1"),
			"count/members.fleet.fleetd.dev":     resource.MustParse("1"),
		}},
	}
	create(t, quota)
	// No kube-controller-manager runs here: write the usage its quota
	// controller would, so the admission plugin enforces the quota.
	quota.Status = corev1.ResourceQuotaStatus{Hard: quota.Spec.Hard, Used: corev1.ResourceList{
		"count/delegations.fleet.fleetd.dev": resource.MustParse("0"),
		"count/members.fleet.fleetd.dev":     resource.MustParse("1"),
	}}
	if err := env.Client.Status().Update(context.Background(), quota); err != nil {
		t.Fatal(err)
	}
	wantOK(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"sessionId": "w1", "content": "the one allowed", "wait": false}))
	refused := callTool[SendOutput](t, primary, "bridge_send", map[string]any{"sessionId": "w1", "content": "over quota", "wait": false})
	wantCode(t, refused, toolerr.QuotaExceeded)
	if !strings.Contains(refused.err.Message, "ResourceQuota") || !strings.Contains(refused.err.Message, "count/delegations.fleet.fleetd.dev") {
		t.Errorf("the refusal does not say which quota: %s", refused.err.Message)
	}
	create(t, testutil.MakeProfile("scripted", ns).Command("scripted-agent").Default().Obj())
	wantCode(t, callTool[SpawnOutput](t, primary, "bridge_spawn", nil), toolerr.QuotaExceeded)
}
