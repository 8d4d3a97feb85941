package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
)

func TestDecideSuspend(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	marked := now.Add(-time.Hour)
	// idle is a Ready member, idle for 31 minutes under a 30-minute
	// policy, nothing queued: due to be suspended.
	idle := func(change func(*suspendInputs)) suspendInputs {
		in := suspendInputs{
			Configured: true, After: 30 * time.Minute, MarkedAt: marked,
			Ready: true, Idle: true, IdleSince: now.Add(-31 * time.Minute), Now: now,
		}
		if change != nil {
			change(&in)
		}
		return in
	}
	cases := map[string]struct {
		in   suspendInputs
		want suspendVerdict
	}{
		"not configured": {
			in:   suspendInputs{Ready: true, Idle: true, IdleSince: now.Add(-time.Hour), Now: now},
			want: suspendVerdict{},
		},
		"idle past suspendAfter": {
			in:   idle(nil),
			want: suspendVerdict{action: suspendNow, reason: fleetv1alpha1.ReasonIdle},
		},
		"idle not long enough: look again when it will be": {
			in:   idle(func(in *suspendInputs) { in.IdleSince = now.Add(-10 * time.Minute) }),
			want: suspendVerdict{again: 20 * time.Minute},
		},
		"idle exactly suspendAfter": {
			in:   idle(func(in *suspendInputs) { in.IdleSince = now.Add(-30 * time.Minute) }),
			want: suspendVerdict{action: suspendNow, reason: fleetv1alpha1.ReasonIdle},
		},
		"working": {
			in:   idle(func(in *suspendInputs) { in.Idle = false }),
			want: suspendVerdict{},
		},
		"not ready": {
			in:   idle(func(in *suspendInputs) { in.Ready = false }),
			want: suspendVerdict{},
		},
		"a message queued": {
			in:   idle(func(in *suspendInputs) { in.Queued = 1 }),
			want: suspendVerdict{},
		},
		"a message in flight (or a question open)": {
			in:   idle(func(in *suspendInputs) { in.InFlight = 1 }),
			want: suspendVerdict{},
		},
		"no idle policy": {
			in:   idle(func(in *suspendInputs) { in.After = 0 }),
			want: suspendVerdict{},
		},
		"cannot be suspended": {
			in:   idle(func(in *suspendInputs) { in.Blocker = "emptyDir" }),
			want: suspendVerdict{},
		},
		"not yet marked as a member that may be suspended": {
			in:   idle(func(in *suspendInputs) { in.MarkedAt = time.Time{} }),
			want: suspendVerdict{again: suspendFence},
		},
		"marked a moment ago: waits out the fence": {
			in:   idle(func(in *suspendInputs) { in.MarkedAt = now.Add(-500 * time.Millisecond) }),
			want: suspendVerdict{again: suspendFence - 500*time.Millisecond},
		},
		"requested while working": {
			in:   idle(func(in *suspendInputs) { in.Requested, in.Idle, in.After = true, false, 0 }),
			want: suspendVerdict{action: suspendNow, reason: fleetv1alpha1.ReasonSuspendRequested},
		},
		"requested with messages queued: they wait": {
			in:   idle(func(in *suspendInputs) { in.Requested, in.Queued = true, 3 }),
			want: suspendVerdict{action: suspendNow, reason: fleetv1alpha1.ReasonSuspendRequested},
		},
		"requested with a message in flight: the turn ends first": {
			in:   idle(func(in *suspendInputs) { in.Requested, in.InFlight = true, 1 }),
			want: suspendVerdict{},
		},
		"requested and not ready": {
			in:   idle(func(in *suspendInputs) { in.Requested, in.Ready = true, false }),
			want: suspendVerdict{action: suspendNow, reason: fleetv1alpha1.ReasonSuspendRequested},
		},
		"suspended for idling stays so": {
			in:   idle(func(in *suspendInputs) { in.Suspended, in.SuspendedFor = true, fleetv1alpha1.ReasonIdle }),
			want: suspendVerdict{action: suspendKeep, reason: fleetv1alpha1.ReasonIdle},
		},
		"suspended for idling: a message resumes it": {
			in:   idle(func(in *suspendInputs) { in.Suspended, in.SuspendedFor, in.Queued = true, fleetv1alpha1.ReasonIdle, 1 }),
			want: suspendVerdict{action: suspendResume},
		},
		"suspended on request: a message waits": {
			in: idle(func(in *suspendInputs) {
				in.Suspended, in.SuspendedFor, in.Requested, in.Queued = true, fleetv1alpha1.ReasonSuspendRequested, true, 2
			}),
			want: suspendVerdict{action: suspendKeep, reason: fleetv1alpha1.ReasonSuspendRequested},
		},
		"suspended on request: suspend turned off resumes it": {
			in:   idle(func(in *suspendInputs) { in.Suspended, in.SuspendedFor = true, fleetv1alpha1.ReasonSuspendRequested }),
			want: suspendVerdict{action: suspendResume},
		},
		"suspended for idling, then requested: stays, now on request": {
			in: idle(func(in *suspendInputs) {
				in.Suspended, in.SuspendedFor, in.Requested = true, fleetv1alpha1.ReasonIdle, true
			}),
			want: suspendVerdict{action: suspendKeep, reason: fleetv1alpha1.ReasonSuspendRequested},
		},
		"suspended and no longer able to be: resumes": {
			in: idle(func(in *suspendInputs) {
				in.Suspended, in.SuspendedFor, in.Blocker = true, fleetv1alpha1.ReasonIdle, "x"
			}),
			want: suspendVerdict{action: suspendResume},
		},
		"suspended and the policy removed: a message still resumes it": {
			in: idle(func(in *suspendInputs) {
				in.Configured, in.After, in.Suspended, in.SuspendedFor, in.Queued = false, 0, true, fleetv1alpha1.ReasonIdle, 1
			}),
			want: suspendVerdict{action: suspendResume},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := decideSuspend(tc.in)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(suspendVerdict{})); diff != "" {
				t.Errorf("decideSuspend (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSuspendInputsIdleSince: the idle clock starts when the member is
// both Ready and idle. An agent sits idle at its prompt before its member
// is Ready, so counting from the agent's idle alone suspended a member with
// a short suspendAfter in the pass that made it Ready: it was never seen
// Ready.
func TestSuspendInputsIdleSince(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	status := func(idleAt time.Time, ready metav1.ConditionStatus, readyAt time.Time) *fleetv1alpha1.MemberStatus {
		return &fleetv1alpha1.MemberStatus{
			AgentStatus:      fleetv1alpha1.AgentIdle,
			AgentStatusSince: &metav1.Time{Time: idleAt},
			Conditions:       []metav1.Condition{{Type: fleetv1alpha1.ConditionReady, Status: ready, LastTransitionTime: metav1.Time{Time: readyAt}}},
		}
	}
	cases := map[string]struct {
		st   *fleetv1alpha1.MemberStatus
		want time.Time
	}{
		"idle before Ready: from Ready": {st: status(t0, metav1.ConditionTrue, t0.Add(5*time.Second)), want: t0.Add(5 * time.Second)},
		"idle after Ready: from idle":   {st: status(t0.Add(time.Minute), metav1.ConditionTrue, t0), want: t0.Add(time.Minute)},
		"not Ready: from idle":          {st: status(t0, metav1.ConditionFalse, t0.Add(5*time.Second)), want: t0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var in suspendInputs
			in.observe(tc.st)
			if !in.IdleSince.Equal(tc.want) {
				t.Errorf("IdleSince = %v, want %v", in.IdleSince, tc.want)
			}
		})
	}
}

func TestSuspendBlocker(t *testing.T) {
	claim := &fleetv1alpha1.MemberPod{Workspace: &fleetv1alpha1.Workspace{VolumeClaim: &fleetv1alpha1.WorkspaceVolumeClaim{Size: resource.MustParse("1Gi")}}}
	cases := map[string]struct {
		rt   fleetv1alpha1.Runtime
		w    Worker
		want string // a substring of the reason; "" for none
	}{
		"pod with a claim":    {rt: fleetv1alpha1.RuntimePod, w: Worker{Pod: claim}},
		"shared pane server":  {rt: fleetv1alpha1.RuntimeShared, w: Worker{Pod: claim}, want: "shared pane server"},
		"pod without a pod":   {rt: fleetv1alpha1.RuntimePod, want: "emptyDir"},
		"pod with a emptyDir": {rt: fleetv1alpha1.RuntimePod, w: Worker{Pod: &fleetv1alpha1.MemberPod{}}, want: "emptyDir"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rts := &Runtimes{shared: &sharedRuntime{}, pod: &podRuntime{}}
			got := rts.of(&fleetv1alpha1.Member{Status: fleetv1alpha1.MemberStatus{Runtime: tc.rt}}).suspendBlocker(tc.w)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("suspendBlocker = %q, want one saying %q", got, tc.want)
			}
		})
	}
}

func TestSuspendedCondition(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	resumed := metav1.Condition{Type: fleetv1alpha1.ConditionSuspended, Status: metav1.ConditionFalse, Reason: fleetv1alpha1.ReasonResumed}
	cases := map[string]struct {
		before    []metav1.Condition
		fact      *suspendFact
		want      metav1.ConditionStatus // "" for no condition
		reason    string
		message   string // a substring of the message
		phase     fleetv1alpha1.MemberPhase
		suspended bool
		// marked is the transition time the condition must show.
		marked *metav1.Time
	}{
		"suspended for idling": {
			fact: &suspendFact{suspended: fleetv1alpha1.ReasonIdle, after: 30 * time.Minute}, suspended: true,
			want: metav1.ConditionTrue, reason: fleetv1alpha1.ReasonIdle, message: "suspended since 2026-12-06T12:00:00Z: it was idle for 30m0s", phase: fleetv1alpha1.MemberSuspended,
		},
		"suspended on request": {
			fact: &suspendFact{suspended: fleetv1alpha1.ReasonSuspendRequested}, suspended: true,
			want: metav1.ConditionTrue, reason: fleetv1alpha1.ReasonSuspendRequested, message: "spec.suspend is true", phase: fleetv1alpha1.MemberSuspended,
		},
		"cannot be suspended": {
			fact: &suspendFact{blocker: "the member's workspace is an emptyDir"},
			want: metav1.ConditionFalse, reason: fleetv1alpha1.ReasonCannotSuspend, message: "emptyDir",
		},
		"resuming on a saved session": {
			fact: &suspendFact{resuming: true, resumingSession: "s-1"},
			want: metav1.ConditionFalse, reason: fleetv1alpha1.ReasonResuming, message: "saved session s-1",
		},
		"resuming with none saved": {
			fact: &suspendFact{resuming: true},
			want: metav1.ConditionFalse, reason: fleetv1alpha1.ReasonResuming, message: "fresh session",
		},
		"resumed": {
			fact: &suspendFact{resumed: true, resumedSession: "s-1"},
			want: metav1.ConditionFalse, reason: fleetv1alpha1.ReasonResumed, message: "s-1",
		},
		"the session could not be resumed": {
			fact: &suspendFact{sessionLost: "it exited at once"},
			want: metav1.ConditionFalse, reason: fleetv1alpha1.ReasonSessionNotResumed, message: "exited",
		},
		"active": {
			fact: &suspendFact{active: true},
			want: metav1.ConditionFalse, reason: fleetv1alpha1.ReasonActive, message: "the member runs",
		},
		"active after a resume keeps the resume's outcome": {
			before: []metav1.Condition{resumed},
			fact:   &suspendFact{active: true},
			want:   metav1.ConditionFalse, reason: fleetv1alpha1.ReasonResumed,
		},
		"able to be suspended after it could not be: marked afresh": {
			before: []metav1.Condition{{Type: fleetv1alpha1.ConditionSuspended, Status: metav1.ConditionFalse, Reason: fleetv1alpha1.ReasonCannotSuspend, LastTransitionTime: metav1.NewTime(at.Add(-time.Hour))}},
			fact:   &suspendFact{active: true},
			want:   metav1.ConditionFalse, reason: fleetv1alpha1.ReasonActive, message: "the member runs", marked: &at,
		},
		"no longer configured: dropped": {
			before: []metav1.Condition{resumed},
			fact:   &suspendFact{drop: true},
		},
		"no fact keeps what it said": {
			before: []metav1.Condition{resumed},
			want:   metav1.ConditionFalse, reason: fleetv1alpha1.ReasonResumed,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			st := &fleetv1alpha1.MemberStatus{Conditions: append([]metav1.Condition(nil), tc.before...)}
			if tc.suspended {
				st.SuspendedAt = &at
			}
			setConditions(st, 1, memberFacts{suspend: tc.fact}, at)
			c := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionSuspended)
			switch {
			case tc.want == "" && c != nil:
				t.Fatalf("Suspended = %+v, want none", c)
			case tc.want == "":
				return
			case c == nil:
				t.Fatalf("no Suspended condition, want %s %s", tc.want, tc.reason)
			}
			if c.Status != tc.want || c.Reason != tc.reason || !strings.Contains(c.Message, tc.message) {
				t.Errorf("Suspended = %s %s %q, want %s %s saying %q", c.Status, c.Reason, c.Message, tc.want, tc.reason, tc.message)
			}
			if tc.marked != nil && !c.LastTransitionTime.Equal(tc.marked) {
				t.Errorf("Suspended changed at %v, want %v", c.LastTransitionTime, tc.marked)
			}
			if tc.phase != "" && st.Phase != tc.phase {
				t.Errorf("phase = %s, want %s", st.Phase, tc.phase)
			}
			if tc.suspended {
				for _, typ := range []string{fleetv1alpha1.ConditionReady, fleetv1alpha1.ConditionPaneReady, fleetv1alpha1.ConditionAgentReady} {
					if meta.IsStatusConditionTrue(st.Conditions, typ) {
						t.Errorf("%s is True on a suspended member", typ)
					}
				}
			}
		})
	}
}

func TestResumeFailed(t *testing.T) {
	agent := &herdr.AgentInfo{Agent: new(string)}
	cases := map[string]struct {
		obs      PaneObservation
		wasReady bool
		want     bool
	}{
		"the agent exited before it was ready":                  {obs: PaneObservation{Exists: true}, want: true},
		"the agent runs":                                        {obs: PaneObservation{Exists: true, Agent: agent}},
		"the pane is gone (a lost pane, not a refused session)": {obs: PaneObservation{}},
		"the agent was ready, then exited":                      {obs: PaneObservation{Exists: true}, wasReady: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := resumeFailed(tc.obs, tc.wasReady); got != tc.want {
				t.Errorf("resumeFailed = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPodMemberSuspendAndResume runs a pod member with an idle policy
// against a real API server: idle past suspendAfter it is suspended (its
// Pod deleted, its workspace claim kept, phase Suspended), a message
// resumes it in a new Pod and is typed once; spec.suspend true suspends
// it on request, and false resumes it with the message that waited. A
// stand-in plays the kubelet, as in TestPodMember.
func TestPodMemberSuspendAndResume(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	hosts := runPodControllers(t, ns)
	makeNode(t, "node-s", corev1.ConditionTrue)
	kubelet := &podHost{t: t, port: hosts.Port}

	m := testutil.MakeMember("w1", ns).Command(scriptedAgent).Obj()
	m.Spec.Pod = &fleetv1alpha1.MemberPod{Workspace: &fleetv1alpha1.Workspace{VolumeClaim: &fleetv1alpha1.WorkspaceVolumeClaim{Size: resource.MustParse("1Gi")}}}
	m.Spec.Idle = &fleetv1alpha1.MemberIdle{SuspendAfter: &metav1.Duration{Duration: 2 * time.Second}}
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(m)
	first := memberPod(t, m, "")
	kubelet.run(ctx, first, "node-s")

	waitSuspended := func(what, reason string, pod *corev1.Pod) {
		t.Helper()
		testutil.Eventually(t, what, func() (bool, string) {
			m := memberNow(t, key)
			c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionSuspended)
			var p corev1.Pod
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), &p)
			podGoing := apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil
			return m.Status.Phase == fleetv1alpha1.MemberSuspended && m.Status.SuspendedAt != nil && m.Status.PodName == "" && m.Status.PaneID == "" &&
					c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason && podGoing,
				fmt.Sprintf("phase %s, agent %s since %v, suspendedAt %v, pod %q (deleting: %v), Suspended %+v", m.Status.Phase, m.Status.AgentStatus, m.Status.AgentStatusSince, m.Status.SuspendedAt, m.Status.PodName, podGoing, c)
		})
	}
	waitResumedReady := func(what string, pod *corev1.Pod) {
		t.Helper()
		testutil.Eventually(t, what, func() (bool, string) {
			m := memberNow(t, key)
			c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionSuspended)
			return m.Status.Phase == fleetv1alpha1.MemberReady && m.Status.PodName == pod.Name && m.Status.SuspendedAt == nil &&
					c != nil && c.Status == metav1.ConditionFalse && c.Reason == fleetv1alpha1.ReasonResumed,
				fmt.Sprintf("phase %s, pod %q, Suspended %+v", m.Status.Phase, m.Status.PodName, c)
		})
	}
	waitTurnDone := func(name, pod string) {
		t.Helper()
		testutil.Eventually(t, "message "+name+" to be typed into the resumed member and its turn to end", func() (bool, string) {
			var d fleetv1alpha1.Delegation
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &d); err != nil {
				return false, err.Error()
			}
			m := memberNow(t, key)
			return d.Status.Phase == fleetv1alpha1.DelegationTurnDone && d.Status.PaneID == m.Status.PaneID && m.Status.PodName == pod,
				fmt.Sprintf("phase %s, typed into %q (member's pane %q, pod %q)", d.Status.Phase, d.Status.PaneID, m.Status.PaneID, m.Status.PodName)
		})
	}

	// Idle for suspendAfter: suspended, its claim kept.
	waitSuspended("the idle member to be suspended", fleetv1alpha1.ReasonIdle, first)
	var pvc corev1.PersistentVolumeClaim
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: WorkspaceClaimName(m.Name)}, &pvc); err != nil || pvc.DeletionTimestamp != nil {
		t.Fatalf("the suspended member's workspace claim: %v (deleting: %v)", err, pvc.DeletionTimestamp)
	}

	// A message (as kubectl would create it) resumes it, and is typed
	// once its agent is ready.
	if err := env.Client.Create(ctx, testutil.MakeDelegation("wake", ns, m.Name, "silent: after the suspension").From(fleetv1alpha1.PrincipalUser, "alice").Obj()); err != nil {
		t.Fatal(err)
	}
	second := memberPod(t, m, first.Name)
	kubelet.run(ctx, second, "node-s")
	waitResumedReady("the member to be resumed by the message", second)
	waitTurnDone("wake", second.Name)

	// spec.suspend: suspended on request; a message then waits for the
	// resume, and is typed once after it.
	setSuspend := func(v bool) {
		t.Helper()
		testutil.Eventually(t, fmt.Sprintf("spec.suspend to be set to %v", v), func() error {
			m := memberNow(t, key)
			m.Spec.Suspend = &v
			return env.Client.Update(ctx, m)
		})
	}
	setSuspend(true)
	waitSuspended("the member to be suspended on request", fleetv1alpha1.ReasonSuspendRequested, second)
	if err := env.Client.Create(ctx, testutil.MakeDelegation("waits", ns, m.Name, "silent: while suspended").Obj()); err != nil {
		t.Fatal(err)
	}
	setSuspend(false)
	third := memberPod(t, m, second.Name)
	kubelet.run(ctx, third, "node-s")
	waitResumedReady("the member to be resumed by spec.suspend false", third)
	waitTurnDone("waits", third.Name)
}

// TestDelegationArrivedOrSettled: the Member controller looks at a
// suspendable member when a message to it arrives (it may resume the
// member) and when one settles (the member may now be suspended). Before,
// only arrivals passed, and a member resumed for a message stayed up past
// its suspendAfter until the resync, five minutes later.
func TestDelegationArrivedOrSettled(t *testing.T) {
	d := func(phase fleetv1alpha1.DelegationPhase) *fleetv1alpha1.Delegation {
		return &fleetv1alpha1.Delegation{Status: fleetv1alpha1.DelegationStatus{Phase: phase}}
	}
	if !delegationArrivedOrSettled.Create(event.CreateEvent{Object: d("")}) {
		t.Error("a new Delegation does not pass")
	}
	cases := []struct {
		from, to fleetv1alpha1.DelegationPhase
		want     bool
	}{
		{fleetv1alpha1.DelegationWorking, fleetv1alpha1.DelegationReplied, true},
		{fleetv1alpha1.DelegationWorking, fleetv1alpha1.DelegationTurnDone, true},
		{fleetv1alpha1.DelegationQueued, fleetv1alpha1.DelegationCancelled, true},
		{fleetv1alpha1.DelegationQueued, fleetv1alpha1.DelegationDelivered, false},
		{fleetv1alpha1.DelegationReplied, fleetv1alpha1.DelegationReplied, false},
	}
	for _, tc := range cases {
		if got := delegationArrivedOrSettled.Update(event.UpdateEvent{ObjectOld: d(tc.from), ObjectNew: d(tc.to)}); got != tc.want {
			t.Errorf("%s -> %s passes = %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
}
