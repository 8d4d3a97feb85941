package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/mcpclient"
	"github.com/fleetd/fleetd/internal/scheme"
	"github.com/fleetd/fleetd/test/framework/localcluster"
)

// Where config/default runs fleetd: one pod of the fleetd Deployment with a
// fleetd and a herdr container (the shared pane server); members run in Pods
// of their own.
const (
	fleetdNamespace = "fleetd-system"
	fleetdContainer = "fleetd"
	herdrContainer  = "herdr"
)

// fleetdPodLabels select the pod of the fleetd Deployment.
var fleetdPodLabels = client.MatchingLabels{"app.kubernetes.io/name": "fleetd"}

// primaryServiceAccount is the service account whose token the suite acts
// with as the primary in cluster mode, as a pod would.
const primaryServiceAccount = "e2e-primary"

// cluster reaches fleetd deployed in a cluster. It starts nothing: it acts
// on the fleetd pod with kubectl, and the primary is a service account.
type cluster struct {
	kubeconfig string
	client     client.Client
	gatewayURL string
	// local is the local cluster this is (make cluster), nil for another.
	local *localcluster.Cluster
}

// startCluster checks that fleetd runs in the cluster in kubeconfig and
// serves at gatewayURL, and mints the primary's service-account token.
// state is the local cluster's state directory when it is one.
func startCluster(kubeconfig, gatewayURL, state string) (*world, func(), error) {
	if gatewayURL == "" {
		return nil, nil, fmt.Errorf("%s is set but %s is not: port-forward the fleetd-gateway Service and set it to http://127.0.0.1:<port>/mcp", envKubeconfig, envGatewayURL)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, nil, err
	}
	cl := &cluster{kubeconfig: kubeconfig, client: c, gatewayURL: gatewayURL}
	if state != "" {
		if cl.local, err = localcluster.Load(state); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", envClusterState, err)
		}
	}
	w := &world{mode: cl, kubeconfig: kubeconfig, cfg: cfg, client: c, gatewayURL: gatewayURL}
	ctx := context.Background()
	if _, err := cl.pod(ctx); err != nil {
		return nil, nil, err
	}
	if err := waitServing(gatewayURL, 2*time.Minute, nil); err != nil {
		return nil, nil, err
	}
	if w.token, err = cl.primaryToken(ctx, kubernetes.NewForConfigOrDie(cfg)); err != nil {
		return nil, nil, fmt.Errorf("minting the primary's token: %w", err)
	}
	return w, func() {}, nil
}

// primaryToken makes the primary service account, lets it delegate and
// manage members in ns through the fleetd-delegator and
// fleetd-fleet-manager ClusterRoles (the local mode's primary is an
// administrator), mints a token for audience
// fleetd, and waits until the gateway lets it in.
func (c *cluster) primaryToken(ctx context.Context, kc kubernetes.Interface) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: primaryServiceAccount, Namespace: ns}}
	if _, err := kc.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	for binding, role := range map[string]string{"-delegates": "fleetd-delegator", "-manages": "fleetd-fleet-manager"} {
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: primaryServiceAccount + binding, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: primaryServiceAccount, Namespace: ns}},
		}
		if _, err := kc.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", err
		}
	}
	tr, err := kc.CoreV1().ServiceAccounts(ns).CreateToken(ctx, primaryServiceAccount, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         []string{fleetv1alpha1.GatewayAudience},
		ExpirationSeconds: ptr.To[int64](2 * 3600),
	}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	token := tr.Status.Token
	// The gateway remembers a refusal for a few seconds; the RoleBinding
	// may reach the API server's authorizer after the first call.
	deadline := time.Now().Add(time.Minute)
	for {
		err := whoami(ctx, c.gatewayURL, token)
		if err == nil {
			return token, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the gateway does not let %s in: %w", primaryServiceAccount, err)
		}
		time.Sleep(time.Second)
	}
}

func whoami(ctx context.Context, url, token string) error {
	s, err := mcpclient.Connect(ctx, url, token)
	if err != nil {
		return err
	}
	defer s.Close()
	r, err := mcpclient.Call(ctx, s, "bridge_whoami", nil)
	if err != nil {
		return err
	}
	if r.IsError {
		return fmt.Errorf("bridge_whoami: %v %s", r.Fields, r.Text)
	}
	return nil
}

// pods are the running pods of the fleetd Deployment, its replicas.
func (c *cluster) pods(ctx context.Context) ([]*corev1.Pod, error) {
	var pods corev1.PodList
	if err := c.client.List(ctx, &pods, client.InNamespace(fleetdNamespace), fleetdPodLabels); err != nil {
		return nil, fmt.Errorf("listing fleetd's pods: %w", err)
	}
	var running []*corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			running = append(running, p)
		}
	}
	if len(running) == 0 {
		return nil, fmt.Errorf("no running fleetd pod in namespace %s", fleetdNamespace)
	}
	slices.SortFunc(running, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return running, nil
}

// pod is a running pod of the fleetd Deployment.
func (c *cluster) pod(ctx context.Context) (*corev1.Pod, error) {
	pods, err := c.pods(ctx)
	if err != nil {
		return nil, err
	}
	return pods[0], nil
}

func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// exec runs a shell script in a container of pod and returns its stdout.
func (c *cluster) exec(pod, container, script string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(kubectlBinary(), append([]string{"--kubeconfig=" + c.kubeconfig, "exec", "-n", fleetdNamespace, pod, "-c", container, "--", "sh", "-c", script, "sh"}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("kubectl exec %s -c %s: %w: %s", pod, container, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// restart sends signal to PID 1 of a container of every fleetd pod, the
// container's main process, and waits until the kubelet has started each
// container again and it is ready. The pods, their emptyDirs and their
// other containers stay.
func (c *cluster) restart(container, signal string) error {
	ctx := context.Background()
	pods, err := c.pods(ctx)
	if err != nil {
		return err
	}
	before := map[string]int32{}
	var execErrs []error
	for _, pod := range pods {
		st := containerStatus(pod, container)
		if st == nil {
			return fmt.Errorf("pod %s has no container %s", pod.Name, container)
		}
		before[pod.Name] = st.RestartCount
		// The exec may fail as the container goes down under it; the
		// restart count says whether the signal landed.
		if _, err := c.exec(pod.Name, container, "kill -s "+signal+" 1"); err != nil {
			execErrs = append(execErrs, err)
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for _, pod := range pods {
		for {
			p := &corev1.Pod{}
			if err := c.client.Get(ctx, client.ObjectKeyFromObject(pod), p); err != nil {
				return fmt.Errorf("getting pod %s: %w", pod.Name, err)
			}
			if p.UID != pod.UID {
				return fmt.Errorf("pod %s was replaced; only its container %s should have restarted", pod.Name, container)
			}
			st := containerStatus(p, container)
			if st != nil && st.RestartCount > before[pod.Name] && st.Ready {
				break
			}
			if time.Now().After(deadline) {
				return errors.Join(append([]error{fmt.Errorf("container %s of pod %s not restarted and ready after SIG%s; status: %+v", container, pod.Name, signal, st)}, execErrs...)...)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// receivedLog is in the member's workspace: members run in Pods of their
// own, config/default's default. The file's name says whose it is.
func (c *cluster) receivedLog(member string) string {
	return memberWorkspace + "/" + member + receivedSuffix
}

// Where a member Pod keeps the tests' received logs.
const (
	memberWorkspace = "/workspace"
	receivedSuffix  = ".received"
	// memberContainer runs the pane server and the agent in a member Pod;
	// the pane host runs beside it, as another user, in "pane-host".
	memberContainer = "agent"
)

// readPaneFile reads a file in the member Pod whose received log it is.
func (c *cluster) readPaneFile(path string) ([]byte, error) {
	member := strings.TrimSuffix(filepath.Base(path), receivedSuffix)
	return c.memberExec(member, `if [ -e "$1" ]; then cat "$1"; fi`, path)
}

// memberPod is the Pod a member runs in now.
func (c *cluster) memberPod(member string) (string, error) {
	var m fleetv1alpha1.Member
	if err := c.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: member}, &m); err != nil {
		return "", err
	}
	if m.Status.PodName == "" {
		return "", fmt.Errorf("member %s has no pod (runtime %s, phase %s)", member, m.Status.Runtime, m.Status.Phase)
	}
	return m.Status.PodName, nil
}

// memberToken is a token as the kubelet projects it into a member's Pod:
// for the Pod's service account, audience fleetd, bound to the Pod.
func (c *cluster) memberToken(member string) (string, error) {
	ctx := context.Background()
	name, err := c.memberPod(member)
	if err != nil {
		return "", err
	}
	var pod corev1.Pod
	if err := c.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pod); err != nil {
		return "", err
	}
	return boundToken(ctx, c.client, &pod)
}

// boundToken is a token as the kubelet projects it into pod: for its
// service account, audience fleetd, bound to the Pod.
func boundToken(ctx context.Context, c client.Client, pod *corev1.Pod) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: cmp.Or(pod.Spec.ServiceAccountName, "default")}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         []string{fleetv1alpha1.GatewayAudience},
		ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", fmt.Errorf("a token for pod %s: %w", pod.Name, err)
	}
	return tr.Status.Token, nil
}

// memberExec runs a shell script in a member's Pod, as its own user.
func (c *cluster) memberExec(member, script string, args ...string) ([]byte, error) {
	pod, err := c.memberPod(member)
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(kubectlBinary(), append([]string{"--kubeconfig=" + c.kubeconfig, "exec", "-n", ns, pod, "-c", memberContainer, "--", "sh", "-c", script, "sh"}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("kubectl exec %s: %w: %s", pod, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// killFleetd ends the fleetd container's process at once, with no graceful
// shutdown, and waits until the restarted container serves. The herdr
// container, and so every pane, keeps running, as when the local fleetd
// process is killed. Deleting the pod would end the panes too.
//
// The kernel ignores SIGKILL sent to a container's PID 1 from inside the
// container; SIGQUIT is delivered because the Go runtime handles it, and
// the runtime then exits at once (after a goroutine dump in the log).
func (c *cluster) killFleetd() error {
	if err := c.restart(fleetdContainer, "QUIT"); err != nil {
		return err
	}
	return waitServing(c.gatewayURL, 2*time.Minute, nil)
}

// restartPaneServer ends every member's pane host at once, as the local
// mode's restart of its one pane server does: the member Pods are deleted,
// and fleetd, which keeps running, replaces them and heals the members.
func (c *cluster) restartPaneServer() error {
	ctx := context.Background()
	var members fleetv1alpha1.MemberList
	if err := c.client.List(ctx, &members, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, m := range members.Items {
		if m.Status.PodName == "" {
			continue
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: m.Status.PodName}}
		if err := c.client.Delete(ctx, pod, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting member %s's pod: %w", m.Name, err)
		}
	}
	return nil
}

func (c *cluster) agentDir() string { return "" }

// paneKeys presses keys in a member's pane, through its Pod's pane host,
// as fleetd's own user there.
func (c *cluster) paneKeys(m *fleetv1alpha1.Member, keys ...string) error {
	params, err := json.Marshal(herdr.PaneSendKeysParams{PaneID: m.Status.PaneID, Keys: keys})
	if err != nil {
		return err
	}
	out, err := c.memberExec(m.Name, `HERDR_SOCKET_PATH=`+memberSocket+` /fleetd-tools/scripted-agent herdr pane.send_keys "$1"`, string(params))
	if err == nil && strings.TrimSpace(string(out)) != "ok" {
		err = fmt.Errorf("pane.send_keys in member %s's pod: %s", m.Name, out)
	}
	return err
}

// modelListener listens in the local cluster's network namespace, on an
// address every pod reaches; another cluster's pods cannot reach the test.
func (c *cluster) modelListener() (net.Listener, string, error) {
	if c.local == nil {
		return nil, "", fmt.Errorf("%w: without %s the pods cannot reach the stand-in model", errNoRealAgents, envClusterState)
	}
	return c.local.Listen()
}

// hookEvents reads the hooks' log in the member's Pod.
func (c *cluster) hookEvents(m *fleetv1alpha1.Member) ([]agents.HookStatus, error) {
	raw, err := c.memberExec(m.Name, `cat "$1" 2>/dev/null || true`, memberAgentDir+"/"+agents.HookEventsFile)
	if err != nil {
		return nil, err
	}
	return agents.ParseHookEvents(raw), nil
}

// Where a member Pod keeps its agent's files, and its pane host's socket.
const (
	memberAgentDir = "/workspace/.fleetd/agent"
	memberSocket   = "/run/herdr/herdr.sock"
)

// killAgent kills the agent's processes in the member's Pod, found as on a
// machine: by name, with the agent's config variable in their environment.
func (c *cluster) killAgent(m *fleetv1alpha1.Member, configEnv string, comms []string) (int, error) {
	out, err := c.memberExec(m.Name, `
env=$1; shift
n=0
for p in /proc/[0-9]*; do
	comm=$(cat "$p/comm" 2>/dev/null) || continue
	for want in "$@"; do
		if [ "$comm" = "$want" ] && tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -q "^$env="; then
			kill -KILL "${p#/proc/}" && n=$((n+1))
		fi
	done
done
echo "$n"`, append([]string{configEnv}, comms...)...)
	if err != nil {
		return 0, err
	}
	var n int
	_, err = fmt.Sscan(string(out), &n)
	return n, err
}

// realAgents: the worker image holds the pinned CLIs; what they need is the
// stand-in model, which only a local cluster's pods reach.
func (c *cluster) realAgents() error {
	if c.local == nil {
		return fmt.Errorf("%w: set %s to a local cluster's state", errNoRealAgents, envClusterState)
	}
	return nil
}

func (c *cluster) logs() string {
	var b strings.Builder
	out, _ := kubectl(c.kubeconfig, "get", "pods", "-n", fleetdNamespace, "-o", "wide")
	fmt.Fprintf(&b, "kubectl get pods -n %s:\n%s\n", fleetdNamespace, out)
	pods, err := c.pods(context.Background())
	if err != nil {
		fmt.Fprintln(&b, err)
		return b.String()
	}
	out, _ = kubectl(c.kubeconfig, "get", "leases", "-n", fleetdNamespace)
	fmt.Fprintf(&b, "kubectl get leases -n %s:\n%s\n", fleetdNamespace, out)
	for _, pod := range pods {
		for _, container := range []string{fleetdContainer, herdrContainer} {
			if st := containerStatus(pod, container); st != nil && st.RestartCount > 0 {
				out, _ := kubectl(c.kubeconfig, "logs", "-n", fleetdNamespace, pod.Name, "-c", container, "--previous", "--tail=100")
				fmt.Fprintf(&b, "%s %s log before its last restart (tail):\n%s\n", pod.Name, container, out)
			}
			out, _ := kubectl(c.kubeconfig, "logs", "-n", fleetdNamespace, pod.Name, "-c", container, "--tail=300")
			fmt.Fprintf(&b, "%s %s log (tail):\n%s\n", pod.Name, container, out)
		}
	}
	return b.String()
}
