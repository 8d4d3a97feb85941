package paneserver_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/fleetd/fleetd/herdr"
)

// TestHundredPanes runs a hundred panes at once: each is created, runs a
// command, is read back and closed, all concurrently.
func TestHundredPanes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a hundred shells")
	}
	const panes = 100
	h := newHarness(t)

	ids := make([]string, panes)
	var wg sync.WaitGroup
	errs := make(chan error, panes)
	for i := range panes {
		wg.Go(func() {
			created, err := h.client.WorkspaceCreate(t.Context(), herdr.WorkspaceCreateParams{Label: fmt.Sprintf("member-%d", i)})
			if err != nil {
				errs <- fmt.Errorf("creating pane %d: %w", i, err)
				return
			}
			ids[i] = created.RootPane.PaneID
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	snap, err := h.client.SessionSnapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Panes) != panes {
		t.Fatalf("snapshot has %d panes, want %d", len(snap.Panes), panes)
	}

	for _, id := range ids {
		wg.Go(func() {
			// The arithmetic keeps the typed command from matching the output.
			if err := h.awaitPrompt(id); err != nil {
				t.Error(err)
				return
			}
			if err := h.tryRun(id, `echo "answer-$((6*7))-$HERDR_PANE_ID"`); err != nil {
				t.Error(err)
				return
			}
			if _, err := h.awaitLine(id, "answer-42-"+id); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	for _, id := range ids {
		wg.Go(func() {
			if err := h.client.PaneClose(t.Context(), id); err != nil {
				t.Errorf("PaneClose(%s) = %v", id, err)
			}
		})
	}
	wg.Wait()
	snap, err = h.client.SessionSnapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Panes)+len(snap.Workspaces) != 0 {
		t.Errorf("after closing, snapshot has %d panes and %d workspaces", len(snap.Panes), len(snap.Workspaces))
	}
}
