// Package controllers holds fleetd's reconcilers, one per kind, and what
// they share to reach herdr.
//
// The Member reconciler keeps a Member's agent running and mirrors its
// status, split by concern:
//
//   - member_controller.go: Reconcile, the normal and delete paths, and
//     setup;
//   - member_pane.go: the pane's lifecycle (create, adopt, restart, close);
//   - member_pod.go: the Pod of a member that runs in one, with its pane
//     host credentials and workspace;
//   - member_token.go: the member's gateway token;
//   - member_agent.go: what the agent itself reports (hooks, transcript);
//   - member_status.go: pure decisions: judging the pane and the agent,
//     the facts a pass found turned into conditions in one place
//     (setConditions), and the restart backoff;
//   - member_files.go: a member's files where its agent runs;
//   - launch.go and env.go: the command line and environment a pane gets;
//     env and Secret resolution is shared with the Profile reconciler.
//
// The Delegation reconciler (delegation_controller.go, with
// delegation_images.go) is the injector: for one member's queue it
// gathers what it knows, lets delegation.Decide say what is due, and
// carries each step out, typing a message into the pane at most once.
//
// The Profile reconciler (profile_controller.go) reports whether a
// Profile's env can be resolved and how many members use it.
//
// Shared by them: panes.go (what the controllers need of herdr, and which
// pane host a member's panes live on), pane_watch.go (herdr's events,
// turned into reconcile requests), screen.go and screen_watch.go (reading
// a screen for what no hook reports), pane_collector.go (closing panes
// whose Member is gone) and setup.go (wiring them to one manager).
package controllers
