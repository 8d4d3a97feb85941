// Package cluster tests the local multi-node cluster of package
// localcluster as a user runs it: the test/cmd/cluster command brings it up
// and down, and the tests read what kubectl and the machine show. They
// need root and start real clusters, so they run only with make
// test-cluster (FLEETD_CLUSTER_TESTS=1) and skip otherwise.
//
// The tests use a cluster of their own (state in a temporary directory,
// its own network namespace name and port), so a cluster of make cluster
// may run meanwhile.
package cluster

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetd/fleetd/internal/testenv"
	"github.com/fleetd/fleetd/test/framework/localcluster"
)

// The test cluster's port, apart from make cluster's.
const testPort = 26543

// testName names the test cluster's network namespace and cgroups, apart
// from make cluster's: CLUSTER_TEST_NAME, or fleetd-clustertest.
var testName = cmp.Or(os.Getenv("CLUSTER_TEST_NAME"), "fleetd-clustertest")

var (
	// clusterBin is test/cmd/cluster, built once.
	clusterBin string
	// stateDir is the test cluster's state.
	stateDir string
	enabled  = os.Getenv("FLEETD_CLUSTER_TESTS") == "1"
)

func TestMain(m *testing.M) {
	if !enabled || os.Geteuid() != 0 {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "fleetd-clustertest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stateDir = filepath.Join(dir, "state")
	clusterBin = filepath.Join(dir, "cluster")
	build := exec.Command("go", "build", "-o", clusterBin, "./cmd/cluster")
	build.Dir = filepath.Join(testenv.RepoRoot(), "test")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building test/cmd/cluster: %v: %s\n", err, out)
		os.Exit(1)
	}
	code := m.Run()
	if out, err := clusterCmd("down"); err != nil {
		fmt.Fprintf(os.Stderr, "tearing the test cluster down: %v\n%s", err, out)
		code = 1
	} else if code == 0 {
		// Only the logs and the relay's copy are left once it is down.
		_ = os.RemoveAll(dir)
	}
	os.Exit(code)
}

// requireCluster skips a test that needs root and make test-cluster.
func requireCluster(tb testing.TB) {
	tb.Helper()
	if !enabled {
		tb.Skip("the local cluster tests start real clusters as root: run them with make test-cluster")
	}
	if os.Geteuid() != 0 {
		tb.Skip("the local cluster needs root")
	}
}

// clusterCmd runs test/cmd/cluster against the test cluster.
func clusterCmd(args ...string) (string, error) {
	return clusterCmdAt(stateDir, testName, testPort, nil, args...)
}

// clusterCmdAt runs test/cmd/cluster against the cluster of state, name and
// port, with env added to the environment.
func clusterCmdAt(state, name string, port int, env []string, args ...string) (string, error) {
	cmd := exec.Command(clusterBin, args...)
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), "CLUSTER_STATE="+state, "CLUSTER_NAME="+name, "CLUSTER_PORT="+strconv.Itoa(port))
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// clusterCmdStart starts test/cmd/cluster against the test cluster and
// returns at once.
func clusterCmdStart(tb testing.TB, args ...string) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(clusterBin, args...)
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), "CLUSTER_STATE="+stateDir, "CLUSTER_NAME="+testName, "CLUSTER_PORT="+strconv.Itoa(testPort))
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	return cmd
}

// up brings the test cluster up (or reuses it) and loads it.
func up(tb testing.TB) *localcluster.Cluster {
	tb.Helper()
	out, err := clusterCmd("up")
	if err != nil {
		tb.Fatalf("cluster up: %v\n%s", err, out)
	}
	tb.Logf("cluster up:\n%s", out)
	cl, err := localcluster.Load(stateDir)
	if err != nil {
		tb.Fatal(err)
	}
	return cl
}

// down tears the test cluster down.
func down(tb testing.TB) {
	tb.Helper()
	if out, err := clusterCmd("down"); err != nil {
		tb.Fatalf("cluster down: %v\n%s", err, out)
	}
}

// kubectl runs the pinned kubectl against cl and returns its output.
func kubectl(tb testing.TB, cl *localcluster.Cluster, args ...string) string {
	tb.Helper()
	out, err := kubectlErr(cl, args...)
	if err != nil {
		tb.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func kubectlErr(cl *localcluster.Cluster, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(cl.BinDir, "kubectl"), append([]string{"--kubeconfig=" + cl.Kubeconfig(), "--cache-dir=" + filepath.Join(stateDir, "kube-cache")}, args...)...)
	cmd.Dir = testenv.RepoRoot()
	out, err := cmd.CombinedOutput()
	return string(out), err
}
