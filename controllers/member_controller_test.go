package controllers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/herdr/paneserver"
	"github.com/fleetd/fleetd/internal/testenv"
	"github.com/fleetd/fleetd/internal/testutil"
)

func getMember(t testing.TB, ns, name string) (*fleetv1alpha1.Member, error) {
	m := &fleetv1alpha1.Member{}
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, m)
	return m, err
}

// waitReady waits for a Member to be Ready and returns it.
func waitReady(t testing.TB, ns, name string) *fleetv1alpha1.Member {
	t.Helper()
	var m *fleetv1alpha1.Member
	testutil.Eventually(t, "member "+name+" Ready", func() (bool, string) {
		var err error
		m, err = getMember(t, ns, name)
		if err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(m.Status.Conditions, fleetv1alpha1.ConditionReady) && m.Status.PaneID != "", describe(m)
	})
	return m
}

func describe(m *fleetv1alpha1.Member) string {
	var conds []string
	for _, c := range m.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return fmt.Sprintf("phase=%s pane=%s agent=%s restarts=%d %s", m.Status.Phase, m.Status.PaneID, m.Status.AgentStatus, m.Status.Restarts, strings.Join(conds, " "))
}

func create(t testing.TB, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %s: %v", obj.GetName(), err)
	}
}

func workspaces(t testing.TB, h *herdrServer) []herdr.WorkspaceInfo {
	t.Helper()
	snap, err := h.client().SessionSnapshot(context.Background())
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return snap.Workspaces
}

func TestMemberBecomesReadyAndMirrorsAgentStatus(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	create(t, testutil.MakeProfile("scripted", ns).Command(scriptedAgent).Obj())
	create(t, testutil.MakeMember("w1", ns).Profile("scripted").Obj())

	m := waitReady(t, ns, "w1")
	if m.Status.WorkspaceID == "" || m.Status.TerminalID == "" || m.Status.TokenSecretName == "" {
		t.Errorf("status misses ids: %s workspace=%q terminal=%q secret=%q", describe(m), m.Status.WorkspaceID, m.Status.TerminalID, m.Status.TokenSecretName)
	}
	if m.Status.ObservedGeneration != m.Generation {
		t.Errorf("observedGeneration=%d, generation=%d", m.Status.ObservedGeneration, m.Generation)
	}

	// Drive the agent through every state and watch the Member follow.
	hc := h.client()
	if err := typeInto(hc, m.Status.PaneID, "dialog: approve?"); err != nil {
		t.Fatalf("prompting: %v", err)
	}
	waitAgentStatus(t, ns, "w1", fleetv1alpha1.AgentBlocked)
	if err := hc.PaneSendKeys(context.Background(), m.Status.PaneID, "y"); err != nil {
		t.Fatal(err)
	}
	waitAgentStatus(t, ns, "w1", fleetv1alpha1.AgentIdle)
	if err := typeInto(hc, m.Status.PaneID, "sleep: 3"); err != nil {
		t.Fatalf("prompting: %v", err)
	}
	waitAgentStatus(t, ns, "w1", fleetv1alpha1.AgentWorking)
	final := waitAgentStatus(t, ns, "w1", fleetv1alpha1.AgentIdle)
	if final.Status.StateChangeSeq < 4 {
		t.Errorf("stateChangeSeq=%d after four status changes", final.Status.StateChangeSeq)
	}

	// The pane got the gateway settings and nothing of the controller's own
	// environment; the token never shows on screen.
	secret := &corev1.Secret{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: m.Status.TokenSecretName}, secret); err != nil {
		t.Fatal(err)
	}
	token := string(secret.Data[fleetv1alpha1.TokenSecretKey])
	if len(token) != 64 {
		t.Errorf("token has %d hex digits, want 64 (256 bits)", len(token))
	}
	read, err := hc.PaneRead(context.Background(), herdr.ReadParams{PaneID: m.Status.PaneID, Source: herdr.ReadSourceRecent})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(read.Text, token) {
		t.Errorf("the token is visible in the pane:\n%s", read.Text)
	}
}

func waitAgentStatus(t testing.TB, ns, name string, want fleetv1alpha1.AgentStatus) *fleetv1alpha1.Member {
	t.Helper()
	var m *fleetv1alpha1.Member
	testutil.Eventually(t, fmt.Sprintf("member %s agentStatus %s", name, want), func() (bool, string) {
		var err error
		m, err = getMember(t, ns, name)
		if err != nil {
			return false, err.Error()
		}
		return m.Status.AgentStatus == want, describe(m)
	})
	return m
}

// TestPaneEnvironment checks what a pane gets: its spec's env and
// fleetd's variables on top of herdr's own environment, which panes inherit
// as herdr's do. herdr's environment may hold an API key and endpoint; a
// worker billed by subscription must never see them, so fleetd empties
// them in its pane.
func TestPaneEnvironment(t *testing.T) {
	ns := env.Namespace(t)
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-of-herdr-itself")
	t.Setenv("ANTHROPIC_BASE_URL", "http://gateway.of.herdr")
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	// sh prints its environment, then becomes the scripted agent.
	create(t, testutil.MakeMember("envcheck", ns).Command("/bin/sh", "-c", "env | sort; exec "+scriptedAgent).Env("TEAM_COLOR", "blue").Obj())
	m := waitReady(t, ns, "envcheck")
	read, err := h.client().PaneRead(context.Background(), herdr.ReadParams{PaneID: m.Status.PaneID, Source: herdr.ReadSourceRecentUnwrapped})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(read.Text, "\n")
	for _, want := range []string{"TEAM_COLOR=blue", "FLEETD_MEMBER=envcheck", "FLEETD_MCP_URL=http://127.0.0.1:1/mcp", "ANTHROPIC_API_KEY=", "ANTHROPIC_BASE_URL="} {
		if !slices.Contains(lines, want) {
			t.Errorf("pane environment has no line %s:\n%s", want, read.Text)
		}
	}
	if strings.Contains(read.Text, "of-herdr") {
		t.Errorf("herdr's API key or endpoint reached a worker billed by subscription:\n%s", read.Text)
	}
}

func TestKilledAgentIsRecreatedAndCounted(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	create(t, testutil.MakeMember("crashy", ns).Command(scriptedAgent).Obj())
	first := waitReady(t, ns, "crashy")

	if err := typeInto(h.client(), first.Status.PaneID, "crash"); err != nil {
		t.Fatal(err)
	}
	var m *fleetv1alpha1.Member
	testutil.Eventually(t, "a recreated pane", func() (bool, string) {
		var err error
		m, err = getMember(t, ns, "crashy")
		if err != nil {
			return false, err.Error()
		}
		return m.Status.Restarts == 1 && m.Status.PaneID != "" && m.Status.PaneID != first.Status.PaneID &&
			meta.IsStatusConditionTrue(m.Status.Conditions, fleetv1alpha1.ConditionReady), describe(m)
	})
	if m.Status.LastRestartReason == "" || m.Status.LastRestartTime == nil {
		t.Errorf("restart not explained: reason=%q time=%v", m.Status.LastRestartReason, m.Status.LastRestartTime)
	}
	if got := len(workspaces(t, h)); got != 1 {
		t.Errorf("%d workspaces after the restart, want 1", got)
	}
	waitEvent(t, ns, "crashy", fleetv1alpha1.ReasonPaneLost)
}

func waitEvent(t testing.TB, ns, name, reason string) {
	t.Helper()
	testutil.Eventually(t, "event "+reason, func() (bool, string) {
		var list eventsv1.EventList
		if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Name == name && e.Reason == reason {
				return true, ""
			}
			seen = append(seen, e.Reason)
		}
		return false, strings.Join(seen, ",")
	})
}

func TestHerdrRestartHealsEveryMember(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	names := []string{"a1", "a2", "a3"}
	for _, n := range names {
		create(t, testutil.MakeMember(n, ns).Command(scriptedAgent).Obj())
	}
	for _, n := range names {
		waitReady(t, ns, n)
	}

	h.stop()
	testutil.Eventually(t, "HerdrReachable=False", func() (bool, string) {
		m, err := getMember(t, ns, "a1")
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionHerdrReachable)
		return c != nil && c.Status == "False", describe(m)
	})
	h.start(t)

	for _, n := range names {
		testutil.Eventually(t, n+" healed", func() (bool, string) {
			m, err := getMember(t, ns, n)
			if err != nil {
				return false, err.Error()
			}
			return m.Status.Restarts >= 1 && meta.IsStatusConditionTrue(m.Status.Conditions, fleetv1alpha1.ConditionReady), describe(m)
		})
	}
	if got := len(workspaces(t, h)); got != len(names) {
		t.Errorf("%d workspaces after healing, want %d", got, len(names))
	}
}

func TestControllerRestartAdoptsPanes(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	run := startControllers(t, ns, h.socket)
	for _, n := range []string{"b1", "b2"} {
		create(t, testutil.MakeMember(n, ns).Command(scriptedAgent).Obj())
	}
	before := map[string]string{}
	for _, n := range []string{"b1", "b2"} {
		before[n] = waitReady(t, ns, n).Status.PaneID
	}
	run.stop()
	startControllers(t, ns, h.socket)

	// Give the new controller a change to make, then check it made none.
	m, _ := getMember(t, ns, "b1")
	if err := typeInto(h.client(), m.Status.PaneID, "sleep: 2"); err != nil {
		t.Fatal(err)
	}
	waitAgentStatus(t, ns, "b1", fleetv1alpha1.AgentWorking)
	waitAgentStatus(t, ns, "b1", fleetv1alpha1.AgentIdle)
	for n, pane := range before {
		m := waitReady(t, ns, n)
		if m.Status.PaneID != pane || m.Status.Restarts != 0 {
			t.Errorf("%s: pane %s → %s, restarts %d; want the same pane", n, pane, m.Status.PaneID, m.Status.Restarts)
		}
	}
	if got := len(workspaces(t, h)); got != 2 {
		t.Errorf("%d workspaces after a controller restart, want 2", got)
	}
}

func TestAdoptsAPaneCreatedButNotRecorded(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	create(t, testutil.MakeMember("orphan", ns).Command(scriptedAgent).Obj())
	m, err := getMember(t, ns, "orphan")
	if err != nil {
		t.Fatal(err)
	}
	// An earlier controller created the workspace and died before writing
	// status.
	ws, err := h.client().WorkspaceCreate(context.Background(), herdr.WorkspaceCreateParams{Label: workspaceLabel(m)})
	if err != nil {
		t.Fatal(err)
	}
	startControllers(t, ns, h.socket)
	testutil.Eventually(t, "adoption", func() (bool, string) {
		m, err := getMember(t, ns, "orphan")
		if err != nil {
			return false, err.Error()
		}
		return m.Status.PaneID == ws.RootPane.PaneID, describe(m)
	})
	if got := len(workspaces(t, h)); got != 1 {
		t.Errorf("%d workspaces, want the adopted one only", got)
	}
}

func TestDeleteCleansUp(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	create(t, testutil.MakeMember("gone", ns).Command(scriptedAgent).Obj())
	m := waitReady(t, ns, "gone")
	if err := env.Client.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "member deleted", func() (bool, string) {
		_, err := getMember(t, ns, "gone")
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if got := len(workspaces(t, h)); got != 0 {
		t.Errorf("%d workspaces left after delete", got)
	}
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: TokenSecretName("gone")}, &corev1.Secret{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("token secret still there: %v", err)
	}
}

// TestDeleteWhileHerdrIsDown: a Member whose pane herdr cannot close is
// held by its finalizer, and its status says it is going (phase
// Terminating, Ready False for Deleting), until cleanupTimeout lets it go.
func TestDeleteWhileHerdrIsDown(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	create(t, testutil.MakeMember("orphaned", ns).Command(scriptedAgent).Obj())
	m := waitReady(t, ns, "orphaned")
	h.stop()
	if err := env.Client.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the member shown terminating", func() (bool, string) {
		m, err := getMember(t, ns, "orphaned")
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionReady)
		return !m.DeletionTimestamp.IsZero() && m.Status.Phase == fleetv1alpha1.MemberTerminating &&
			c != nil && c.Status == metav1.ConditionFalse && c.Reason == fleetv1alpha1.ReasonDeleting, describe(m)
	})
	// Bounded by cleanupTimeout, then released with a Warning.
	testutil.Eventually(t, "member deleted without herdr", func() (bool, string) {
		_, err := getMember(t, ns, "orphaned")
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	waitEvent(t, ns, "orphaned", fleetv1alpha1.ReasonCleanupTimedOut)
}

func TestSubscriptionBoundaryRefusesThePane(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	// The API server lets this through (it is only a command line), the
	// controller does not: the endpoint would reach a subscription worker.
	create(t, testutil.MakeMember("smuggler", ns).Command("env", "ANTHROPIC_BASE_URL=http://evil", scriptedAgent).Obj())
	testutil.Eventually(t, "SubscriptionBoundary", func() (bool, string) {
		m, err := getMember(t, ns, "smuggler")
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionReady)
		return c != nil && c.Reason == fleetv1alpha1.ReasonSubscriptionBoundary && m.Status.Phase == fleetv1alpha1.MemberFailed, describe(m)
	})
	waitEvent(t, ns, "smuggler", fleetv1alpha1.ReasonSubscriptionBoundary)
	if got := len(workspaces(t, h)); got != 0 {
		t.Errorf("%d panes created across the subscription boundary", got)
	}
}

func TestFiftyMembersAllReachReady(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 50 agents")
	}
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- env.Client.Create(context.Background(), testutil.MakeMember(fmt.Sprintf("m%02d", i), ns).Command(scriptedAgent).Obj())
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("creating a member: %v", err)
		}
	}
	testutil.Eventually(t, "50 members Ready", func() (bool, string) {
		var list fleetv1alpha1.MemberList
		if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, m := range list.Items {
			if meta.IsStatusConditionTrue(m.Status.Conditions, fleetv1alpha1.ConditionReady) {
				ready++
			}
		}
		return ready == n, fmt.Sprintf("%d of %d ready", ready, n)
	})
	if got := len(workspaces(t, h)); got != n {
		t.Errorf("%d workspaces for %d members", got, n)
	}
}

// TestKnownAgentsStartThroughAgentStart runs Members of a known agent kind
// (claude) the way herdr starts them, agent.start, with the same Member name
// in two namespaces on one herdr: herdr's agent names are unique per server,
// so each must get its own. "claude" is a wrapper that records its
// arguments and runs the scripted agent.
func TestKnownAgentsStartThroughAgentStart(t *testing.T) {
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "claude")
	// HERDR_AGENT makes herdr know the scripted agent as claude.
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"" + dir + "/argv.$HERDR_PANE_ID\"\nexport HERDR_AGENT=claude\nexec " + scriptedAgent + "\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	h := startHerdr(t, func(o *paneserver.Options) { o.AgentCommands["claude"] = wrapper })
	nsA, nsB := env.Namespace(t), env.Namespace(t)
	startControllers(t, nsA, h.socket)
	startControllers(t, nsB, h.socket)
	for _, ns := range []string{nsA, nsB} {
		create(t, testutil.MakeMember("w1", ns).Agent(fleetv1alpha1.AgentClaude).Obj())
	}

	names := map[string]string{}
	for _, ns := range []string{nsA, nsB} {
		m := waitReady(t, ns, "w1")
		info, err := h.client().AgentGet(context.Background(), m.Status.PaneID)
		if err != nil {
			t.Fatalf("%s/w1: herdr does not know pane %s as an agent: %v", ns, m.Status.PaneID, err)
		}
		got := ""
		if info.Name != nil {
			got = *info.Name
		}
		if got != agentName(ns, "w1") {
			t.Errorf("%s/w1: herdr agent name %q, want %q", ns, got, agentName(ns, "w1"))
		}
		names[got] = ns
		argv, err := os.ReadFile(filepath.Join(dir, "argv."+m.Status.PaneID))
		if err != nil {
			t.Fatalf("%s/w1: the agent's arguments were not recorded: %v", ns, err)
		}
		if !strings.Contains(string(argv), "--mcp-config\n") || !strings.Contains(string(argv), "${"+agents.EnvToken+"}") {
			t.Errorf("%s/w1: claude started without the gateway's MCP config:\n%s", ns, argv)
		}

		// A known agent gets its messages through agent.prompt.
		create(t, testutil.MakeDelegation("hello", ns, "w1", "silent: hello").Obj())
		waitPhase(t, ns, "hello", fleetv1alpha1.DelegationTurnDone)
	}
	if len(names) != 2 {
		t.Errorf("the two Members share a herdr agent name: %v", names)
	}
}

// claudeStandIn writes an executable that herdr starts for agent.start
// kind claude: it runs body, known to herdr as claude by HERDR_AGENT.
func claudeStandIn(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "claude")
	if err := os.WriteFile(path, []byte("#!/bin/sh\nexport HERDR_AGENT=claude\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

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

// TestAgentNameHeldByAnEarlierPaneIsFreed: herdr may bring back, after its
// own restart, an earlier agent of a Member under the Member's herdr name
// (agent_name_taken). A pane of an earlier incarnation of this Member is
// closed and the start retried; a name held by anything else stays a
// refusal the Member explains.
func TestAgentNameHeldByAnEarlierPaneIsFreed(t *testing.T) {
	h := startHerdr(t, func(o *paneserver.Options) { o.AgentCommands["claude"] = claudeStandIn(t, "exec "+scriptedAgent) })
	ns := env.Namespace(t)
	hc := h.client()
	hold := func(label, name string) string {
		ws, err := hc.WorkspaceCreate(context.Background(), herdr.WorkspaceCreateParams{Label: label})
		if err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the holder's shell", func() (bool, string) {
			_, err := hc.AgentStart(context.Background(), herdr.AgentStartParams{Name: name, Kind: "claude", PaneID: ws.RootPane.PaneID})
			return err == nil, fmt.Sprint(err)
		})
		return ws.Workspace.WorkspaceID
	}
	earlier := hold("fleetd:"+ns+"/w1:an-earlier-uid", agentName(ns, "w1"))
	foreign := hold("someone else's", agentName(ns, "w2"))
	startControllers(t, ns, h.socket)
	create(t, testutil.MakeMember("w1", ns).Agent(fleetv1alpha1.AgentClaude).Obj())
	create(t, testutil.MakeMember("w2", ns).Agent(fleetv1alpha1.AgentClaude).Obj())

	m := waitReady(t, ns, "w1")
	if m.Status.WorkspaceID == earlier {
		t.Errorf("w1 runs in the earlier workspace %s", earlier)
	}
	for _, ws := range workspaces(t, h) {
		if ws.WorkspaceID == earlier {
			t.Errorf("the earlier pane of w1 still holds its name")
		}
	}
	testutil.Eventually(t, "w2 explains the name it cannot have", func() (bool, string) {
		m, err := getMember(t, ns, "w2")
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionPaneReady)
		return c != nil && c.Reason == fleetv1alpha1.ReasonAgentStartFailed && strings.Contains(c.Message, "agent_name_taken") &&
			m.Status.Phase == fleetv1alpha1.MemberFailed, describe(m)
	})
	var kept bool
	for _, ws := range workspaces(t, h) {
		kept = kept || ws.WorkspaceID == foreign
	}
	if !kept {
		t.Errorf("fleetd closed a workspace that was not a Member's")
	}
}

// failingReader is an API server that fails every live read.
type failingReader struct{ client.Reader }

func (failingReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errors.New("connection refused")
}

// aheadReader is an API server that holds a newer Member than the cache.
type aheadReader struct{ client.Reader }

func (aheadReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	obj.SetName(key.Name)
	obj.SetNamespace(key.Namespace)
	obj.SetResourceVersion("newer")
	return nil
}

// closedPanes is herdr after the Member's pane was closed.
type closedPanes struct{ Panes }

func (closedPanes) AgentGet(context.Context, string) (*herdr.AgentInfo, error) {
	return nil, herdr.ErrNotFound
}

func (closedPanes) PaneRead(context.Context, herdr.ReadParams) (*herdr.PaneRead, error) {
	return nil, herdr.ErrNotFound
}

// TestReconcileReturnsAnErrorOrARequeue: controller-runtime ignores a
// result returned with an error, so a pass that fails says so alone (the
// error's backoff brings it back), and one that waits for the cache asks
// for its requeue alone. Both the paths that check the Member is fresh
// before making a pane are covered: with no pane yet, and with a lost one.
func TestReconcileReturnsAnErrorOrARequeue(t *testing.T) {
	cases := map[string]struct {
		pane        string
		reader      client.Reader
		wantErr     bool
		wantRequeue time.Duration
	}{
		"no pane yet, and the live look fails": {reader: failingReader{}, wantErr: true},
		"no pane yet, and the cache is behind": {reader: aheadReader{}, wantRequeue: staleRetry},
		"a lost pane, and the live look fails": {pane: "w1:p1", reader: failingReader{}, wantErr: true},
		"a lost pane, and the cache is behind": {pane: "w1:p1", reader: aheadReader{}, wantRequeue: staleRetry},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m := testutil.MakeMember("w1", "ns").Command("agent").Obj()
			m.UID = "0123456789abcdef"
			m.Finalizers = []string{fleetv1alpha1.MemberFinalizer}
			m.Status.PaneID, m.Status.WorkspaceID = tc.pane, strings.Split(tc.pane, ":")[0]
			c := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(m).WithStatusSubresource(m).Build()
			r := &MemberReconciler{
				Client: c, Reader: tc.reader, Panes: closedPanes{}, PaneWatch: NewPaneWatch(closedPanes{}),
				Recorder: events.NewFakeRecorder(10), Clock: clocktesting.NewFakeClock(time.Now()), AgentDir: t.TempDir(),
			}
			res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(m)})
			if (err != nil) != tc.wantErr {
				t.Fatalf("Reconcile() error = %v, want an error: %v", err, tc.wantErr)
			}
			if err != nil && !res.IsZero() {
				t.Errorf("Reconcile() = %+v with error %v: controller-runtime ignores a result returned with an error", res, err)
			}
			if err == nil && res.RequeueAfter != tc.wantRequeue {
				t.Errorf("Reconcile() requeues after %s, want %s", res.RequeueAfter, tc.wantRequeue)
			}
		})
	}
}
