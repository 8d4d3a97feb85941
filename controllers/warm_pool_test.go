package controllers

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/testutil"
)

// warmPodFixture is a warm Pod of pool "p" for the pure tests: template
// "t", made at created, ready or not.
func warmPodFixture(name string, created time.Time, ready bool, mutate ...func(*corev1.Pod)) corev1.Pod {
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: name, CreationTimestamp: metav1.NewTime(created), UID: types.UID("uid-" + name),
		Labels: map[string]string{fleetv1alpha1.LabelMember: "", fleetv1alpha1.LabelPool: "p", labelPoolTemplate: "t"},
	}}
	pod.Status.Phase = corev1.PodPending
	if ready {
		pod.Status.Phase, pod.Status.PodIP = corev1.PodRunning, "10.0.0.1"
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	for _, f := range mutate {
		f(&pod)
	}
	return pod
}

func TestPlanPool(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	old, older := now.Add(-time.Hour), now.Add(-2*time.Hour)
	claimed := func(p *corev1.Pod) { p.Labels[fleetv1alpha1.LabelMember] = "w1" }
	otherTemplate := func(p *corev1.Pod) { p.Labels[labelPoolTemplate] = "u" }
	ended := func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }
	going := func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: now} }
	for name, tc := range map[string]struct {
		size                 int32
		pods                 []corev1.Pod
		start                int
		drop                 []string
		wantFree, wantStarts int32
	}{
		"empty pool fills, a few at once": {size: 3, start: warmStartAtOnce},
		"no more start while enough do":   {size: 5, pods: []corev1.Pod{warmPodFixture("a", old, false), warmPodFixture("b", old, false)}, wantStarts: 2},
		"full pool keeps":                 {size: 2, pods: []corev1.Pod{warmPodFixture("a", old, true), warmPodFixture("b", old, false)}, wantFree: 1, wantStarts: 1},
		"claimed pods are not the pool's": {size: 2, pods: []corev1.Pod{warmPodFixture("a", old, true, claimed), warmPodFixture("b", old, true)}, start: 1, wantFree: 1},
		"another template goes":           {size: 1, pods: []corev1.Pod{warmPodFixture("a", old, true, otherTemplate)}, start: 1, drop: []string{"a"}},
		"an ended pod goes":               {size: 1, pods: []corev1.Pod{warmPodFixture("a", old, true, ended)}, start: 1, drop: []string{"a"}},
		"a deleted pod is no one's":       {size: 1, pods: []corev1.Pod{warmPodFixture("a", old, true, going)}, start: 1},
		"too old goes":                    {size: 1, pods: []corev1.Pod{warmPodFixture("a", now.Add(-warmPodMaxAge-time.Minute), true)}, start: 1, drop: []string{"a"}},
		// Shrinking keeps the ready ones, the oldest first.
		"shrinks, starting ones first": {size: 1, pods: []corev1.Pod{
			warmPodFixture("starting", older, false), warmPodFixture("young", old, true), warmPodFixture("old", older, true),
		}, drop: []string{"young", "starting"}, wantFree: 1},
		"size 0 empties": {size: 0, pods: []corev1.Pod{warmPodFixture("a", old, true)}, drop: []string{"a"}},
	} {
		t.Run(name, func(t *testing.T) {
			plan := planPool(tc.size, "t", tc.pods, false, now)
			var dropped []string
			for _, d := range plan.drop {
				if d.why == "" {
					t.Errorf("pod %s dropped with no reason", d.pod.Name)
				}
				dropped = append(dropped, d.pod.Name)
			}
			if plan.start != tc.start || !slices.Equal(dropped, tc.drop) || plan.free != tc.wantFree || plan.starting != tc.wantStarts {
				t.Errorf("plan: start %d, drop %v, free %d, starting %d; want %d, %v, %d, %d",
					plan.start, dropped, plan.free, plan.starting, tc.start, tc.drop, tc.wantFree, tc.wantStarts)
			}
		})
	}
}

// TestPlanPoolWithAgents: where the pool starts agents ahead, a running
// warm Pod is free only once its agent is ready.
func TestPlanPoolWithAgents(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	ready := func(p *corev1.Pod) {
		p.Annotations = map[string]string{annotationWarmLaunch: "k", annotationWarmReady: "true"}
	}
	starting := func(p *corev1.Pod) { p.Annotations = map[string]string{annotationWarmLaunch: "k"} }
	pods := []corev1.Pod{warmPodFixture("a", now, true, ready), warmPodFixture("b", now, true, starting), warmPodFixture("c", now, true)}
	if plan := planPool(3, "t", pods, true, now); plan.free != 1 || plan.starting != 2 || plan.start != 0 {
		t.Errorf("with agents: free %d, starting %d, start %d; want 1, 2, 0", plan.free, plan.starting, plan.start)
	}
	if plan := planPool(3, "t", pods, false, now); plan.free != 3 {
		t.Errorf("without agents: free %d, want 3", plan.free)
	}
	got := claimCandidates(pods, "t", "m", now)
	if len(got) != 3 || got[0].Name != "a" || got[1].Name != "b" {
		t.Errorf("claim order %v; want the pod with a ready agent, then the one whose agent starts", []string{got[0].Name, got[1].Name, got[2].Name})
	}
}

func TestClaimCandidates(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	old := now.Add(-time.Hour)
	pods := []corev1.Pod{
		warmPodFixture("ready-a", old, true),
		warmPodFixture("ready-b", old, true),
		warmPodFixture("starting", old, false),
		warmPodFixture("claimed", old, true, func(p *corev1.Pod) { p.Labels[fleetv1alpha1.LabelMember] = "w1" }),
		warmPodFixture("other-template", old, true, func(p *corev1.Pod) { p.Labels[labelPoolTemplate] = "u" }),
		warmPodFixture("going", old, true, func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: now} }),
		warmPodFixture("too-old", now.Add(-warmPodMaxAge-time.Minute), true),
	}
	firsts := map[string]bool{}
	for i := range 32 {
		got := claimCandidates(pods, "t", types.UID(fmt.Sprintf("member-%d", i)), now)
		var names []string
		for _, p := range got {
			names = append(names, p.Name)
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"ready-a", "ready-b"}) {
			t.Fatalf("candidates %v; want only the free, ready pods of the template", names)
		}
		firsts[got[0].Name] = true
	}
	// Members claiming at once start at different Pods.
	if len(firsts) != 2 {
		t.Errorf("32 members all try %v first", firsts)
	}
}

// TestWarmPool runs a Profile's warm pool against a real API server, with a
// stand-in for the kubelet: the pool fills to its size, a new Member of
// the Profile claims a ready warm Pod (labelled and owned by the Member,
// reached over TLS with the Pod's own credentials) and starts its agent
// in it, the pool refills, a Member with no warm Pod free starts cold, a
// change of the Profile's pod replaces the free warm Pods, and size 0
// empties the pool.
func TestWarmPool(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	hosts := runPodControllers(t, ns)
	makeNode(t, "node-a", corev1.ConditionTrue)
	kubelet := &podHost{t: t, port: hosts.Port}

	p := testutil.MakeProfile("coders", ns).Command(scriptedAgent).Obj()
	p.Spec.Runtime = fleetv1alpha1.RuntimePod
	p.Spec.WarmPool = &fleetv1alpha1.WarmPool{Size: 2}
	create(t, p)
	free := func(what string, n int) []corev1.Pod {
		t.Helper()
		var pods []corev1.Pod
		testutil.Eventually(t, what, func() (bool, string) {
			var list corev1.PodList
			if err := env.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{fleetv1alpha1.LabelPool: p.Name, fleetv1alpha1.LabelMember: ""}); err != nil {
				return false, err.Error()
			}
			pods = slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
			return len(pods) == n, fmt.Sprintf("%d free warm pods", len(pods))
		})
		return pods
	}
	profileStatus := func(what string, want func(*fleetv1alpha1.Profile) bool) {
		t.Helper()
		testutil.Eventually(t, what, func() (bool, string) {
			var got fleetv1alpha1.Profile
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
				return false, err.Error()
			}
			return want(&got), fmt.Sprintf("warm pool %+v, conditions %+v", got.Status.WarmPool, got.Status.Conditions)
		})
	}

	warm := free("the pool to fill", 2)
	for _, pod := range warm {
		if !metav1.IsControlledBy(&pod, p) {
			t.Errorf("warm pod %s is not its profile's: %+v", pod.Name, pod.OwnerReferences)
		}
		// Its Secret is made right after it, owned by it.
		testutil.Eventually(t, "warm pod "+pod.Name+"'s pane host credentials", func() error {
			return env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: WarmPodSecretName(pod.Name)}, &corev1.Secret{})
		})
	}
	profileStatus("the pool to say 2 starting", func(p *fleetv1alpha1.Profile) bool {
		c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.ConditionWarmPool)
		return p.Status.WarmPool != nil && p.Status.WarmPool.Starting == 2 && c != nil && c.Reason == fleetv1alpha1.ReasonPoolFilling
	})
	ready := &warm[0]
	kubelet.run(ctx, ready, "node-a")
	profileStatus("the pool to say 1 free", func(p *fleetv1alpha1.Profile) bool {
		return p.Status.WarmPool != nil && p.Status.WarmPool.Free == 1 && p.Status.WarmPool.Starting == 1
	})

	// The pool starts the member's agent in it ahead of any claim.
	warmPane := ""
	testutil.Eventually(t, "the warm pod's agent to be started", func() (bool, string) {
		var pod corev1.Pod
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ready), &pod); err != nil {
			return false, err.Error()
		}
		if pod.Annotations[annotationWarmLaunch] == "" {
			return false, "no warm launch recorded"
		}
		c, err := hosts.ForWarmPod(ns, pod.Name, pod.Status.PodIP)
		if err != nil {
			return false, err.Error()
		}
		defer c.CloseIdleConnections()
		snap, err := c.SessionSnapshot(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, ws := range snap.Workspaces {
			for _, pane := range snap.Panes {
				if pane.WorkspaceID == ws.WorkspaceID && ws.Label == warmPaneLabelPrefix+pod.Annotations[annotationWarmLaunch] {
					warmPane = pane.PaneID
				}
			}
		}
		return warmPane != "", fmt.Sprintf("workspaces %+v", snap.Workspaces)
	})

	// A Member of the Profile claims the ready one, and takes over the
	// agent started in it.
	m := testutil.MakeMember("w1", ns).Profile(p.Name).Obj()
	create(t, m)
	m = waitReady(t, ns, m.Name)
	if m.Status.PaneID != warmPane {
		t.Errorf("the member runs in pane %s; want %s, where the warm pod's agent was started", m.Status.PaneID, warmPane)
	}
	if m.Status.PodName != ready.Name || m.Status.PodUID != string(ready.UID) || m.Status.PodPool != p.Name {
		t.Fatalf("member runs in pod %s (%s) from pool %q; want warm pod %s from %s", m.Status.PodName, m.Status.PodUID, m.Status.PodPool, ready.Name, p.Name)
	}
	var claimed corev1.Pod
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ready), &claimed); err != nil {
		t.Fatal(err)
	}
	if claimed.Labels[fleetv1alpha1.LabelMember] != m.Name || claimed.Labels[fleetv1alpha1.LabelMemberUID] != string(m.UID) || !metav1.IsControlledBy(&claimed, m) {
		t.Errorf("the claimed pod's labels %v, owners %+v; want the member's", claimed.Labels, claimed.OwnerReferences)
	}
	c, err := hosts.For(m)
	if err != nil {
		t.Fatal(err)
	}
	if snap, err := c.SessionSnapshot(ctx); err != nil || len(snap.Workspaces) != 1 || snap.Workspaces[0].Label != workspaceLabel(m) {
		t.Errorf("the warm pod's pane host has %+v, %v; want the member's workspace", snap, err)
	}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: PaneHostSecretName(m.Name)}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("a member that claimed a warm pod got credentials of its own minted: %v", err)
	}
	waitEvent(t, ns, m.Name, fleetv1alpha1.ReasonPodClaimed)

	// The pool refills, and counts the claim.
	refilled := free("the pool to refill", 2)
	profileStatus("the pool to count the claim", func(p *fleetv1alpha1.Profile) bool {
		return p.Status.WarmPool != nil && p.Status.WarmPool.Claimed == 1 && p.Status.WarmPool.Starting == 2
	})

	// No warm Pod is ready: the next member starts cold.
	cold := testutil.MakeMember("w2", ns).Profile(p.Name).Obj()
	create(t, cold)
	coldPod := memberPod(t, cold, "")
	if coldPod.Labels[fleetv1alpha1.LabelPool] != "" || slices.ContainsFunc(refilled, func(w corev1.Pod) bool { return w.Name == coldPod.Name }) {
		t.Errorf("with no warm pod free, member w2 got pod %s (labels %v); want one started for it", coldPod.Name, coldPod.Labels)
	}

	// The Profile's pod changes: the free warm Pods are of the old one,
	// and are replaced.
	testutil.Eventually(t, "the profile's pod to change", func() error {
		var got fleetv1alpha1.Profile
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
			return err
		}
		// An image of its own: a Profile's to name, not a Member's.
		got.Spec.Pod = &fleetv1alpha1.MemberPod{Image: "agents:v2", Resources: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}}
		return env.Client.Update(ctx, &got)
	})
	testutil.Eventually(t, "the warm pods of the old pod to be replaced", func() (bool, string) {
		now := free("two warm pods", 2)
		for _, w := range now {
			if slices.ContainsFunc(refilled, func(r corev1.Pod) bool { return r.Name == w.Name }) {
				return false, "warm pod " + w.Name + " of the old pod is still free"
			}
		}
		return true, ""
	})

	// Size 0: the free ones go, the claimed one stays its member's.
	testutil.Eventually(t, "the pool to be sized 0", func() error {
		var got fleetv1alpha1.Profile
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
			return err
		}
		got.Spec.WarmPool.Size = 0
		return env.Client.Update(ctx, &got)
	})
	free("the pool to empty", 0)
	profileStatus("the pool's condition to go", func(p *fleetv1alpha1.Profile) bool {
		return meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.ConditionWarmPool) == nil
	})
	if got := memberNow(t, client.ObjectKeyFromObject(m)); got.Status.PodName != ready.Name {
		t.Errorf("emptying the pool moved member w1 to pod %q", got.Status.PodName)
	}
}

func TestMemberCountsChanged(t *testing.T) {
	base := testutil.MakeMember("w1", "ns").Profile("p").Obj()
	for name, tc := range map[string]struct {
		mutate func(*fleetv1alpha1.Member)
		want   bool
	}{
		"a status write of its agent":  {mutate: func(m *fleetv1alpha1.Member) { m.Status.AgentStatus = fleetv1alpha1.AgentWorking }},
		"it claims a warm pod":         {mutate: func(m *fleetv1alpha1.Member) { m.Status.PodName, m.Status.PodPool = "p-warm-abcde", "p" }, want: true},
		"its pod is replaced":          {mutate: func(m *fleetv1alpha1.Member) { m.Status.PodName = "w1-xyz" }, want: true},
		"it runs from another profile": {mutate: func(m *fleetv1alpha1.Member) { m.Spec.Profile = "q" }, want: true},
		"it is being deleted":          {mutate: func(m *fleetv1alpha1.Member) { m.DeletionTimestamp = &metav1.Time{Time: time.Now()} }, want: true},
	} {
		updated := base.DeepCopy()
		tc.mutate(updated)
		if got := memberCountsChanged(base, updated); got != tc.want {
			t.Errorf("%s: memberCountsChanged = %v, want %v", name, got, tc.want)
		}
	}
}

func TestWarmAgentSettled(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{annotationWarmStarted: now.Add(-d).Format(time.RFC3339)}}}
	}
	if warmAgentSettled(at(time.Second), now) {
		t.Error("an agent started a second ago counts as settled")
	}
	if !warmAgentSettled(at(warmAgentSettle), now) {
		t.Error("an agent started warmAgentSettle ago does not count as settled")
	}
	if warmAgentSettled(&corev1.Pod{}, now) {
		t.Error("an agent with no start time counts as settled")
	}
}

func TestStaleWarmAgents(t *testing.T) {
	now := time.Now()
	mk := func(name string, annotations map[string]string) *corev1.Pod {
		p := warmPodFixture(name, now, true, func(p *corev1.Pod) { p.Annotations = annotations })
		return &p
	}
	pods := []*corev1.Pod{
		mk("current", map[string]string{annotationWarmLaunch: "k2", annotationWarmReady: "true"}),
		mk("before", map[string]string{annotationWarmLaunch: "k1", annotationWarmReady: "true"}),
		mk("none-yet", nil),
	}
	got := staleWarmAgents(pods, "k2")
	if len(got) != 1 || got[0].Name != "before" {
		t.Errorf("stale: %v; want the pod whose agent was started from the launch before", got)
	}
	if got := staleWarmAgents(pods, ""); len(got) != 0 {
		t.Errorf("with the launch unknown, stale: %v; want none", got)
	}
}
