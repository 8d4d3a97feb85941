package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

// BenchmarkPromptToWorking measures how long the scripted agent takes from
// herdr's agent.prompt to herdr reporting it working, as a subscriber sees
// it: herdr's 300 ms submit delay, reading the prompt, and the
// pane.report_agent round trip. It runs the real binary in a real pane.
func BenchmarkPromptToWorking(b *testing.B) {
	dir, err := os.MkdirTemp("", "sab")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	agent := filepath.Join(dir, "scripted-agent")
	if out, err := exec.Command("go", "build", "-o", agent, ".").CombinedOutput(); err != nil {
		b.Fatalf("building the agent: %v\n%s", err, out)
	}
	socket := filepath.Join(dir, "h.sock")
	srv, err := paneserver.New(paneserver.Options{SocketPath: socket, Shell: "/bin/sh"})
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	defer srv.Close()

	ctx := context.Background()
	c := herdr.NewClient(socket)
	ws, err := c.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{})
	if err != nil {
		b.Fatal(err)
	}
	pane := ws.RootPane.PaneID
	if err := c.PaneSendInput(ctx, herdr.PaneSendInputParams{PaneID: pane, Text: "exec " + agent, Keys: []string{"enter"}}); err != nil {
		b.Fatal(err)
	}
	stream := c.Subscribe(ctx, []herdr.Subscription{herdr.PaneAgentStatusChanged(pane)})
	defer stream.Close()
	waitStatus := func(want herdr.AgentStatus) {
		timeout := time.After(30 * time.Second)
		for {
			select {
			case ev, ok := <-stream.Events():
				if !ok {
					b.Fatalf("the stream ended: %v", stream.Err())
				}
				if ev.Kind == herdr.EventPaneAgentStatusChanged && ev.Data.AgentStatus == want {
					return
				}
				if ev.Kind == herdr.EventResync {
					for _, a := range ev.Snapshot.Agents {
						if a.PaneID == pane && a.AgentStatus == want {
							return
						}
					}
				}
			case <-timeout:
				b.Fatalf("no %s status within 30s", want)
			}
		}
	}
	waitStatus(herdr.AgentStatusIdle)

	b.ResetTimer()
	for range b.N {
		if _, err := c.AgentPrompt(ctx, herdr.AgentPromptParams{Target: pane, Text: "silent: ok"}); err != nil {
			b.Fatal(err)
		}
		waitStatus(herdr.AgentStatusWorking)
		b.StopTimer()
		waitStatus(herdr.AgentStatusIdle)
		b.StartTimer()
	}
}
