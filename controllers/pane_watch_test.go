package controllers

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
)

// TestPaneWatchFollowsAPaneIDReusedAfterAHerdrRestart: herdr restarts, the
// pane stream's reconnect is rejected because the pane is gone, and the
// recreated pane gets the same id. Tracking that id again must follow the
// new pane, or the Member never hears from its new agent.
func TestPaneWatchFollowsAPaneIDReusedAfterAHerdrRestart(t *testing.T) {
	h := startHerdr(t)
	c := h.client()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	newPane := func() string {
		t.Helper()
		ws, err := c.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Label: "events"})
		if err != nil {
			t.Fatal(err)
		}
		return ws.RootPane.PaneID
	}
	pw := NewPaneWatch(c)
	go func() { _ = pw.Start(ctx) }()
	key := types.NamespacedName{Namespace: "ns", Name: "m"}
	// requested waits for a reconcile request for key, draining others.
	requested := func(within time.Duration) bool {
		deadline := time.After(within)
		for {
			select {
			case ev := <-pw.requests:
				if ev.Object.GetName() == key.Name {
					return true
				}
			case <-deadline:
				return false
			}
		}
	}
	drain := func() {
		for requested(200 * time.Millisecond) {
		}
	}
	report := func(pane string, state herdr.AgentState) {
		t.Helper()
		if err := c.PaneReportAgent(ctx, herdr.PaneReportAgentParams{PaneID: pane, Source: "test", Agent: "scripted", State: state}); err != nil {
			t.Fatal(err)
		}
	}

	pane := newPane()
	pw.Track(key, pane, c)
	drain()
	report(pane, herdr.AgentStateWorking)
	if !requested(5 * time.Second) {
		t.Fatal("no request for a status change before the restart")
	}

	h.stop()
	h.start(t)
	testutil.Eventually(t, "the pane stream ended by herdr", func() (bool, string) {
		pw.mu.Lock()
		defer pw.mu.Unlock()
		return !pw.tracked[key].running(), "still running"
	})
	again := newPane()
	if again != pane {
		t.Fatalf("the restarted herdr gave the new pane id %s, not %s; the case needs a reused id", again, pane)
	}
	pw.Track(key, again, c)
	drain()
	report(again, herdr.AgentStateIdle)
	if !requested(5 * time.Second) {
		t.Fatal("no request for the status change of the pane that reused the id")
	}
}
