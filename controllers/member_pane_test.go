package controllers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

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
