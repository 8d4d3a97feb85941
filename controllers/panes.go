package controllers

import (
	"context"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/panehost"
)

// PaneClient is what the controllers need of one herdr: herdr itself,
// fleetd's own pane server, or the pane host of a Member's Pod, all reached
// through *herdr.Client, which satisfies it.
type PaneClient interface {
	Ping(ctx context.Context) (*herdr.Pong, error)
	SessionSnapshot(ctx context.Context) (*herdr.SessionSnapshot, error)
	WorkspaceCreate(ctx context.Context, p herdr.WorkspaceCreateParams) (*herdr.WorkspaceCreated, error)
	WorkspaceClose(ctx context.Context, workspaceID string) error
	AgentStart(ctx context.Context, p herdr.AgentStartParams) (*herdr.AgentStarted, error)
	AgentGet(ctx context.Context, target string) (*herdr.AgentInfo, error)
	AgentPrompt(ctx context.Context, p herdr.AgentPromptParams) (*herdr.AgentInfo, error)
	PaneRead(ctx context.Context, p herdr.ReadParams) (*herdr.PaneRead, error)
	PaneSendInput(ctx context.Context, p herdr.PaneSendInputParams) error
	PaneSendKeys(ctx context.Context, paneID string, keys ...string) error
	PaneReportAgent(ctx context.Context, p herdr.PaneReportAgentParams) error
	Subscribe(ctx context.Context, subs []herdr.Subscription) *herdr.Stream
}

var _ PaneClient = (*herdr.Client)(nil)

// AgentFiles is where a known agent's configuration is written before it
// starts, and its hooks' record read: beside fleetd (a pane server that
// shares fleetd's filesystem), or through the pane host where the agent
// runs.
type AgentFiles interface {
	Install(ctx context.Context, dir, workingDir string, files []agents.File) error
	Observe(ctx context.Context, kind fleetv1alpha1.AgentKind, dir string, tokens fleetv1alpha1.TranscriptCursor) (panehost.Observation, error)
	// ReadFile reads a file within root, a member's working directory.
	ReadFile(ctx context.Context, root, path string, maxBytes int64) ([]byte, error)
	// Remove removes what a deleted member left: its agent directory dir
	// ("" for none) and, where it ran as a user of its own, that user's
	// processes and files.
	Remove(ctx context.Context, dir string) error
}

var (
	_ AgentFiles = panehost.Local{}
	_ AgentFiles = panehost.Remote{}
)
