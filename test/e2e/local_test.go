package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/devenv"
	"github.com/fleetd/fleetd/internal/scheme"
	"github.com/fleetd/fleetd/internal/testenv"
)

// local runs everything as processes on this machine: etcd and
// kube-apiserver, the pane server, and fleetd with a static primary token.
type local struct {
	dir string
	bin string
	cp  *devenv.ControlPlane

	socket     string
	paneServer *devenv.Process
	fleetd     *devenv.Process
	fleetdArgs []string
	gatewayURL string

	// jaeger is where fleetd exports its traces; nil, and jaegerErr says
	// why, when there is no Jaeger to run.
	jaeger    *jaeger
	jaegerErr error
}

// startLocal builds the binaries and starts the control plane, the pane
// server and fleetd in a temporary directory.
func startLocal() (_ *world, _ func(), err error) {
	dir, err := os.MkdirTemp("", "fleetd-e2e")
	if err != nil {
		return nil, nil, err
	}
	l := &local{dir: dir, bin: filepath.Join(dir, "bin")}
	// Members' users traverse the directory to their own parts of it, and
	// write their received logs and temporary files in directories open
	// to all.
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, nil, err
	}
	for _, open := range []string{"received", "tmp"} {
		if err := os.Mkdir(filepath.Join(dir, open), 0o777); err != nil {
			return nil, nil, err
		}
		if err := os.Chmod(filepath.Join(dir, open), 0o1777); err != nil {
			return nil, nil, err
		}
	}
	// stops undo what started, last first.
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	stops = append(stops, func() { os.RemoveAll(dir) })
	defer func() {
		if err != nil {
			stop()
		}
	}()

	if err := l.build(); err != nil {
		return nil, nil, err
	}
	ctx := context.Background()
	l.cp = &devenv.ControlPlane{
		Dir:           filepath.Join(dir, "controlplane"),
		BinDir:        controlPlaneDir(),
		EtcdPort:      freePorts(2),
		APIServerPort: freePorts(1),
	}
	if err := l.cp.Start(ctx); err != nil {
		return nil, nil, err
	}
	stops = append(stops, l.cp.Stop)
	w := &world{mode: l, kubeconfig: l.cp.Kubeconfig()}
	if w.cfg, err = l.cp.RESTConfig(); err != nil {
		return nil, nil, err
	}
	if w.client, err = client.New(w.cfg, client.Options{Scheme: scheme.New()}); err != nil {
		return nil, nil, err
	}
	if err := devenv.InstallCRDs(ctx, w.client); err != nil {
		return nil, nil, err
	}
	if err := devenv.InstallPolicies(ctx, w.client, ns); err != nil {
		return nil, nil, err
	}
	if w.token, err = devenv.EnsurePrimaryToken(ctx, w.client, dir, ns); err != nil {
		return nil, nil, err
	}
	l.socket = filepath.Join(dir, "herdr.sock")
	if err := l.startPaneServer(); err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { l.paneServer.Stop(5 * time.Second) })
	switch l.jaeger, l.jaegerErr = startJaeger(dir); {
	case l.jaegerErr == nil:
		stops = append(stops, func() { l.jaeger.proc.Stop(5 * time.Second) })
	case !errors.Is(l.jaegerErr, errNoJaeger):
		return nil, nil, l.jaegerErr
	}
	port := freePorts(1)
	l.gatewayURL = fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	w.gatewayURL = l.gatewayURL
	l.fleetdArgs = []string{
		"--kubeconfig=" + l.cp.Kubeconfig(),
		"--herdr-socket=" + l.socket,
		fmt.Sprintf("--gateway-bind=127.0.0.1:%d", port),
		"--static-tokens=" + ns + "/" + devenv.StaticTokenSecret,
		"--static-namespace=" + ns,
		"--progress-interval=1s",
		"--agent-state-dir=" + filepath.Join(dir, "agents"),
		"--zap-log-level=info",
	}
	if err := l.startFleetd(); err != nil {
		return nil, nil, err
	}
	// l.fleetd changes when a test restarts fleetd.
	stops = append(stops, func() { l.fleetd.Stop(10 * time.Second) })
	return w, stop, nil
}

// build compiles the binaries the processes run.
func (l *local) build() error {
	for pkg, name := range map[string]string{
		"./cmd/fleetd":         "fleetd",
		"./cmd/paneserver":     "paneserver",
		"./hack/scriptedagent": "scripted-agent",
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(l.bin, name), pkg)
		cmd.Dir = testenv.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %v\n%s", pkg, err, out)
		}
	}
	// The pinned agent CLIs, when make agents installed them, are on the
	// panes' PATH as herdr expects: agent.start types "claude".
	for _, agent := range []string{"claude", "codex"} {
		installed := filepath.Join(testenv.RepoRoot(), "bin", agent)
		if _, err := os.Stat(installed); err == nil {
			if err := os.Symlink(installed, filepath.Join(l.bin, agent)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (l *local) paneKeys(m *fleetv1alpha1.Member, keys ...string) error {
	return herdr.NewClient(l.socket).PaneSendKeys(context.Background(), m.Status.PaneID, keys...)
}

// modelListener listens on loopback: the panes run on this machine.
func (l *local) modelListener() (net.Listener, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	return ln, ln.Addr().String(), nil
}

func (l *local) hookEvents(m *fleetv1alpha1.Member) ([]agents.HookStatus, error) {
	return agents.ReadHookEvents(filepath.Join(l.agentDir(), m.Namespace, m.Name+"-"+string(m.UID)[:8]))
}

// killAgent finds the member's agent among this machine's processes.
func (l *local) killAgent(m *fleetv1alpha1.Member, configEnv string, comms []string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	killed := 0
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		env := "\x00" + string(raw)
		if err != nil || !strings.Contains(env, "\x00"+configEnv+"=") || !strings.Contains(env, "\x00FLEETD_MEMBER="+m.Name+"\x00") {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if !slices.Contains(comms, strings.TrimSpace(string(comm))) {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err == nil && syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	return killed, nil
}

func (l *local) agentDir() string { return filepath.Join(l.dir, "agents") }

func (l *local) realAgents() error {
	for _, agent := range []string{"claude", "codex"} {
		if _, err := os.Stat(filepath.Join(l.bin, agent)); err != nil {
			return fmt.Errorf("%s is not installed: run make agents (it installs the pinned CLIs from npm into bin/)", agent)
		}
	}
	return nil
}

func controlPlaneDir() string {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d
	}
	return filepath.Join(testenv.RepoRoot(), "bin", "controlplane")
}

// freePorts finds n consecutive free ports on 127.0.0.1 and returns the first.
func freePorts(n int) int {
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		first := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		ok := true
		for i := 1; i < n; i++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(first+i))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return first
		}
	}
}

// env is the processes' environment: panes find the scripted agent on PATH,
// and what honours TMPDIR keeps its temporary files in the run's directory,
// removed with it (for what does not, see agentTempGlobs).
func (l *local) env() []string {
	return []string{
		"PATH=" + l.bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + l.dir,
		"TMPDIR=" + filepath.Join(l.dir, "tmp"),
	}
}

func (l *local) startPaneServer() error {
	l.paneServer = &devenv.Process{
		Name: "paneserver", Path: filepath.Join(l.bin, "paneserver"),
		// As herdr does, it keeps its layout across a restart.
		// With --agent-root, as root, each member runs as a Unix user of
		// its own, as under fleetd dev.
		Args: []string{"--socket=" + l.socket, "--shell=/bin/sh", "--cwd=" + l.dir, "--session-file=" + filepath.Join(l.dir, "herdr-session.json"), "--agent-root=" + l.agentDir()},
		Env:  l.env(), Log: filepath.Join(l.dir, "logs", "paneserver.log"),
	}
	if err := l.paneServer.Start(); err != nil {
		return err
	}
	c := herdr.NewClient(l.socket)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := c.Ping(context.Background()); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the pane server did not answer; see %s", l.paneServer.Log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (l *local) startFleetd() error {
	l.fleetd = &devenv.Process{
		Name: "fleetd", Path: filepath.Join(l.bin, "fleetd"), Args: l.fleetdArgs,
		Env: l.env(), Log: filepath.Join(l.dir, "logs", "fleetd.log"),
	}
	if l.jaeger != nil {
		l.fleetd.Env = append(l.fleetd.Env, l.jaeger.fleetdEnv()...)
	}
	if err := l.fleetd.Start(); err != nil {
		return err
	}
	if err := waitServing(l.gatewayURL, 60*time.Second, l.fleetd.Exited()); err != nil {
		select {
		case <-l.fleetd.Exited():
			return fmt.Errorf("fleetd exited: %v; see %s", l.fleetd.Err(), l.fleetd.Log)
		default:
			return fmt.Errorf("%w; see %s", err, l.fleetd.Log)
		}
	}
	return nil
}

// receivedLog is where a member's scripted agent logs: in a directory its
// Unix user may write to, as every member may.
func (l *local) receivedLog(member string) string {
	return filepath.Join(l.dir, "received", member+".received")
}

// memberToken is the one in the member's token Secret: members share the
// pane server.
func (l *local) memberToken(member string) (string, error) { return secretToken(member) }

func (l *local) readPaneFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	return b, err
}

// killFleetd sends fleetd SIGKILL and starts it again.
func (l *local) killFleetd() error {
	l.fleetd.Kill()
	return l.startFleetd()
}

func (l *local) restartPaneServer() error {
	l.paneServer.Stop(5 * time.Second)
	return l.startPaneServer()
}

func (l *local) logs() string {
	var out string
	for _, p := range []*devenv.Process{l.fleetd, l.paneServer} {
		if log, err := os.ReadFile(p.Log); err == nil {
			out += fmt.Sprintf("%s log (tail):\n%s\n", p.Name, tail(log, 20000))
		}
	}
	return out
}

// startReplica starts one more fleetd that serves only the gateway, with
// extra flags, as a second replica behind one Service would. It returns
// the replica's MCP URL and the process.
func (l *local) startReplica(name string, extra ...string) (string, *devenv.Process, error) {
	port := freePorts(1)
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	args := []string{"--controllers=false", fmt.Sprintf("--gateway-bind=127.0.0.1:%d", port)}
	for _, a := range l.fleetdArgs {
		if !strings.HasPrefix(a, "--gateway-bind=") {
			args = append(args, a)
		}
	}
	p := &devenv.Process{
		Name: "fleetd " + name, Path: filepath.Join(l.bin, "fleetd"), Args: append(args, extra...),
		Env: l.env(), Log: filepath.Join(l.dir, "logs", "fleetd-"+name+".log"),
	}
	if err := p.Start(); err != nil {
		return "", nil, err
	}
	if err := waitServing(url, 60*time.Second, p.Exited()); err != nil {
		p.Kill()
		return "", nil, fmt.Errorf("%w; see %s", err, p.Log)
	}
	return url, p, nil
}
