// Command paneserver runs fleetd's herdr-compatible pane server
// (panehost/paneserver), beside fleetd on a machine and in every member
// Pod, where it also runs as the Pod's pane host.
//
//	paneserver --socket /run/herdr/herdr.sock
//
// The socket defaults to $HERDR_SOCKET_PATH. SIGTERM or SIGINT kills every
// pane's processes and removes the socket.
//
// A member's Pod runs it twice. In the agent's container it is the pane
// server, keeping the agent's directory (--agent-root) and opening its
// socket to the Pod's group (--socket-group). In a container of its own,
// as another user, it is the pane host (--relay): it alone holds the
// member's TLS credentials and the Pod's token, serves fleetd's
// controllers over TLS (--tls-listen with --tls-dir) relayed to that
// socket, and forwards the agent's MCP traffic to the gateway with the
// token (--gateway, --gateway-listen, --token-file).
//
// As PID 1 (a container's first process), or with --subreaper, it runs the
// server as the child of a small init of its own that reaps the orphans
// the panes' programs leave behind.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/panehost"
	"github.com/fleetd/fleetd/panehost/paneserver"
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
	tlsDir := flag.String("tls-dir", "", "directory with the pane host's "+panehost.CertKey+", "+panehost.KeyKey+" and "+panehost.CAKey+" (a mounted Secret), for --tls-listen")
	flag.StringVar(&opts.TLSAddress, "tls-listen", "", "also serve the protocol over TLS on this address, to fleetd's controllers only")
	agentRoot := flag.String("agent-root", "", "directory the agents' own directories lie in: serve fleetd's agent methods for them")
	gateway := flag.String("gateway", "", "the gateway's base URL, to forward the agent's MCP traffic to (with --gateway-listen and --token-file)")
	gatewayListen := flag.String("gateway-listen", "127.0.0.1:8766", "loopback address the agent mounts the gateway on")
	tokenFile := flag.String("token-file", "", "the pod's service-account token for the gateway, rotated by the kubelet")
	memberUsers := flag.String("member-users", "auto", "run each workspace under a Unix user of its own and authorise socket calls by peer credentials: on, off, or auto (on with --agent-root where this process may switch users: root, or CAP_SETUID and CAP_SETGID)")
	firstUID := flag.Uint("member-uid-base", paneserver.DefaultFirstUID, "the first user id given to workspaces")
	var trusted []uint32
	flag.Func("trusted-uid", "a user that may do everything on the socket, as this server's own (fleetd's, when it runs as another user); repeatable", func(v string) error {
		uid, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return fmt.Errorf("want a user id, got %q", v)
		}
		trusted = append(trusted, uint32(uid))
		return nil
	})
	var guarded []string
	flag.Func("guard-dir", "a `directory` shared with the members' users, made this server's and --guard-group's only at start (mode 0771: the others only pass through); repeatable", func(v string) error {
		if !filepath.IsAbs(v) {
			return fmt.Errorf("want an absolute path, got %q", v)
		}
		guarded = append(guarded, filepath.Clean(v))
		return nil
	})
	guardGroup := flag.Int("guard-group", 0, "the group that may change the --guard-dir directories besides this server (fleetd's)")
	relay := flag.Bool("relay", false, "be a member Pod's pane host only: relay fleetd's connections over TLS (--tls-listen, --tls-dir) to the pane server on --socket, which runs the agent in another container as another user, and forward the agent's gateway traffic (--gateway); the TLS key and the token stay with this process")
	flag.BoolVar(&opts.SocketGroup, "socket-group", false, "open the socket to its group as well (mode 0660), for a --relay running as a user of that group")
	subreaper := flag.Bool("subreaper", false, "reap the orphans of the panes' programs, as a child subreaper: run the server under a small init that reaps and forwards signals (always so as PID 1)")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if *subreaper || os.Getpid() == 1 {
		code, err := runInit(append(os.Args[1:], "--subreaper=false"))
		if err != nil {
			return err
		}
		os.Exit(code)
	}
	if opts.SocketPath == "" {
		return fmt.Errorf("no socket: pass --socket or set %s", herdr.SocketPathEnv)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	opts.Logger = log
	// Before the socket listens: no member's process runs yet.
	for _, dir := range guarded {
		if err := guardDir(dir, *guardGroup); err != nil {
			return err
		}
	}
	if opts.TLSAddress != "" {
		if *tlsDir == "" {
			return fmt.Errorf("--tls-listen needs --tls-dir")
		}
		cfg, err := panehost.ServerConfig(filepath.Join(*tlsDir, panehost.CertKey), filepath.Join(*tlsDir, panehost.KeyKey), filepath.Join(*tlsDir, panehost.CAKey))
		if err != nil {
			return err
		}
		opts.TLSConfig = cfg
	}
	switch users := *memberUsers; {
	case *relay:
		// The relay runs no panes.
	case users == "on" && *agentRoot == "":
		return fmt.Errorf("--member-users=on needs --agent-root: each workspace's user gets its home there")
	case users == "on" || users == "auto" && *agentRoot != "" && paneserver.CanSwitchUsers():
		opts.Users = &paneserver.UserOptions{FirstUID: uint32(*firstUID), HomeRoot: filepath.Join(*agentRoot, ".users"), Trusted: trusted}
	case users == "auto" || users == "off":
		log.Warn("Every workspace runs as this server's user: members on this pane server can read and act on each other's panes, processes and files (run it as root, or with CAP_SETUID and CAP_SETGID, to give each its own user; or run members in pods)")
	default:
		return fmt.Errorf("--member-users=%q: want on, off or auto", users)
	}
	// srv is set before the first request: the extensions ask it whose a
	// workspace is.
	var srv *paneserver.Server
	if *agentRoot != "" {
		opts.Extensions = panehost.Extensions(*agentRoot, func() panehost.Users { return srv })
	}
	if *gateway != "" {
		if *tokenFile == "" {
			return fmt.Errorf("--gateway needs --token-file")
		}
		fwd, err := panehost.NewForwarder(*gateway, *tokenFile)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", *gatewayListen)
		if err != nil {
			return fmt.Errorf("listening for the agent's gateway traffic: %w", err)
		}
		if !isLoopback(ln.Addr()) {
			_ = ln.Close()
			return fmt.Errorf("--gateway-listen=%s: the forwarder carries the pod's credential and listens on loopback only", *gatewayListen)
		}
		go func() { _ = (&http.Server{Handler: fwd, ReadHeaderTimeout: 10 * time.Second}).Serve(ln) }()
		log.Info("Forwarding the agent's gateway traffic", "listen", ln.Addr().String(), "gateway", *gateway)
	}
	if *relay {
		return runRelay(opts.SocketPath, opts.TLSAddress, opts.TLSConfig, log)
	}

	var err error
	srv, err = paneserver.New(opts)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	log.Info("Serving herdr protocol", "socket", srv.SocketPath(), "tls", srv.TLSAddress())

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

// runRelay serves fleetd's controllers over TLS, relayed to the pane
// server on socket, from when the pane server answers until SIGTERM.
func runRelay(socket, address string, cfg *tls.Config, log *slog.Logger) error {
	if cfg == nil {
		return errors.New("--relay needs --tls-listen and --tls-dir")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	r := &panehost.Relay{Socket: socket, TLS: cfg, Log: log}
	if err := r.WaitForSocket(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return fmt.Errorf("listening for fleetd: %w", err)
	}
	served := make(chan error, 1)
	go func() { served <- r.Serve(ln) }()
	log.Info("Relaying fleetd's connections to the pane server", "tls", ln.Addr().String(), "socket", socket)
	select {
	case <-ctx.Done():
		log.Info("Shutting down")
		_ = ln.Close()
		return nil
	case err := <-served:
		return err
	}
}

func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
