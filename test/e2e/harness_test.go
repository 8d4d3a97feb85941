// Package e2e drives every flow of fleetd's contract through the real binaries; the
// tests talk to the gateway over HTTP with the go-sdk MCP client and read
// what a user reads.
//
// The suite runs in one of two modes:
//   - local (the default): fleetd, the pane server and scripted agents run
//     as processes on this machine, on a local etcd and kube-apiserver; the
//     primary holds a static token;
//   - cluster, when FLEETD_E2E_KUBECONFIG is set: fleetd already runs in
//     the cluster that kubeconfig reaches, deployed from test/e2e/config
//     (config/default with the local run's short intervals; hack/e2e-kind.sh
//     does all of it), its gateway is at FLEETD_E2E_GATEWAY_URL, the
//     primary is a service account whose token the suite mints, and the
//     suite starts nothing but Kubernetes objects.
//
// The tests are the same in both; what differs (how fleetd is killed, how
// the pane server restarts, where an agent's files are) is behind mode.
package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/mcpclient"
	"github.com/fleetd/fleetd/internal/testenv"
)

// ns is where the primary acts and the samples and test members go.
const ns = "default"

// Environment variables that select cluster mode.
const (
	envKubeconfig = "FLEETD_E2E_KUBECONFIG"
	envGatewayURL = "FLEETD_E2E_GATEWAY_URL"
	// envClusterState is the state directory of a local cluster (make
	// cluster) the kubeconfig's cluster is: with it the suite also loses
	// nodes, and serves the stand-in model where pods reach it.
	envClusterState = "FLEETD_E2E_CLUSTER_STATE"
)

// mode is where fleetd and its pane server run, and the operations the
// tests need on them.
type mode interface {
	// receivedLog is the file where member's scripted agent records the
	// prompts it receives, as a path where the agent runs.
	receivedLog(member string) string
	// readPaneFile reads a file where the agents run; a file that does not
	// exist reads as empty.
	readPaneFile(path string) ([]byte, error)
	// killFleetd ends fleetd abruptly, leaving the panes running, and
	// returns once fleetd serves again.
	killFleetd() error
	// restartPaneServer stops the pane server, which ends every pane, and
	// returns once a new one runs. fleetd keeps running.
	restartPaneServer() error
	// logs is the tail of fleetd's and the pane server's logs.
	logs() string
	// agentDir is where fleetd keeps each known agent's directory, as the
	// tests read it; "" when they cannot.
	agentDir() string
	// paneKeys presses keys in a member's pane, as a person at herdr would.
	paneKeys(m *fleetv1alpha1.Member, keys ...string) error
	// modelListener listens where members' agents reach the test, for the
	// stand-in model; it returns the URL host (IP:port) they dial.
	modelListener() (net.Listener, string, error)
	// hookEvents are the status events fleetd's hooks recorded for m's agent.
	hookEvents(m *fleetv1alpha1.Member) ([]agents.HookStatus, error)
	// killAgent ends m's agent processes (named one of comms, with
	// configEnv in their environment) with SIGKILL, and says how many.
	killAgent(m *fleetv1alpha1.Member, configEnv string, comms []string) (int, error)
	// memberToken is the token a member's agent calls the gateway with.
	memberToken(member string) (string, error)
	// realAgents says why the real agent CLIs cannot run here, nil when
	// they can: installed by make agents, and reachable by the panes. An
	// errNoRealAgents says the tests that need them skip here.
	realAgents() error
}

// world is the running system under test.
type world struct {
	mode
	kubeconfig string
	cfg        *rest.Config
	client     client.Client
	// gatewayURL is the gateway's MCP endpoint as the tests reach it.
	gatewayURL string
	// token is the primary's bearer token.
	token string
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
	// The agent CLIs keep files in /tmp whatever TMPDIR says: what the run
	// left there goes with it.
	defer removeAgentTemp(agentTemp())
	var stop func()
	var err error
	if kubeconfig := os.Getenv(envKubeconfig); kubeconfig != "" {
		w, stop, err = startCluster(kubeconfig, os.Getenv(envGatewayURL), os.Getenv(envClusterState))
	} else {
		w, stop, err = startLocal()
	}
	if err != nil {
		return 0, err
	}
	defer stop()
	if out, err := w.kubectl("apply", "-n", ns, "-k", filepath.Join(testenv.RepoRoot(), "config", "samples")); err != nil {
		return 0, fmt.Errorf("kubectl apply -k config/samples: %v\n%s", err, out)
	}
	return m.Run(), nil
}

// agentTempGlobs are where the agent CLIs keep their temporary files,
// whatever TMPDIR says (Claude Code: claude-<uid>, cc-socks-<uid>).
var agentTempGlobs = []string{"/tmp/claude-*", "/tmp/cc-socks", "/tmp/cc-socks-*"}

// agentTemp is what agentTempGlobs match now.
func agentTemp() map[string]bool {
	found := map[string]bool{}
	for _, glob := range agentTempGlobs {
		matches, _ := filepath.Glob(glob)
		for _, m := range matches {
			found[m] = true
		}
	}
	return found
}

// removeAgentTemp removes what agentTempGlobs match that before did not.
func removeAgentTemp(before map[string]bool) {
	for path := range agentTemp() {
		if !before[path] {
			if err := os.RemoveAll(path); err != nil {
				fmt.Fprintln(os.Stderr, "e2e: removing the agents' temporary files:", err)
			}
		}
	}
}

func (w *world) kubectl(args ...string) (string, error) {
	return kubectl(w.kubeconfig, args...)
}

// kubectl runs kubectl against the cluster in kubeconfig and returns its
// combined output.
func kubectl(kubeconfig string, args ...string) (string, error) {
	out, err := exec.Command(kubectlBinary(), append([]string{"--kubeconfig=" + kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}

// kubectlBinary is the kubectl that `make controlplane` builds from the same
// pinned release as the API server, so that a machine with only Go runs the
// suite. Against an outside cluster without it, the one on PATH will do.
func kubectlBinary() string {
	built := filepath.Join(controlPlaneDir(), "kubectl")
	if _, err := os.Stat(built); err == nil || os.Getenv(envKubeconfig) == "" {
		return built
	}
	return "kubectl"
}

// waitServing waits until the gateway at mcpURL answers /readyz.
func waitServing(mcpURL string, timeout time.Duration, exited <-chan struct{}) error {
	ready := strings.TrimSuffix(mcpURL, "/mcp") + "/readyz"
	deadline := time.Now().Add(timeout)
	var last string
	for {
		resp, err := http.Get(ready)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-exited:
			return fmt.Errorf("fleetd exited")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the gateway at %s is not ready after %s: %s", ready, timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
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
		t.Log(w.logs())
	})
}

// tail is the last n bytes of b.
func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
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

// initializeStatus is the HTTP status of an MCP initialize with token.
func initializeStatus(t *testing.T, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, w.gatewayURL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
