package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetd/fleetd/test/framework/localcluster"
)

// globalSysctls are the settings the kubelets set for the whole machine,
// and the values they set them to.
var globalSysctls = map[string]string{
	"kernel.panic_on_oops": "1",
	"kernel.panic":         "10",
	"vm.overcommit_memory": "1",
}

func readGlobalSysctls(tb testing.TB) map[string]string {
	tb.Helper()
	out := map[string]string{}
	for k := range globalSysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", strings.ReplaceAll(k, ".", "/")))
		if err != nil {
			tb.Fatal(err)
		}
		out[k] = strings.TrimSpace(string(v))
	}
	return out
}

// TestTwoClustersKeepApart runs two clusters on the machine at once (the
// test cluster and a second one of a single node, each with its own state,
// name and port) and takes the first down: the second runs on (its
// daemons, its Nodes Ready, a new pod Running) and the global sysctls stay
// at the kubelets' values while it runs. Only when the second goes down
// are they the machine's own again. A teardown of an empty state directory
// in between touches neither.
func TestTwoClustersKeepApart(t *testing.T) {
	requireCluster(t)
	down(t)
	before := readGlobalSysctls(t)
	if cmp.Equal(before, globalSysctls) {
		t.Log("the machine's sysctls are the kubelets' values already (another cluster runs?): their restoring cannot be told apart")
	}
	secondState := filepath.Join(filepath.Dir(stateDir), "second")
	secondName, secondPort := testName+"-2", testPort+1
	second := func(args ...string) (string, error) {
		return clusterCmdAt(secondState, secondName, secondPort, []string{"NODES=1"}, args...)
	}
	t.Cleanup(func() {
		if out, err := second("down"); err != nil {
			t.Errorf("tearing the second cluster down: %v\n%s", err, out)
		}
	})

	up(t)
	if out, err := second("up"); err != nil {
		t.Fatalf("second cluster up: %v\n%s", err, out)
	}
	cl2, err := localcluster.Load(secondState)
	if err != nil {
		t.Fatal(err)
	}
	if got := readGlobalSysctls(t); !cmp.Equal(got, globalSysctls) {
		t.Errorf("with two clusters up, the sysctls are %v, want the kubelets' %v", got, globalSysctls)
	}
	procs, err := cl2.Processes()
	if err != nil {
		t.Fatal(err)
	}

	// A teardown with no journal of its own has nothing to undo.
	if out, err := clusterCmdAt(filepath.Join(filepath.Dir(stateDir), "empty"), secondName, secondPort, nil, "down"); err != nil || !strings.Contains(out, "No local cluster") {
		t.Errorf("down of an empty state directory: %v\n%s", err, out)
	}
	down(t)

	ctx := context.Background()
	if err := cl2.Healthy(ctx); err != nil {
		t.Fatalf("the second cluster, after the first went down: %v", err)
	}
	after, err := cl2.Processes()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(procs, after); diff != "" {
		t.Errorf("the second cluster's daemons changed as the first went down (-before +after):\n%s", diff)
	}
	if _, err := os.Stat("/run/netns/" + secondName); err != nil {
		t.Errorf("the second cluster's network namespace: %v", err)
	}
	if err := cl2.WaitNodesReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	kubectl(t, cl2, "run", "after-the-first", "--image="+localcluster.PauseImage, "--image-pull-policy=Never", "--restart=Never")
	if out, err := kubectlErr(cl2, "wait", "--for=condition=Ready", "pod/after-the-first", "--timeout=90s"); err != nil {
		t.Errorf("a pod on the second cluster after the first went down: %v\n%s", err, out)
	}
	if got := readGlobalSysctls(t); !cmp.Equal(got, globalSysctls) {
		t.Errorf("with the second cluster still up, the sysctls are %v, want the kubelets' %v", got, globalSysctls)
	}

	if out, err := second("down"); err != nil {
		t.Fatalf("second cluster down: %v\n%s", err, out)
	}
	if got := readGlobalSysctls(t); !cmp.Equal(got, before) {
		t.Errorf("with both clusters down, the sysctls are %v, want the machine's %v", got, before)
	}
}
