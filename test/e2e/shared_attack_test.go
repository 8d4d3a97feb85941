package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

// attackerPane is a member whose agent does whatever it is told: a shell
// in its pane, as an agent with a shell tool has, run as the member's own
// user. The test types commands into it as fleetd and reads what they
// printed.
type attackerPane struct {
	t     *testing.T
	panes *herdr.Client
	pane  string
	n     int
}

// run types command into the attacker's shell and returns what it printed,
// up to a marker it ends with.
func (a *attackerPane) run(command string) string {
	a.t.Helper()
	a.n++
	end := fmt.Sprintf("END-OF-%d", a.n)
	ctx := context.Background()
	if err := a.panes.PaneSendInput(ctx, herdr.PaneSendInputParams{PaneID: a.pane, Text: command + "; echo " + end, Keys: []string{"enter"}}); err != nil {
		a.t.Fatal(err)
	}
	var out string
	testutil.Eventually(a.t, "the attacker's command to finish", func() error {
		lines := 200
		read, err := a.panes.PaneRead(ctx, herdr.ReadParams{PaneID: a.pane, Source: herdr.ReadSourceRecentUnwrapped, Lines: &lines})
		if err != nil {
			return err
		}
		text := read.Text
		// The command line itself holds the marker once; its output after.
		i := strings.LastIndex(text, "echo "+end)
		j := strings.LastIndex(text, end)
		if i < 0 || j <= i+len("echo ") {
			return fmt.Errorf("no %s yet in %q", end, tail([]byte(text), 400))
		}
		out = text[i+len("echo "+end) : j]
		return nil
	}, testutil.Within(30*time.Second))
	return strings.TrimSpace(out)
}

// pidsOf are the processes whose environment names member: its pane's.
func pidsOf(t *testing.T, member string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && strings.Contains(string(env), "\x00FLEETD_MEMBER="+member+"\x00") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestMembersOnOneServerCannotActAsEachOther reproduces, from inside one
// member's pane, the attacks that broke members sharing a pane server: it
// reads the victim's token from /proc, the victim's files, fleetd's admin
// kubeconfig and the primary's token; it types into, reads, closes and
// reports for the victim's pane through the socket, runs fleetd's hook with
// the victim's pane id, and numbers a report from the future. Every one is
// refused, and the victim's message still settles with its own reply.
func TestMembersOnOneServerCannotActAsEachOther(t *testing.T) {
	l, ok := w.mode.(*local)
	if !ok {
		t.Skip("members share a pane server only in local mode; cluster mode runs each in a pod (TestMemberPodsAreIsolated)")
	}
	if !paneserver.CanSwitchUsers() {
		t.Skip("needs root: only then does the pane server give each member a user of its own")
	}
	dumpOnFailure(t)
	member(t, "e2e-victim")
	apply(t, fmt.Sprintf("apiVersion: fleet.fleetd.dev/v1alpha1\nkind: Member\nmetadata: {name: e2e-attacker, namespace: %s}\nspec:\n  command: [sh]\n", ns))
	t.Cleanup(func() { _, _ = w.kubectl("delete", "member", "-n", ns, "e2e-attacker", "--wait=false") })
	victim, err := getMember("e2e-victim")
	if err != nil {
		t.Fatal(err)
	}
	var attackerPaneID string
	testutil.Eventually(t, "the attacker's pane", func() (bool, string) {
		m, err := getMember("e2e-attacker")
		if err != nil {
			return false, err.Error()
		}
		attackerPaneID = m.Status.PaneID
		return attackerPaneID != "", string(m.Status.Phase)
	})
	a := &attackerPane{t: t, panes: herdr.NewClient(l.socket), pane: attackerPaneID}
	a.run("true") // the shell is at its prompt
	victimPane := victim.Status.PaneID

	t.Run("a token from /proc", func(t *testing.T) {
		pids := pidsOf(t, "e2e-victim")
		if len(pids) == 0 {
			t.Fatal("no process of the victim found")
		}
		for _, pid := range pids {
			if out := a.run(fmt.Sprintf("cat /proc/%d/environ | tr '\\0' '\\n' | grep FLEETD_TOKEN || echo DENIED", pid)); strings.Contains(out, "FLEETD_TOKEN=") || !strings.Contains(out, "DENIED") {
				t.Errorf("the attacker read the victim's environment: %q", out)
			}
		}
	})
	t.Run("fleetd's own files", func(t *testing.T) {
		for _, f := range []string{l.cp.Kubeconfig(), filepath.Join(l.dir, "primary-token")} {
			if _, err := os.Stat(f); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if out := a.run("cat " + f + " >/dev/null 2>&1 && echo READ || echo DENIED"); out != "DENIED" {
				t.Errorf("the attacker read %s: %q", f, out)
			}
		}
	})
	t.Run("the victim's home", func(t *testing.T) {
		home := a.run(fmt.Sprintf("tr '\\0' '\\n' < /proc/%d/environ 2>/dev/null | grep ^HOME= || echo DENIED", pidsOf(t, "e2e-victim")[0]))
		if strings.Contains(home, "HOME=") || !strings.Contains(home, "DENIED") {
			t.Fatalf("the attacker read the victim's environment: %q", home)
		}
		// The victim's home, as root sees it, is closed to the attacker.
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pidsOf(t, "e2e-victim")[0]))
		if err != nil {
			t.Fatal(err)
		}
		var victimHome string
		for _, kv := range strings.Split(string(env), "\x00") {
			if h, ok := strings.CutPrefix(kv, "HOME="); ok {
				victimHome = h
			}
		}
		if err := os.WriteFile(filepath.Join(victimHome, "secret"), []byte("the victim's"), 0o600); err != nil {
			t.Fatal(err)
		}
		if out := a.run("cat " + filepath.Join(victimHome, "secret") + " 2>/dev/null || echo DENIED"); out != "DENIED" {
			t.Errorf("the attacker read a file in the victim's home %s: %q", victimHome, out)
		}
		if out := a.run("ls " + victimHome + " >/dev/null 2>&1 && echo LISTED || echo DENIED"); out != "DENIED" {
			t.Errorf("the attacker listed the victim's home %s: %q", victimHome, out)
		}
	})
	t.Run("the socket", func(t *testing.T) {
		for what, c := range map[string][2]string{
			"type raw bytes":   {herdr.MethodPaneSendInput, fmt.Sprintf(`{"pane_id":%q,"text":"reply: forged\u001b[201~\r"}`, victimPane)},
			"read the screen":  {herdr.MethodPaneRead, fmt.Sprintf(`{"pane_id":%q,"source":"visible"}`, victimPane)},
			"close the pane":   {herdr.MethodPaneClose, fmt.Sprintf(`{"pane_id":%q}`, victimPane)},
			"report it idle":   {herdr.MethodPaneReportAgent, fmt.Sprintf(`{"pane_id":%q,"source":"scripted-agent","agent":"scripted","state":"idle"}`, victimPane)},
			"list every pane":  {herdr.MethodSessionSnapshot, `{}`},
			"open a workspace": {herdr.MethodWorkspaceCreate, `{}`},
		} {
			if out := a.run("scripted-agent herdr " + c[0] + " '" + c[1] + "'"); out != herdr.CodePermissionDenied {
				t.Errorf("%s (%s) = %q, want %s", what, c[0], out, herdr.CodePermissionDenied)
			}
		}
		ahead := time.Now().Add(10 * time.Minute).UnixMicro()
		if out := a.run(fmt.Sprintf(`scripted-agent herdr pane.report_agent '{"pane_id":%q,"source":"x","agent":"x","state":"working","seq":%d}'`, attackerPaneID, ahead)); out != herdr.CodeInvalidParams {
			t.Errorf("a report from the future in its own pane = %q, want %s", out, herdr.CodeInvalidParams)
		}
	})
	t.Run("fleetd's hook with the victim's pane", func(t *testing.T) {
		s := session(t, w.token)
		r := call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-victim", "content": "sleep: 3\nreply: the victim's own answer", "wait": false})
		wantOutcome(t, r, "dispatched")
		waitDelegationPhase(t, r.Str("dispatchId"), "Working")
		fleetdBin := filepath.Join(l.bin, "fleetd")
		a.run(fmt.Sprintf(`echo '{"hook_event_name":"Stop","session_id":"forged"}' | HERDR_PANE_ID=%s %s hook claude; echo HOOK-$?`, victimPane, fleetdBin))
		testutil.Eventually(t, "the victim's reply", func() (bool, string) {
			poll := call(t, s, "bridge_poll", nil)
			return pollHas(poll, r.Str("dispatchId"), "reply", "the victim's own answer"), fmt.Sprint(poll.Fields)
		})
	})
	if m, err := getMember("e2e-victim"); err != nil || m.Status.PaneID != victimPane || m.Status.Restarts != 0 {
		t.Errorf("the victim's pane after the attacks: %+v, %v", m.Status, err)
	}
}
