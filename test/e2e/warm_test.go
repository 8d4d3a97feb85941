package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/testutil"
)

// Warm pools, in cluster mode: a Profile keeps Pods started for its
// members to claim.

// warmReceived is where a warm member's agent logs what it receives: in
// its own Pod's workspace.
const warmReceived = memberWorkspace + "/warm" + receivedSuffix

// warmProfile applies a Profile of scripted members in Pods with a warm
// pool of size, and waits until free of its Pods are ready.
func warmProfile(t *testing.T, name string, size, free int) {
	t.Helper()
	apply(t, fmt.Sprintf("apiVersion: fleet.fleetd.dev/v1alpha1\nkind: Profile\nmetadata: {name: %s, namespace: %s}\nspec:\n  command: [scripted-agent, --received-log, %s]\n  runtime: Pod\n  warmPool: {size: %d}\n", name, ns, warmReceived, size))
	t.Cleanup(func() { _, _ = w.kubectl("delete", "profile", "-n", ns, name, "--wait=false") })
	waitPool(t, name, func(s fleetv1alpha1.WarmPoolStatus) bool { return int(s.Free) == free })
}

// waitPool waits for profile's warm pool status to be as want says.
func waitPool(t *testing.T, profile string, want func(fleetv1alpha1.WarmPoolStatus) bool) fleetv1alpha1.WarmPoolStatus {
	t.Helper()
	var got fleetv1alpha1.WarmPoolStatus
	testutil.Eventually(t, "profile "+profile+"'s warm pool", func() (bool, string) {
		var p fleetv1alpha1.Profile
		if err := w.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: profile}, &p); err != nil {
			return false, err.Error()
		}
		if p.Status.WarmPool == nil {
			return false, "no warm pool status"
		}
		got = *p.Status.WarmPool
		return want(got), fmt.Sprintf("%+v", got)
	}, testutil.Within(3*time.Minute))
	return got
}

// freeWarmPods are profile's warm Pods no member has claimed.
func freeWarmPods(t *testing.T, profile string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := w.client.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{fleetv1alpha1.LabelPool: profile, fleetv1alpha1.LabelMember: ""}); err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
}

// podToken is a token as the kubelet projects it into pod.
func podToken(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	token, err := boundToken(context.Background(), w.client, pod)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// warmMember applies a Member of profile.
func warmMember(t *testing.T, name, profile string) {
	t.Helper()
	apply(t, fmt.Sprintf("apiVersion: fleet.fleetd.dev/v1alpha1\nkind: Member\nmetadata: {name: %s, namespace: %s}\nspec: {profile: %s}\n", name, ns, profile))
	t.Cleanup(func() { _, _ = w.kubectl("delete", "member", "-n", ns, name, "--wait=false") })
}

// warmReceivedBy is what member's agent received, in order.
func warmReceivedBy(t *testing.T, c *cluster, member string) []string {
	t.Helper()
	b, err := c.memberExec(member, `cat "$1"`, warmReceived)
	return parseReceived(t, b, err)
}

// TestWarmPoolClaim: a new member of a Profile with a warm pool takes one
// of its ready Pods, and its identity is bound at the claim: the token of
// a warm Pod opens nothing before, and is the member's after, while the
// other warm Pod's still opens nothing. The member works, and the pool
// refills.
func TestWarmPoolClaim(t *testing.T) {
	dumpOnFailure(t)
	c := clusterMode(t)
	warmProfile(t, "e2e-warm", 2, 2)
	free := freeWarmPods(t, "e2e-warm")
	tokens := map[string]string{}
	for i := range free {
		token := podToken(t, &free[i])
		tokens[free[i].Name] = token
		// It may open a session, as the agent started in the Pod does,
		// and call no tool.
		if got := initializeStatus(t, token); got != http.StatusOK {
			t.Errorf("initialize with the token of unclaimed warm pod %s: HTTP %d, want %d", free[i].Name, got, http.StatusOK)
		}
		if err := whoami(context.Background(), w.gatewayURL, token); err == nil {
			t.Errorf("the token of unclaimed warm pod %s called bridge_whoami", free[i].Name)
		}
	}

	start := time.Now()
	warmMember(t, "e2e-warm-1", "e2e-warm")
	m := waitReady(t, "e2e-warm-1")
	t.Logf("apply to Ready with a warm pod: %s", time.Since(start).Round(time.Millisecond))
	if _, ok := tokens[m.Status.PodName]; !ok || m.Status.PodPool != "e2e-warm" {
		t.Fatalf("the member runs in pod %s (pool %q); want one of the warm pods %v", m.Status.PodName, m.Status.PodPool, free)
	}
	for pod, token := range tokens {
		claimed := pod == m.Status.PodName
		if err := whoami(context.Background(), w.gatewayURL, token); (err == nil) != claimed {
			t.Errorf("the token of warm pod %s (claimed: %v): whoami %v", pod, claimed, err)
		}
	}
	s := session(t, memberToken(t, "e2e-warm-1"))
	who := call(t, s, "bridge_whoami", nil)
	if who.IsError || who.Str("name") != "e2e-warm-1" {
		t.Errorf("the claimed pod's token is %v %s; want member e2e-warm-1", who.Fields, who.Text)
	}
	wantOutcome(t, call(t, session(t, w.token), "bridge_send", map[string]any{"sessionId": "e2e-warm-1", "content": "reply: warm"}), "reply")
	if got := warmReceivedBy(t, c, "e2e-warm-1"); !slices.Equal(got, []string{"reply: warm"}) {
		t.Errorf("received %q", got)
	}
	waitPool(t, "e2e-warm", func(s fleetv1alpha1.WarmPoolStatus) bool { return s.Free == 2 && s.Claimed == 1 })
}

// TestWarmPoolEmpty: with no warm Pod ready (the nodes cordoned, so the
// pool's refill cannot start) a new member starts a Pod of its own, as
// without a pool, and runs once the nodes take Pods again.
func TestWarmPoolEmpty(t *testing.T) {
	dumpOnFailure(t)
	c := clusterMode(t)
	warmProfile(t, "e2e-warm-empty", 1, 1)
	var nodes corev1.NodeList
	if err := w.client.List(context.Background(), &nodes); err != nil {
		t.Fatal(err)
	}
	uncordon := func() {
		for _, n := range nodes.Items {
			_, _ = w.kubectl("uncordon", n.Name)
		}
	}
	t.Cleanup(uncordon)
	for _, n := range nodes.Items {
		if out, err := w.kubectl("cordon", n.Name); err != nil {
			t.Fatalf("kubectl cordon %s: %v\n%s", n.Name, err, out)
		}
	}
	warmMember(t, "e2e-warm-a", "e2e-warm-empty")
	a := waitReady(t, "e2e-warm-a")
	if a.Status.PodPool != "e2e-warm-empty" {
		t.Fatalf("member a runs in pod %s from pool %q; want the free warm pod", a.Status.PodName, a.Status.PodPool)
	}
	// The pool's refill waits for a node; so does the next member's Pod.
	waitPool(t, "e2e-warm-empty", func(s fleetv1alpha1.WarmPoolStatus) bool { return s.Free == 0 && s.Starting == 1 })
	warmMember(t, "e2e-warm-b", "e2e-warm-empty")
	testutil.Eventually(t, "member b's own pod", func() (bool, string) {
		m, err := getMember("e2e-warm-b")
		if err != nil {
			return false, err.Error()
		}
		return m.Status.PodName != "", "no pod yet"
	})
	uncordon()
	b := waitReady(t, "e2e-warm-b")
	if b.Status.PodPool != "" {
		t.Errorf("member b runs in pod %s from pool %q; want a pod started for it", b.Status.PodName, b.Status.PodPool)
	}
	wantOutcome(t, call(t, session(t, w.token), "bridge_send", map[string]any{"sessionId": "e2e-warm-b", "content": "reply: cold"}), "reply")
	if got := warmReceivedBy(t, c, "e2e-warm-b"); !slices.Equal(got, []string{"reply: cold"}) {
		t.Errorf("received %q", got)
	}
	waitPool(t, "e2e-warm-empty", func(s fleetv1alpha1.WarmPoolStatus) bool { return s.Free == 1 })
}

// TestWarmPoolRealAgents: a member of a Profile of the real Claude Code
// (and of Codex) with a warm pool takes over the agent the pool started in
// its Pod ahead of the claim, and answers with its tools: the agent
// connected to the gateway with the Pod's token before any member had it,
// and calls tools as the member after.
func TestWarmPoolRealAgents(t *testing.T) {
	clusterMode(t)
	requireRealAgents(t)
	dumpOnFailure(t)
	_, url := startModel(t)
	for _, a := range []realAgent{claudeCode, codexCLI} {
		t.Run(string(a.kind), func(t *testing.T) {
			profile, name := "warm-"+string(a.kind), "warm-"+string(a.kind)+"-1"
			agentProfile(t, profile, a.kind, url, "")
			if out, err := w.kubectl("patch", "profile", "-n", ns, profile, "--type=merge", "-p", `{"spec":{"runtime":"Pod","warmPool":{"size":1}}}`); err != nil {
				t.Fatalf("kubectl patch: %v\n%s", err, out)
			}
			waitPool(t, profile, func(s fleetv1alpha1.WarmPoolStatus) bool { return s.Free == 1 })
			testutil.Eventually(t, "the warm pod's agent to be ready", func() (bool, string) {
				free := freeWarmPods(t, profile)
				return len(free) == 1 && free[0].Annotations["fleet.fleetd.dev/warm-ready"] != "", fmt.Sprintf("%d free", len(free))
			})
			warm := freeWarmPods(t, profile)[0].Name
			start := time.Now()
			m := agentMember(t, name, profile)
			t.Logf("apply to Ready with a warm %s: %s", a.kind, time.Since(start).Round(time.Millisecond))
			if m.Status.PodName != warm {
				t.Fatalf("the member runs in pod %s (pool %q); want warm pod %s", m.Status.PodName, m.Status.PodPool, warm)
			}
			r := call(t, session(t, w.token), "bridge_send", map[string]any{"sessionId": name, "content": "reply: warm " + string(a.kind)})
			wantOutcome(t, r, "reply")
			if r.Str("text") != "warm "+string(a.kind) {
				t.Errorf("reply %q", r.Str("text"))
			}
		})
	}
}
