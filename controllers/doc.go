// Package controllers holds fleetd's reconcilers, one per kind, and what
// they share to reach herdr.
//
// The Member reconciler (member_controller.go) keeps a Member's agent
// running and mirrors its status; its doc comment lists the files its
// phases live in (member_*.go, runtime.go, launch.go, env.go).
// member_status.go and member_conditions.go hold its decisions about the
// pane and the agent as pure functions: judging the pane and the agent,
// the facts a pass found turned into conditions, one function per
// condition (setConditions), and the restart
// backoff.
//
// The Delegation reconciler (delegation_controller.go, with
// delegation_typing.go for typing into a pane, delegation_carry.go for a
// reply or question carried to a member sender, delegation_images.go for
// the images a message carries and delegation_tracing.go for its spans)
// is the injector: for one member's
// queue it gathers what it knows, lets delegation.Decide say what is due,
// and carries each step out, typing a message into the pane at most once.
//
// The Profile reconciler (profile_controller.go) reports whether a
// Profile's env can be resolved (env.go) and how many members use it.
//
// Around them: runtime.go (where a Member's agent runs, which the
// Delegation reconciler and the gateway ask too), panes.go (PaneClient,
// what the controllers need of one herdr, and AgentFiles, where an agent's
// files are reached), pane_watch.go (herdr's events, turned into the
// Member reconciler's requests), screen.go and screen_watch.go (reading a
// screen for what no hook reports), pane_collector.go (closing the shared
// pane server's workspaces whose Member is gone), own_writes.go (what the
// Member and Delegation reconcilers wrote that their caches may not show
// yet), metrics.go and metrics_state.go (the Prometheus metrics), and
// setup.go (wiring them to one manager).
package controllers
