package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// TestPodPrimary runs a primary as a Pod of its own, as DESIGN says pods
// mount the gateway: its service account's token, projected by the kubelet
// for audience fleetd, is all it shows. Before a RoleBinding lets the
// account delegate, the gateway refuses it (403); after, the
// same Pod's call returns the worker's reply, sent as the account.
func TestPodPrimary(t *testing.T) {
	cl, ok := w.mode.(*cluster)
	if !ok {
		t.Skip("a primary in a Pod needs a cluster with nodes")
	}
	dumpOnFailure(t)
	ctx := context.Background()
	kc := kubernetes.NewForConfigOrDie(w.cfg)
	member(t, "e2e-pod-worker")
	const account = "e2e-pod-primary"
	if _, err := kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: account}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kc.CoreV1().ServiceAccounts(ns).Delete(ctx, account, metav1.DeleteOptions{}) })
	send := `{"sessionId":"e2e-pod-worker","content":"reply: hello, pod"}`

	// The gateway refuses a principal with no rights at all at the door,
	// with 403, as it does every request of an unknown token with 401.
	out, _ := cl.runPrimaryPod(t, kc, account, send)
	if !strings.HasPrefix(out, "error: ") || !strings.Contains(out, "Forbidden") {
		t.Errorf("a pod whose account may not delegate: %q, want it refused with 403 Forbidden", out)
	}

	if _, err := kc.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: account + "-delegates"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fleetd-delegator"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: account, Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kc.RbacV1().RoleBindings(ns).Delete(ctx, account+"-delegates", metav1.DeleteOptions{}) })
	// The gateway remembers a refusal for a few seconds.
	var result map[string]any
	var took string
	deadline := time.Now().Add(time.Minute)
	for {
		out, took = cl.runPrimaryPod(t, kc, account, send)
		if json.Unmarshal([]byte(out), &result) == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if result["outcome"] != "reply" || result["text"] != "hello, pod" {
		t.Fatalf("the pod's bridge_send: %q, want the worker's reply", out)
	}
	t.Logf("bridge_send -> reply from a primary Pod to a member Pod: %s", took)
	d, err := getDelegation(fmt.Sprint(result["dispatchId"]))
	if err != nil {
		t.Fatal(err)
	}
	if want := (fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalServiceAccount, Name: "system:serviceaccount:" + ns + ":" + account}); d.Spec.From != want {
		t.Errorf("the delegation is from %+v, want %+v: identity comes from the token", d.Spec.From, want)
	}
}

// runPrimaryPod runs `scripted-agent call bridge_send ARGS` in a Pod of
// account, from fleetd's own image, and returns the result it printed and
// how long the call took.
func (c *cluster) runPrimaryPod(t *testing.T, kc kubernetes.Interface, account, args string) (string, string) {
	t.Helper()
	ctx := context.Background()
	fleetdPod, err := c.pod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var image string
	for _, ct := range fleetdPod.Spec.Containers {
		if ct.Name == fleetdContainer {
			image = ct.Image
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: account + "-", Namespace: ns},
		Spec: corev1.PodSpec{
			ServiceAccountName:           account,
			AutomountServiceAccountToken: ptr.To(false),
			RestartPolicy:                corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "primary", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"/usr/local/bin/scripted-agent", "call", "bridge_send", args},
				Env: []corev1.EnvVar{
					{Name: "FLEETD_MCP_URL", Value: "http://fleetd-gateway." + fleetdNamespace + ".svc:8080/mcp"},
					{Name: "FLEETD_TOKEN_FILE", Value: "/var/run/secrets/fleetd/token"},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "fleetd-token", MountPath: "/var/run/secrets/fleetd", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "fleetd-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
					Audience: fleetv1alpha1.GatewayAudience, ExpirationSeconds: ptr.To[int64](3600), Path: "token",
				}}},
			}}}},
		},
	}
	pod, err = kc.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = kc.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p, err := kc.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("primary pod %s still %s: %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
		}
		time.Sleep(500 * time.Millisecond)
	}
	logs, err := kc.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "primary"}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("primary pod %s printed %s", pod.Name, logs)
	result, took, _ := strings.Cut(strings.TrimSpace(string(logs)), "\ntook ")
	return result, took
}

// TestProcessPrimary is TestPodPrimary's flow with everything on this
// machine, as with fleetd dev: the same call from a process with the
// primary's token, for the time it takes.
func TestProcessPrimary(t *testing.T) {
	l, ok := w.mode.(*local)
	if !ok {
		t.Skip("a primary process beside fleetd runs in local mode")
	}
	dumpOnFailure(t)
	member(t, "e2e-proc-primary-worker")
	cmd := exec.Command(filepath.Join(l.bin, "scripted-agent"), "call", "bridge_send", `{"sessionId":"e2e-proc-primary-worker","content":"reply: hello, process"}`)
	cmd.Env = append(os.Environ(), "FLEETD_MCP_URL="+w.gatewayURL, "FLEETD_TOKEN="+w.token)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	result, took, _ := strings.Cut(strings.TrimSpace(string(out)), "\ntook ")
	var fields map[string]any
	if err := json.Unmarshal([]byte(result), &fields); err != nil || fields["outcome"] != "reply" || fields["text"] != "hello, process" {
		t.Fatalf("the process's bridge_send: %q (%v), want the worker's reply", out, err)
	}
	t.Logf("bridge_send -> reply from a primary process on this machine: %s", took)
}
