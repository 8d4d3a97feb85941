package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func at(sec int) *metav1.Time {
	t := metav1.NewTime(t0.Add(time.Duration(sec) * time.Second))
	return &t
}

// delegationAt is a Delegation created at t0 with status s.
func delegationAt(name string, s fleetv1alpha1.DelegationStatus) fleetv1alpha1.Delegation {
	d := testutil.MakeDelegation(name, "ns", "w1", "hi").Obj()
	d.UID = types.UID("uid-" + name)
	d.CreationTimestamp = metav1.NewTime(t0)
	d.Status = s
	return *d
}

func newTestMetrics(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

func TestDelegationSpans(t *testing.T) {
	type span struct {
		Phase   string
		Seconds float64
		Settled bool
	}
	cases := map[string]struct {
		status fleetv1alpha1.DelegationStatus
		want   []span
	}{
		"queued": {status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationQueued}},
		"typed, not proven: a refusal may still put it back": {
			status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationDelivered, DeliveringAt: at(3)},
		},
		"picked up": {
			status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationWorking, QueuedAt: at(0), DeliveringAt: at(3), DeliveredAt: at(3), PickedUpAt: at(5)},
			want:   []span{{Phase: "queued", Seconds: 3}, {Phase: "delivered", Seconds: 2}},
		},
		"replied": {
			status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationReplied, DeliveringAt: at(3), DeliveredAt: at(3), PickedUpAt: at(5), SettledAt: at(65)},
			want:   []span{{Phase: "queued", Seconds: 3}, {Phase: "delivered", Seconds: 2}, {Phase: "working", Seconds: 60, Settled: true}},
		},
		"typed, never picked up, timed out: it left the queue when typed": {
			status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationTimedOut, DeliveringAt: at(10), SettledAt: at(600)},
			want:   []span{{Phase: "queued", Seconds: 10}, {Settled: true}},
		},
		"cancelled in the queue": {
			status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationCancelled, SettledAt: at(7)},
			want:   []span{{Settled: true}},
		},
		"clocks that disagree never make a negative time": {
			status: fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationReplied, DeliveringAt: at(3), DeliveredAt: at(3), PickedUpAt: at(5), SettledAt: at(4)},
			want:   []span{{Phase: "queued", Seconds: 3}, {Phase: "delivered", Seconds: 2}, {Phase: "working", Seconds: 0, Settled: true}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := delegationAt("d", tc.status)
			var got []span
			for _, s := range delegationSpans(&d) {
				got = append(got, span{s.phase, s.seconds, s.settled})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("spans (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDelegationRecorderCountsEachStepOnce: looking at the same queue again
// records nothing new; a step that happened before the first look (a
// restarted controller, retained Delegations) is never recorded; a
// Delegation gone from the queue is forgotten.
func TestDelegationRecorderCountsEachStepOnce(t *testing.T) {
	m, reg := newTestMetrics(t)
	rec := &delegationRecorder{metrics: m}
	member := types.NamespacedName{Namespace: "ns", Name: "w1"}

	old := delegationAt("old", fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationReplied, DeliveringAt: at(1), DeliveredAt: at(1), PickedUpAt: at(2), SettledAt: at(3)})
	fresh := delegationAt("fresh", fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationQueued})
	rec.observe(member, []fleetv1alpha1.Delegation{old, fresh}, t0.Add(10*time.Second+300*time.Millisecond))
	if n := promtestutil.CollectAndCount(reg, "fleetd_delegation_outcomes_total", "fleetd_delegation_phase_duration_seconds"); n != 0 {
		t.Fatalf("recorded %d series for what happened before the first look, want none", n)
	}

	fresh.Status = fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationWorking, DeliveringAt: at(10), DeliveredAt: at(10), PickedUpAt: at(12)}
	for range 3 {
		rec.observe(member, []fleetv1alpha1.Delegation{old, fresh}, t0.Add(13*time.Second))
	}
	fresh.Status.Phase, fresh.Status.Outcome, fresh.Status.SettledAt = fleetv1alpha1.DelegationReplied, fleetv1alpha1.OutcomeReply, at(20)
	for range 3 {
		rec.observe(member, []fleetv1alpha1.Delegation{old, fresh}, t0.Add(21*time.Second))
	}
	wantHistograms(t, reg, map[string]uint64{"queued": 1, "delivered": 1, "working": 1})
	if got := promtestutil.ToFloat64(m.outcomes.WithLabelValues("ns", "reply")); got != 1 {
		t.Errorf("reply outcomes = %v, want 1", got)
	}

	rec.observe(member, nil, t0.Add(30*time.Second))
	if len(rec.seen) != 0 {
		t.Errorf("still remembers %v after the queue emptied", rec.seen)
	}
}

// wantHistograms checks the count of fleetd_delegation_phase_duration_seconds
// for each phase.
func wantHistograms(t *testing.T, reg prometheus.Gatherer, want map[string]uint64) {
	t.Helper()
	got := phaseCounts(t, reg)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("phase_duration_seconds counts (-want +got):\n%s", diff)
	}
}

func phaseCounts(t testing.TB, reg prometheus.Gatherer) map[string]uint64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != "fleetd_delegation_phase_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "phase" {
					got[l.GetValue()] = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return got
}

func TestPaneHostErrorKind(t *testing.T) {
	cases := map[string]struct {
		err      error
		wantKind string
	}{
		"not reached":          {err: fmt.Errorf("herdr ping: %w: dialing x: refused", herdr.ErrUnavailable), wantKind: "unavailable"},
		"bad answer":           {err: fmt.Errorf("herdr ping: %w: line too long", herdr.ErrProtocol), wantKind: "protocol"},
		"slow":                 {err: fmt.Errorf("herdr ping: %w", context.DeadlineExceeded), wantKind: "timeout"},
		"herdr timed out":      {err: &herdr.Error{Code: herdr.CodeTimeout}, wantKind: "timeout"},
		"host fault":           {err: &herdr.Error{Code: herdr.CodeInternalError}, wantKind: "server"},
		"TLS refused":          {err: errors.New("remote error: tls: bad certificate"), wantKind: "unavailable"},
		"the caller gave up":   {err: fmt.Errorf("herdr ping: %w", context.Canceled)},
		"a pane that is gone":  {err: &herdr.Error{Code: herdr.CodePaneNotFound}},
		"a dialog on screen":   {err: &herdr.Error{Code: herdr.CodeAgentBlocked}},
		"a refused permission": {err: &herdr.Error{Code: herdr.CodePermissionDenied}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			kind, ok := paneHostErrorKind(tc.err)
			if ok != (tc.wantKind != "") || kind != tc.wantKind {
				t.Errorf("paneHostErrorKind(%v) = %q, %v; want %q", tc.err, kind, ok, tc.wantKind)
			}
		})
	}
}

// TestPaneHostErrorsCountsWhatTheClientSaw: a herdr client with the
// counter as its OnError counts a pane host it cannot reach, and not a
// refusal from one it can.
func TestPaneHostErrorsCountsWhatTheClientSaw(t *testing.T) {
	m, _ := newTestMetrics(t)
	gone := herdr.NewClient(t.TempDir() + "/nobody.sock")
	gone.OnError = m.PaneHostErrors(fleetv1alpha1.RuntimePod)
	if _, err := gone.Ping(context.Background()); err == nil {
		t.Fatal("ping of no server succeeded")
	}
	h := startHerdr(t)
	c := h.client()
	c.OnError = m.PaneHostErrors(fleetv1alpha1.RuntimeShared)
	if err := c.PaneSendKeys(context.Background(), "p_nope", "enter"); !errors.Is(err, herdr.ErrNotFound) {
		t.Fatalf("keys to no pane: %v, want not found", err)
	}
	want := `
# HELP fleetd_pane_host_errors_total Calls to a pane host (herdr, or a member Pod's pane host) that failed for the host's sake, by runtime, herdr method and kind: unavailable (not reached), timeout, protocol (an answer that breaks the protocol), server (the host's own fault). Refusals about a pane (pane_not_found, agent_blocked, ...) are answers, not counted.
# TYPE fleetd_pane_host_errors_total counter
fleetd_pane_host_errors_total{kind="unavailable",method="ping",runtime="Pod"} 1
`
	if err := promtestutil.CollectAndCompare(m.paneHostErrors, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

func TestCountMembers(t *testing.T) {
	ready := testutil.MakeMember("a", "ns").Obj()
	ready.Status.Phase, ready.Status.AgentStatus = fleetv1alpha1.MemberReady, fleetv1alpha1.AgentIdle
	busy := ready.DeepCopy()
	busy.Status.AgentStatus = fleetv1alpha1.AgentWorking
	other := ready.DeepCopy()
	other.Namespace = "other"
	fresh := testutil.MakeMember("b", "ns").Obj()
	leaving := ready.DeepCopy()
	leaving.DeletionTimestamp = at(0)
	got := countMembers([]fleetv1alpha1.Member{*ready, *ready, *busy, *other, *fresh, *leaving})
	want := map[memberKey]int{
		{"ns", "Ready", "idle"}:       2,
		{"ns", "Ready", "working"}:    1,
		{"other", "Ready", "idle"}:    1,
		{"ns", "Pending", "unknown"}:  1,
		{"ns", "Terminating", "idle"}: 1,
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(memberKey{})); diff != "" {
		t.Errorf("countMembers (-want +got):\n%s", diff)
	}
}

func TestCountDelegations(t *testing.T) {
	queuedOld := delegationAt("q1", fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationQueued})
	queuedNew := delegationAt("q2", fleetv1alpha1.DelegationStatus{})
	queuedNew.CreationTimestamp = *at(50)
	working := delegationAt("w", fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationWorking, DeliveringAt: at(1)})
	settled := delegationAt("s", fleetv1alpha1.DelegationStatus{Phase: fleetv1alpha1.DelegationReplied, DeliveringAt: at(1), SettledAt: at(2)})
	settled.Namespace = "quiet"
	got := countDelegations([]fleetv1alpha1.Delegation{queuedOld, queuedNew, working, settled}, t0.Add(100*time.Second))
	want := delegationCounts{
		byPhase:      map[phaseKey]int{{"ns", "Queued"}: 1, {"ns", "Pending"}: 1, {"ns", "Working"}: 1, {"quiet", "Replied"}: 1},
		queued:       map[string]int{"ns": 2, "quiet": 0},
		oldestQueued: map[string]time.Duration{"ns": 100 * time.Second},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(delegationCounts{}, phaseKey{})); diff != "" {
		t.Errorf("countDelegations (-want +got):\n%s", diff)
	}
}

// TestStateCollectorWaitsForElection: a replica on standby reports no
// gauges, so two replicas never report one fleet twice.
func TestStateCollectorWaitsForElection(t *testing.T) {
	elected := make(chan struct{})
	c := &stateCollector{reader: nil, clock: clocktesting.NewFakePassiveClock(t0), elected: elected}
	if n := promtestutil.CollectAndCount(c); n != 0 {
		t.Errorf("collected %d metrics before the election, want none", n)
	}
}

// startWithMetrics runs the controllers for ns against herdr at socket,
// recording on a registry of their own.
func startWithMetrics(t *testing.T, ns, socket string) (*controllerRun, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	run := runManager(t, env.Config, ns, func(ctx context.Context, mgr ctrl.Manager) error {
		return SetupWithManager(ctx, mgr, Config{
			Panes: herdr.NewClient(socket), MCPURL: "http://127.0.0.1:1/mcp", Policy: delegation.DefaultPolicy,
			AgentDir: t.TempDir(), HookCommand: []string{"/bin/true"}, ScreenInterval: 100 * time.Millisecond,
			Metrics: m,
		})
	})
	return run, reg
}

func outcomeCount(t testing.TB, reg prometheus.Gatherer, ns, outcome string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "fleetd_delegation_outcomes_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == ns && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// waitRecorded waits for the injector to have recorded one Delegation's
// queued, delivered and working phases and a turn_done outcome.
func waitRecorded(t *testing.T, reg prometheus.Gatherer, ns string) {
	t.Helper()
	want := map[string]uint64{"queued": 1, "delivered": 1, "working": 1}
	testutil.Eventually(t, "one Delegation's phases recorded", func() (bool, string) {
		got, n := phaseCounts(t, reg), outcomeCount(t, reg, ns, "turn_done")
		return cmp.Equal(want, got) && n == 1, fmt.Sprintf("phases %v, turn_done %v", got, n)
	})
}

// TestDelegationMetricsFollowThePhases: a Delegation driven through its
// phases by the real injector is recorded once in each phase histogram and
// once as an outcome; a restarted controller does not record it again
// from what it finds in the API, and records the next one once.
func TestDelegationMetricsFollowThePhases(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	run, reg := startWithMetrics(t, ns, h.socket)
	agentWithLog(t, ns, "w1")
	create(t, testutil.MakeDelegation("first", ns, "w1", "silent: one").Obj())
	first := waitPhase(t, ns, "first", fleetv1alpha1.DelegationTurnDone)
	waitRecorded(t, reg, ns)

	// A controller started after the first settled (in status's whole
	// seconds) finds it in the API, and must not count it.
	run.stop()
	testutil.Eventually(t, "a second after the first settled", func() (bool, string) {
		return time.Now().After(first.Status.SettledAt.Add(time.Second)), ""
	})
	_, reg = startWithMetrics(t, ns, h.socket)
	create(t, testutil.MakeDelegation("second", ns, "w1", "silent: two").Obj())
	waitPhase(t, ns, "second", fleetv1alpha1.DelegationTurnDone)
	waitRecorded(t, reg, ns)
	if n := promtestutil.CollectAndCount(reg, "fleetd_delegation_duration_seconds"); n != 1 {
		t.Errorf("%d duration series, want one (turn_done)", n)
	}
}

// TestStateCollectorCountsFromTheCache: the gauges show the Members and
// Delegations as they are: a member blocked on a dialog, the message that
// raised it working, the next one queued.
func TestStateCollectorCountsFromTheCache(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	_, reg := startWithMetrics(t, ns, h.socket)
	agentWithLog(t, ns, "w1")
	create(t, testutil.MakeDelegation("dialog", ns, "w1", "dialog: allow?").Obj())
	waitAgentStatus(t, ns, "w1", fleetv1alpha1.AgentBlocked)
	create(t, testutil.MakeDelegation("second", ns, "w1", "silent: after the dialog").Obj())
	waitPhase(t, ns, "dialog", fleetv1alpha1.DelegationWorking)

	want := fmt.Sprintf(`
# HELP fleetd_delegation_queue_depth Delegations waiting in their members' queues (neither typed into a pane nor settled), by namespace.
# TYPE fleetd_delegation_queue_depth gauge
fleetd_delegation_queue_depth{namespace=%[1]q} 1
# HELP fleetd_delegations Delegations kept in the API, by namespace and phase (settled ones stay until their retention ends).
# TYPE fleetd_delegations gauge
fleetd_delegations{namespace=%[1]q,phase="Queued"} 1
fleetd_delegations{namespace=%[1]q,phase="Working"} 1
# HELP fleetd_members Members by namespace, phase (Pending, Starting, Ready, Restarting, Failed, Terminating) and agent status (idle, working, blocked, done, unknown).
# TYPE fleetd_members gauge
fleetd_members{agent_status="blocked",namespace=%[1]q,phase="Ready"} 1
`, ns)
	testutil.Eventually(t, "gauges of a blocked member", func() (bool, string) {
		err := promtestutil.GatherAndCompare(reg, strings.NewReader(want), "fleetd_members", "fleetd_delegations", "fleetd_delegation_queue_depth")
		return err == nil, fmt.Sprint(err)
	})
	if n := promtestutil.CollectAndCount(reg, "fleetd_delegation_oldest_queued_seconds"); n != 1 {
		t.Errorf("%d oldest-queued series, want one for %s", n, ns)
	}
}

// TestRestartsAreCounted: a pane recreated after its agent died counts one
// restart of a Shared member.
func TestRestartsAreCounted(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	_, reg := startWithMetrics(t, ns, h.socket)
	create(t, testutil.MakeMember("crashy", ns).Command(scriptedAgent).Obj())
	first := waitReady(t, ns, "crashy")
	if err := typeInto(h.client(), first.Status.PaneID, "crash"); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`
# HELP fleetd_member_restarts_total Members' panes (Shared) or Pods (Pod) recreated after they were lost, by namespace and runtime.
# TYPE fleetd_member_restarts_total counter
fleetd_member_restarts_total{namespace=%q,runtime="Shared"} 1
`, ns)
	testutil.Eventually(t, "one restart counted", func() (bool, string) {
		err := promtestutil.GatherAndCompare(reg, strings.NewReader(want), "fleetd_member_restarts_total")
		return err == nil, fmt.Sprint(err)
	})
}

// TestStateCollectorCountsItsShards: a sharded replica reports the
// Members of its own shards only, and none once it owns no shard.
func TestStateCollectorCountsItsShards(t *testing.T) {
	ns := env.Namespace(t)
	create(t, testutil.MakeMember("mine", ns).Command("true").Obj())
	create(t, testutil.MakeMember("theirs", ns).Command("true").Obj())
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	elected := make(chan struct{})
	close(elected)
	if err := m.useState(inNamespace{env.Client, ns}, clocktesting.NewFakePassiveClock(t0), elected, func(_, name string) bool { return name == "mine" }); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`
# HELP fleetd_members Members by namespace, phase (Pending, Starting, Ready, Restarting, Failed, Terminating) and agent status (idle, working, blocked, done, unknown).
# TYPE fleetd_members gauge
fleetd_members{agent_status="unknown",namespace=%q,phase="Pending"} 1
`, ns)
	if err := promtestutil.GatherAndCompare(reg, strings.NewReader(want), "fleetd_members"); err != nil {
		t.Error(err)
	}
	m.ForgetState()
	if n := promtestutil.CollectAndCount(reg, "fleetd_members"); n != 0 {
		t.Errorf("%d member series from a replica that owns no shard, want none", n)
	}
}

// inNamespace lists in one namespace only.
type inNamespace struct {
	ctrlclient.Reader
	ns string
}

func (r inNamespace) List(ctx context.Context, list ctrlclient.ObjectList, opts ...ctrlclient.ListOption) error {
	return r.Reader.List(ctx, list, append(opts, ctrlclient.InNamespace(r.ns))...)
}
