package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

// TestBlockedAtStart: an agent that shows a dialog before it was ever ready
// stays starting, with its own condition and the dialog's text, for as
// long as it waits; once someone answers (and the dialog is gone from the
// screen, as an agent's TUI redraws it), it becomes Ready.
func TestBlockedAtStart(t *testing.T) {
	dialog := `printf '%s\n' '────────────────────────' ' Accessing workspace:' '' ' Quick safety check: Is this a project you trust?' ' ❯ No, exit' '   Yes, I trust this folder' '' ' Enter to confirm · Esc to cancel'
read answer
printf '\033[2J\033[H'
exec ` + scriptedAgent
	h := startHerdr(t, func(o *paneserver.Options) {
		o.AgentCommands["claude"] = claudeStandIn(t, dialog)
		// The real herdr never calls an agent with a dialog on its screen
		// ready; the pane server does not read screens and calls it ready
		// once the settle delay passes. herdr's own delay keeps fleetd's
		// look at the screen ahead of it on a busy machine.
		o.AgentSettle = 3 * time.Second
	})
	ns := env.Namespace(t)
	startControllers(t, ns, h.socket)
	create(t, testutil.MakeMember("w1", ns).Agent(fleetv1alpha1.AgentClaude).Obj())

	var m *fleetv1alpha1.Member
	testutil.Eventually(t, "the member blocked at start with the dialog's text", func() (bool, string) {
		var err error
		if m, err = getMember(t, ns, "w1"); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionAgentReady)
		return c != nil && c.Reason == fleetv1alpha1.ReasonBlockedAtStart && strings.Contains(c.Message, "Yes, I trust this folder") &&
			m.Status.AgentStatus == fleetv1alpha1.AgentBlocked && strings.Contains(m.Status.AgentMessage, "Enter to confirm"), describe(m)
	})
	if m.Status.Phase != fleetv1alpha1.MemberStarting {
		t.Errorf("phase %s, want Starting while the dialog waits", m.Status.Phase)
	}
	if err := h.client().PaneSendKeys(context.Background(), m.Status.PaneID, "enter"); err != nil {
		t.Fatal(err)
	}
	ready := waitReady(t, ns, "w1")
	if ready.Status.AgentMessage != "" || ready.Status.Restarts != 0 {
		t.Errorf("after the answer: message %q, restarts %d; want no dialog and the same pane", ready.Status.AgentMessage, ready.Status.Restarts)
	}
}

// TestAnotherSourceOwnsThePane: when herdr's own Claude integration owns a
// pane's status (it recorded the session), herdr drops fleetd's reports;
// the Member says so.
func TestAnotherSourceOwnsThePane(t *testing.T) {
	h := startHerdr(t, func(o *paneserver.Options) { o.AgentCommands["claude"] = claudeStandIn(t, "exec "+scriptedAgent) })
	ns := env.Namespace(t)
	startControllers(t, ns, h.socket)
	create(t, testutil.MakeMember("w1", ns).Agent(fleetv1alpha1.AgentClaude).Obj())
	m := waitReady(t, ns, "w1")
	if c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionAgentHooks); c == nil || c.Reason != fleetv1alpha1.ReasonAwaitingHooks {
		t.Errorf("AgentHooks = %+v before any hook, want AwaitingHooks", c)
	}
	err := h.client().PaneReportAgent(context.Background(), herdr.PaneReportAgentParams{
		PaneID: m.Status.PaneID, Source: "herdr:claude", Agent: "claude", State: herdr.AgentStateWorking, AgentSessionID: ptrTo("their-session"),
	})
	if err != nil {
		t.Fatal(err)
	}
	// herdr now drops every other source's report, so nothing changes in
	// this server (herdr itself would go on reading the screen): make the
	// controller look again.
	patch := client.MergeFrom(m.DeepCopy())
	m.Annotations = map[string]string{"test/look": "again"}
	if err := env.Client.Patch(context.Background(), m, patch); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "AgentHooks names the other source", func() (bool, string) {
		m, err := getMember(t, ns, "w1")
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionAgentHooks)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == fleetv1alpha1.ReasonOtherStatusSource &&
			strings.Contains(c.Message, "herdr:claude"), describe(m)
	})
}

func TestSooner(t *testing.T) {
	for _, c := range []struct{ a, b, want time.Duration }{
		{0, 0, 0}, {0, time.Second, time.Second}, {time.Second, 0, time.Second}, {2 * time.Second, time.Second, time.Second}, {time.Second, 2 * time.Second, time.Second},
	} {
		if got := sooner(c.a, c.b); got != c.want {
			t.Errorf("sooner(%s, %s) = %s, want %s", c.a, c.b, got, c.want)
		}
	}
}
