package controllers

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/panehost"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

func TestRuntimeOf(t *testing.T) {
	started := &fleetv1alpha1.Member{Status: fleetv1alpha1.MemberStatus{Runtime: fleetv1alpha1.RuntimeShared}}
	cases := map[string]struct {
		m    *fleetv1alpha1.Member
		w    Worker
		def  fleetv1alpha1.Runtime
		want fleetv1alpha1.Runtime
	}{
		"nothing says":                  {m: &fleetv1alpha1.Member{}, want: fleetv1alpha1.RuntimeShared},
		"fleetd's default":              {m: &fleetv1alpha1.Member{}, def: fleetv1alpha1.RuntimePod, want: fleetv1alpha1.RuntimePod},
		"the spec over the default":     {m: &fleetv1alpha1.Member{}, w: Worker{Runtime: fleetv1alpha1.RuntimeShared}, def: fleetv1alpha1.RuntimePod, want: fleetv1alpha1.RuntimeShared},
		"a started member stays put":    {m: started, w: Worker{Runtime: fleetv1alpha1.RuntimePod}, def: fleetv1alpha1.RuntimePod, want: fleetv1alpha1.RuntimeShared},
		"the profile's runtime (via w)": {m: &fleetv1alpha1.Member{}, w: Worker{Runtime: fleetv1alpha1.RuntimePod}, want: fleetv1alpha1.RuntimePod},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := runtimeOf(tc.m, tc.w, tc.def); got != tc.want {
				t.Errorf("runtimeOf = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestResolveWorkerPod(t *testing.T) {
	profilePod := &fleetv1alpha1.MemberPod{
		Image: "profile-image", ServiceAccountName: "agents", RuntimeClassName: ptr.To("gvisor"),
		Tolerations:  []corev1.Toleration{{Key: "agents", Operator: corev1.TolerationOpExists}},
		NodeSelector: map[string]string{"pool": "agents"},
	}
	p := &fleetv1alpha1.Profile{Spec: fleetv1alpha1.ProfileSpec{Runtime: fleetv1alpha1.RuntimePod, Pod: profilePod}}
	p.Spec.Command = []string{"agent"}
	if w := resolveWorker(&fleetv1alpha1.Member{}, p); w.Runtime != fleetv1alpha1.RuntimePod || !cmp.Equal(w.Pod, profilePod) {
		t.Errorf("from the profile: runtime %s, pod %+v", w.Runtime, w.Pod)
	}
	limits := &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}}
	// What only a Profile may set stays the Profile's, whatever the
	// Member's own pod says; the rest of the Member's replaces the
	// Profile's field by field.
	memberPod := &fleetv1alpha1.MemberPod{Image: "member-image", ServiceAccountName: "other", Resources: limits, NodeSelector: map[string]string{"pool": "big"}}
	m := &fleetv1alpha1.Member{Spec: fleetv1alpha1.MemberSpec{Runtime: fleetv1alpha1.RuntimeShared, Pod: memberPod}}
	want := profilePod.DeepCopy()
	want.Resources, want.NodeSelector = limits, map[string]string{"pool": "big"}
	if w := resolveWorker(m, p); w.Runtime != fleetv1alpha1.RuntimeShared || !cmp.Equal(w.Pod, want) {
		t.Errorf("the member's own: runtime %s, pod (-want +got):\n%s", w.Runtime, cmp.Diff(want, w.Pod))
	}
	inline := &fleetv1alpha1.Member{Spec: fleetv1alpha1.MemberSpec{Command: []string{"agent"}, Pod: memberPod}}
	want = &fleetv1alpha1.MemberPod{Resources: limits, NodeSelector: map[string]string{"pool": "big"}}
	if w := resolveWorker(inline, nil); !cmp.Equal(w.Pod, want) {
		t.Errorf("an inline member's pod (-want +got):\n%s", cmp.Diff(want, w.Pod))
	}
}

func TestDesiredPod(t *testing.T) {
	m := &fleetv1alpha1.Member{ObjectMeta: metav1.ObjectMeta{Name: "w1", Namespace: "team", UID: "uid-1"}}
	set := PodSettings{WorkerImage: "worker:1", ToolsImage: "fleetd:1", PullPolicy: corev1.PullNever, GatewayURL: "http://gw.fleetd-system.svc:8080"}
	limits := &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}}
	spec := &fleetv1alpha1.MemberPod{
		Resources:          limits,
		NodeSelector:       map[string]string{"pool": "agents"},
		Tolerations:        []corev1.Toleration{{Key: "agents", Operator: corev1.TolerationOpExists}},
		RuntimeClassName:   ptr.To("gvisor"),
		ServiceAccountName: "agents",
	}
	pod := desiredPod(m, spec, set, "w1-workspace")

	if got := pod.Labels[fleetv1alpha1.LabelMemberUID]; got != "uid-1" || pod.Labels[fleetv1alpha1.LabelMember] != "w1" {
		t.Errorf("labels %v", pod.Labels)
	}
	s := pod.Spec
	if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
		t.Error("the pod mounts a token for the Kubernetes API")
	}
	if s.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %s: fleetd replaces lost pods itself", s.RestartPolicy)
	}
	if s.ServiceAccountName != "agents" || s.RuntimeClassName == nil || *s.RuntimeClassName != "gvisor" || s.NodeSelector["pool"] != "agents" || len(s.Tolerations) != 1 {
		t.Errorf("scheduling fields not passed through: %+v", s)
	}
	if sc := s.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || ptr.Deref(sc.RunAsUser, 0) == 0 {
		t.Errorf("default security context %+v, want a non-root user", sc)
	}
	agent := s.Containers[0]
	if agent.Image != "worker:1" || agent.ImagePullPolicy != corev1.PullNever {
		t.Errorf("agent image %s (%s)", agent.Image, agent.ImagePullPolicy)
	}
	if diff := cmp.Diff(agentResources(limits), agent.Resources); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
	for _, flag := range []string{"--agent-root=" + podAgentRoot, "--socket-group"} {
		if !slices.Contains(agent.Command, flag) {
			t.Errorf("pane server command %v lacks %s", agent.Command, flag)
		}
	}
	host := s.Containers[1]
	if host.Name != paneHostContainer || host.Image != "fleetd:1" {
		t.Errorf("pane host container %s runs %s, want %s from fleetd's image", host.Name, host.Image, paneHostContainer)
	}
	for _, flag := range []string{"--relay", "--tls-listen=:7443", "--tls-dir=" + podTLSDir, "--gateway=" + set.GatewayURL, "--token-file=" + podTokenDir + "/token"} {
		if !slices.Contains(host.Command, flag) {
			t.Errorf("pane host command %v lacks %s", host.Command, flag)
		}
	}
	if s.InitContainers[0].Image != "fleetd:1" || !slices.Contains(s.InitContainers[0].Command, podToolsDir+"/") {
		t.Errorf("init container %+v does not bring fleetd's binaries", s.InitContainers[0])
	}
	volumes := map[string]corev1.VolumeSource{}
	for _, v := range s.Volumes {
		volumes[v.Name] = v.VolumeSource
	}
	if c := volumes["workspace"].PersistentVolumeClaim; c == nil || c.ClaimName != "w1-workspace" {
		t.Errorf("workspace %+v, want the claim", volumes["workspace"])
	}
	token := volumes["fleetd-token"].Projected
	if token == nil || token.Sources[0].ServiceAccountToken == nil || token.Sources[0].ServiceAccountToken.Audience != fleetv1alpha1.GatewayAudience {
		t.Errorf("token volume %+v, want a projected token for audience %s", token, fleetv1alpha1.GatewayAudience)
	}
	if sec := volumes["pane-host-tls"].Secret; sec == nil || sec.SecretName != PaneHostSecretName("w1") {
		t.Errorf("pane host credentials %+v", volumes["pane-host-tls"])
	}

	if ws := desiredPod(m, nil, set, "").Spec.Volumes[0]; ws.EmptyDir == nil {
		t.Errorf("default workspace %+v, want an emptyDir", ws)
	}
	if img := desiredPod(m, &fleetv1alpha1.MemberPod{Image: "mine:2"}, set, "").Spec.Containers[0].Image; img != "mine:2" {
		t.Errorf("the member's image %s", img)
	}
}

// TestMemberPodKeepsCredentialsFromTheAgent: the agent runs as a user
// other than the pane host's, in a container that mounts neither the
// Pod's token nor the member's TLS key and shares no process namespace
// with the pane host's; no container gets a capability, so the Pod stays
// within Pod Security restricted.
func TestMemberPodKeepsCredentialsFromTheAgent(t *testing.T) {
	m := &fleetv1alpha1.Member{ObjectMeta: metav1.ObjectMeta{Name: "w1", Namespace: "team", UID: "uid-1"}}
	set := PodSettings{WorkerImage: "worker:1", ToolsImage: "fleetd:1", GatewayURL: "http://gw"}
	credentials := []string{"pane-host-tls", "fleetd-token"}
	cases := map[string]*fleetv1alpha1.MemberPod{
		"fleetd's security context": nil,
		"the member's own user": {SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}},
	}
	for name, spec := range cases {
		t.Run(name, func(t *testing.T) {
			pod := desiredPod(m, spec, set, "")
			if pod.Spec.SecurityContext.FSGroup == nil {
				t.Error("the Pod has no fsGroup: the pane host, not the files' owner, could not read its credentials")
			}
			if ptr.Deref(pod.Spec.ShareProcessNamespace, false) {
				t.Error("the agent shares a process namespace with the pane host")
			}
			containers := map[string]corev1.Container{}
			for _, c := range pod.Spec.Containers {
				containers[c.Name] = c
			}
			agent, host := containers[agentContainer], containers[paneHostContainer]
			userOf := func(c corev1.Container) int64 {
				if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
					return *c.SecurityContext.RunAsUser
				}
				return ptr.Deref(pod.Spec.SecurityContext.RunAsUser, 0)
			}
			if a, h := userOf(agent), userOf(host); a == h || a == 0 || h == 0 {
				t.Errorf("agent runs as %d, pane host as %d: want two users, neither root", a, h)
			}
			mounts := func(c corev1.Container) []string {
				var names []string
				for _, vm := range c.VolumeMounts {
					names = append(names, vm.Name)
				}
				return names
			}
			for _, v := range credentials {
				if slices.Contains(mounts(agent), v) {
					t.Errorf("the agent's container mounts %s", v)
				}
				if !slices.Contains(mounts(host), v) {
					t.Errorf("the pane host's container does not mount %s", v)
				}
			}
			for _, arg := range agent.Command {
				if strings.HasPrefix(arg, "--tls-") || strings.HasPrefix(arg, "--token-file") || strings.HasPrefix(arg, "--gateway") {
					t.Errorf("the agent's pane server is given %s", arg)
				}
			}
			for _, v := range pod.Spec.Volumes {
				var mode *int32
				switch {
				case v.Secret != nil:
					mode = v.Secret.DefaultMode
				case v.Projected != nil:
					mode = v.Projected.DefaultMode
				default:
					continue
				}
				if ptr.Deref(mode, 0o644) != 0o400 {
					t.Errorf("volume %s's files are mode %o, want 0400", v.Name, ptr.Deref(mode, 0o644))
				}
			}
			for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
				sc := c.SecurityContext
				if sc == nil || ptr.Deref(sc.AllowPrivilegeEscalation, true) || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 || ptr.Deref(sc.Privileged, false) {
					t.Errorf("container %s's security context %+v is beyond Pod Security restricted", c.Name, sc)
				}
			}
		})
	}
}

// TestMemberPodIsBounded: a member Pod whose spec names no resources still
// cannot take a node's memory, CPU or disk: every container has limits, and
// every emptyDir a size.
func TestMemberPodIsBounded(t *testing.T) {
	m := &fleetv1alpha1.Member{ObjectMeta: metav1.ObjectMeta{Name: "w1", Namespace: "team", UID: "uid-1"}}
	set := PodSettings{WorkerImage: "worker:1", ToolsImage: "fleetd:1"}
	for name, spec := range map[string]*fleetv1alpha1.MemberPod{
		"no pod spec":            nil,
		"a pod spec without any": {},
		"a cpu request alone":    {Resources: &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}},
	} {
		t.Run(name, func(t *testing.T) {
			pod := desiredPod(m, spec, set, "")
			for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
				for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
					limit, ok := c.Resources.Limits[r]
					if !ok || limit.IsZero() {
						t.Errorf("container %s has no %s limit: %v", c.Name, r, c.Resources)
					}
					if req, ok := c.Resources.Requests[r]; ok && req.Cmp(limit) > 0 {
						t.Errorf("container %s requests %s of %s, above its limit %s", c.Name, req.String(), r, limit.String())
					}
				}
			}
			for _, v := range pod.Spec.Volumes {
				if v.EmptyDir != nil && (v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.IsZero()) {
					t.Errorf("emptyDir %s has no sizeLimit", v.Name)
				}
			}
		})
	}
}

func TestAgentResources(t *testing.T) {
	q := resource.MustParse
	list := func(kv ...string) corev1.ResourceList {
		l := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			l[corev1.ResourceName(kv[i])] = q(kv[i+1])
		}
		return l
	}
	cases := map[string]struct {
		spec *corev1.ResourceRequirements
		want corev1.ResourceRequirements
	}{
		"none: the defaults": {
			want: defaultAgentResources,
		},
		"the spec's own win, the rest default": {
			spec: &corev1.ResourceRequirements{Limits: list("memory", "8Gi", "ephemeral-storage", "50Gi")},
			want: corev1.ResourceRequirements{
				Requests: list("cpu", "100m", "memory", "512Mi", "ephemeral-storage", "1Gi"),
				Limits:   list("cpu", "2", "memory", "8Gi", "ephemeral-storage", "50Gi"),
			},
		},
		"a limit below the default request lowers it": {
			spec: &corev1.ResourceRequirements{Limits: list("memory", "256Mi")},
			want: corev1.ResourceRequirements{
				Requests: list("cpu", "100m", "memory", "256Mi", "ephemeral-storage", "1Gi"),
				Limits:   list("cpu", "2", "memory", "256Mi", "ephemeral-storage", "10Gi"),
			},
		},
		"a request above the default limit raises it": {
			spec: &corev1.ResourceRequirements{Requests: list("cpu", "4")},
			want: corev1.ResourceRequirements{
				Requests: list("cpu", "4", "memory", "512Mi", "ephemeral-storage", "1Gi"),
				Limits:   list("cpu", "4", "memory", "4Gi", "ephemeral-storage", "10Gi"),
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := agentResources(tc.spec)
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if ws := workspaceSize(got); ws.Cmp(got.Limits[corev1.ResourceEphemeralStorage]) != 0 {
				t.Errorf("workspace size %s, want the ephemeral-storage limit", ws.String())
			}
		})
	}
}

func TestJudgePod(t *testing.T) {
	ready := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}
	pod := func(mutate func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w1-abc"}, Spec: corev1.PodSpec{NodeName: "n1"}}
		p.Status.Phase = corev1.PodRunning
		mutate(p)
		return p
	}
	node := func(status corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status."}}}}
	}
	cases := map[string]struct {
		pod     *corev1.Pod
		node    *corev1.Node
		want    podVerdict
		wantWhy string
	}{
		"no pod": {want: podNone},
		"running and ready": {pod: pod(func(p *corev1.Pod) {
			p.Status.PodIP, p.Status.Conditions = "10.0.0.5", []corev1.PodCondition{ready}
		}), node: node(corev1.ConditionTrue), want: podRunning},
		"ready but no address yet": {pod: pod(func(p *corev1.Pod) { p.Status.Conditions = []corev1.PodCondition{ready} }), want: podStarting},
		"unschedulable": {pod: pod(func(p *corev1.Pod) {
			p.Spec.NodeName = ""
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available: 3 Insufficient memory."}}
		}), want: podUnschedulable, wantWhy: "0/3 nodes are available: 3 Insufficient memory."},
		"oom killed": {pod: pod(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: agentContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}
		}), want: podLost, wantWhy: "container agent OOMKilled (exit code 137)"},
		"one container ended, the other runs on": {pod: pod(func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{
				{Name: paneHostContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
				{Name: agentContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1}}},
			}
		}), want: podLost, wantWhy: "container agent Error (exit code 1)"},
		"evicted": {pod: pod(func(p *corev1.Pod) {
			p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
		}), want: podLost, wantWhy: "Evicted: The node was low on resource: memory."},
		"being deleted": {pod: pod(func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Now()} }), want: podLost, wantWhy: "is being deleted"},
		"its node is lost": {pod: pod(func(p *corev1.Pod) {
			p.Status.PodIP, p.Status.Conditions = "10.0.0.5", []corev1.PodCondition{ready}
		}), node: node(corev1.ConditionUnknown), want: podLost, wantWhy: "node n1 of pod w1-abc is lost (Ready is Unknown: Kubelet stopped posting node status.)"},
		"waiting for its image": {pod: pod(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodPending
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: agentContainer, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: "image not present"}}}}
		}), want: podStarting, wantWhy: "ErrImageNeverPull"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, why := judgePod(tc.pod, tc.node)
			if got != tc.want || !strings.Contains(why, tc.wantWhy) {
				t.Errorf("judgePod = %d, %q; want %d, containing %q", got, why, tc.want, tc.wantWhy)
			}
		})
	}
}

// podHost stands in for the kubelet of one node in an envtest, where no
// kubelet runs: it binds a member's Pod to the node, starts the pane host
// the Pod would run (with the credentials the controller minted for it,
// on loopback), and reports the Pod running and ready.
type podHost struct {
	t    *testing.T
	port int
	srv  *paneserver.Server
}

func (h *podHost) run(ctx context.Context, pod *corev1.Pod, node string) {
	t := h.t
	t.Helper()
	if h.srv != nil {
		_ = h.srv.Close()
		h.srv = nil
	}
	var secret corev1.Secret
	var secretName string
	for _, v := range pod.Spec.Volumes {
		if v.Name == "pane-host-tls" && v.Secret != nil {
			secretName = v.Secret.SecretName
		}
	}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: secretName}, &secret); err != nil {
		t.Fatalf("the pod's pane host credentials: %v", err)
	}
	dir := t.TempDir()
	for _, k := range []string{panehost.CertKey, panehost.KeyKey, panehost.CAKey} {
		if err := os.WriteFile(filepath.Join(dir, k), secret.Data[k], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tlsCfg, err := panehost.ServerConfig(filepath.Join(dir, panehost.CertKey), filepath.Join(dir, panehost.KeyKey), filepath.Join(dir, panehost.CAKey))
	if err != nil {
		t.Fatal(err)
	}
	sock, err := os.MkdirTemp("", "ph")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sock) })
	srv, err := paneserver.New(paneserver.Options{
		SocketPath: filepath.Join(sock, "h.sock"), Shell: "/bin/sh", Cwd: dir, AgentSettle: 200 * time.Millisecond,
		TLSAddress: fmt.Sprintf("127.0.0.1:%d", h.port), TLSConfig: tlsCfg,
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	h.srv = srv
	t.Cleanup(func() {
		if h.srv == srv {
			_ = srv.Close()
		}
	})
	if err := env.Client.SubResource("binding").Create(ctx, pod, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}); err != nil {
		t.Fatalf("binding pod %s: %v", pod.Name, err)
	}
	setPodStatus(t, pod, func(st *corev1.PodStatus) {
		st.Phase, st.PodIP = corev1.PodRunning, "127.0.0.1"
		st.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		}
	})
}

func setPodStatus(t *testing.T, pod *corev1.Pod, mutate func(*corev1.PodStatus)) {
	t.Helper()
	testutil.Eventually(t, "the pod's status to be written", func() error {
		var p corev1.Pod
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), &p); err != nil {
			return err
		}
		mutate(&p.Status)
		return env.Client.Status().Update(context.Background(), &p)
	})
}

func makeNode(t *testing.T, name string, ready corev1.ConditionStatus) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(ctx, n); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n) })
	setNodeReady(t, name, ready)
}

func setNodeReady(t *testing.T, name string, ready corev1.ConditionStatus) {
	t.Helper()
	testutil.Eventually(t, "node "+name+" to say Ready "+string(ready), func() error {
		var n corev1.Node
		if err := env.Client.Get(context.Background(), types.NamespacedName{Name: name}, &n); err != nil {
			return err
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "Test", Message: "set by the test", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		return env.Client.Status().Update(context.Background(), &n)
	})
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// memberPod waits for the Member's Pod other than skip and returns it.
func memberPod(t *testing.T, m *fleetv1alpha1.Member, skip string) *corev1.Pod {
	t.Helper()
	var found *corev1.Pod
	testutil.Eventually(t, "a pod for member "+m.Name, func() error {
		var pods corev1.PodList
		if err := env.Client.List(context.Background(), &pods, client.InNamespace(m.Namespace), client.MatchingLabels{fleetv1alpha1.LabelMember: m.Name}); err != nil {
			return err
		}
		for i := range pods.Items {
			if p := &pods.Items[i]; p.Name != skip && p.DeletionTimestamp == nil {
				found = p
				return nil
			}
		}
		return fmt.Errorf("%d pods, none new", len(pods.Items))
	})
	return found
}

func memberNow(t *testing.T, key types.NamespacedName) *fleetv1alpha1.Member {
	t.Helper()
	m, err := getMember(t, key.Namespace, key.Name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestPodMember runs a Member in a Pod of its own against a real API
// server: the controller mints its pane host credentials, creates its Pod,
// reaches the Pod's pane host over mutual TLS once it runs, and starts the
// agent there; a Pod that cannot be scheduled shows Unschedulable with the
// scheduler's message; a Pod that is OOMKilled, or whose node is lost, is
// replaced with a restart counted and its reason. A stand-in plays the
// kubelet (no kubelet runs in an envtest); make test-cluster runs the same
// on real nodes.
func TestPodMember(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	hosts := runPodControllers(t, ns)
	port := hosts.Port
	makeNode(t, "node-a", corev1.ConditionTrue)
	makeNode(t, "node-b", corev1.ConditionTrue)
	kubelet := &podHost{t: t, port: port}

	m := &fleetv1alpha1.Member{ObjectMeta: metav1.ObjectMeta{Name: "w1", Namespace: ns}, Spec: fleetv1alpha1.MemberSpec{Command: []string{scriptedAgent}}}
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(m)
	pod := memberPod(t, m, "")
	var np networkingv1.NetworkPolicy
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: NetworkPolicyName}, &np); err != nil {
		t.Errorf("no network policy guards the member pods' pane hosts: %v", err)
	}
	if m = memberNow(t, key); m.Status.TokenSecretName != "" || m.Status.TokenHash != "" {
		t.Errorf("a pod member got a token Secret: %s", m.Status.TokenSecretName)
	}
	wantEgress(t, m, MemberEgressPolicy(m, nil).Spec)

	// A Member whose own pod asks for more than a Member may (here with no
	// admission policy to stop it) gets no Pod, and says why.
	greedy := testutil.MakeMember("greedy", ns).Command(scriptedAgent).Obj()
	greedy.Spec.Pod = &fleetv1alpha1.MemberPod{ServiceAccountName: "deployer", SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](0)}}
	if err := env.Client.Create(ctx, greedy); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the greedy member to be refused its pod", func() (bool, string) {
		g := memberNow(t, client.ObjectKeyFromObject(greedy))
		c := meta.FindStatusCondition(g.Status.Conditions, fleetv1alpha1.ConditionPaneReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == fleetv1alpha1.ReasonPodForbidden && g.Status.Phase == fleetv1alpha1.MemberFailed &&
				strings.Contains(c.Message, "spec.pod.serviceAccountName") && strings.Contains(c.Message, "spec.pod.securityContext.runAsNonRoot"),
			fmt.Sprintf("phase %s, PaneReady %+v", g.Status.Phase, c)
	})
	var greedyPods corev1.PodList
	if err := env.Client.List(ctx, &greedyPods, client.InNamespace(ns), client.MatchingLabels{fleetv1alpha1.LabelMember: greedy.Name}); err != nil || len(greedyPods.Items) != 0 {
		t.Errorf("the greedy member has %d pods (%v), want none", len(greedyPods.Items), err)
	}

	// Unschedulable first: the Member says so, with the scheduler's words.
	const noFit = "0/2 nodes are available: 2 Insufficient memory."
	setPodStatus(t, pod, func(st *corev1.PodStatus) {
		st.Phase = corev1.PodPending
		st.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: noFit}}
	})
	testutil.Eventually(t, "the member to show Unschedulable", func() (bool, string) {
		m := memberNow(t, key)
		c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionPodScheduled)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == fleetv1alpha1.ReasonUnschedulable && c.Message == noFit && m.Status.Phase == fleetv1alpha1.MemberPending,
			fmt.Sprintf("phase %s, PodScheduled %+v", m.Status.Phase, c)
	})

	// The Pod runs: the agent starts in its pane host, over TLS.
	kubelet.run(ctx, pod, "node-a")
	waitPodReady := func(what string, want func(*fleetv1alpha1.Member) bool) *fleetv1alpha1.Member {
		t.Helper()
		var m *fleetv1alpha1.Member
		testutil.Eventually(t, what, func() (bool, string) {
			m = memberNow(t, key)
			return m.Status.Phase == fleetv1alpha1.MemberReady && want(m), fmt.Sprintf("phase %s, pod %s on %s, restarts %d, conditions %+v", m.Status.Phase, m.Status.PodName, m.Status.NodeName, m.Status.Restarts, m.Status.Conditions)
		})
		return m
	}
	m = waitPodReady("the pod member to be ready", func(m *fleetv1alpha1.Member) bool { return m.Status.PodName == pod.Name })
	if m.Status.PodUID != string(pod.UID) || m.Status.NodeName != "node-a" || m.Status.PodIP != "127.0.0.1" || m.Status.Runtime != fleetv1alpha1.RuntimePod {
		t.Errorf("status pod fields: %+v", m.Status)
	}
	c, err := hosts.For(m)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := c.SessionSnapshot(ctx)
	if err != nil || len(snap.Workspaces) != 1 || snap.Workspaces[0].Label != workspaceLabel(m) {
		t.Fatalf("the pod's pane host has %+v, %v; want the member's workspace", snap, err)
	}

	// OOMKilled: replaced, with the restart counted and its reason.
	setPodStatus(t, pod, func(st *corev1.PodStatus) {
		st.Phase = corev1.PodFailed
		st.Conditions = nil
		st.ContainerStatuses = []corev1.ContainerStatus{{Name: agentContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}
	})
	second := memberPod(t, m, pod.Name)
	testutil.Eventually(t, "the restart to be recorded", func() (bool, string) {
		m := memberNow(t, key)
		return m.Status.Restarts == 1 && strings.Contains(m.Status.LastRestartReason, "OOMKilled"), fmt.Sprintf("restarts %d: %s", m.Status.Restarts, m.Status.LastRestartReason)
	})
	kubelet.run(ctx, second, "node-a")
	waitPodReady("the member to be ready in its second pod", func(m *fleetv1alpha1.Member) bool { return m.Status.PodName == second.Name })

	// Its node is lost: the Pod is replaced on another node.
	setNodeReady(t, "node-a", corev1.ConditionUnknown)
	third := memberPod(t, m, second.Name)
	kubelet.run(ctx, third, "node-b")
	m = waitPodReady("the member to be ready on another node", func(m *fleetv1alpha1.Member) bool {
		return m.Status.PodName == third.Name && m.Status.NodeName == "node-b"
	})
	if m.Status.Restarts != 2 || !strings.Contains(m.Status.LastRestartReason, "node node-a") {
		t.Errorf("after the node was lost: restarts %d, reason %q", m.Status.Restarts, m.Status.LastRestartReason)
	}
	var old corev1.Pod
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(second), &old); !apierrors.IsNotFound(err) {
		t.Errorf("the pod on the lost node is still there: %v (deletion %v)", err, old.DeletionTimestamp)
	}

	// Someone deletes its Pod: replaced too, and the restart says so.
	if err := env.Client.Delete(ctx, third, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	fourth := memberPod(t, m, third.Name)
	kubelet.run(ctx, fourth, "node-b")
	m = waitPodReady("the member to be ready after its pod was deleted", func(m *fleetv1alpha1.Member) bool { return m.Status.PodName == fourth.Name })
	if m.Status.Restarts != 3 || !strings.Contains(m.Status.LastRestartReason, "deleted") {
		t.Errorf("after its pod was deleted: restarts %d, reason %q", m.Status.Restarts, m.Status.LastRestartReason)
	}
	third = fourth

	// Deleting the Member takes its Pod (here to Terminating: no kubelet
	// confirms the end).
	if err := env.Client.Delete(ctx, m); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the member to be gone and its pod to end", func() error {
		if err := env.Client.Get(ctx, key, &fleetv1alpha1.Member{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("member still there: %v", err)
		}
		var p corev1.Pod
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(third), &p); err == nil && p.DeletionTimestamp == nil {
			return fmt.Errorf("pod %s is not being deleted", third.Name)
		}
		return nil
	})
}

// runPodControllers runs the controllers for ns with members in Pods by
// default, and returns the pane hosts they reach them with.
func runPodControllers(t *testing.T, ns string) *panehost.Hosts {
	t.Helper()
	ca, _, err := panehost.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	hosts := panehost.NewHosts(ca)
	hosts.Port = freePort(t)
	runManager(t, env.Config, ns, func(ctx context.Context, mgr ctrl.Manager) error {
		return SetupWithManager(ctx, mgr, Config{
			PaneHosts: hosts, CA: ca, DefaultRuntime: fleetv1alpha1.RuntimePod,
			Pods: PodSettings{
				WorkerImage: "worker:test", ToolsImage: "fleetd:test", GatewayURL: "http://127.0.0.1:1", Port: hosts.Port,
				FleetdNamespace: "fleetd-system", FleetdPodLabels: map[string]string{"app.kubernetes.io/name": "fleetd"},
			},
			MCPURL: "http://127.0.0.1:1/mcp", AgentDir: t.TempDir(), HookCommand: []string{"/bin/true"},
		})
	})
	return hosts
}

// wantEgress waits for m's egress policy to be m's and to say want.
func wantEgress(t *testing.T, m *fleetv1alpha1.Member, want networkingv1.NetworkPolicySpec) {
	t.Helper()
	testutil.Eventually(t, "member "+m.Name+"'s egress policy", func() (bool, string) {
		var np networkingv1.NetworkPolicy
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: m.Namespace, Name: EgressPolicyName(m.Name)}, &np); err != nil {
			return false, err.Error()
		}
		if !metav1.IsControlledBy(&np, m) {
			return false, fmt.Sprintf("owned by %+v", np.OwnerReferences)
		}
		diff := cmp.Diff(want, np.Spec)
		return diff == "", diff
	})
}

// TestPodMemberEgress: a pod member's egress policy is its Profile's, and
// follows a change of the Profile while the member runs.
func TestPodMemberEgress(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	runPodControllers(t, ns)
	https := intstr.FromInt32(443)
	model := networkingv1.NetworkPolicyEgressRule{
		To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.1.2.3/32"}}},
		Ports: []networkingv1.NetworkPolicyPort{{Port: &https}},
	}
	profile := testutil.MakeProfile("walled", ns).Command(scriptedAgent).Obj()
	profile.Spec.Pod = &fleetv1alpha1.MemberPod{Egress: &fleetv1alpha1.MemberEgress{Internet: ptr.To(false), Rules: []networkingv1.NetworkPolicyEgressRule{model}}}
	if err := env.Client.Create(ctx, profile); err != nil {
		t.Fatal(err)
	}
	m := testutil.MakeMember("w1", ns).Profile("walled").Obj()
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	m = memberNow(t, client.ObjectKeyFromObject(m))
	wantEgress(t, m, MemberEgressPolicy(m, profile.Spec.Pod.Egress).Spec)
	tcp := corev1.ProtocolTCP
	model.Ports[0].Protocol = &tcp
	if got := MemberEgressPolicy(m, profile.Spec.Pod.Egress).Spec.Egress; !cmp.Equal(got, []networkingv1.NetworkPolicyEgressRule{model}) {
		t.Fatalf("the walled profile's egress is %+v, want the model alone", got)
	}

	// The Profile opens the internet again: the running member's policy
	// follows, with no new Pod.
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(profile), profile); err != nil {
		t.Fatal(err)
	}
	profile.Spec.Pod.Egress.Internet = ptr.To(true)
	if err := env.Client.Update(ctx, profile); err != nil {
		t.Fatal(err)
	}
	wantEgress(t, m, MemberEgressPolicy(m, profile.Spec.Pod.Egress).Spec)
}

// TestDesiredNetworkPolicy: only fleetd's own pods reach a member Pod, and
// only on the pane host port; a member Pod reaches DNS and fleetd's
// gateway port, and what its own egress policy adds.
func TestDesiredNetworkPolicy(t *testing.T) {
	set := PodSettings{Port: 7443, FleetdNamespace: "fleetd-system", FleetdPodLabels: map[string]string{"app.kubernetes.io/name": "fleetd"}}
	np := MemberNetworkPolicy("team", set)
	m := &fleetv1alpha1.Member{ObjectMeta: metav1.ObjectMeta{Name: "w1", Namespace: "team", UID: "uid-1"}}
	pod := desiredPod(m, &fleetv1alpha1.MemberPod{}, PodSettings{WorkerImage: "w", ToolsImage: "t"}, "")
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	if np.Namespace != "team" || !sel.Matches(labels.Set(pod.Labels)) {
		t.Errorf("policy in %s selecting %v does not select a member Pod labelled %v", np.Namespace, sel, pod.Labels)
	}
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	fleetd := networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "fleetd-system"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "fleetd"}},
	}
	port := func(p intstr.IntOrString) *intstr.IntOrString { return &p }
	want := networkingv1.NetworkPolicySpec{
		PodSelector: np.Spec.PodSelector,
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From:  []networkingv1.NetworkPolicyPeer{fleetd},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: port(intstr.FromInt32(7443))}},
		}},
		Egress: []networkingv1.NetworkPolicyEgressRule{
			{
				To: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
					PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: port(intstr.FromInt32(53))}, {Protocol: &tcp, Port: port(intstr.FromInt32(53))}},
			},
			{To: []networkingv1.NetworkPolicyPeer{fleetd}, Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: port(intstr.FromString("gateway"))}}},
		},
	}
	if diff := cmp.Diff(want, np.Spec); diff != "" {
		t.Errorf("member network policy (-want +got):\n%s", diff)
	}
}

// TestDesiredEgressPolicy: a member's Pod reaches the internet, and
// nothing private, unless its Profile says otherwise; a Profile's rules
// add to that; the policy selects this Member's Pods alone.
func TestDesiredEgressPolicy(t *testing.T) {
	internet := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{
		{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "127.0.0.0/8"}}},
		{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: []string{"fc00::/7", "fe80::/10", "::1/128"}}},
	}}
	https := intstr.FromInt32(443)
	model := networkingv1.NetworkPolicyEgressRule{
		To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.1.2.3/32"}}},
		Ports: []networkingv1.NetworkPolicyPort{{Port: &https}},
	}
	// The API server's default protocol, which the policy spells out.
	tcp := corev1.ProtocolTCP
	modelTCP := *model.DeepCopy()
	modelTCP.Ports[0].Protocol = &tcp
	cases := map[string]struct {
		egress *fleetv1alpha1.MemberEgress
		want   []networkingv1.NetworkPolicyEgressRule
	}{
		"no egress":            {egress: nil, want: []networkingv1.NetworkPolicyEgressRule{internet}},
		"internet left out":    {egress: &fleetv1alpha1.MemberEgress{}, want: []networkingv1.NetworkPolicyEgressRule{internet}},
		"no internet":          {egress: &fleetv1alpha1.MemberEgress{Internet: ptr.To(false)}, want: []networkingv1.NetworkPolicyEgressRule{}},
		"a private model":      {egress: &fleetv1alpha1.MemberEgress{Internet: ptr.To(false), Rules: []networkingv1.NetworkPolicyEgressRule{model}}, want: []networkingv1.NetworkPolicyEgressRule{modelTCP}},
		"internet and a model": {egress: &fleetv1alpha1.MemberEgress{Rules: []networkingv1.NetworkPolicyEgressRule{model}}, want: []networkingv1.NetworkPolicyEgressRule{internet, modelTCP}},
	}
	m := &fleetv1alpha1.Member{ObjectMeta: metav1.ObjectMeta{Name: "w1", Namespace: "team", UID: "uid-1"}}
	other := &fleetv1alpha1.Member{ObjectMeta: metav1.ObjectMeta{Name: "w2", Namespace: "team", UID: "uid-2"}}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			np := MemberEgressPolicy(m, tc.egress)
			want := networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{fleetv1alpha1.LabelMemberUID: "uid-1"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress:      tc.want,
			}
			if diff := cmp.Diff(want, np.Spec); diff != "" {
				t.Errorf("egress policy (-want +got):\n%s", diff)
			}
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			if err != nil {
				t.Fatal(err)
			}
			set := PodSettings{WorkerImage: "w", ToolsImage: "t"}
			if !sel.Matches(labels.Set(desiredPod(m, &fleetv1alpha1.MemberPod{}, set, "").Labels)) {
				t.Error("the policy does not select its member's Pod")
			}
			if sel.Matches(labels.Set(desiredPod(other, &fleetv1alpha1.MemberPod{}, set, "").Labels)) {
				t.Error("the policy selects another member's Pod")
			}
		})
	}
}
