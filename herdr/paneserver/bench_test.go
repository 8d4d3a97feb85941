package paneserver_test

import (
	"testing"

	"github.com/fleetd/fleetd/herdr"
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
