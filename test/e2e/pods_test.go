package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/panehost"
)

// The tests of this file need members in Pods: cluster mode. Those that
// reach into the cluster's network, or lose a node, need the local cluster
// too (FLEETD_E2E_CLUSTER_STATE).

func clusterMode(t *testing.T) *cluster {
	t.Helper()
	c, ok := w.mode.(*cluster)
	if !ok {
		t.Skip("members run in Pods in cluster mode only")
	}
	return c
}

func localCluster(t *testing.T) *cluster {
	t.Helper()
	c := clusterMode(t)
	if c.local == nil {
		t.Skipf("reaching pods and losing nodes needs the local cluster: set %s", envClusterState)
	}
	return c
}

// podMember applies a scripted Member whose spec.pod is pod (YAML flow
// style, "" for none) and waits until it is Ready.
func podMember(t *testing.T, name, pod string) string {
	t.Helper()
	log := w.receivedLog(name)
	if pod != "" {
		pod = "\n  pod: " + pod
	}
	apply(t, fmt.Sprintf("apiVersion: fleet.fleetd.dev/v1alpha1\nkind: Member\nmetadata: {name: %s, namespace: %s}\nspec:\n  command: [scripted-agent, --received-log, %s]%s\n", name, ns, log, pod))
	t.Cleanup(func() { _, _ = w.kubectl("delete", "member", "-n", ns, name, "--wait=false") })
	waitReady(t, name)
	return log
}

func podNow(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	m, err := getMember(name)
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := w.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: m.Status.PodName}, &pod); err != nil {
		t.Fatalf("member %s's pod %q: %v", name, m.Status.PodName, err)
	}
	return &pod
}

// TestMemberPodsSpreadOverNodes: a Member's scheduling settings reach its
// Pod; three members that may not share a node run on three.
func TestMemberPodsSpreadOverNodes(t *testing.T) {
	clusterMode(t)
	dumpOnFailure(t)
	names := []string{"e2e-spread-1", "e2e-spread-2", "e2e-spread-3"}
	apart := fmt.Sprintf(`{affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: kubernetes.io/hostname, labelSelector: {matchExpressions: [{key: %s, operator: In, values: [%s]}]}}]}}}`,
		fleetv1alpha1.LabelMember, strings.Join(names, ", "))
	nodes := map[string]string{}
	for _, name := range names {
		podMember(t, name, apart)
	}
	for _, name := range names {
		m, _ := getMember(name)
		if m.Status.Runtime != fleetv1alpha1.RuntimePod || m.Status.NodeName == "" {
			t.Fatalf("member %s: runtime %s on node %q", name, m.Status.Runtime, m.Status.NodeName)
		}
		if c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionIsolated); c == nil || c.Status != metav1.ConditionTrue || c.Reason != fleetv1alpha1.ReasonOwnPod {
			t.Errorf("member %s Isolated = %+v, want True, OwnPod", name, c)
		}
		nodes[m.Status.NodeName] = name
	}
	if len(nodes) != len(names) {
		t.Errorf("members on nodes %v, want each on a node of its own", nodes)
	}
	// Each answers from where it runs.
	s := session(t, w.token)
	for _, name := range names {
		r := call(t, s, "bridge_send", map[string]any{"sessionId": name, "content": "reply: from " + name})
		wantOutcome(t, r, "reply")
	}
}

// TestMemberPodsAreIsolated plays a member's agent turned against another
// member: it has its own Pod's files and network, and nothing of the
// other's. The other's pane host takes only fleetd's controller, by a
// client certificate of fleetd's CA: no certificate, and the attacker's
// own pane host credentials, are refused, from this machine and from the
// attacker's Pod. The attacker's Pod has no Kubernetes API token and its
// agent no gateway credential in its environment; its pane host serves
// only its own workspace; and once its Pod is gone, that Pod's token no
// longer opens the gateway.
func TestMemberPodsAreIsolated(t *testing.T) {
	c := localCluster(t)
	dumpOnFailure(t)
	ctx := context.Background()
	podMember(t, "e2e-iso-a", "")
	victimLog := podMember(t, "e2e-iso-b", "")
	victim, _ := getMember("e2e-iso-b")
	victimPod := podNow(t, "e2e-iso-b")
	victimAddr := fmt.Sprintf("%s:%d", victimPod.Status.PodIP, panehost.DefaultPort)

	var caSecret corev1.Secret
	if err := w.client.Get(ctx, client.ObjectKey{Namespace: fleetdNamespace, Name: "fleetd-pane-host-ca"}, &caSecret); err != nil {
		t.Fatal(err)
	}
	ca, err := panehost.ParseCA(caSecret.Data["ca.crt"], caSecret.Data["ca.key"])
	if err != nil {
		t.Fatal(err)
	}
	ping := func(cert *tls.Certificate) error {
		conn, err := c.local.Dial(ctx, victimAddr)
		if err != nil {
			return err
		}
		defer conn.Close()
		cfg := panehost.ClientConfig(ca.Pool(), func() (*tls.Certificate, error) {
			if cert == nil {
				return &tls.Certificate{}, nil
			}
			return cert, nil
		}, string(victim.UID))
		tc := tls.Client(conn, cfg)
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		req, _ := json.Marshal(herdr.Request{ID: "1", Method: herdr.MethodPing, Params: herdr.EmptyParams{}})
		if _, err := tc.Write(append(req, '\n')); err != nil {
			return err
		}
		line, err := bufio.NewReader(tc).ReadString('\n')
		if err != nil {
			return err
		}
		if !strings.Contains(line, `"result"`) {
			return fmt.Errorf("ping answered %s", line)
		}
		return nil
	}
	controller, err := ca.IssueController(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(&controller); err != nil {
		t.Fatalf("fleetd's controller certificate is refused too, so the refusals below prove nothing: %v", err)
	}
	if err := ping(nil); err == nil {
		t.Error("the victim's pane host answered a client with no certificate")
	}

	// What the attacker's agent can read in its own Pod.
	attacker := func(script string, args ...string) string {
		t.Helper()
		out, err := c.memberExec("e2e-iso-a", script, args...)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	// The attacker's agent cannot read its own pane host's credentials
	// (TestMemberPodAgentHoldsNoCredential); were it to have them, from
	// the API, they still open no other member's pane host.
	var own corev1.Secret
	if err := w.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "e2e-iso-a-fleetd-pane-host"}, &own); err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM := string(own.Data[panehost.CertKey]), string(own.Data[panehost.KeyKey])
	stolen, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	if err != nil {
		t.Fatalf("the attacker's own pane host credentials: %v", err)
	}
	if err := ping(&stolen); err == nil {
		t.Error("the victim's pane host answered the attacker's own pane host certificate")
	}
	// The same from the attacker's Pod, with node from the worker image.
	fromPod := attacker(`node -e '
const tls = require("tls"), fs = require("fs");
const s = tls.connect({host: process.argv[1], port: +process.argv[2], rejectUnauthorized: false,
	cert: process.argv[3], key: process.argv[4]}, () => {
	s.write(JSON.stringify({id: "1", method: "pane.read", params: {pane_id: "w1:p1", source: "visible"}}) + "\n");
});
s.setTimeout(10000, () => { console.log("refused: timeout"); process.exit(0); });
s.on("data", d => { console.log("answered: " + d); process.exit(0); });
s.on("error", e => { console.log("refused: " + e.message); process.exit(0); });
s.on("close", () => { console.log("refused: closed"); process.exit(0); });
' "$1" "$2" "$3" "$4"`, victimPod.Status.PodIP, fmt.Sprint(panehost.DefaultPort), certPEM, keyPEM)
	if !strings.HasPrefix(fromPod, "refused: ") {
		t.Errorf("from the attacker's Pod, the victim's pane host: %s", fromPod)
	}
	t.Logf("from the attacker's Pod: %s", strings.TrimSpace(fromPod))

	if out := attacker(`ls /var/run/secrets/kubernetes.io/serviceaccount 2>&1 || true`); !strings.Contains(out, "No such file") {
		t.Errorf("the attacker's Pod has a Kubernetes API token: %s", out)
	}
	if out := attacker(`for f in /proc/[0-9]*/environ; do tr '\0' '\n' <"$f" 2>/dev/null; done | grep '^FLEETD_TOKEN=.' || true`); out != "" {
		t.Errorf("a process in the attacker's Pod holds a gateway token in its environment: %s", out)
	}
	if out := attacker(`ls /workspace; ls /run/herdr`); strings.Contains(out, "e2e-iso-b") {
		t.Errorf("the victim's files in the attacker's Pod: %s", out)
	}
	snapshot := attacker(`HERDR_SOCKET_PATH=` + memberSocket + ` /fleetd-tools/scripted-agent herdr session.snapshot '{}'`)
	if strings.TrimSpace(snapshot) != "ok" {
		t.Errorf("the attacker's own pane host: %s", snapshot)
	}
	if got := received(t, victimLog); len(got) != 0 {
		t.Errorf("the victim received %q", got)
	}

	// The attacker's gateway identity is its Pod's; a replaced Pod's token
	// is fenced off.
	old, err := w.memberToken("e2e-iso-a")
	if err != nil {
		t.Fatal(err)
	}
	if who := call(t, session(t, old), "bridge_whoami", nil); who.Str("name") != "e2e-iso-a" {
		t.Errorf("the attacker's token is %v", who.Fields)
	}
	before := podNow(t, "e2e-iso-a")
	if err := w.client.Delete(ctx, before, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the attacker in a new Pod", func() (bool, string) {
		m, err := getMember("e2e-iso-a")
		return err == nil && m.Status.PodName != before.Name && meta.IsStatusConditionTrue(m.Status.Conditions, fleetv1alpha1.ConditionReady), fmt.Sprint(err, m.Status.PodName)
	})
	testutil.Eventually(t, "the old Pod's token refused", func() (bool, string) {
		code := initializeStatus(t, old)
		return code == http.StatusUnauthorized, fmt.Sprintf("status %d", code)
	})

	var np networkingv1.NetworkPolicy
	if err := w.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fleetd-member-pane-hosts"}, &np); err != nil {
		t.Errorf("no network policy guards the member Pods: %v", err)
	}
	// The local cluster enforces the policy too (test/cluster's netpol
	// test shows it); the refusals above are the pane hosts' mutual TLS,
	// which holds on a cluster that does not.
}

// TestMemberPodAgentHoldsNoCredential: in a member's Pod the agent runs
// as a user other than the pane host's, in a container that mounts
// neither the Pod's token nor the member's TLS key: the agent's shell
// reads neither, at its path or through any process it can see, and no
// process it sees runs as the pane host's user. The agent still reaches
// the gateway through the pane host's forwarder.
func TestMemberPodAgentHoldsNoCredential(t *testing.T) {
	c := clusterMode(t)
	dumpOnFailure(t)
	podMember(t, "e2e-cred", "")
	pod := podNow(t, "e2e-cred")
	hostUser := int64(-1)
	for _, ct := range pod.Spec.Containers {
		if ct.Name == "pane-host" && ct.SecurityContext != nil && ct.SecurityContext.RunAsUser != nil {
			hostUser = *ct.SecurityContext.RunAsUser
		}
	}
	if hostUser < 0 {
		t.Fatalf("the member's Pod has no pane host container of a user of its own: %+v", pod.Spec.Containers)
	}
	agent := func(script string, args ...string) string {
		t.Helper()
		out, err := c.memberExec("e2e-cred", script, args...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	if uid := agent(`id -u`); uid == fmt.Sprint(hostUser) {
		t.Errorf("the agent runs as the pane host's user %s", uid)
	}
	for _, path := range []string{"/var/run/secrets/fleetd/token", "/etc/fleetd/pane-host/tls.key", "/etc/fleetd/pane-host/tls.crt"} {
		out := agent(`for f in "$1" /proc/[0-9]*/root"$1"; do if cat "$f" >/dev/null 2>&1; then echo "read $f"; fi; done`, path)
		if out != "" {
			t.Errorf("the agent reads the pane host's credential: %s", out)
		}
	}
	if out := agent(`grep -h '^Uid:' /proc/[0-9]*/status | awk '$2 == '"$1"' || $3 == '"$1"' { print }'`, fmt.Sprint(hostUser)); out != "" {
		t.Errorf("the agent sees processes of the pane host's user: %s", out)
	}
	// The agent's reply goes to the gateway through the forwarder, with
	// the token the agent cannot read.
	r := call(t, session(t, w.token), "bridge_send", map[string]any{"sessionId": "e2e-cred", "content": "reply: through the pane host"})
	wantOutcome(t, r, "reply")
	t.Logf("the agent runs as %s, the pane host as %d", agent(`id -u`), hostUser)
}

// busyWithQueue sends member a message that keeps it working, waits until
// it is, and queues three more behind it. It returns the one in flight and
// the queued ones, in order.
func busyWithQueue(t *testing.T, member string) (string, []string) {
	t.Helper()
	s := session(t, w.token)
	r := call(t, s, "bridge_send", map[string]any{"sessionId": member, "content": "sleep: 600\nreply: never sent", "wait": false})
	wantOutcome(t, r, "dispatched")
	inFlight := r.Str("dispatchId")
	waitDelegationPhase(t, inFlight, fleetv1alpha1.DelegationWorking)
	var queued []string
	for i := range 3 {
		r := call(t, s, "bridge_send", map[string]any{"sessionId": member, "content": fmt.Sprintf("reply: queued %d", i), "wait": false})
		wantOutcome(t, r, "dispatched")
		queued = append(queued, r.Str("dispatchId"))
	}
	return inFlight, queued
}

// afterTheLoss checks what a member's lost Pod leaves: the message in
// flight ended worker_gone, and the queued ones reached the new Pod in
// order, each typed once, and nothing else was typed there.
func afterTheLoss(t *testing.T, log, inFlight string, queued []string) {
	t.Helper()
	waitDelegationPhase(t, inFlight, fleetv1alpha1.DelegationWorkerGone)
	for _, id := range queued {
		waitDelegationPhase(t, id, fleetv1alpha1.DelegationReplied)
	}
	want := []string{"reply: queued 0", "reply: queued 1", "reply: queued 2"}
	if got := received(t, log); !slices.Equal(got, want) {
		t.Errorf("the new Pod received %q, want %q: the queue in order, each once, and not the lost message", got, want)
	}
}

// TestMemberPodDeleted: a member whose Pod is deleted gets a new one; the
// message in flight ends worker_gone and the queue goes on, in order.
func TestMemberPodDeleted(t *testing.T) {
	clusterMode(t)
	dumpOnFailure(t)
	log := podMember(t, "e2e-pod-gone", "")
	inFlight, queued := busyWithQueue(t, "e2e-pod-gone")
	pod := podNow(t, "e2e-pod-gone")
	if err := w.client.Delete(context.Background(), pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	afterTheLoss(t, log, inFlight, queued)
	m, _ := getMember("e2e-pod-gone")
	if m.Status.PodName == pod.Name || m.Status.Restarts < 1 || !strings.Contains(m.Status.LastRestartReason, "deleted") {
		t.Errorf("after its Pod was deleted: pod %s, restarts %d, reason %q", m.Status.PodName, m.Status.Restarts, m.Status.LastRestartReason)
	}
}

// TestMemberPodCrashed: the pane server, the agent container's main
// process, ends (as on a crash); the container exits while the pane
// host's runs on, and the member is the same as above.
func TestMemberPodCrashed(t *testing.T) {
	c := clusterMode(t)
	dumpOnFailure(t)
	log := podMember(t, "e2e-pod-crash", "")
	inFlight, queued := busyWithQueue(t, "e2e-pod-crash")
	pod := podNow(t, "e2e-pod-crash")
	// SIGKILL from inside the Pod's PID namespace does not reach its init;
	// the init passes SIGTERM on, and the pane server ends at once, with
	// its panes.
	if _, err := c.memberExec("e2e-pod-crash", `kill -TERM 1`); err != nil {
		t.Fatal(err)
	}
	afterTheLoss(t, log, inFlight, queued)
	m, _ := getMember("e2e-pod-crash")
	if m.Status.PodName == pod.Name || m.Status.Restarts < 1 || m.Status.LastRestartReason == "" {
		t.Errorf("after its pane host ended: pod %s, restarts %d, reason %q", m.Status.PodName, m.Status.Restarts, m.Status.LastRestartReason)
	}
	t.Logf("restart reason: %s", m.Status.LastRestartReason)
}

// TestUnschedulableMember: a Member whose Pod fits no node says so, with
// the scheduler's own words.
func TestUnschedulableMember(t *testing.T) {
	clusterMode(t)
	dumpOnFailure(t)
	apply(t, fmt.Sprintf("apiVersion: fleet.fleetd.dev/v1alpha1\nkind: Member\nmetadata: {name: e2e-nowhere, namespace: %s}\nspec:\n  command: [scripted-agent]\n  pod: {nodeSelector: {fleet.fleetd.dev/e2e: nowhere}}\n", ns))
	t.Cleanup(func() { _, _ = w.kubectl("delete", "member", "-n", ns, "e2e-nowhere", "--wait=false") })
	testutil.Eventually(t, "the member to show Unschedulable", func() (bool, string) {
		m, err := getMember("e2e-nowhere")
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionPodScheduled)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == fleetv1alpha1.ReasonUnschedulable &&
				strings.Contains(c.Message, "didn't match") && m.Status.Phase == fleetv1alpha1.MemberPending,
			fmt.Sprintf("phase %s, PodScheduled %+v", m.Status.Phase, c)
	})
}

// TestNodeLost kills a whole node as a power loss would (its kubelet,
// containerd and containers): the member on it is Ready on another node
// within 60 s, the issue's bound for a failover, its message in flight
// ends worker_gone and its queue reaches the new Pod in order, each typed
// once. The node is booted again afterwards.
func TestNodeLost(t *testing.T) {
	c := localCluster(t)
	dumpOnFailure(t)
	ctx := context.Background()
	victim := c.nodeToLose(t)
	log := podMember(t, "e2e-node-lost", fmt.Sprintf(`{affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 100, preference: {matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [%s]}]}}]}}}`, victim))
	if m, _ := getMember("e2e-node-lost"); m.Status.NodeName != victim {
		t.Fatalf("the member runs on %s, not on %s, the node to lose", m.Status.NodeName, victim)
	}
	inFlight, queued := busyWithQueue(t, "e2e-node-lost")
	before := podNow(t, "e2e-node-lost")

	lost := time.Now()
	if err := c.local.KillNode(victim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.local.StartNode(ctx, victim); err != nil {
			t.Errorf("booting %s again: %v", victim, err)
			return
		}
		testutil.Eventually(t, victim+" Ready again", func() (bool, string) {
			ready, err := c.local.NodeReady(ctx, victim)
			return err == nil && ready, fmt.Sprint(err)
		}, testutil.Within(3*time.Minute))
	})
	var notReady time.Duration
	var m *fleetv1alpha1.Member
	testutil.Eventually(t, "the member Ready on another node", func() (bool, string) {
		if notReady == 0 {
			if ready, err := c.local.NodeReady(ctx, victim); err == nil && !ready {
				notReady = time.Since(lost)
			}
		}
		var err error
		if m, err = getMember("e2e-node-lost"); err != nil {
			return false, err.Error()
		}
		return m.Status.PodName != before.Name && m.Status.NodeName != victim && m.Status.NodeName != "" &&
				meta.IsStatusConditionTrue(m.Status.Conditions, fleetv1alpha1.ConditionReady),
			fmt.Sprintf("pod %s on %q, phase %s", m.Status.PodName, m.Status.NodeName, m.Status.Phase)
	}, testutil.Within(3*time.Minute))
	elsewhere := time.Since(lost)
	t.Logf("node %s lost: NotReady after %.1fs, member Ready on %s after %.1fs (restart reason %q)", victim, notReady.Seconds(), m.Status.NodeName, elsewhere.Seconds(), m.Status.LastRestartReason)
	if elsewhere > time.Minute {
		t.Errorf("the member took %s to be Ready elsewhere, more than a minute", elsewhere.Round(time.Second))
	}
	afterTheLoss(t, log, inFlight, queued)
}

// nodeToLose picks a node whose loss leaves the cluster able to heal:
// neither fleetd's nor the one with every DNS server, and not the one
// running kube-proxy (the first) when another will do.
func (c *cluster) nodeToLose(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	replicas, err := c.pods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fleetdNodes := map[string]bool{}
	for _, p := range replicas {
		fleetdNodes[p.Spec.NodeName] = true
	}
	var dns corev1.PodList
	if err := w.client.List(ctx, &dns, client.InNamespace("kube-system"), client.MatchingLabels{"k8s-app": "kube-dns"}); err != nil {
		t.Fatal(err)
	}
	dnsNodes := map[string]bool{}
	for _, p := range dns.Items {
		dnsNodes[p.Spec.NodeName] = true
	}
	var candidates []string
	for _, n := range c.local.NodeNames() {
		// With one replica its node must stay; with more, the others
		// take its shards over and serve the gateway.
		if fleetdNodes[n] && len(replicas) == 1 || len(dnsNodes) == 1 && dnsNodes[n] {
			continue
		}
		candidates = append(candidates, n)
	}
	if len(candidates) == 0 {
		t.Skipf("every node holds fleetd's one replica (%v) or all of DNS (%v)", fleetdNodes, dnsNodes)
	}
	slices.SortFunc(candidates, func(a, b string) int {
		// A node without a fleetd replica first.
		if fleetdNodes[a] != fleetdNodes[b] {
			if fleetdNodes[a] {
				return 1
			}
			return -1
		}
		if (a == c.local.NodeNames()[0]) != (b == c.local.NodeNames()[0]) {
			if a == c.local.NodeNames()[0] {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
	return candidates[0]
}
