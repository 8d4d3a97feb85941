// Command paneserver runs a herdr-compatible server: fleetd's stand-in for
// herdr where herdr itself cannot be installed.
//
//	paneserver --socket /run/herdr/herdr.sock
//
// The socket defaults to $HERDR_SOCKET_PATH. SIGTERM or SIGINT kills every
// pane's processes and removes the socket.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/herdr/paneserver"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "paneserver:", err)
		os.Exit(1)
	}
}

func run() error {
	opts := paneserver.Options{AgentCommands: map[string]string{}}
	flag.StringVar(&opts.SocketPath, "socket", os.Getenv(herdr.SocketPathEnv), "unix socket to listen on (default $"+herdr.SocketPathEnv+")")
	flag.StringVar(&opts.Shell, "shell", "", "shell each pane runs (default $SHELL, else /bin/sh)")
	flag.StringVar(&opts.Cwd, "cwd", "", "working directory of panes created without one (default the current directory)")
	flag.StringVar(&opts.SessionFile, "session-file", "", "where to keep the session across restarts, as herdr keeps session.json: the layout returns with the same ids, and agents herdr's own integrations reported are resumed (empty keeps nothing)")
	flag.Func("agent-command", "`label=executable` agent.start types for an agent kind; repeatable", func(v string) error {
		label, exe, ok := strings.Cut(v, "=")
		if !ok || label == "" || exe == "" {
			return fmt.Errorf("want label=executable, got %q", v)
		}
		opts.AgentCommands[label] = exe
		return nil
	})
	flag.Parse()
	if opts.SocketPath == "" {
		return fmt.Errorf("no socket: pass --socket or set %s", herdr.SocketPathEnv)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	opts.Logger = log

	srv, err := paneserver.New(opts)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	log.Info("Serving herdr protocol", "socket", srv.SocketPath())

	select {
	case <-ctx.Done():
		log.Info("Shutting down")
	case err := <-served:
		_ = srv.Close()
		return err
	}
	if err := srv.Close(); err != nil {
		return err
	}
	return <-served
}
