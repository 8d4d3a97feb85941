package controllers

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
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
	f, err := os.Open(log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var entry struct{ Text string }
		if err := json.Unmarshal(sc.Bytes(), &entry); err != nil {
			t.Fatalf("received log: %v", err)
		}
		out = append(out, entry.Text)
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
	eventually(t, fmt.Sprintf("delegation %s %s", name, want), func() (bool, string) {
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
	m, _ := getMember(t, ns, "w1")
	if m.Status.QueueDepth != 0 || m.Status.InFlight != "" {
		t.Errorf("member queue after the burst: depth=%d inFlight=%q", m.Status.QueueDepth, m.Status.InFlight)
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

	// While the dialog is up the second one waits in the queue.
	eventually(t, "queue depth 1 while blocked", func() (bool, string) {
		m, err := getMember(t, ns, "w1")
		if err != nil {
			return false, err.Error()
		}
		return m.Status.QueueDepth == 1 && m.Status.InFlight == "dialog", fmt.Sprintf("depth=%d inFlight=%q", m.Status.QueueDepth, m.Status.InFlight)
	})
	if d, _ := getDelegation(ns, "second"); d.Status.DeliveringAt != nil {
		t.Fatalf("typed into a blocked member")
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

func TestDeadlineSettlesTimedOut(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	log := agentWithLog(t, ns, "w1")
	create(t, sequenced(testutil.MakeDelegation("slow", ns, "w1", "sleep: 30").Timeout(2).Obj(), 1))
	create(t, sequenced(testutil.MakeDelegation("behind", ns, "w1", "silent: never typed").Timeout(1).Obj(), 2))
	d := waitPhase(t, ns, "slow", fleetv1alpha1.DelegationTimedOut)
	if d.Status.Outcome != fleetv1alpha1.OutcomeTimeout || d.Status.DeliveredAt == nil {
		t.Errorf("slow: outcome=%s delivered=%v", d.Status.Outcome, d.Status.DeliveredAt)
	}
	behind := waitPhase(t, ns, "behind", fleetv1alpha1.DelegationTimedOut)
	if behind.Status.DeliveringAt != nil {
		t.Errorf("a delegation that timed out in the queue was typed")
	}
	if got := received(t, log); len(got) != 1 {
		t.Errorf("received %q, want only the slow one", got)
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

func TestRefusedDeliveryFailsAndTheQueueMovesOn(t *testing.T) {
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
	eventually(t, "the agent blocked in herdr", func() (bool, string) {
		a, err := hc.AgentGet(context.Background(), m.Status.PaneID)
		if err != nil {
			return false, err.Error()
		}
		return a.AgentStatus == herdr.AgentStatusBlocked, string(a.AgentStatus)
	})
	injector := startInjectorOnly(t, ns, h.socket)
	create(t, sequenced(testutil.MakeDelegation("refused", ns, "w1", "silent: refused").Obj(), 1))
	create(t, sequenced(testutil.MakeDelegation("next", ns, "w1", "silent: next").Obj(), 2))
	d := waitPhase(t, ns, "refused", fleetv1alpha1.DelegationFailed)
	if d.Status.Outcome != fleetv1alpha1.OutcomeDeliveryFailed || !strings.Contains(conditionMessage(d, fleetv1alpha1.ConditionSettled), "agent_blocked") {
		t.Errorf("outcome=%s conditions=%v, want delivery_failed naming agent_blocked", d.Status.Outcome, d.Status.Conditions)
	}
	// The queue moves on: once the dialog is answered and the Member
	// controller runs again, the next one is delivered.
	injector.stop()
	if err := hc.PaneSendKeys(context.Background(), m.Status.PaneID, "y"); err != nil {
		t.Fatal(err)
	}
	startControllers(t, ns, h.socket)
	waitPhase(t, ns, "next", fleetv1alpha1.DelegationTurnDone)
	if got := received(t, log); len(got) != 2 || got[1] != "silent: next" {
		t.Errorf("received %q, want the dialog prompt and next", got)
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
		eventually(t, "progress", func() (bool, string) {
			got := len(received(t, log))
			return got >= (stops+1)*4, fmt.Sprintf("%d received", got)
		})
		run.stop()
		run = startControllers(t, ns, h.socket)
	}
	settled := 0
	eventually(t, "every delegation settled", func() (bool, string) {
		var list fleetv1alpha1.DelegationList
		if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		settled = 0
		for _, d := range list.Items {
			if d.Status.Phase.IsTerminal() {
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

func TestRetentionDeletesSettledDelegations(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	const retention = 2 * time.Second
	startManager(t, env.Config, ns, h.socket, true, func(p *DeliveryPolicy) { p.Retention = retention })
	ctx := context.Background()

	// Both settle at once (nobody is there to take them); the waiter got the
	// blocking one's outcome, while the detached one's is still owed.
	create(t, testutil.MakeDelegation("blocking", ns, "nobody", "hello").Obj())
	detached := testutil.MakeDelegation("detached", ns, "nobody", "hello").Obj()
	detached.Spec.Wait = ptrTo(false)
	create(t, detached)
	// Owed to a member that does not exist: nobody can ever collect it.
	orphan := testutil.MakeDelegation("orphan", ns, "nobody", "hello").Obj()
	orphan.Spec.Wait = ptrTo(false)
	orphan.Spec.From = fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: "ghost"}
	create(t, orphan)
	waitPhase(t, ns, "blocking", fleetv1alpha1.DelegationWorkerGone)
	waitPhase(t, ns, "detached", fleetv1alpha1.DelegationWorkerGone)

	gone := func(name string) func() (bool, string) {
		return func() (bool, string) {
			d, err := getDelegation(ns, name)
			if apierrors.IsNotFound(err) {
				return true, ""
			}
			return false, fmt.Sprintf("still there (err %v, phase %s)", err, d.Status.Phase)
		}
	}
	eventually(t, "the settled blocking delegation deleted", gone("blocking"))
	eventually(t, "the outcome owed to a member that is gone deleted", gone("orphan"))
	time.Sleep(retention)
	d, err := getDelegation(ns, "detached")
	if err != nil {
		t.Fatalf("an outcome nobody collected was deleted: %v", err)
	}

	// bridge_ack's write: from now on it is only history.
	now := metav1.Now()
	d.Status.AcknowledgedAt = &now
	if err := env.Client.Status().Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the acknowledged delegation deleted", gone("detached"))

	// Owed to a member that exists, in a queue nothing else touches: kept
	// until the member is deleted, then taken without waiting for a resync.
	agentWithLog(t, ns, "sender")
	owed := testutil.MakeDelegation("owed", ns, "nobody-else", "hello").Obj()
	owed.Spec.Wait = ptrTo(false)
	owed.Spec.From = fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: "sender"}
	create(t, owed)
	waitPhase(t, ns, "owed", fleetv1alpha1.DelegationWorkerGone)
	time.Sleep(2 * retention)
	if _, err := getDelegation(ns, "owed"); err != nil {
		t.Fatalf("an outcome its member sender has not collected was deleted: %v", err)
	}
	m, err := getMember(t, ns, "sender")
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, m); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the outcome owed to the deleted member deleted", gone("owed"))
}

// TestDetachedReplyIsTypedIntoAMemberSendersPane follows DESIGN's detached
// path for a member sender: the worker's reply (written here as the
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
	now := metav1.Now()
	d.Status.Reply, d.Status.RepliedAt = ptrTo("the report is in docs/report.md"), &now
	d.Status.Phase, d.Status.Outcome, d.Status.SettledAt = fleetv1alpha1.DelegationReplied, fleetv1alpha1.OutcomeReply, &now
	if err := env.Client.Status().Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	if !d.Unclaimed() {
		t.Fatalf("a detached reply not yet carried is not owed to its sender")
	}

	eventually(t, "the reply typed into the sender's pane", func() (bool, string) {
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
	eventually(t, "the original acknowledged", func() (bool, string) {
		d, err := getDelegation(ns, "task")
		if err != nil {
			return false, err.Error()
		}
		return d.Status.AcknowledgedAt != nil && !d.Unclaimed(), fmt.Sprintf("acknowledgedAt=%v replyDeliveredAs=%q", d.Status.AcknowledgedAt, d.Status.ReplyDeliveredAs)
	})
}
