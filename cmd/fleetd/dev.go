package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/devenv"
	"github.com/fleetd/fleetd/internal/scheme"
	"github.com/fleetd/fleetd/panehost"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

// dev is `fleetd dev`: a whole local environment in the foreground. It
// starts etcd, kube-apiserver and kube-controller-manager with state in
// --state-dir, installs the CRDs, runs a pane server (the real herdr when it
// is installed, else the built-in herdr-compatible one), applies the sample
// Profiles and runs fleetd. Ctrl-C stops everything it started; a second run
// reuses the state.
func dev(args []string) int {
	fs := flag.NewFlagSet("fleetd dev", flag.ExitOnError)
	var o options
	o.bind(fs)
	stateDir := fs.String("state-dir", ".dev", "Where the environment keeps its state (etcd data, certificates, kubeconfig, logs).")
	binDir := fs.String("controlplane-dir", "", "Directory with etcd, kube-apiserver and kube-controller-manager (default: KUBEBUILDER_ASSETS, else bin/controlplane).")
	etcdPort := fs.Int("etcd-port", devenv.DefaultEtcdPort, "etcd's client port on 127.0.0.1 (the next port is its peer port).")
	apiPort := fs.Int("apiserver-port", devenv.DefaultAPIServerPort, "kube-apiserver's port on 127.0.0.1.")
	ns := fs.String("dev-namespace", "default", "Namespace for the sample Profiles and the primary's token.")
	zapOpts := zap.Options{Development: true}
	zapOpts.BindFlags(fs)
	_ = fs.Parse(args)
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	agentDirSet := false
	fs.Visit(func(f *flag.Flag) { agentDirSet = agentDirSet || f.Name == "agent-state-dir" })
	if !agentDirSet {
		// The environment keeps everything it makes in its state dir.
		o.agentDir = filepath.Join(*stateDir, "agents")
	}

	if err := runDev(*stateDir, *binDir, *etcdPort, *apiPort, *ns, o); err != nil {
		fmt.Fprintln(os.Stderr, "fleetd dev:", err)
		return 1
	}
	return 0
}

func runDev(stateDir, binDir string, etcdPort, apiPort int, ns string, o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	state, err := filepath.Abs(stateDir)
	if err != nil {
		return err
	}
	if binDir == "" {
		binDir = defaultControlPlaneDir()
	}
	if err := devenv.CheckBinaries(binDir); err != nil {
		return err
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		return err
	}

	started := time.Now()
	cp := &devenv.ControlPlane{Dir: filepath.Join(state, "controlplane"), BinDir: binDir, EtcdPort: etcdPort, APIServerPort: apiPort}
	fmt.Fprintf(os.Stderr, "Starting etcd and kube-apiserver (state in %s)\n", state)
	if err := cp.Start(ctx); err != nil {
		return err
	}
	defer cp.Stop()
	cfg, err := cp.RESTConfig()
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return err
	}
	if err := devenv.EnsureNamespace(ctx, c, ns); err != nil {
		return fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	if err := devenv.InstallCRDs(ctx, c); err != nil {
		return fmt.Errorf("installing the CRDs: %w", err)
	}
	if err := devenv.InstallPolicies(ctx, c, ns); err != nil {
		return fmt.Errorf("installing the admission policies: %w", err)
	}
	token, err := devenv.EnsurePrimaryToken(ctx, c, state, ns)
	if err != nil {
		return err
	}
	if err := devenv.ApplySampleProfiles(ctx, c, ns); err != nil {
		return err
	}

	socket, which, stopPanes, err := startPanes(ctx, state, o.agentDir)
	if err != nil {
		return err
	}
	defer stopPanes()

	o.herdrSocket = socket
	o.staticTokens = ns + "/" + devenv.StaticTokenSecret
	o.staticNamespace = ns
	printBanner(cp.Kubeconfig(), o.mcpURL(), token, which, state, time.Since(started))

	fleetd := make(chan error, 1)
	go func() { fleetd <- start(ctx, cfg, o) }()
	select {
	case err := <-fleetd:
		if err != nil && ctx.Err() == nil {
			return err
		}
	case p := <-cp.Exited():
		return fmt.Errorf("%s exited (%v); see %s", p.Name, p.Err(), p.Log)
	case <-ctx.Done():
		<-fleetd
	}
	fmt.Fprintln(os.Stderr, "Stopping fleetd dev")
	return nil
}

// defaultControlPlaneDir is KUBEBUILDER_ASSETS, else bin/controlplane
// beside this executable.
func defaultControlPlaneDir() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	if exe, err := os.Executable(); err == nil {
		return filepath.Join(filepath.Dir(exe), "controlplane")
	}
	return filepath.Join("bin", "controlplane")
}

// startPanes runs a pane server: the herdr at HERDR_SOCKET_PATH if set, a
// `herdr server` when herdr is installed, else the built-in one. Panes find
// the binaries beside this one (the scripted agent) on their PATH. The
// built-in one keeps the agents' directories under agentDir and, where it
// may (as root), runs each member as a Unix user of its own: the state
// directory is then only traversable by them, never readable.
func startPanes(ctx context.Context, state, agentDir string) (socket, which string, stop func(), err error) {
	if exe, err := os.Executable(); err == nil {
		os.Setenv("PATH", filepath.Dir(exe)+string(os.PathListSeparator)+os.Getenv("PATH"))
	}
	if s := os.Getenv(herdr.SocketPathEnv); s != "" {
		if _, err := herdr.NewClient(s).Ping(ctx); err != nil {
			return "", "", nil, fmt.Errorf("HERDR_SOCKET_PATH=%s does not answer: %w", s, err)
		}
		return s, "herdr at " + s, func() {}, nil
	}
	socket = filepath.Join(state, "herdr.sock")
	if path, err := exec.LookPath("herdr"); err == nil {
		p := &devenv.Process{Name: "herdr", Path: path, Args: []string{"server"}, Log: filepath.Join(state, "logs", "herdr.log"),
			Env: append(os.Environ(), herdr.SocketPathEnv+"="+socket)}
		if err := p.Start(); err != nil {
			return "", "", nil, err
		}
		if err := pingUntil(ctx, socket, 30*time.Second); err != nil {
			p.Stop(5 * time.Second)
			return "", "", nil, fmt.Errorf("herdr server did not answer: %w (see %s)", err, p.Log)
		}
		return socket, "herdr (" + path + ")", func() { p.Stop(10 * time.Second) }, nil
	}
	agentRoot, err := filepath.Abs(agentDir)
	if err != nil {
		return "", "", nil, err
	}
	var srv *paneserver.Server
	opts := paneserver.Options{SocketPath: socket, Cwd: os.Getenv("HOME"),
		Extensions: panehost.Extensions(agentRoot, func() panehost.Users { return srv })}
	which = "the built-in herdr-compatible pane server"
	if paneserver.CanSwitchUsers() {
		// Members reach their own directories through the state
		// directory, and nothing else in it.
		for _, dir := range []string{state, agentRoot} {
			if err := os.MkdirAll(dir, 0o711); err != nil {
				return "", "", nil, err
			}
			if err := os.Chmod(dir, 0o711); err != nil {
				return "", "", nil, err
			}
		}
		opts.Users = &paneserver.UserOptions{HomeRoot: filepath.Join(agentRoot, ".users")}
		which += ", each member as a Unix user of its own"
	} else {
		which += " (members share your Unix user and can act as each other; as root each gets a user of its own)"
	}
	if srv, err = paneserver.New(opts); err != nil {
		return "", "", nil, fmt.Errorf("starting the built-in pane server: %w", err)
	}
	go func() { _ = srv.Serve() }()
	return socket, which, func() { _ = srv.Close() }, nil
}

func pingUntil(ctx context.Context, socket string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := herdr.NewClient(socket)
	for {
		_, err := c.Ping(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func printBanner(kubeconfig, mcpURL, token, panes, state string, took time.Duration) {
	var b strings.Builder
	fmt.Fprintf(&b, "\nfleetd dev is up (%s). Panes run in %s.\n\n", took.Round(100*time.Millisecond), panes)
	fmt.Fprintf(&b, "  export KUBECONFIG=%s\n", kubeconfig)
	fmt.Fprintf(&b, "  kubectl get fleet\n\n")
	fmt.Fprintf(&b, "Gateway (MCP):  %s\n", mcpURL)
	fmt.Fprintf(&b, "Dashboard:      %s   (sign in with the primary token)\n", strings.TrimSuffix(mcpURL, "/mcp")+"/ui/")
	fmt.Fprintf(&b, "Primary token:  %s   (also in %s)\n\n", token, filepath.Join(state, "primary-token"))
	fmt.Fprintf(&b, "Mount it in Claude Code:\n  claude mcp add --transport http fleetd %s --header \"Authorization: Bearer %s\"\n\n", mcpURL, token)
	fmt.Fprintf(&b, "Mount it in Codex (~/.codex/config.toml), with FLEETD_TOKEN=%s in Codex's environment:\n  [mcp_servers.fleetd]\n  url = %q\n  bearer_token_env_var = \"FLEETD_TOKEN\"\n\n", token, mcpURL)
	fmt.Fprintf(&b, "Try: kubectl apply -f config/samples/fleet_v1alpha1_member.yaml, then make demo.\nCtrl-C stops everything.\n")
	fmt.Fprint(os.Stdout, b.String())
}
