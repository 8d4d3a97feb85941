// Package e2e drives every flow of DESIGN.md through the real binaries:
// fleetd, the pane server and scripted agents run as processes, on a local
// etcd and kube-apiserver; the tests talk to the gateway over HTTP with the
// go-sdk MCP client and read what a user reads.
package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/devenv"
	"github.com/fleetd/fleetd/internal/mcpclient"
	"github.com/fleetd/fleetd/internal/scheme"
	"github.com/fleetd/fleetd/internal/testenv"
)

// ns is where the primary's static token acts and the samples go.
const ns = "default"

// world is the running system under test.
type world struct {
	dir    string
	bin    string
	cp     *devenv.ControlPlane
	cfg    *rest.Config
	client client.Client
	token  string

	socket     string
	paneServer *devenv.Process
	fleetd     *devenv.Process
	gatewayURL string
	fleetdArgs []string
}

var w *world

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "fleetd-e2e")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	w = &world{dir: dir, bin: filepath.Join(dir, "bin")}
	if err := w.build(); err != nil {
		return 0, err
	}
	ctx := context.Background()
	w.cp = &devenv.ControlPlane{
		Dir:           filepath.Join(dir, "controlplane"),
		BinDir:        controlPlaneDir(),
		EtcdPort:      freePorts(2),
		APIServerPort: freePorts(1),
	}
	if err := w.cp.Start(ctx); err != nil {
		return 0, err
	}
	defer w.cp.Stop()
	if w.cfg, err = w.cp.RESTConfig(); err != nil {
		return 0, err
	}
	if w.client, err = client.New(w.cfg, client.Options{Scheme: scheme.New()}); err != nil {
		return 0, err
	}
	if err := devenv.InstallCRDs(ctx, w.client); err != nil {
		return 0, err
	}
	if w.token, err = devenv.EnsurePrimaryToken(ctx, w.client, dir, ns); err != nil {
		return 0, err
	}
	w.socket = filepath.Join(dir, "herdr.sock")
	if err := w.startPaneServer(); err != nil {
		return 0, err
	}
	defer w.paneServer.Stop(5 * time.Second)
	port := freePorts(1)
	w.gatewayURL = fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	w.fleetdArgs = []string{
		"--kubeconfig=" + w.cp.Kubeconfig(),
		"--herdr-socket=" + w.socket,
		fmt.Sprintf("--gateway-bind=127.0.0.1:%d", port),
		"--static-tokens=" + ns + "/" + devenv.StaticTokenSecret,
		"--static-namespace=" + ns,
		"--progress-interval=1s",
		"--turn-settle-window=1s",
		"--zap-log-level=info",
	}
	if err := w.startFleetd(); err != nil {
		return 0, err
	}
	defer w.fleetd.Stop(10 * time.Second)
	if out, err := w.kubectl("apply", "-k", filepath.Join(testenv.RepoRoot(), "config", "samples")); err != nil {
		return 0, fmt.Errorf("kubectl apply -k config/samples: %v\n%s", err, out)
	}
	return m.Run(), nil
}

// build compiles the binaries the processes run.
func (w *world) build() error {
	for pkg, name := range map[string]string{
		"./cmd/fleetd":         "fleetd",
		"./cmd/paneserver":     "paneserver",
		"./hack/scriptedagent": "scripted-agent",
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(w.bin, name), pkg)
		cmd.Dir = testenv.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %v\n%s", pkg, err, out)
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

func (w *world) env() []string {
	return []string{
		"PATH=" + w.bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + w.dir,
	}
}

func (w *world) startPaneServer() error {
	w.paneServer = &devenv.Process{
		Name: "paneserver", Path: filepath.Join(w.bin, "paneserver"),
		Args: []string{"--socket=" + w.socket, "--shell=/bin/sh", "--cwd=" + w.dir},
		Env:  w.env(), Log: filepath.Join(w.dir, "logs", "paneserver.log"),
	}
	if err := w.paneServer.Start(); err != nil {
		return err
	}
	c := herdr.NewClient(w.socket)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := c.Ping(context.Background()); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the pane server did not answer; see %s", w.paneServer.Log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (w *world) startFleetd() error {
	w.fleetd = &devenv.Process{
		Name: "fleetd", Path: filepath.Join(w.bin, "fleetd"), Args: w.fleetdArgs,
		Env: w.env(), Log: filepath.Join(w.dir, "logs", "fleetd.log"),
	}
	if err := w.fleetd.Start(); err != nil {
		return err
	}
	ready := strings.TrimSuffix(w.gatewayURL, "/mcp") + "/readyz"
	deadline := time.Now().Add(60 * time.Second)
	for {
		if resp, err := http.Get(ready); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-w.fleetd.Exited():
			return fmt.Errorf("fleetd exited: %v; see %s", w.fleetd.Err(), w.fleetd.Log)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fleetd not ready; see %s", w.fleetd.Log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (w *world) kubectl(args ...string) (string, error) {
	cmd := exec.Command("kubectl", append([]string{"--kubeconfig=" + w.cp.Kubeconfig()}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// dumpOnFailure prints what a person debugging a failure looks at first.
func dumpOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		out, _ := w.kubectl("get", "fleet", "-A", "-o", "wide")
		t.Logf("kubectl get fleet -A -o wide:\n%s", out)
		out, _ = w.kubectl("get", "events", "-A", "--sort-by=.lastTimestamp")
		t.Logf("events:\n%s", out)
		if os.Getenv("FLEETD_E2E_DUMP_YAML") != "" {
			out, _ = w.kubectl("get", "delegations", "-A", "-o", "yaml")
			t.Logf("delegations:\n%s", out)
		}
		if log, err := os.ReadFile(w.fleetd.Log); err == nil {
			if len(log) > 20000 {
				log = log[len(log)-20000:]
			}
			t.Logf("fleetd log (tail):\n%s", log)
		}
	})
}

// session opens an MCP session as the holder of token.
func session(t *testing.T, token string) *mcp.ClientSession {
	t.Helper()
	s, err := mcpclient.Connect(context.Background(), w.gatewayURL, token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func call(t *testing.T, s *mcp.ClientSession, tool string, args map[string]any) mcpclient.Result {
	t.Helper()
	res, err := mcpclient.Call(context.Background(), s, tool, args)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res
}

// eventually polls until cond holds; the deadline catches hangs, not slowness.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s; last: %s", what, last)
}
