// Package paneserver is a herdr-compatible server: the same socket protocol
// and the subset of methods fleetd calls, with a real pty, shell and
// terminal emulator behind every pane. fleetd's tests and local runs use it
// where the real herdr cannot be installed.
//
// In a test:
//
//	srv, err := paneserver.New(paneserver.Options{SocketPath: sock, Shell: "/bin/sh"})
//	if err != nil { ... }
//	go srv.Serve()
//	defer srv.Close()
//	client := herdr.NewClient(sock)
//
// Where it differs from herdr: tabs hold a single pane (no splits); reads
// are always plain text; agent status comes from pane.report_agent or, for
// agents started by agent.start, from the agent's process being in the
// foreground (there are no screen manifests); and an idle report stays idle
// (herdr's done marks idle-but-unseen, and a headless server has no one to
// see it).
package paneserver
