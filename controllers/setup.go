package controllers

import (
	"context"
	"fmt"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Config wires fleetd's controllers to herdr and the gateway.
type Config struct {
	// Panes is herdr.
	Panes Panes
	// MCPURL is the gateway's MCP endpoint as panes reach it.
	MCPURL string
	// Policy tunes the injector.
	Policy DeliveryPolicy
	// MemberConcurrency and QueueConcurrency bound parallel reconciles of
	// Members and of member queues (defaults 4 and 16).
	MemberConcurrency, QueueConcurrency int
	// Clock is the real clock unless set.
	Clock clock.PassiveClock
}

// SetupWithManager adds the herdr event source and the Member, Delegation and
// Profile controllers to mgr.
func SetupWithManager(ctx context.Context, mgr ctrl.Manager, cfg Config) error {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	events := NewPaneEvents(cfg.Panes)
	if err := mgr.Add(events); err != nil {
		return fmt.Errorf("adding herdr's event source: %w", err)
	}
	members := &MemberReconciler{
		Client:                  mgr.GetClient(),
		Reader:                  mgr.GetAPIReader(),
		Panes:                   cfg.Panes,
		Events:                  events,
		Recorder:                mgr.GetEventRecorder("fleetd-member"),
		Clock:                   cfg.Clock,
		MCPURL:                  cfg.MCPURL,
		MaxConcurrentReconciles: cfg.MemberConcurrency,
	}
	if err := members.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the member controller: %w", err)
	}
	delegations := &DelegationReconciler{
		Client:                  mgr.GetClient(),
		Panes:                   cfg.Panes,
		Recorder:                mgr.GetEventRecorder("fleetd-delegation"),
		Clock:                   cfg.Clock,
		Policy:                  cfg.Policy,
		MaxConcurrentReconciles: cfg.QueueConcurrency,
	}
	if err := delegations.SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("setting up the delegation controller: %w", err)
	}
	profiles := &ProfileReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader()}
	if err := profiles.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the profile controller: %w", err)
	}
	return nil
}
