package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/fleetd/fleetd/internal/mcpclient"
	"github.com/fleetd/fleetd/test/framework/browsertest"
)

// TestDashboard drives the dashboard in headless Chromium against the real
// fleetd: a member applied with kubectl appears and turns idle; a message
// sent from its page is typed into its pane by the injector (the terminal
// shows the prompt), asks back, is answered over MCP and replied to, each
// step on the timeline; and Cancel interrupts a turn in progress.
func TestDashboard(t *testing.T) {
	dumpOnFailure(t)
	b := browsertest.Start(t)
	d := b.OpenDashboard(t, strings.TrimSuffix(w.gatewayURL, "/mcp"), w.token)
	d.WaitLive()

	member(t, "e2e-dash")
	d.WaitRow("e2e-dash", "idle")
	d.WaitRowText("e2e-dash", "scripted-agent")
	d.Screenshot("fleet")

	d.OpenMember("e2e-dash")
	id := d.Send("ask: which branch?\nreply: working on {answer}")
	d.WaitTerminal("ask: which branch?")
	d.WaitPhase(id, "Asking")
	d.WaitStep(id, "asked", "which branch?")
	d.Screenshot("asking")
	s := session(t, w.token)
	wantOutcome(t, call(t, s, "bridge_send", map[string]any{"turnId": id + ".q1", "content": "main"}), "reply")
	d.WaitPhase(id, "Replied")
	d.WaitStep(id, "replied", "working on main")
	if got, want := d.Steps(id), []string{"created", "queued", "delivered", "working", "asked", "answered", "replied"}; !slices.Equal(got, want) {
		t.Errorf("steps %v, want %v", got, want)
	}
	d.Screenshot("replied")

	long := d.Send("sleep: 60\nreply: too late")
	d.WaitPhase(long, "Working")
	d.Cancel(long)
	d.WaitPhase(long, "Cancelled")
	d.WaitStep(long, "cancelled", "")
	d.Screenshot("cancelled")
	r, err := mcpclient.Call(context.Background(), s, "bridge_cancel", map[string]any{"dispatchId": long})
	if err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, r, "cancelled")
}
