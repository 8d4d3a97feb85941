package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/controllers"
	"github.com/fleetd/fleetd/test/framework/localcluster"
)

// netpolPods are the pods of TestNetworkPolicyWallsMembers: two members
// and a pod of no member in one namespace, and a stand-in for fleetd's
// pod (labelled as fleetd's, with its gateway port named) in another. Each
// runs the sandbox image alone; the test listens and dials from inside
// their network namespaces.
const netpolPods = `apiVersion: v1
kind: Namespace
metadata: {name: np-team}
---
apiVersion: v1
kind: Namespace
metadata: {name: np-fleetd}
---
apiVersion: v1
kind: Pod
metadata: {name: member-a, namespace: np-team, labels: {app.kubernetes.io/name: fleetd-member, fleet.fleetd.dev/member-uid: uid-a}}
spec: {containers: [{name: c, image: %[1]s, imagePullPolicy: Never}]}
---
apiVersion: v1
kind: Pod
metadata: {name: member-b, namespace: np-team, labels: {app.kubernetes.io/name: fleetd-member}}
spec: {containers: [{name: c, image: %[1]s, imagePullPolicy: Never}]}
---
apiVersion: v1
kind: Pod
metadata: {name: bystander, namespace: np-team}
spec: {containers: [{name: c, image: %[1]s, imagePullPolicy: Never}]}
---
apiVersion: v1
kind: Pod
metadata: {name: fleetd, namespace: np-fleetd, labels: {app.kubernetes.io/name: fleetd}}
spec: {containers: [{name: c, image: %[1]s, imagePullPolicy: Never, ports: [{name: gateway, containerPort: 8080}]}]}
`

// Ports the test serves: the pane host's, one a member serves of its own
// accord, and the gateway's.
const (
	npPaneHostPort = 7443
	npServedPort   = 9999
	npGatewayPort  = 8080
)

// TestNetworkPolicyWallsMembers checks that the cluster enforces fleetd's
// member NetworkPolicy in both directions. Without the policy every pod
// reaches every other (so the walls below are the policy's doing); with
// it, a member Pod reaches neither another member's pane host nor a port
// another member serves, nor a pod the policy does not name, and a pod of
// no member cannot reach a member's pane host either; fleetd's pod still
// reaches the pane hosts, and a member still reaches the gateway. A
// member's egress policy (its Profile's rules) opens an address for that
// member alone: here the pod of no member, which stands for a model's API
// on the company's network.
func TestNetworkPolicyWallsMembers(t *testing.T) {
	requireCluster(t)
	cl := up(t)
	manifest := filepath.Join(t.TempDir(), "pods.yaml")
	if err := os.WriteFile(manifest, fmt.Appendf(nil, netpolPods, localcluster.PauseImage), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, cl, "apply", "-f", manifest)
	t.Cleanup(func() { _, _ = kubectlErr(cl, "delete", "namespace", "np-team", "np-fleetd", "--wait=false") })
	kubectl(t, cl, "wait", "--for=condition=Ready", "-n", "np-team", "pod", "--all", "--timeout=120s")
	kubectl(t, cl, "wait", "--for=condition=Ready", "-n", "np-fleetd", "pod/fleetd", "--timeout=120s")

	a, b, bystander, fleetd := podOf(t, cl, "np-team", "member-a"), podOf(t, cl, "np-team", "member-b"), podOf(t, cl, "np-team", "bystander"), podOf(t, cl, "np-fleetd", "fleetd")
	b.serve(t, npPaneHostPort, npServedPort)
	bystander.serve(t, npServedPort)
	fleetd.serve(t, npGatewayPort)

	// Open before the policy: what the policy then stops, it stops.
	for _, c := range []struct {
		from *testPod
		to   string
	}{{a, b.addr(npPaneHostPort)}, {a, b.addr(npServedPort)}, {a, bystander.addr(npServedPort)}, {bystander, b.addr(npPaneHostPort)}} {
		if err := c.from.dial(c.to); err != nil {
			t.Fatalf("before any policy, %s could not reach %s: %v", c.from.name, c.to, err)
		}
	}

	np := controllers.MemberNetworkPolicy("np-team", controllers.PodSettings{
		Port: npPaneHostPort, FleetdNamespace: "np-fleetd", FleetdPodLabels: map[string]string{"app.kubernetes.io/name": "fleetd"},
	})
	np.APIVersion, np.Kind = "networking.k8s.io/v1", "NetworkPolicy"
	applyJSON(t, cl, np)

	// The engines pick the policy up in a moment.
	deadline := time.Now().Add(60 * time.Second)
	for a.dial(b.addr(npServedPort)) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("%s still reaches %s a minute after the policy was applied: is NetworkPolicy enforced?", a.name, b.addr(npServedPort))
		}
		time.Sleep(time.Second)
	}
	for _, c := range []struct {
		what string
		from *testPod
		to   string
		open bool
	}{
		{"a member to another member's pane host", a, b.addr(npPaneHostPort), false},
		{"a member to a port another member serves", a, b.addr(npServedPort), false},
		{"a member to a pod the policy does not name", a, bystander.addr(npServedPort), false},
		{"a pod of no member to a member's pane host", bystander, b.addr(npPaneHostPort), false},
		{"fleetd to a member's pane host", fleetd, b.addr(npPaneHostPort), true},
		{"a member to the gateway", a, fleetd.addr(npGatewayPort), true},
	} {
		err := c.from.dial(c.to)
		switch {
		case c.open && err != nil:
			t.Errorf("%s (%s to %s): %v, want open", c.what, c.from.name, c.to, err)
		case !c.open && err == nil:
			t.Errorf("%s (%s to %s): connected, want walled off", c.what, c.from.name, c.to)
		}
	}

	// member-a's Profile opens the bystander's address, on its port alone.
	private := bystander.addr(npServedPort)
	served := intstr.FromInt32(npServedPort)
	member := &fleetv1alpha1.Member{ObjectMeta: metav1.ObjectMeta{Name: "member-a", Namespace: "np-team", UID: "uid-a"}}
	egress := controllers.MemberEgressPolicy(member, &fleetv1alpha1.MemberEgress{Internet: ptr.To(false), Rules: []networkingv1.NetworkPolicyEgressRule{{
		To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: bystander.ip + "/32"}}},
		Ports: []networkingv1.NetworkPolicyPort{{Port: &served}},
	}}})
	egress.APIVersion, egress.Kind = "networking.k8s.io/v1", "NetworkPolicy"
	applyJSON(t, cl, egress)
	deadline = time.Now().Add(60 * time.Second)
	for a.dial(private) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("%s still cannot reach %s a minute after its egress policy opened it", a.name, private)
		}
		time.Sleep(time.Second)
	}
	if err := b.dial(private); err == nil {
		t.Errorf("%s reaches %s, which only %s's egress policy opens", b.name, private, a.name)
	}
}

// applyJSON applies an object with kubectl.
func applyJSON(t *testing.T, cl *localcluster.Cluster, obj any) {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "object.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, cl, "apply", "-f", path)
}

// acceptAndClose accepts connections on ln and closes each at once, until
// ln is closed.
func acceptAndClose(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// testPod is a running pod the test listens and dials in.
type testPod struct {
	name, ip, netns string
}

func podOf(t *testing.T, cl *localcluster.Cluster, ns, name string) *testPod {
	t.Helper()
	out := strings.Fields(kubectl(t, cl, "get", "pod", "-n", ns, name, "-o", "jsonpath={.metadata.uid} {.status.podIP}"))
	if len(out) != 2 {
		t.Fatalf("pod %s/%s: uid and IP %q", ns, name, out)
	}
	netns, err := cl.PodNetns(out[0])
	if err != nil {
		t.Fatal(err)
	}
	return &testPod{name: name, ip: out[1], netns: netns}
}

func (p *testPod) addr(port int) string { return net.JoinHostPort(p.ip, fmt.Sprint(port)) }

// serve accepts connections on ports inside the pod's namespace until the
// test ends; each is closed at once.
func (p *testPod) serve(t *testing.T, ports ...int) {
	t.Helper()
	for _, port := range ports {
		ln, err := localcluster.ListenInNetns(p.netns, fmt.Sprintf("0.0.0.0:%d", port))
		if err != nil {
			t.Fatalf("listening on %d in %s: %v", port, p.name, err)
		}
		t.Cleanup(func() { ln.Close() })
		go acceptAndClose(ln)
	}
}

// dial connects from inside the pod's namespace. A connection the policy
// stops has its first packet dropped, so it times out.
func (p *testPod) dial(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := localcluster.DialInNetns(ctx, p.netns, addr)
	if err != nil {
		return err
	}
	return c.Close()
}
