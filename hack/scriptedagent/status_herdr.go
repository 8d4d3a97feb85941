package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/fleetd/fleetd/herdr"
)

// herdrReporter reports the agent's state with herdr's pane.report_agent,
// as the lifecycle hooks of Claude Code or Codex do.
type herdrReporter struct {
	client    *herdr.Client
	paneID    string
	sessionID string
	// now is the clock that seq starts from.
	now func() time.Time

	mu  sync.Mutex
	seq uint64
}

// newHerdrReporter returns a reporter for the pane paneID on herdr's socket.
func newHerdrReporter(socketPath, paneID, sessionID string) *herdrReporter {
	return &herdrReporter{
		client:    herdr.NewClient(socketPath),
		paneID:    paneID,
		sessionID: sessionID,
		now:       time.Now,
	}
}

// Report sends state to herdr. herdr ignores a report whose seq is not above
// the last one from the same source, so seq follows the wall clock in
// milliseconds: an agent restarted in the same pane must not look stale. The
// lock keeps seq in the order the reports are sent.
func (r *herdrReporter) Report(ctx context.Context, state, message string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq = max(r.seq+1, uint64(r.now().UnixMilli()))
	seq := r.seq
	params := herdr.PaneReportAgentParams{
		PaneID:         r.paneID,
		Source:         reportSource,
		Agent:          reportLabel(),
		State:          herdr.AgentState(state),
		Seq:            &seq,
		AgentSessionID: &r.sessionID,
	}
	if message != "" {
		params.Message = &message
	}
	if err := r.client.PaneReportAgent(ctx, params); err != nil {
		return fmt.Errorf("reporting %s for pane %s: %w", state, r.paneID, err)
	}
	return nil
}

// newSessionID returns a random agent session id, new for each process, so
// that herdr and fleetd can tell a restarted agent from the one before.
func newSessionID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "scripted-" + hex.EncodeToString(b)
}
