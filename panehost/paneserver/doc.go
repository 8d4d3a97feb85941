// Package paneserver is the pane server fleetd ships: herdr-compatible,
// with herdr's socket protocol and the methods fleetd calls, and a real
// pty, shell and terminal emulator behind every pane. It runs beside fleetd
// in local mode (fleetd dev starts it where no herdr is installed) and in the
// agent's container of every member Pod (cmd/paneserver), where the pane
// host relays the controllers' TLS connections to its socket. It follows
// herdr's behaviour (0.8.2, protocol 20), not habits of its own, so that a
// client written against herdr works with it unchanged:
//
//   - Report authority. pane.report_agent answers ok whatever it changes.
//     Reports are ordered per source by seq; once a source sent a seq, its
//     reports without one are ignored. Among custom sources the latest
//     report wins and never expires; it lapses when the agent it names
//     exits (a label herdr does not know survives the exit), and
//     pane.release_agent or pane.clear_agent_authority end it. herdr's own
//     integrations (herdr:claude, ...) are the only sources whose session
//     ids are kept; for Claude and Codex their state is ignored, and once
//     such a session is recorded every other source's reports are dropped.
//     A report whose label names another known agent than the one running
//     is dropped.
//   - Agents. The foreground process of every pane is identified as herdr
//     does: a HERDR_AGENT hint in its environment, its program name, or the
//     script a node or shell host runs. agent.prompt refuses what herdr
//     refuses: a blocked agent (agent_blocked), an agent of a kind herdr
//     does not know, one still launching, or one that is not the pane's
//     foreground process (agent_not_ready). It answers, then presses Enter
//     300ms later; with wait, an agent that was not working and shows no
//     change within 5s is agent_prompt_stalled.
//   - Launches. agent.start needs the shell at its prompt. The agent is
//     ready no sooner than 3s after the start, once it is the started kind
//     and idle; a report never makes it ready early. A launch that shows a
//     dialog first stays launch_pending with no deadline; one that reaches
//     its deadline otherwise loses its name.
//   - Environment. Panes inherit the server's environment, with TERM and
//     COLORTERM set and CODEX_THREAD_ID removed; the caller's env overrides
//     it, and herdr's HERDR_* variables override everything.
//   - Events. The latest 512 events of all kinds are kept: a lifecycle
//     subscription replays those of its kind, oldest first; filtered ones
//     start from now. Each subscription gets at most one event per 100ms,
//     so subscriptions interleave by their place in the list.
//   - Restarts. With SessionFile set, the layout comes back with the same
//     ids, fresh shells in the old directories showing the old output, and
//     agents an official integration reported are resumed (claude
//     --resume <id>) under their old names, ready at once. Every other
//     agent's name is free again. A restored workspace's user derives from
//     its label, never from the file; the file must be the server's own,
//     mode 0600 and no link, and one that names a user outside the
//     workspaces' range is refused.
//   - Ids and reads. Ids spell numbers as herdr does (w1 ... w9, wA);
//     pane.read answers revision 0 and source detection reads the screen.
//
// Where it deliberately differs from herdr:
//   - Members are not one trust domain. With Options.Users each workspace
//     runs under a Unix user of its own, the socket is open to all users,
//     and every call is authorised by the caller's peer credentials: a
//     workspace's user may report, read, type and close only in its own
//     panes (permission_denied otherwise); the server's own user and TLS
//     callers may do everything. herdr has one user and a 0600 socket.
//     Each such user has a name (the Member's, from a fleetd label), in
//     USER and LOGNAME, and a TMPDIR of its own; where the server may make
//     mount namespaces, each pane gets one in which /etc/passwd and
//     /etc/group name the user and /tmp is its own (identity.go), and
//     RemoveWorkspaceUser removes what a user left once its Member is gone.
//   - Panes are confined. Every pane's shell runs with no_new_privs; with
//     Options.Users and CAP_SYS_ADMIN its /proc shows only its own user's
//     processes; when a user's last pane goes, every process of that user
//     ends, in whatever session. The network stays shared.
//   - Typed text is text. pane.send_input and agent.prompt show every
//     control in their text (but newline and tab) instead of acting on it;
//     keys go through keys.
//   - A report whose seq lies more than 10s in the future (fleetd numbers
//     reports by the time in microseconds) is refused with invalid_params;
//     herdr would take it and drop every later report as stale.
//   - There are no screen manifests. herdr reads a known agent's screen for
//     its status (and forces blocked over a custom report when a dialog
//     shows); here an identified agent with no report counts as idle once
//     its 3s grace is over, and never as blocked. fleetd reads the screen
//     itself (herdr/detect) and reports what it sees, so its behaviour does
//     not depend on herdr's manifests.
//   - Tabs hold a single pane (no splits); reads are always plain text.
//   - An idle agent stays idle: herdr's done (idle, output unseen) needs
//     someone looking at the screen, and a headless server has no one.
//   - Process identification looks at the foreground group's leader only,
//     not every member of the group.
//   - Only the methods fleetd calls are served.
//
// Serving a socket:
//
//	srv, err := paneserver.New(paneserver.Options{SocketPath: sock, Shell: "/bin/sh"})
//	if err != nil { ... }
//	go srv.Serve()
//	defer srv.Close()
//	client := herdr.NewClient(sock)
package paneserver
