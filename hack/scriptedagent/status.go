package main

import (
	"context"
	"os"
)

// Agent states the scripted agent reports, as herdr's pane.report_agent
// spells them.
const (
	stateIdle    = "idle"
	stateWorking = "working"
	stateBlocked = "blocked"
)

// Identity of the scripted agent in its status reports.
const (
	reportSource = "scripted-agent"
	reportAgent  = "scripted"
	// envAgentKind names the agent kind the process stands in for, as
	// herdr reads it to identify a process (HERDR_AGENT=claude): the
	// scripted agent then reports under that kind, as herdr expects of the
	// agent it started.
	envAgentKind = "HERDR_AGENT"
)

// reportLabel is the agent label of the scripted agent's reports.
func reportLabel() string {
	if kind := os.Getenv(envAgentKind); kind != "" {
		return kind
	}
	return reportAgent
}

// statusReporter tells herdr what the agent is doing, the way hook-based
// agents do.
type statusReporter interface {
	// Report records the agent's new state; message may be empty.
	Report(ctx context.Context, state, message string) error
}

// silentReporter reports nothing, for an agent that runs outside herdr.
type silentReporter struct{}

// Report does nothing.
func (silentReporter) Report(context.Context, string, string) error { return nil }
