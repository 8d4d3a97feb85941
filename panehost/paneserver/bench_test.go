package paneserver_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

// BenchmarkPing measures one request round trip: dial, request, response,
// close.
func BenchmarkPing(b *testing.B) {
	h := newHarness(b)
	for b.Loop() {
		if _, err := h.direct.Ping(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReportToEvent measures how long a status change takes from
// pane.report_agent to the subscriber's pane.agent_status_changed.
func BenchmarkReportToEvent(b *testing.B) {
	h := newHarness(b)
	pane := h.pane()
	stream := h.direct.Subscribe(b.Context(), []herdr.Subscription{herdr.PaneAgentStatusChanged(pane)})
	defer stream.Close()
	if ev := nextEvent(b, stream); ev.Kind != herdr.EventResync {
		b.Fatalf("first event = %s, want resync", ev.Kind)
	}
	states := []herdr.AgentState{herdr.AgentStateWorking, herdr.AgentStateIdle}
	i := 0
	for b.Loop() {
		state := states[i%2]
		i++
		err := h.direct.PaneReportAgent(b.Context(), herdr.PaneReportAgentParams{PaneID: pane, Source: "bench", Agent: "claude", State: state})
		if err != nil {
			b.Fatal(err)
		}
		if ev := nextEvent(b, stream); ev.Data.AgentStatus != herdr.AgentStatus(state) {
			b.Fatalf("event = %+v, want %s", ev, state)
		}
	}
}

// BenchmarkSnapshotWhilePanesStart measures a session snapshot, the call a
// controller makes on every reconcile, on a quiet server ("quiet") and on
// one that starts and closes workspaces all the while ("starting"), each
// as a workspace's own user where the test may switch users. The ratio
// of the two is what one client's pane starts cost every other client.
func BenchmarkSnapshotWhilePanesStart(b *testing.B) {
	for _, busy := range []bool{false, true} {
		name := map[bool]string{false: "quiet", true: "starting"}[busy]
		b.Run(name, func(b *testing.B) {
			h := newHarness(b, func(o *paneserver.Options) {
				if paneserver.CanSwitchUsers() {
					o.Users = &paneserver.UserOptions{HomeRoot: filepath.Join(o.Cwd, "users")}
				}
			})
			ctx, stop := context.WithCancel(b.Context())
			var starts sync.WaitGroup
			if busy {
				starts.Go(func() {
					for i := 0; ctx.Err() == nil; i++ {
						created, err := h.direct.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Label: fmt.Sprintf("fleetd:bench/m%d:0", i%4)})
						if err != nil {
							continue
						}
						_ = h.direct.WorkspaceClose(context.Background(), created.Workspace.WorkspaceID)
					}
				})
			}
			for b.Loop() {
				if _, err := h.client.SessionSnapshot(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
			stop()
			starts.Wait()
		})
	}
}
