package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetd/fleetd/test/framework/localcluster"
)

// netnsInode is how /proc/<pid>/ns/net names the cluster's namespace.
func netnsInode(tb testing.TB) string {
	tb.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+testName, &st); err != nil {
		tb.Fatalf("the cluster's network namespace: %v", err)
	}
	return "net:[" + strconv.FormatUint(st.Ino, 10) + "]"
}

// TestUpDownLeavesMachineUnchanged brings a cluster up and down and checks
// that the machine's own network namespace (addresses, routes, iptables,
// sysctls), mounts, cgroups, the directories daemons write to and its
// processes are as before; and that while the cluster runs, the machine's
// namespace has gained nothing but the relay's loopback listener.
func TestUpDownLeavesMachineUnchanged(t *testing.T) {
	requireCluster(t)
	down(t)
	volatile := volatileSysctls()
	before := snapshot(t)
	cl := up(t)
	ns := netnsInode(t)

	during := snapshot(t)
	// Only the namespace, its mount and what the cluster's daemons write
	// may differ while it runs; the network of the machine may not.
	for _, f := range []struct{ what, before, during string }{
		{"ip addr", before.Addr, during.Addr},
		{"ip route", before.Route, during.Route},
		{"iptables-save", before.IPTables, during.IPTables},
		{"ip6tables-save", before.IP6Tables, during.IP6Tables},
		{"nft list ruleset", before.NFTables, during.NFTables},
	} {
		if f.before != f.during {
			t.Errorf("while the cluster runs, the machine's %s changed:\nbefore:\n%s\nduring:\n%s", f.what, f.before, f.during)
		}
	}
	for _, k := range []string{"net.ipv4.ip_forward", "net.bridge.bridge-nf-call-iptables"} {
		if before.Sysctl[k] != during.Sysctl[k] {
			t.Errorf("while the cluster runs, the machine's %s is %q, was %q", k, during.Sysctl[k], before.Sysctl[k])
		}
	}
	if got := kubectl(t, cl, "get", "nodes", "-o", "name"); strings.Count(got, "node/") != len(cl.Nodes) {
		t.Errorf("kubectl get nodes: %s", got)
	}

	down(t)
	after := snapshot(t)
	compareMachine(t, "after up and down", before, after, volatile)
	if left := clusterProcesses(ns); len(left) > 0 {
		t.Errorf("processes of the cluster outlived its teardown:\n%s", strings.Join(left, "\n"))
	}
}

// TestSecondUpReusesTheCluster runs up twice: the second finds the
// cluster healthy and leaves its daemons as they are.
func TestSecondUpReusesTheCluster(t *testing.T) {
	requireCluster(t)
	cl := up(t)
	before, err := cl.Processes()
	if err != nil {
		t.Fatal(err)
	}
	out, err := clusterCmd("up")
	if err != nil {
		t.Fatalf("second up: %v\n%s", err, out)
	}
	if !strings.Contains(out, "Reusing the running cluster") {
		t.Errorf("the second up did not reuse the cluster:\n%s", out)
	}
	after, err := cl.Processes()
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != len(after) {
		t.Fatalf("the second up started daemons: %d before, %d after", len(before), len(after))
	}
	for i := range before {
		if before[i] != after[i] || !after[i].Running {
			t.Errorf("daemon %s: %+v before, %+v after the second up", before[i].Name, before[i], after[i])
		}
	}
}

// TestKilledBringUpIsCleanedUp kills the bring-up with SIGKILL at several
// points of its way, and checks each time that down leaves the machine as
// it was.
func TestKilledBringUpIsCleanedUp(t *testing.T) {
	requireCluster(t)
	down(t)
	volatile := volatileSysctls()
	before := snapshot(t)
	journal := filepath.Join(stateDir, "journal.jsonl")
	cases := map[string]string{
		// Some journal line each point has just written.
		"after the namespace is made":    `"op":"netns"`,
		"after etcd starts":              `"name":"etcd"`,
		"after the API server starts":    `"name":"kube-apiserver"`,
		"after the first kubelet starts": `"name":"node-1/kubelet"`,
		"after the last kubelet starts":  `"name":"node-3/kubelet"`,
	}
	for name, marker := range cases {
		t.Run(name, func(t *testing.T) {
			cmd := clusterCmdStart(t, "up")
			deadline := time.Now().Add(2 * time.Minute)
			for {
				data, _ := os.ReadFile(journal)
				if strings.Contains(string(data), marker) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the bring-up never wrote %s", marker)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			down(t)
			compareMachine(t, "after a bring-up killed "+name, before, snapshot(t), volatile)
			if left := clusterProcesses(""); len(left) > 0 {
				t.Errorf("processes of the cluster outlived its teardown:\n%s", strings.Join(left, "\n"))
			}
		})
	}
}

// TestNodeNotReadyWhenItsKubeletDies kills one node's kubelet and waits
// for Kubernetes to say the Node is NotReady (kube-controller-manager's
// node monitor grace period is 16s here, 50s by default); started again,
// the node is Ready again.
func TestNodeNotReadyWhenItsKubeletDies(t *testing.T) {
	requireCluster(t)
	cl := up(t)
	ctx := context.Background()
	node := cl.NodeNames()[len(cl.Nodes)-1]
	if err := cl.KillKubelet(node); err != nil {
		t.Fatal(err)
	}
	waitNodeReady(t, cl, node, false, 2*time.Minute)
	// The other nodes stay Ready.
	for _, n := range cl.NodeNames()[:len(cl.Nodes)-1] {
		if ready, err := cl.NodeReady(ctx, n); err != nil || !ready {
			t.Errorf("node %s: ready %v (%v) while another's kubelet is down", n, ready, err)
		}
	}
	if err := cl.StartNode(ctx, node); err != nil {
		t.Fatal(err)
	}
	waitNodeReady(t, cl, node, true, 2*time.Minute)
}

// TestNodeKillAndStart kills a whole node as a power loss would: nothing
// of it is left running, its Node goes NotReady, and once booted again it
// is Ready and runs pods.
func TestNodeKillAndStart(t *testing.T) {
	requireCluster(t)
	cl := up(t)
	ctx := context.Background()
	node := cl.NodeNames()[0]
	// A pod on the node, so that there are containers to kill.
	kubectl(t, cl, "run", "sleeper", "--image="+localcluster.PauseImage, "--image-pull-policy=Never", "--restart=Always",
		"--overrides", `{"spec":{"nodeName":"`+node+`"}}`)
	kubectl(t, cl, "wait", "--for=condition=Ready", "pod/sleeper", "--timeout=60s")
	t.Cleanup(func() { _, _ = kubectlErr(cl, "delete", "pod", "sleeper", "--wait=false") })

	if err := cl.KillNode(node); err != nil {
		t.Fatal(err)
	}
	procs, err := cl.Processes()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if strings.HasPrefix(p.Name, node+"/") && p.Running {
			t.Errorf("%s (pid %d) survived the node's kill", p.Name, p.PID)
		}
	}
	waitNodeReady(t, cl, node, false, 2*time.Minute)
	if err := cl.StartNode(ctx, node); err != nil {
		t.Fatal(err)
	}
	waitNodeReady(t, cl, node, true, 2*time.Minute)
	kubectl(t, cl, "wait", "--for=condition=Ready", "pod/sleeper", "--timeout=120s")
}

func waitNodeReady(t *testing.T, cl *localcluster.Cluster, node string, want bool, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		ready, err := cl.NodeReady(context.Background(), node)
		if err == nil && ready == want {
			t.Logf("node %s Ready=%v after %.1fs", node, want, time.Since(start).Seconds())
			return
		}
		if time.Since(start) > timeout {
			t.Fatalf("node %s not Ready=%v after %s (last: %v, %v)", node, want, timeout, ready, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
