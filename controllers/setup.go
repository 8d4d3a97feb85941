package controllers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/herdr/detect"
	"github.com/fleetd/fleetd/panehost"
)

// Config wires fleetd's controllers to herdr and the gateway.
type Config struct {
	// Panes is the shared pane server: herdr, or fleetd's own, beside
	// fleetd.
	Panes PaneClient
	// PaneHosts routes pod members to their Pods' pane hosts; nil runs no
	// pod members.
	PaneHosts *panehost.Hosts
	// CA mints pod members' pane host credentials (with PaneHosts).
	CA *panehost.CA
	// DefaultRuntime is where Members that do not say run (Shared if
	// empty); Pods is how pod members run.
	DefaultRuntime fleetv1alpha1.Runtime
	Pods           PodSettings
	// MCPURL is the gateway's MCP endpoint as panes reach it.
	MCPURL string
	// Policy tunes the injector (delegation.DefaultPolicy if zero).
	Policy delegation.Policy
	// MemberConcurrency and QueueConcurrency bound parallel reconciles of
	// Members and of member queues (default 16 each).
	MemberConcurrency, QueueConcurrency int
	// Clock is the real clock unless set.
	Clock clock.PassiveClock
	// AgentDir is where each Member of a known agent gets a directory of its
	// own (DefaultAgentDir if empty); herdr's panes must reach it at the
	// same path.
	AgentDir string
	// HookCommand runs `fleetd hook` where herdr's panes run.
	HookCommand []string
	// ScreenManifests is a directory of screen manifests (<agent>.toml) that
	// replace fleetd's built-in ones; empty uses the built-ins.
	ScreenManifests string
	// ScreenInterval is how often agents' screens are read
	// (DefaultScreenInterval if zero).
	ScreenInterval time.Duration
	// PaneCollectInterval is how often the shared pane server is swept for
	// workspaces whose Member is gone (DefaultPaneCollectInterval if zero).
	PaneCollectInterval time.Duration
	// Sharding is which shards these controllers own; the zero value owns
	// every one.
	Sharding Sharding
	// Metrics, when set, records Delegations' phases and outcomes and
	// Members' restarts; the Member and Delegation gauges join them on its
	// registry.
	Metrics *Metrics
}

// DefaultAgentDir is where agents' directories go when none is configured:
// $XDG_STATE_HOME/fleetd/agents, else ~/.local/state/fleetd/agents.
func DefaultAgentDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "fleetd", "agents")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "fleetd", "agents")
	}
	return filepath.Join(os.TempDir(), "fleetd", "agents")
}

// SetupWithManager adds the pane and screen watches and the Member, Delegation and
// Profile controllers to mgr.
func SetupWithManager(ctx context.Context, mgr ctrl.Manager, cfg Config) error {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Policy == (delegation.Policy{}) {
		cfg.Policy = delegation.DefaultPolicy
	}
	if cfg.AgentDir == "" {
		cfg.AgentDir = DefaultAgentDir()
	}
	agentDir, err := filepath.Abs(cfg.AgentDir)
	if err != nil {
		return fmt.Errorf("resolving the agent directory: %w", err)
	}
	paneWatch := NewPaneWatch(cfg.Panes)
	if err := mgr.Add(paneWatch); err != nil {
		return fmt.Errorf("adding the pane watch: %w", err)
	}
	detectors, err := detect.Load(cfg.ScreenManifests)
	if err != nil {
		return err
	}
	screens := NewScreenWatch(detectors, cfg.ScreenInterval, cfg.Clock)
	if err := mgr.Add(screens); err != nil {
		return fmt.Errorf("adding the screen watch: %w", err)
	}
	if cfg.Panes != nil {
		collector := &PaneCollector{Panes: cfg.Panes, Reader: mgr.GetAPIReader(), Interval: cfg.PaneCollectInterval}
		if err := mgr.Add(collector); err != nil {
			return fmt.Errorf("adding the pane collector: %w", err)
		}
	}
	if cfg.Metrics != nil {
		if err := cfg.Metrics.useState(mgr.GetCache(), cfg.Clock, mgr.Elected(), cfg.Sharding.owns); err != nil {
			return fmt.Errorf("registering the member and delegation gauges: %w", err)
		}
	}
	runtimes := NewRuntimes(cfg.Panes, cfg.PaneHosts, agentDir, cfg.HookCommand)
	members := &MemberReconciler{
		Sharding:                cfg.Sharding,
		Runtimes:                runtimes,
		DefaultRuntime:          cfg.DefaultRuntime,
		Pods:                    cfg.Pods,
		CA:                      cfg.CA,
		Client:                  mgr.GetClient(),
		Reader:                  mgr.GetAPIReader(),
		Panes:                   cfg.Panes,
		PaneWatch:               paneWatch,
		Screens:                 screens,
		AgentDir:                agentDir,
		HookCommand:             cfg.HookCommand,
		Recorder:                mgr.GetEventRecorder("fleetd-member"),
		Clock:                   cfg.Clock,
		MCPURL:                  cfg.MCPURL,
		MaxConcurrentReconciles: cfg.MemberConcurrency,
		Metrics:                 cfg.Metrics,
	}
	if err := members.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the member controller: %w", err)
	}
	delegations := &DelegationReconciler{
		Sharding:                cfg.Sharding,
		Runtimes:                runtimes,
		Client:                  mgr.GetClient(),
		Reader:                  mgr.GetAPIReader(),
		Panes:                   cfg.Panes,
		Recorder:                mgr.GetEventRecorder("fleetd-delegation"),
		Clock:                   cfg.Clock,
		Policy:                  cfg.Policy,
		MaxConcurrentReconciles: cfg.QueueConcurrency,
		Metrics:                 cfg.Metrics,
	}
	if err := delegations.SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("setting up the delegation controller: %w", err)
	}
	profiles := &ProfileReconciler{Sharding: cfg.Sharding, Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Pods: cfg.Pods, CA: cfg.CA, Hosts: cfg.PaneHosts}
	if err := profiles.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the profile controller: %w", err)
	}
	return setupShardStrays(mgr, cfg.Sharding)
}
