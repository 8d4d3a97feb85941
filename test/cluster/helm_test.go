package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/fleetd/fleetd/internal/testenv"
	"github.com/fleetd/fleetd/test/framework/localcluster"
)

// helmNamespace is where TestHelmFleetd installs fleetd: not
// config/default's fleetd-system, so that the release's namespace is shown
// to reach every flag, subject and NetworkPolicy that names it.
const helmNamespace = "fleet-ops"

// helmCmd runs the pinned Helm (make helm) against cl, with Helm's own
// configuration and cache in a directory of the test's.
func helmCmd(tb testing.TB, cl *localcluster.Cluster, home string, args ...string) (string, error) {
	tb.Helper()
	bin := filepath.Join(testenv.RepoRoot(), "bin", "helm")
	if _, err := os.Stat(bin); err != nil {
		tb.Fatalf("the pinned Helm is not built (make helm): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig=" + cl.Kubeconfig(), "--namespace=" + helmNamespace}, args...)...)
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func helm(tb testing.TB, cl *localcluster.Cluster, home string, args ...string) string {
	tb.Helper()
	out, err := helmCmd(tb, cl, home, args...)
	if err != nil {
		tb.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// TestHelmFleetd installs fleetd with charts/fleetd and the real Helm, as
// a user would, in a namespace of its own: fleetd rolls out, the sample
// scripted Member becomes Ready in a Pod of its own and the gateway
// Service answers; helm upgrade with another --max-queue rolls out a pod
// that runs with it; helm uninstall leaves none of the release's objects
// (namespaced, ClusterRoles and their bindings, admission policies and
// their bindings, Helm's own record) but the CRDs, which Helm keeps.
func TestHelmFleetd(t *testing.T) {
	requireCluster(t)
	cl := up(t)
	loadImages(t, "fleetd,worker")
	root := testenv.RepoRoot()
	home := t.TempDir()
	member := filepath.Join(root, "config", "samples", "fleet_v1alpha1_member.yaml")
	t.Cleanup(func() {
		for _, args := range [][]string{
			{"delete", "-f", member, "--ignore-not-found", "--wait=true", "--timeout=60s"},
		} {
			if out, err := kubectlErr(cl, args...); err != nil {
				t.Logf("cleaning up: kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		if out, err := helmCmd(t, cl, home, "uninstall", "fleetd", "--ignore-not-found", "--wait", "--timeout=2m"); err != nil {
			t.Logf("cleaning up: helm uninstall: %v\n%s", err, out)
		}
		for _, args := range [][]string{
			{"delete", "-f", filepath.Join(root, "config", "samples", "fleet_v1alpha1_profile.yaml"), "--ignore-not-found"},
			{"delete", "-k", filepath.Join(root, "config", "crd"), "--ignore-not-found", "--wait=true", "--timeout=60s"},
			{"delete", "namespace", helmNamespace, "--ignore-not-found", "--wait=true", "--timeout=120s"},
		} {
			if out, err := kubectlErr(cl, args...); err != nil {
				t.Logf("cleaning up: kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	})

	t.Log(helm(t, cl, home, "install", "fleetd", "charts/fleetd", "--create-namespace", "--wait", "--timeout=5m"))
	diagnose := func() string { return diagnoseIn(cl, helmNamespace) }
	if out, err := kubectlErr(cl, "-n", helmNamespace, "rollout", "status", "deployment/fleetd", "--timeout=180s"); err != nil {
		t.Fatalf("fleetd did not roll out: %v\n%s\n%s", err, out, diagnose())
	}
	pods := kubectl(t, cl, "-n", helmNamespace, "get", "pods", "-l", "app.kubernetes.io/name=fleetd",
		"-o", "jsonpath={range .items[*]}{.status.phase} {.spec.containers[0].image}{\"\\n\"}{end}")
	if !strings.HasPrefix(pods, "Running fleetd:dev") {
		t.Fatalf("fleetd's pod: %q, want Running from fleetd:dev", pods)
	}
	// What the release made, to look for once it is uninstalled.
	manifest := helm(t, cl, home, "get", "manifest", "fleetd")

	kubectl(t, cl, "apply", "-f", filepath.Join(root, "config", "samples", "fleet_v1alpha1_profile.yaml"))
	kubectl(t, cl, "apply", "-f", member)
	if out, err := kubectlErr(cl, "wait", "--for=condition=Ready", "member/worker-1", "--timeout=180s"); err != nil {
		t.Fatalf("member worker-1 not Ready: %v\n%s\n%s", err, out, diagnose())
	}
	if where := kubectl(t, cl, "get", "member", "worker-1", "-o", "jsonpath={.status.runtime} {.status.podName}"); !strings.HasPrefix(where, "Pod worker-1-") {
		t.Errorf("worker-1 runs %q, want in a Pod of its own", where)
	}
	gatewayReady(t, cl)

	// An upgrade with one value changed reaches the running pod.
	t.Log(helm(t, cl, home, "upgrade", "fleetd", "charts/fleetd", "--reuse-values", "--set", "limits.maxQueue=7", "--wait", "--timeout=5m"))
	if out, err := kubectlErr(cl, "-n", helmNamespace, "rollout", "status", "deployment/fleetd", "--timeout=180s"); err != nil {
		t.Fatalf("fleetd did not roll out after the upgrade: %v\n%s\n%s", err, out, diagnose())
	}
	args := kubectl(t, cl, "-n", helmNamespace, "get", "pods", "-l", "app.kubernetes.io/name=fleetd", "--field-selector=status.phase=Running",
		"-o", "jsonpath={range .items[*]}{.metadata.deletionTimestamp}|{.spec.containers[0].args}{\"\\n\"}{end}")
	var live []string
	for line := range strings.Lines(args) {
		if deleting, a, _ := strings.Cut(strings.TrimSpace(line), "|"); deleting == "" {
			live = append(live, a)
		}
	}
	if len(live) == 0 || slices.ContainsFunc(live, func(a string) bool { return !strings.Contains(a, `"--max-queue=7"`) }) {
		t.Errorf("fleetd's pods after helm upgrade --set limits.maxQueue=7 run with %q", live)
	}
	var status struct {
		Info struct {
			Status string `json:"status"`
		} `json:"info"`
		Version int `json:"version"`
	}
	if err := json.Unmarshal([]byte(helm(t, cl, home, "status", "fleetd", "-o", "json")), &status); err != nil {
		t.Fatal(err)
	}
	if status.Info.Status != "deployed" || status.Version != 2 {
		t.Errorf("helm status after the upgrade: %+v, want deployed, version 2", status)
	}
	gatewayReady(t, cl)

	// fleetd finalizes its Members: they go while it runs.
	kubectl(t, cl, "delete", "-f", member, "--wait=true", "--timeout=120s")
	t.Log(helm(t, cl, home, "uninstall", "fleetd", "--wait", "--timeout=3m"))
	if out, err := kubectlErr(cl, "-n", helmNamespace, "wait", "--for=delete", "pod", "-l", "app.kubernetes.io/name=fleetd", "--timeout=120s"); err != nil {
		t.Errorf("fleetd's pods outlived helm uninstall: %v\n%s", err, out)
	}
	var left []string
	for _, ref := range manifestObjects(t, manifest) {
		if ref.GetKind() == "CustomResourceDefinition" {
			t.Errorf("the release's manifest has CRD %s: Helm would delete it, and every Member with it", ref.GetName())
		}
		args := []string{"get", ref.GetKind(), ref.GetName(), "--ignore-not-found", "-o", "name"}
		if ns := ref.GetNamespace(); ns != "" {
			args = append(args, "-n", ns)
		}
		if out := strings.TrimSpace(kubectl(t, cl, args...)); out != "" {
			left = append(left, out)
		}
	}
	// Beyond the manifest: whatever cluster-wide object still bears the
	// release's labels or fleetd's names, and Helm's record of it.
	for _, kinds := range []string{
		"clusterroles,clusterrolebindings",
		"validatingadmissionpolicies,validatingadmissionpolicybindings,mutatingadmissionpolicies,mutatingadmissionpolicybindings",
	} {
		for name := range strings.Lines(kubectl(t, cl, "get", kinds, "-o", "name")) {
			if name = strings.TrimSpace(name); strings.Contains(name, "/fleetd") {
				left = append(left, name)
			}
		}
	}
	left = append(left, strings.Fields(kubectl(t, cl, "get", "all,serviceaccounts,roles,rolebindings,secrets,configmaps", "-A", "-l", "app.kubernetes.io/instance=fleetd", "-o", "name"))...)
	left = append(left, strings.Fields(kubectl(t, cl, "-n", helmNamespace, "get", "secrets", "-l", "owner=helm,name=fleetd", "-o", "name"))...)
	if len(left) > 0 {
		t.Errorf("helm uninstall left %q", left)
	}
	crds := kubectl(t, cl, "get", "crds", "-o", "name")
	for _, crd := range []string{"members.fleet.fleetd.dev", "delegations.fleet.fleetd.dev", "profiles.fleet.fleetd.dev"} {
		if !strings.Contains(crds, "customresourcedefinition.apiextensions.k8s.io/"+crd) {
			t.Errorf("CRD %s went with the release; Helm keeps a chart's crds/", crd)
		}
	}
	// What fleetd made for itself is no object of the release's; the
	// README says to delete the namespace.
	t.Logf("left in %s by fleetd itself:\n%s", helmNamespace, kubectl(t, cl, "-n", helmNamespace, "get", "secrets,leases,configmaps", "-o", "name"))
}

// gatewayReady checks that the gateway Service answers /readyz through the
// cluster's Forward. Right after a rollout kube-proxy may still send a
// connection to the Pod that went, so it asks until the Service answers,
// for a minute.
func gatewayReady(t *testing.T, cl *localcluster.Cluster) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc, err := cl.ServiceAddr(ctx, helmNamespace, "fleetd-gateway", "gateway")
	if err != nil {
		t.Fatal(err)
	}
	local, err := cl.Forward(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		resp, err := http.Get("http://" + local + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = fmt.Errorf("%s %s", resp.Status, body)
		}
		if now := time.Now(); now.After(deadline) {
			t.Fatalf("GET /readyz of the gateway Service %s through %s for a minute: %v (before: %s)", svc, local, err, last)
		}
		last = err.Error()
	}
}

// manifestObjects lists the objects of helm get manifest's output.
func manifestObjects(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding the release's manifest: %v\n%s", err, manifest)
		}
		if obj != nil {
			objs = append(objs, &unstructured.Unstructured{Object: obj})
		}
	}
	if !slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == "Deployment" }) {
		t.Fatalf("no Deployment among the release's objects:\n%s", manifest)
	}
	return objs
}
