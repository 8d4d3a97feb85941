package cluster

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetd/fleetd/internal/testenv"
	"github.com/fleetd/fleetd/test/framework/localcluster"
)

// loadImages builds the named images (test/cmd/images) and loads them into
// the test cluster.
func loadImages(tb testing.TB, names string) {
	tb.Helper()
	cmd := exec.Command("go", "run", "./cmd/images", "--only="+names, "--load", "--state="+stateDir)
	cmd.Dir = filepath.Join(testenv.RepoRoot(), "test")
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("building and loading %s: %v\n%s", names, err, out)
	}
	tb.Logf("images:\n%s", out)
}

// TestDeployFleetd deploys fleetd as a user would, with kubectl apply -k
// config/default and the images built here, and checks that its pod runs,
// that the sample scripted Member becomes Ready in a Pod of its own (from
// the worker image, config/default's default) and answers a Delegation
// (its Pod reaches the gateway by the Service's DNS name), and that a test
// in the machine's namespace reaches the gateway Service through Forward.
func TestDeployFleetd(t *testing.T) {
	requireCluster(t)
	cl := up(t)
	loadImages(t, "fleetd,worker")
	root := testenv.RepoRoot()
	kubectl(t, cl, "apply", "-k", filepath.Join(root, "config", "default"))
	t.Cleanup(func() {
		for _, args := range [][]string{
			{"delete", "-f", filepath.Join(root, "config", "samples", "fleet_v1alpha1_member.yaml"), "--wait=true", "--timeout=60s"},
			{"delete", "-k", filepath.Join(root, "config", "default"), "--wait=true", "--timeout=120s"},
		} {
			if out, err := kubectlErr(cl, args...); err != nil {
				t.Logf("cleaning up: kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	})
	if out, err := kubectlErr(cl, "-n", "fleetd-system", "rollout", "status", "deployment/fleetd", "--timeout=180s"); err != nil {
		t.Fatalf("fleetd did not roll out: %v\n%s\n%s", err, out, diagnose(cl))
	}
	pods := kubectl(t, cl, "-n", "fleetd-system", "get", "pods", "-l", "app.kubernetes.io/name=fleetd",
		"-o", "jsonpath={range .items[*]}{.status.phase} {.spec.containers[0].image}{\"\\n\"}{end}")
	if !strings.HasPrefix(pods, "Running fleetd:dev") {
		t.Fatalf("fleetd's pod: %q, want Running from fleetd:dev", pods)
	}

	kubectl(t, cl, "apply", "-f", filepath.Join(root, "config", "samples", "fleet_v1alpha1_profile.yaml"))
	start := time.Now()
	kubectl(t, cl, "apply", "-f", filepath.Join(root, "config", "samples", "fleet_v1alpha1_member.yaml"))
	if out, err := kubectlErr(cl, "wait", "--for=condition=Ready", "member/worker-1", "--timeout=120s"); err != nil {
		t.Fatalf("member worker-1 not Ready: %v\n%s\n%s", err, out, diagnose(cl))
	}
	t.Logf("scripted member worker-1 Ready %.2fs after kubectl apply", time.Since(start).Seconds())
	if where := kubectl(t, cl, "get", "member", "worker-1", "-o", "jsonpath={.status.runtime} {.status.podName} {.status.nodeName}"); !strings.HasPrefix(where, "Pod worker-1-") {
		t.Errorf("worker-1 runs %q, want in a Pod of its own", where)
	}

	kubectl(t, cl, "apply", "-f", filepath.Join(root, "config", "samples", "fleet_v1alpha1_delegation.yaml"))
	t.Cleanup(func() { _, _ = kubectlErr(cl, "delete", "delegation", "hello-worker-1", "--ignore-not-found") })
	if out, err := kubectlErr(cl, "wait", "--for=jsonpath={.status.phase}=Replied", "delegation/hello-worker-1", "--timeout=60s"); err != nil {
		t.Fatalf("the sample delegation was not replied to: %v\n%s\n%s", err, out, diagnose(cl))
	}
	if reply := kubectl(t, cl, "get", "delegation", "hello-worker-1", "-o", "jsonpath={.status.reply}"); reply != "hello from kubectl" {
		t.Errorf("reply = %q, want the sample's", reply)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc, err := cl.ServiceAddr(ctx, "fleetd-system", "fleetd-gateway", "gateway")
	if err != nil {
		t.Fatal(err)
	}
	local, err := cl.Forward(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + local + "/readyz")
	if err != nil {
		t.Fatalf("the gateway Service %s through %s: %v", svc, local, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /readyz through the forward: %s %s", resp.Status, body)
	}
}

// diagnose is what a failed deploy shows: pods, events and fleetd's logs.
func diagnose(cl *localcluster.Cluster) string { return diagnoseIn(cl, "fleetd-system") }

// diagnoseIn is diagnose for fleetd deployed in namespace ns.
func diagnoseIn(cl *localcluster.Cluster, ns string) string {
	var b strings.Builder
	for _, args := range [][]string{
		{"get", "pods", "-A", "-o", "wide"},
		{"get", "members,delegations", "-A"},
		{"get", "events", "-A", "--sort-by=.lastTimestamp"},
		{"-n", ns, "logs", "deployment/fleetd", "-c", "fleetd", "--tail=50"},
		{"-n", ns, "logs", "deployment/fleetd", "-c", "herdr", "--tail=50"},
	} {
		out, _ := kubectlErr(cl, args...)
		b.WriteString("$ kubectl " + strings.Join(args, " ") + "\n" + out + "\n")
	}
	return b.String()
}
