package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
)

// DefaultPaneCollectInterval is how often the shared pane server is swept
// for workspaces whose Member is gone.
const DefaultPaneCollectInterval = time.Minute

// PaneCollector closes the shared pane server's workspaces whose Member is
// gone: one deleted before any pass recorded its pane, or a pane left
// behind by a controller that stopped halfway. It goes by the workspaces'
// labels, which name the Member incarnation (namespace, name and UID), and
// asks the API server, not the cache, whether that Member exists: one
// created a moment ago may not be cached yet.
type PaneCollector struct {
	Panes    PaneClient
	Reader   client.Reader
	Interval time.Duration
}

// NeedLeaderElection ties the sweeps to the controllers that make panes.
func (c *PaneCollector) NeedLeaderElection() bool { return true }

// Start sweeps at once and then every Interval until ctx ends.
func (c *PaneCollector) Start(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithName("pane-collector")
	interval := c.Interval
	if interval <= 0 {
		interval = DefaultPaneCollectInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		closed, err := c.Collect(ctx)
		if err != nil && ctx.Err() == nil && !errors.Is(err, herdr.ErrUnavailable) {
			log.Error(err, "Sweeping the pane server for panes whose member is gone")
		}
		for _, ws := range closed {
			log.Info("Closed a workspace whose member is gone", "workspace", ws)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Collect sweeps once and returns the labels of the workspaces it closed.
func (c *PaneCollector) Collect(ctx context.Context) ([]string, error) {
	hctx, cancel := context.WithTimeout(ctx, herdrTimeout)
	defer cancel()
	snap, err := c.Panes.SessionSnapshot(hctx)
	if err != nil {
		return nil, fmt.Errorf("taking a herdr snapshot: %w", err)
	}
	var closed []string
	for _, ws := range snap.Workspaces {
		key, uid, ok := parseWorkspaceLabel(ws.Label)
		if !ok {
			continue
		}
		var m fleetv1alpha1.Member
		err := c.Reader.Get(ctx, key, &m)
		switch {
		case err == nil && m.UID == uid:
			continue
		case err != nil && !apierrors.IsNotFound(err):
			return closed, fmt.Errorf("looking up member %s: %w", key, err)
		}
		if err := c.Panes.WorkspaceClose(hctx, ws.WorkspaceID); err != nil && !errors.Is(err, herdr.ErrNotFound) {
			return closed, fmt.Errorf("closing workspace %s of member %s, which is gone: %w", ws.WorkspaceID, key, err)
		}
		closed = append(closed, ws.Label)
	}
	return closed, nil
}
