package paneserver_test

import (
	"errors"
	"testing"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

// TestRename: workspace.rename sets a workspace's label and agent.rename
// an agent's name, which then targets it; a name another agent holds, or
// one herdr would refuse, is refused.
func TestRename(t *testing.T) {
	h := newHarness(t, func(o *paneserver.Options) {
		o.AgentCommands["claude"] = writeScript(t, o.Cwd, "idle-claude", "export HERDR_AGENT=claude\nexec cat")
	})
	a := h.workspace(herdr.WorkspaceCreateParams{Label: "warm"})
	b := h.workspace(herdr.WorkspaceCreateParams{Label: "other"})
	for name, ws := range map[string]*herdr.WorkspaceCreated{"warm-1": a, "taken": b} {
		if _, err := h.client.AgentStart(t.Context(), herdr.AgentStartParams{Name: name, Kind: "claude", PaneID: ws.RootPane.PaneID}); err != nil {
			t.Fatal(err)
		}
		h.waitReady(name)
	}

	if err := h.client.WorkspaceRename(t.Context(), a.Workspace.WorkspaceID, "fleetd:ns/w1:uid"); err != nil {
		t.Fatal(err)
	}
	if err := h.client.AgentRename(t.Context(), "warm-1", "w1-0123abcd"); err != nil {
		t.Fatal(err)
	}
	snap, err := h.client.SessionSnapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{}
	for _, ws := range snap.Workspaces {
		labels[ws.WorkspaceID] = ws.Label
	}
	if labels[a.Workspace.WorkspaceID] != "fleetd:ns/w1:uid" || labels[b.Workspace.WorkspaceID] != "other" {
		t.Errorf("labels after the rename: %v", labels)
	}
	got, err := h.client.AgentGet(t.Context(), "w1-0123abcd")
	if err != nil || got.PaneID != a.RootPane.PaneID {
		t.Fatalf("the renamed agent: %+v, %v", got, err)
	}
	if _, err := h.client.AgentGet(t.Context(), "warm-1"); !errors.Is(err, herdr.ErrNotFound) {
		t.Errorf("the old name still targets an agent: %v", err)
	}

	for what, rename := range map[string]func() error{
		"a name another agent holds": func() error { return h.client.AgentRename(t.Context(), "w1-0123abcd", "taken") },
		"an invalid name":            func() error { return h.client.AgentRename(t.Context(), "w1-0123abcd", "1bad") },
		"an unknown workspace":       func() error { return h.client.WorkspaceRename(t.Context(), "w999", "x") },
	} {
		var herr *herdr.Error
		if err := rename(); !errors.As(err, &herr) {
			t.Errorf("renaming to %s: %v, want herdr's refusal", what, err)
		}
	}
}
