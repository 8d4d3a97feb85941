package controllers

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
)

// agentWithLog starts a Member running the scripted agent and returns the
// file where the agent records every prompt it receives.
func agentWithLog(t *testing.T, ns, name string) string {
	t.Helper()
	log := filepath.Join(t.TempDir(), name+".received")
	create(t, testutil.MakeMember(name, ns).Command(scriptedAgent, "--received-log", log).Obj())
	waitReady(t, ns, name)
	return log
}

// received lists the prompts an agent received, in order.
func received(t testing.TB, log string) []string {
	t.Helper()
	out, err := testutil.ReadReceived(log)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sequenced stamps the creation order the gateway would, so Delegations
// created within one second keep their order.
func sequenced(d *fleetv1alpha1.Delegation, i int) *fleetv1alpha1.Delegation {
	d.Annotations = map[string]string{fleetv1alpha1.AnnotationSequence: fmt.Sprintf("2026-01-01T00:00:00.%09dZ", i)}
	return d
}

func getDelegation(ns, name string) (*fleetv1alpha1.Delegation, error) {
	d := &fleetv1alpha1.Delegation{}
	return d, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d)
}

func waitPhase(t testing.TB, ns, name string, want fleetv1alpha1.DelegationPhase) *fleetv1alpha1.Delegation {
	t.Helper()
	var d *fleetv1alpha1.Delegation
	testutil.Eventually(t, fmt.Sprintf("delegation %s %s", name, want), func() (bool, string) {
		var err error
		d, err = getDelegation(ns, name)
		if err != nil {
			return false, err.Error()
		}
		m, _ := getMember(t, ns, d.Spec.To)
		return d.Status.Phase == want, fmt.Sprintf("phase=%s outcome=%s deliveringSeq=%d conditions=%v; member %s seq=%d since=%v", d.Status.Phase, d.Status.Outcome, d.Status.DeliveringSeq, d.Status.Conditions, describe(m), m.Status.StateChangeSeq, m.Status.AgentStatusSince)
	})
	return d
}

func TestBurstIsDeliveredInOrderOncePerTurn(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	log := agentWithLog(t, ns, "w1")

	const n = 20
	var want []string
	for i := range n {
		content := fmt.Sprintf("silent: message %02d", i)
		want = append(want, content)
		create(t, sequenced(testutil.MakeDelegation(fmt.Sprintf("d%02d", i), ns, "w1", content).Obj(), i))
	}
	for i := range n {
		d := waitPhase(t, ns, fmt.Sprintf("d%02d", i), fleetv1alpha1.DelegationTurnDone)
		if d.Status.Outcome != fleetv1alpha1.OutcomeTurnDone || d.Status.Tail == nil || !strings.Contains(*d.Status.Tail, fmt.Sprintf("message %02d", i)) {
			t.Errorf("d%02d: outcome=%s tail=%v, want turn_done with its own text", i, d.Status.Outcome, d.Status.Tail)
		}
		if d.Status.QueuedAt == nil || d.Status.DeliveredAt == nil || d.Status.PickedUpAt == nil || d.Status.SettledAt == nil {
			t.Errorf("d%02d: a step has no timestamp: %+v", i, d.Status)
		}
	}
	if got := received(t, log); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("the agent received (in order):\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestNothingIsTypedWhileBlocked(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	log := agentWithLog(t, ns, "w1")
	create(t, testutil.MakeDelegation("dialog", ns, "w1", "dialog: allow?").Obj())
	waitAgentStatus(t, ns, "w1", fleetv1alpha1.AgentBlocked)
	create(t, testutil.MakeDelegation("second", ns, "w1", "silent: after the dialog").Obj())

	// While the dialog is up the second one waits in the queue: the first
	// was picked up (blocked is a pickup), the second is still queued.
	waitPhase(t, ns, "dialog", fleetv1alpha1.DelegationWorking)
	if d, _ := getDelegation(ns, "second"); d.Status.DeliveringAt != nil || d.Status.Phase != fleetv1alpha1.DelegationQueued {
		t.Fatalf("typed into a blocked member: %+v", d.Status)
	}
	if got := received(t, log); len(got) != 1 {
		t.Fatalf("the agent received %d prompts while blocked: %q", len(got), got)
	}

	m, _ := getMember(t, ns, "w1")
	if err := h.client().PaneSendKeys(context.Background(), m.Status.PaneID, "y"); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, "dialog", fleetv1alpha1.DelegationTurnDone)
	waitPhase(t, ns, "second", fleetv1alpha1.DelegationTurnDone)
	if got := received(t, log); len(got) != 2 || got[1] != "silent: after the dialog" {
		t.Errorf("received %q", got)
	}
}

// TestDeadlineSettlesTimedOut: a message in flight when its deadline passes
// settles timeout; one still queued stays queued and is delivered once its
// worker is free, and then settles timeout at once (its sender got the
// timeout already; a reply takes the detached path).
func TestDeadlineSettlesTimedOut(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	log := agentWithLog(t, ns, "w1")
	create(t, sequenced(testutil.MakeDelegation("slow", ns, "w1", "sleep: 4").Timeout(2).Obj(), 1))
	create(t, sequenced(testutil.MakeDelegation("behind", ns, "w1", "silent: typed late").Timeout(1).Obj(), 2))
	d := waitPhase(t, ns, "slow", fleetv1alpha1.DelegationTimedOut)
	if d.Status.Outcome != fleetv1alpha1.OutcomeTimeout || d.Status.DeliveredAt == nil {
		t.Errorf("slow: outcome=%s delivered=%v", d.Status.Outcome, d.Status.DeliveredAt)
	}
	// The slow one's turn is still on (4 s): behind is past its deadline and
	// still queued.
	if behind, _ := getDelegation(ns, "behind"); behind.Status.Phase != fleetv1alpha1.DelegationQueued || behind.Status.DeliveringAt != nil {
		t.Errorf("behind, past its deadline behind a busy worker: %+v, want it still queued", behind.Status)
	}
	behind := waitPhase(t, ns, "behind", fleetv1alpha1.DelegationTimedOut)
	if behind.Status.DeliveringAt == nil || !behind.Status.DeliveringAt.After(d.Status.SettledAt.Time) {
		t.Errorf("behind was not typed after the slow one's turn: %+v", behind.Status)
	}
	// behind settles as soon as it is typed, maybe before the agent logs it.
	testutil.Eventually(t, "the agent to receive behind", func() (bool, string) {
		got := received(t, log)
		return len(got) >= 2, fmt.Sprintf("received %q", got)
	})
	if got := received(t, log); len(got) != 2 || got[1] != "silent: typed late" {
		t.Errorf("received %q, want both, in order", got)
	}
}

func TestMemberDeletedSettlesWorkerGone(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	agentWithLog(t, ns, "w1")
	create(t, sequenced(testutil.MakeDelegation("busy", ns, "w1", "sleep: 30").Obj(), 1))
	create(t, sequenced(testutil.MakeDelegation("queued", ns, "w1", "silent: x").Obj(), 2))
	waitPhase(t, ns, "busy", fleetv1alpha1.DelegationWorking)
	m, _ := getMember(t, ns, "w1")
	if err := env.Client.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"busy", "queued"} {
		d := waitPhase(t, ns, name, fleetv1alpha1.DelegationWorkerGone)
		if d.Status.Outcome != fleetv1alpha1.OutcomeWorkerGone {
			t.Errorf("%s: outcome %s", name, d.Status.Outcome)
		}
	}
}

func TestDelegationToNobodyIsWorkerGone(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	create(t, testutil.MakeDelegation("lost", ns, "nobody", "hello").Obj())
	waitPhase(t, ns, "lost", fleetv1alpha1.DelegationWorkerGone)
}

// TestDialogTheStatusMissedPostponesTheDelivery: herdr refuses a prompt
// for a dialog the member's status did not show yet (agent_blocked); the
// message goes back to the queue, and is delivered once the dialog is
// answered.
func TestDialogTheStatusMissedPostponesTheDelivery(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	run := startControllers(t, ns, h.socket)
	log := agentWithLog(t, ns, "w1")
	// The Member's status says idle while a dialog is really on screen: the
	// race between a status sample and a delivery, made deterministic by
	// stopping the Member controller before the dialog opens.
	run.stop()
	m, _ := getMember(t, ns, "w1")
	hc := h.client()
	if err := typeInto(hc, m.Status.PaneID, "dialog: hold on"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the agent blocked in herdr", func() (bool, string) {
		a, err := hc.AgentGet(context.Background(), m.Status.PaneID)
		if err != nil {
			return false, err.Error()
		}
		return a.AgentStatus == herdr.AgentStatusBlocked, string(a.AgentStatus)
	})
	injector := startInjectorOnly(t, ns, h.socket)
	create(t, sequenced(testutil.MakeDelegation("postponed", ns, "w1", "silent: postponed").Obj(), 1))
	testutil.Eventually(t, "herdr's refusal recorded", func() (bool, string) {
		d, err := getDelegation(ns, "postponed")
		if err != nil {
			return false, err.Error()
		}
		msg := conditionMessage(d, fleetv1alpha1.ConditionDelivered)
		return strings.Contains(msg, herdr.CodeAgentBlocked), fmt.Sprintf("phase=%s delivered=%q", d.Status.Phase, msg)
	})
	if d, _ := getDelegation(ns, "postponed"); d.Status.Phase != fleetv1alpha1.DelegationQueued || d.Status.DeliveringAt != nil {
		t.Fatalf("a postponed delivery is queued again: %+v", d.Status)
	}
	injector.stop()
	if err := hc.PaneSendKeys(context.Background(), m.Status.PaneID, "y"); err != nil {
		t.Fatal(err)
	}
	startControllers(t, ns, h.socket)
	waitPhase(t, ns, "postponed", fleetv1alpha1.DelegationTurnDone)
	if got := received(t, log); len(got) != 2 || got[1] != "silent: postponed" {
		t.Errorf("received %q, want the dialog prompt and the postponed one", got)
	}
}

// TestRefusedDeliveryFailsAndTheQueueMovesOn: herdr refuses a message for
// good; it settles delivery_failed and the next one is delivered, though
// the agent stays idle throughout and its status never moves.
func TestRefusedDeliveryFailsAndTheQueueMovesOn(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startManagerOn(t, env.Config, ns, refusingPanes{PaneClient: h.client(), marker: "refuse me"}, true)
	log := agentWithLog(t, ns, "w1")
	m, _ := getMember(t, ns, "w1")
	create(t, sequenced(testutil.MakeDelegation("refused", ns, "w1", "silent: refuse me").Obj(), 1))
	create(t, sequenced(testutil.MakeDelegation("next", ns, "w1", "silent: next").Obj(), 2))
	d := waitPhase(t, ns, "refused", fleetv1alpha1.DelegationFailed)
	if d.Status.Outcome != fleetv1alpha1.OutcomeDeliveryFailed || !strings.Contains(conditionMessage(d, fleetv1alpha1.ConditionSettled), herdr.CodeAgentPromptFailed) {
		t.Errorf("outcome=%s conditions=%v, want delivery_failed naming %s", d.Status.Outcome, d.Status.Conditions, herdr.CodeAgentPromptFailed)
	}
	next := waitPhase(t, ns, "next", fleetv1alpha1.DelegationTurnDone)
	if next.Status.DeliveringSeq != m.Status.StateChangeSeq {
		t.Errorf("next was typed at seq %d; the agent's status moved after the refusal (seq %d then)", next.Status.DeliveringSeq, m.Status.StateChangeSeq)
	}
	if got := received(t, log); len(got) != 1 || got[0] != "silent: next" {
		t.Errorf("received %q, want only next", got)
	}
}

func conditionMessage(d *fleetv1alpha1.Delegation, typ string) string {
	for _, c := range d.Status.Conditions {
		if c.Type == typ {
			return c.Message
		}
	}
	return ""
}

func TestControllerStoppedMidBurstTypesEachOnce(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	run := startControllers(t, ns, h.socket)
	log := agentWithLog(t, ns, "w1")
	const n = 20
	for i := range n {
		create(t, sequenced(testutil.MakeDelegation(fmt.Sprintf("d%02d", i), ns, "w1", fmt.Sprintf("silent: burst %02d", i)).Obj(), i))
	}
	// Stop the controllers a few times in the middle of the burst.
	for stops := 0; stops < 3; stops++ {
		testutil.Eventually(t, "progress", func() (bool, string) {
			got := len(received(t, log))
			return got >= (stops+1)*4, fmt.Sprintf("%d received", got)
		})
		run.stop()
		run = startControllers(t, ns, h.socket)
	}
	settled := 0
	testutil.Eventually(t, "every delegation settled", func() (bool, string) {
		var list fleetv1alpha1.DelegationList
		if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		settled = 0
		for _, d := range list.Items {
			if delegation.Settled(d.Status.Phase) {
				settled++
			}
		}
		return settled == n, fmt.Sprintf("%d of %d settled", settled, n)
	})
	counts := map[string]int{}
	for _, p := range received(t, log) {
		counts[p]++
	}
	var list fleetv1alpha1.DelegationList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, d := range list.Items {
		c := counts[d.Spec.Content]
		switch {
		case c > 1:
			t.Errorf("%s typed %d times", d.Name, c)
		case c == 1 && d.Status.Phase != fleetv1alpha1.DelegationTurnDone:
			t.Errorf("%s was received but settled %s", d.Name, d.Status.Phase)
		case c == 0 && d.Status.Phase != fleetv1alpha1.DelegationFailed:
			t.Errorf("%s was never received but settled %s", d.Name, d.Status.Phase)
		}
	}
}

// TestRetentionDeletesSettledDelegations runs the injector's reconcile by
// hand on a clock the test moves, against the API server: each pass's
// decision shows in what is left and in when it asks to look again.
func TestRetentionDeletesSettledDelegations(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	const retention = time.Hour
	// Whole seconds: the API keeps timestamps to the second.
	clk := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	r, cached := injectorByHand(t, ns, clk, retention)
	queue := ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "nobody"}}

	// Settled at once (nobody is there to take them). The waiter got the
	// blocking one's outcome; the detached one's is still owed; so is
	// orphan's, to a member that does not exist; and owed's, to one that
	// does.
	create(t, testutil.MakeDelegation("blocking", ns, "nobody", "hello").Obj())
	detached := testutil.MakeDelegation("detached", ns, "nobody", "hello").Obj()
	detached.Spec.Wait = ptrTo(false)
	create(t, detached)
	orphan := testutil.MakeDelegation("orphan", ns, "nobody", "hello").Obj()
	orphan.Spec.Wait = ptrTo(false)
	orphan.Spec.From = fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: "ghost"}
	create(t, orphan)
	create(t, testutil.MakeMember("sender", ns).Command("true").Obj())
	owed := testutil.MakeDelegation("owed", ns, "nobody", "hello").Obj()
	owed.Spec.Wait = ptrTo(false)
	owed.Spec.From = fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: "sender"}
	create(t, owed)
	all := []string{"blocking", "detached", "orphan", "owed"}
	cached(t, "the four queued", func(ds map[string]fleetv1alpha1.Delegation) bool { return len(ds) == 4 })

	pass := func(want time.Duration) {
		t.Helper()
		res, err := r.Reconcile(ctx, queue)
		if err != nil {
			t.Fatal(err)
		}
		if res.RequeueAfter != want {
			t.Errorf("requeueAfter = %s, want %s", res.RequeueAfter, want)
		}
	}
	left := func(want ...string) {
		t.Helper()
		cached(t, fmt.Sprintf("left: %v", want), func(ds map[string]fleetv1alpha1.Delegation) bool {
			if len(ds) != len(want) {
				return false
			}
			for _, name := range want {
				if d, ok := ds[name]; !ok || d.Status.Phase != fleetv1alpha1.DelegationWorkerGone {
					return false
				}
			}
			return true
		})
	}

	// The settled ones are kept for the retention; the orphaned outcome
	// will never be collected, so it goes a retention after it settled too.
	pass(0)
	left(all...)
	pass(retention)

	clk.Step(retention - time.Second)
	pass(time.Second)
	left(all...)

	clk.Step(time.Second)
	pass(0)
	left("detached", "owed")

	// The outcomes owed stay, however old, until collected.
	clk.Step(100 * retention)
	pass(0)
	left("detached", "owed")

	// bridge_ack's write: from then on it is only history.
	d, err := getDelegation(ns, "detached")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := delegation.Acknowledge(d, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Status().Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	cached(t, "the acknowledgement", func(ds map[string]fleetv1alpha1.Delegation) bool { return ds["detached"].Status.AcknowledgedAt != nil })
	pass(retention)
	clk.Step(retention)
	pass(0)
	left("owed")

	// Its member sender is deleted: nobody will collect it now.
	if err := env.Client.Delete(ctx, testutil.MakeMember("sender", ns).Obj()); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the member gone from the cache", func() (bool, string) {
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sender"}, &fleetv1alpha1.Member{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	pass(0)
	left()
}

// TestAnOutcomeOwedToADeletedMemberGoesAtOnce: deleting a member is enough
// for retention to take the outcomes it was owed, with no other event in
// their queue and no periodic look.
func TestAnOutcomeOwedToADeletedMemberGoesAtOnce(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startManager(t, env.Config, ns, h.socket, true, func(p *delegation.Policy) { p.Retention = time.Nanosecond })
	agentWithLog(t, ns, "sender")
	owed := testutil.MakeDelegation("owed", ns, "nobody", "hello").Obj()
	owed.Spec.Wait = ptrTo(false)
	owed.Spec.From = fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: "sender"}
	create(t, owed)
	waitPhase(t, ns, "owed", fleetv1alpha1.DelegationWorkerGone)
	if err := env.Client.Delete(context.Background(), testutil.MakeMember("sender", ns).Obj()); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the outcome owed to the deleted member deleted", func() (bool, string) {
		d, err := getDelegation(ns, "owed")
		return apierrors.IsNotFound(err), fmt.Sprintf("err %v, phase %s", err, d.Status.Phase)
	})
}

// injectorByHand is a Delegation reconciler on clk that the test calls, with
// a cache of ns, and a way to wait until the cache shows something.
func injectorByHand(t *testing.T, ns string, clk clock.PassiveClock, retention time.Duration) (*DelegationReconciler, func(t *testing.T, what string, cond func(map[string]fleetv1alpha1.Delegation) bool)) {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  env.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := IndexDelegations(ctx, mgr.GetFieldIndexer()); err != nil {
		t.Fatal(err)
	}
	// Informers for what Reconcile reads, before the cache starts.
	for _, o := range []client.Object{&fleetv1alpha1.Delegation{}, &fleetv1alpha1.Member{}} {
		if _, err := mgr.GetCache().GetInformer(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	policy := delegation.DefaultPolicy
	policy.Retention = retention
	r := &DelegationReconciler{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Panes: herdr.NewClient(filepath.Join(t.TempDir(), "no-herdr")),
		Recorder: mgr.GetEventRecorder("fleetd-delegation"), Clock: clk, Policy: policy,
	}
	cached := func(t *testing.T, what string, cond func(map[string]fleetv1alpha1.Delegation) bool) {
		t.Helper()
		testutil.Eventually(t, "the cache shows "+what, func() (bool, string) {
			var list fleetv1alpha1.DelegationList
			if err := r.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
				return false, err.Error()
			}
			ds := map[string]fleetv1alpha1.Delegation{}
			var names []string
			for _, d := range list.Items {
				ds[d.Name] = d
				names = append(names, d.Name+"="+string(d.Status.Phase))
			}
			return cond(ds), strings.Join(names, " ")
		})
	}
	return r, cached
}

// TestDetachedReplyIsTypedIntoAMemberSendersPane follows the detached path
// for a member sender: the worker's reply (written here as the
// gateway's bridge_reply writes it) is carried into the sender's pane by a
// Delegation of its own, and once typed there it counts as acknowledged.
func TestDetachedReplyIsTypedIntoAMemberSendersPane(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	leadLog := agentWithLog(t, ns, "lead")
	agentWithLog(t, ns, "w1")
	ctx := context.Background()

	d := testutil.MakeDelegation("task", ns, "w1", "sleep: 30").Obj()
	d.Spec.Wait = ptrTo(false)
	d.Spec.From = fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: "lead"}
	create(t, d)
	d = waitPhase(t, ns, "task", fleetv1alpha1.DelegationWorking)
	if err := delegation.Reply(d, time.Now(), "the report is in docs/report.md"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Status().Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	if !delegation.Unclaimed(d) {
		t.Fatalf("a detached reply not yet carried is not owed to its sender")
	}

	testutil.Eventually(t, "the reply typed into the sender's pane", func() (bool, string) {
		got := received(t, leadLog)
		for _, p := range got {
			if strings.Contains(p, "Reply from w1 to your message task") && strings.Contains(p, "the report is in docs/report.md") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("lead received %q", got)
	})
	carrier := waitPhase(t, ns, "task-reply", fleetv1alpha1.DelegationTurnDone)
	if carrier.Spec.From.Name != "w1" || carrier.Spec.To != "lead" || carrier.Spec.InReplyTo != "task" {
		t.Errorf("carrier spec %+v", carrier.Spec)
	}
	testutil.Eventually(t, "the original acknowledged", func() (bool, string) {
		d, err := getDelegation(ns, "task")
		if err != nil {
			return false, err.Error()
		}
		return d.Status.AcknowledgedAt != nil && !delegation.Unclaimed(d), fmt.Sprintf("acknowledgedAt=%v replyDeliveredAs=%q", d.Status.AcknowledgedAt, d.Status.ReplyDeliveredAs)
	})
}

// TestTurnDoneAndReplyRace: a worker's reply and the end of its turn race to
// settle one message. The controller settles turn_done with a write on the
// version it decided on; the gateway records a reply only on a message
// still in flight. Whichever order they come in, exactly one settles it
// and the other learns so.
func TestTurnDoneAndReplyRace(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	ctx := context.Background()
	// reply writes a reply on d the way the gateway does: the transition,
	// then an update on the version it read.
	reply := func(d *fleetv1alpha1.Delegation) error {
		d = d.DeepCopy()
		if err := delegation.Reply(d, time.Now(), "the answer"); err != nil {
			return err
		}
		return env.Client.Status().Update(ctx, d)
	}
	inFlight := func(name string) *fleetv1alpha1.Delegation {
		create(t, testutil.MakeDelegation(name, ns, "w1", "work").Obj())
		d, err := getDelegation(ns, name)
		if err != nil {
			t.Fatal(err)
		}
		delegation.BeginDelivery(d, time.Now(), delegation.Target{PaneID: "w9:p9"})
		delegation.Pickup(d, time.Now())
		if err := env.Client.Status().Update(ctx, d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	endTurn := func(decidedOn *fleetv1alpha1.Delegation) error {
		r := &DelegationReconciler{Client: env.Client, Panes: h.client(), Clock: clock.RealClock{}, Policy: delegation.DefaultPolicy}
		write, err := r.endTurn(ctx, types.NamespacedName{Namespace: ns, Name: "w1"}, h.client(), decidedOn.DeepCopy(), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return write()
	}

	t.Run("the reply comes before the settle, unseen by the decision", func(t *testing.T) {
		decidedOn := inFlight("reply-first")
		if err := reply(decidedOn); err != nil {
			t.Fatal(err)
		}
		if err := endTurn(decidedOn); !errors.Is(err, errConflict) {
			t.Errorf("settling after the reply: %v, want a conflict (it looks again)", err)
		}
		if d, _ := getDelegation(ns, "reply-first"); d.Status.Phase != fleetv1alpha1.DelegationReplied {
			t.Errorf("phase %s, want Replied", d.Status.Phase)
		}
	})
	t.Run("the turn ends first", func(t *testing.T) {
		decidedOn := inFlight("turn-first")
		if err := endTurn(decidedOn); err != nil {
			t.Fatal(err)
		}
		// The gateway's write on the version it read conflicts; on the
		// fresh one, the reply does not apply.
		if err := reply(decidedOn); !apierrors.IsConflict(err) {
			t.Errorf("a reply on the old version: %v, want a conflict", err)
		}
		fresh, _ := getDelegation(ns, "turn-first")
		if err := reply(fresh); !errors.Is(err, delegation.ErrNotInFlight) {
			t.Errorf("a reply on the settled message: %v, want %v", err, delegation.ErrNotInFlight)
		}
		if fresh.Status.Phase != fleetv1alpha1.DelegationTurnDone {
			t.Errorf("phase %s, want TurnDone", fresh.Status.Phase)
		}
	})
}

// TestTheInjectorNeverWritesAMember: Member.status has one writer, the
// Member controller. The injector only reads Members: delivering a message
// leaves the Member's resourceVersion as it was.
func TestTheInjectorNeverWritesAMember(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	run := startControllers(t, ns, h.socket)
	log := agentWithLog(t, ns, "w1")
	run.stop()
	before, err := getMember(t, ns, "w1")
	if err != nil {
		t.Fatal(err)
	}
	startInjectorOnly(t, ns, h.socket)
	create(t, testutil.MakeDelegation("d", ns, "w1", "silent: one").Obj())
	testutil.Eventually(t, "the message typed", func() (bool, string) {
		got := received(t, log)
		return len(got) == 1, fmt.Sprintf("received %q", got)
	})
	waitPhase(t, ns, "d", fleetv1alpha1.DelegationDelivered)
	after, err := getMember(t, ns, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("the injector wrote member w1: resourceVersion %s -> %s", before.ResourceVersion, after.ResourceVersion)
	}
}

// screenPanes is herdr showing text in every pane.
type screenPanes struct {
	PaneClient
	text string
}

func (p screenPanes) PaneRead(_ context.Context, params herdr.ReadParams) (*herdr.PaneRead, error) {
	return &herdr.PaneRead{PaneID: params.PaneID, Source: params.Source, Text: p.text}, nil
}

// TestTailKeepsCharactersWhole: the tail a turn_done carries is cut to what
// a Delegation holds from its end, and a character the cut falls into is
// left out whole, not split into invalid UTF-8.
func TestTailKeepsCharactersWhole(t *testing.T) {
	rest := strings.Repeat("x", fleetv1alpha1.MaxContentBytes-1)
	cases := map[string]struct {
		screen, want string
	}{
		"short text is kept":             {screen: "done ✓", want: "done ✓"},
		"exactly the limit is kept":      {screen: "é" + strings.Repeat("x", fleetv1alpha1.MaxContentBytes-2), want: "é" + strings.Repeat("x", fleetv1alpha1.MaxContentBytes-2)},
		"the cut falls inside a é":       {screen: "é" + rest, want: rest},
		"the cut falls inside a ✓":       {screen: "a✓" + rest, want: rest},
		"the cut falls before a ✓ whole": {screen: "a✓" + strings.Repeat("x", fleetv1alpha1.MaxContentBytes-3), want: "✓" + strings.Repeat("x", fleetv1alpha1.MaxContentBytes-3)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := readTail(context.Background(), screenPanes{text: tc.screen}, "w1:p1")
			if err != nil {
				t.Fatal(err)
			}
			if !utf8.ValidString(got) || len(got) > fleetv1alpha1.MaxContentBytes {
				t.Errorf("tail is %d bytes, valid UTF-8 %v; want at most %d of valid UTF-8", len(got), utf8.ValidString(got), fleetv1alpha1.MaxContentBytes)
			}
			if got != tc.want {
				t.Errorf("tail = %.20q... (%d bytes), want %.20q... (%d bytes)", got, len(got), tc.want, len(tc.want))
			}
		})
	}
}

// agentSeqPast waits until the agent in pane shows status want at a status
// change count past seq, and returns that count.
func agentSeqPast(t *testing.T, h *herdrServer, pane string, seq int64, want herdr.AgentStatus) int64 {
	t.Helper()
	var got int64
	testutil.Eventually(t, fmt.Sprintf("the agent %s past seq %d", want, seq), func() (bool, string) {
		info, err := h.client().AgentGet(context.Background(), pane)
		if err != nil {
			return false, err.Error()
		}
		got = int64(info.StateChangeSeq)
		return info.AgentStatus == want && got > seq, fmt.Sprintf("%s at seq %d", info.AgentStatus, got)
	})
	return got
}

// staleMember runs the controllers until member w1 is idle, then stops
// them: its status stays as it was while its agent moves on, as it does
// while a lagging Member status waits to be written.
func staleMember(t *testing.T, ns string, h *herdrServer) (*fleetv1alpha1.Member, string) {
	t.Helper()
	run := startControllers(t, ns, h.socket)
	log := agentWithLog(t, ns, "w1")
	waitAgentStatus(t, ns, "w1", fleetv1alpha1.AgentIdle)
	run.stop()
	// As it is once stopped: its last write may have come meanwhile.
	m, err := getMember(t, ns, "w1")
	if err != nil {
		t.Fatal(err)
	}
	return m, log
}

// TestTypingCountsFromTheAgentsOwnSeq: a message's delivery records the
// agent's status change count as herdr reports it when it is typed, not
// the Member status' one, which can lag. Otherwise a change the status had
// not shown yet looks like the pickup of a message the agent never saw.
func TestTypingCountsFromTheAgentsOwnSeq(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	m, log := staleMember(t, ns, h)
	// The agent works a turn the Member's status never shows.
	if err := typeMessage(context.Background(), h.client(), m.Status.PaneID, true, "silent: behind the status"); err != nil {
		t.Fatal(err)
	}
	live := agentSeqPast(t, h, m.Status.PaneID, m.Status.StateChangeSeq+1, herdr.AgentStatusIdle)

	startInjectorOnly(t, ns, h.socket)
	create(t, testutil.MakeDelegation("d", ns, "w1", "silent: one").Obj())
	testutil.Eventually(t, "the message typed", func() (bool, string) {
		got := received(t, log)
		return len(got) == 2, fmt.Sprintf("received %q", got)
	})
	d, err := getDelegation(ns, "d")
	if err != nil {
		t.Fatal(err)
	}
	if d.Status.DeliveringSeq < live {
		t.Errorf("the delivery counts from seq %d, the Member status' (%d); want the agent's own, %d or later", d.Status.DeliveringSeq, m.Status.StateChangeSeq, live)
	}
}

// TestUnconfirmedTypingIsConfirmedByTheAgent: a message another replica
// typed before it died (its intent written, its typing unseen by this one)
// is proved typed by the agent's working on it, even while the Member's
// status lags past the confirm window. It is not failed, and the next
// message is not typed into the turn.
func TestUnconfirmedTypingIsConfirmedByTheAgent(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	m, log := staleMember(t, ns, h)
	ctx := context.Background()

	// The replica that died: the intent, then the typing.
	create(t, sequenced(testutil.MakeDelegation("first", ns, "w1", "sleep: 3").Obj(), 0))
	first, err := getDelegation(ns, "first")
	if err != nil {
		t.Fatal(err)
	}
	delegation.BeginDelivery(first, time.Now(), delegation.Target{PaneID: m.Status.PaneID, TerminalID: m.Status.TerminalID, Seq: m.Status.StateChangeSeq})
	if err := env.Client.Status().Update(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := typeMessage(ctx, h.client(), m.Status.PaneID, true, "sleep: 3"); err != nil {
		t.Fatal(err)
	}
	agentSeqPast(t, h, m.Status.PaneID, m.Status.StateChangeSeq, herdr.AgentStatusWorking)
	create(t, sequenced(testutil.MakeDelegation("second", ns, "w1", "silent: second").Obj(), 1))

	// This replica, on the Member's stale status: confirm window 1 s.
	startManager(t, env.Config, ns, h.socket, false, func(p *delegation.Policy) { p.ConfirmWindow = time.Second })
	d := waitPhase(t, ns, "first", fleetv1alpha1.DelegationWorking)
	if d.Status.PickedUpAt == nil || d.Status.DeliveredAt == nil {
		t.Errorf("the pickup is not recorded: %+v", d.Status)
	}
	agentSeqPast(t, h, m.Status.PaneID, d.Status.DeliveringSeq+1, herdr.AgentStatusIdle)
	time.Sleep(2 * time.Second) // past the confirm window, with the status as stale as ever
	if d, _ := getDelegation(ns, "first"); d.Status.Phase == fleetv1alpha1.DelegationFailed {
		t.Errorf("first failed %s: %s", d.Status.Phase, conditionMessage(d, fleetv1alpha1.ConditionSettled))
	}
	if got := received(t, log); len(got) != 1 || got[0] != "sleep: 3" {
		t.Errorf("the agent received %q; want only the first message, the second waits for its turn to end", got)
	}
}

// TestTheControllerMarksClosedMessages: a Delegation that needs nothing
// more but retention is marked closed, with its member, its sender's label
// and its bytes, so that the gateway's cache can leave it out and still
// count it; one whose outcome is still owed is not, and a closed label
// set by hand on it is taken off; collecting the outcome closes it.
func TestTheControllerMarksClosedMessages(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	create(t, testutil.MakeDelegation("blocking", ns, "nobody", "twelve bytes").Obj())
	detached := testutil.MakeDelegation("detached", ns, "nobody", "hello").Obj()
	detached.Spec.Wait = ptrTo(false)
	detached.Labels = map[string]string{fleetv1alpha1.LabelClosed: "true"}
	create(t, detached)
	waitPhase(t, ns, "blocking", fleetv1alpha1.DelegationWorkerGone)
	waitPhase(t, ns, "detached", fleetv1alpha1.DelegationWorkerGone)

	testutil.Eventually(t, "the blocking one marked closed", func() error {
		d, err := getDelegation(ns, "blocking")
		if err != nil {
			return err
		}
		want := map[string]string{
			fleetv1alpha1.LabelClosed: "true",
			fleetv1alpha1.LabelMember: "nobody",
			fleetv1alpha1.LabelSender: delegation.SenderLabel(d.Spec.From),
		}
		for k, v := range want {
			if d.Labels[k] != v {
				return fmt.Errorf("label %s = %q, want %q", k, d.Labels[k], v)
			}
		}
		if n, ok := delegation.MarkedBytes(d.Annotations); !ok || n != 12 {
			return fmt.Errorf("marked bytes %d, %v; want 12", n, ok)
		}
		return nil
	})
	closedLabel := func(what, want string) {
		t.Helper()
		testutil.Eventually(t, what, func() error {
			d, err := getDelegation(ns, "detached")
			if err != nil {
				return err
			}
			if got := d.Labels[fleetv1alpha1.LabelClosed]; got != want {
				return fmt.Errorf("closed label %q, want %q", got, want)
			}
			return nil
		})
	}
	closedLabel("the forged mark taken off the owed one", "")

	d, err := getDelegation(ns, "detached")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := delegation.Acknowledge(d, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Status().Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	closedLabel("the collected one marked closed", "true")
}

// TestTheControllerMarksSupersededMessagesClosed: a turn that ended with
// no reply leaves its message open for a late reply, until another message
// to the member is typed: the worker's reply then goes to that one, and
// the older is closed. The last one typed stays open.
func TestTheControllerMarksSupersededMessagesClosed(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	agentWithLog(t, ns, "w1")
	closedLabel := func(name string) string {
		t.Helper()
		d, err := getDelegation(ns, name)
		if err != nil {
			t.Fatal(err)
		}
		return d.Labels[fleetv1alpha1.LabelClosed]
	}

	create(t, sequenced(testutil.MakeDelegation("first", ns, "w1", "silent: one").Obj(), 0))
	waitPhase(t, ns, "first", fleetv1alpha1.DelegationTurnDone)
	if got := closedLabel("first"); got != "" {
		t.Fatalf("the last message typed, open for a late reply, is marked closed (%q)", got)
	}
	create(t, sequenced(testutil.MakeDelegation("second", ns, "w1", "silent: two").Obj(), 1))
	waitPhase(t, ns, "second", fleetv1alpha1.DelegationTurnDone)
	testutil.Eventually(t, "the superseded message marked closed", func() (bool, string) {
		got := closedLabel("first")
		return got == "true", fmt.Sprintf("first: closed label %q", got)
	})
	if got := closedLabel("second"); got != "" {
		t.Errorf("the last message typed is marked closed (%q)", got)
	}
}
