package controllers

import (
	"context"

	"github.com/fleetd/fleetd/herdr"
)

// Panes is what the controllers need of herdr. *herdr.Client satisfies it.
type Panes interface {
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

var _ Panes = (*herdr.Client)(nil)
