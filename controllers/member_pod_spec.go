package controllers

import (
	"cmp"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/panehost"
)

// What a pod member's Pod is made of: how fleetd runs pod members, where
// things are inside the Pod, and the Pod itself.

// PodSettings are how fleetd runs pod members.
type PodSettings struct {
	// WorkerImage runs the agent unless the Member's pod names an image.
	WorkerImage string
	// ToolsImage is fleetd's own image: an init container brings its
	// binaries (the pane host, `fleetd hook`) into every member Pod, so
	// any image with the agent's CLI and a shell works.
	ToolsImage string
	// PullPolicy is the pull policy of those two images.
	PullPolicy corev1.PullPolicy
	// GatewayURL is the gateway's base URL as pods reach it, such as
	// http://fleetd-gateway.fleetd-system.svc:8080.
	GatewayURL string
	// Port is the pane host's TLS port; panehost.DefaultPort if zero.
	Port int
	// FleetdNamespace is where fleetd's own pods run: the only pods a
	// member Pod's pane host takes connections from (a NetworkPolicy in
	// each namespace with member Pods says so). Empty makes no policy.
	FleetdNamespace string
	// FleetdPodLabels select fleetd's own pods in FleetdNamespace.
	FleetdPodLabels map[string]string
}

// Where things are inside a member Pod.
const (
	podToolsDir      = "/fleetd-tools"
	podWorkspace     = "/workspace"
	podAgentRoot     = "/workspace/.fleetd"
	podAgentDir      = "/workspace/.fleetd/agent"
	podTLSDir        = "/etc/fleetd/pane-host"
	podTokenDir      = "/var/run/secrets/fleetd"
	podSocketDir     = "/run/herdr"
	podGatewayListen = "127.0.0.1:8766"
	// podMCPURL is where the agent mounts the gateway: the pane host's
	// forwarder, which adds the Pod's token.
	podMCPURL = "http://" + podGatewayListen + "/mcp"
	// podUser is the Pod's default user, the agent user of fleetd's images.
	podUser = 65532
	// paneHostUser runs the pane host: a user other than the agent's, in
	// a container of its own.
	paneHostUser = 65533
	// podTokenSeconds is the lifetime of the Pod's projected token; the
	// kubelet rotates it at 80%.
	podTokenSeconds = 3600
	// agentContainer runs the pane server, and in its pane the agent.
	agentContainer = "agent"
	// paneHostContainer runs the pane host: the only container with the
	// Pod's token and the member's TLS key.
	paneHostContainer = "pane-host"
)

// PaneHostSecretName is the Secret with a pod member's pane host
// credentials.
func PaneHostSecretName(member string) string { return member + "-fleetd-pane-host" }

// WorkspaceClaimName is a pod member's workspace claim.
func WorkspaceClaimName(member string) string { return member + "-workspace" }

// podHookCommand runs `fleetd hook` in a member Pod.
var podHookCommand = []string{podToolsDir + "/fleetd", "hook"}

// desiredPod is a member's Pod: an init container brings fleetd's binaries
// from its own image, the agent container runs the pane server, which
// runs the agent in its pane, and the pane host container, as another
// user, relays fleetd's calls to it. The Pod has no token for the
// Kubernetes API; its projected token, for audience fleetd, is how the
// agent is known to the gateway, through the pane host's forwarder, and
// only the pane host's container mounts it.
func desiredPod(m *fleetv1alpha1.Member, spec *fleetv1alpha1.MemberPod, set PodSettings, claim string) *corev1.Pod {
	return podFrom(memberPodIdentity(m), m.Namespace, spec, set, claim)
}

// podIdentity is what makes a Pod one Member's, or a warm Pod of a pool:
// everything else about it comes from its pod spec and fleetd's settings.
type podIdentity struct {
	name, generateName string
	labels             map[string]string
	// tlsSecret holds its pane host's credentials.
	tlsSecret string
}

// memberPodIdentity is a Pod started for m.
func memberPodIdentity(m *fleetv1alpha1.Member) podIdentity {
	return podIdentity{
		generateName: m.Name + "-",
		labels: map[string]string{
			fleetv1alpha1.LabelMember:    m.Name,
			fleetv1alpha1.LabelMemberUID: string(m.UID),
		},
		tlsSecret: PaneHostSecretName(m.Name),
	}
}

// podFrom is the Pod id names, in namespace, of spec.
func podFrom(id podIdentity, namespace string, spec *fleetv1alpha1.MemberPod, set PodSettings, claim string) *corev1.Pod {
	if spec == nil {
		spec = &fleetv1alpha1.MemberPod{}
	}
	port := cmp.Or(set.Port, panehost.DefaultPort)
	resources := agentResources(spec.Resources)
	workspace := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: workspaceSize(resources)}}
	if claim != "" {
		workspace = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}
	}
	podSecurity := spec.SecurityContext
	if podSecurity == nil {
		podSecurity = &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			RunAsUser:      ptr.To[int64](podUser),
			RunAsGroup:     ptr.To[int64](podUser),
			FSGroup:        ptr.To[int64](podUser),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}
	}
	if podSecurity.FSGroup == nil {
		// The pane host, a user other than the Pod's, reads its token and
		// TLS key through the group the kubelet gives their files.
		podSecurity = podSecurity.DeepCopy()
		podSecurity.FSGroup = ptr.To[int64](podUser)
	}
	containerSecurity := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	paneHostSecurity := containerSecurity.DeepCopy()
	paneHostSecurity.RunAsUser = ptr.To[int64](paneHostUser)
	paneHostSecurity.RunAsNonRoot = ptr.To(true)
	tools := corev1.VolumeMount{Name: "fleetd-tools", MountPath: podToolsDir}
	labels := map[string]string{}
	maps.Copy(labels, id.labels)
	maps.Copy(labels, memberPodLabels)
	labels["app.kubernetes.io/managed-by"] = "fleetd"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:         id.name,
			GenerateName: id.generateName,
			Namespace:    namespace,
			Labels:       labels,
		},
		Spec: corev1.PodSpec{
			// fleetd replaces a lost Pod itself, with backoff and a count
			// and a reason in the Member's status.
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			ServiceAccountName:            cmp.Or(spec.ServiceAccountName, "default"),
			NodeSelector:                  spec.NodeSelector,
			Affinity:                      spec.Affinity,
			Tolerations:                   spec.Tolerations,
			RuntimeClassName:              spec.RuntimeClassName,
			SecurityContext:               podSecurity,
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			InitContainers: []corev1.Container{{
				Name:            "fleetd-tools",
				Image:           set.ToolsImage,
				ImagePullPolicy: set.PullPolicy,
				Command:         []string{"cp", "/fleetd", "/paneserver", "/usr/local/bin/scripted-agent", podToolsDir + "/"},
				Resources:       *toolsResources.DeepCopy(),
				SecurityContext: containerSecurity,
				VolumeMounts:    []corev1.VolumeMount{tools},
			}},
			// The pane host and the agent run in two containers as two
			// users, and only the pane host's mounts the Pod's token and
			// the member's TLS key. Pod Security restricted lets no
			// process switch users, and a file of the agent's own user
			// (or group) it could read or chmod back however the pane
			// host set it; a volume its container does not mount it
			// cannot reach at all, as its container shares no process
			// namespace with the pane host's. The agent owns the pane
			// server in its container, as it did before; the pane host
			// only relays fleetd's authenticated calls to its socket.
			Containers: []corev1.Container{{
				Name:            agentContainer,
				Image:           cmp.Or(spec.Image, set.WorkerImage),
				ImagePullPolicy: cmp.Or(spec.ImagePullPolicy, set.PullPolicy),
				Command: []string{
					podToolsDir + "/paneserver",
					"--socket=" + podSocketDir + "/herdr.sock",
					"--socket-group",
					"--shell=/bin/sh",
					"--cwd=" + podWorkspace,
					"--agent-root=" + podAgentRoot,
				},
				Env: []corev1.EnvVar{
					{Name: "HOME", Value: podWorkspace},
					{Name: "PATH", Value: podToolsDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
				},
				WorkingDir:      podWorkspace,
				Resources:       resources,
				SecurityContext: containerSecurity,
				VolumeMounts: []corev1.VolumeMount{
					{Name: "workspace", MountPath: podWorkspace},
					{Name: "fleetd-tools", MountPath: podToolsDir, ReadOnly: true},
					{Name: "run", MountPath: podSocketDir},
				},
			}, {
				Name:            paneHostContainer,
				Image:           set.ToolsImage,
				ImagePullPolicy: set.PullPolicy,
				Command: []string{
					"/paneserver", "--relay",
					"--socket=" + podSocketDir + "/herdr.sock",
					fmt.Sprintf("--tls-listen=:%d", port),
					"--tls-dir=" + podTLSDir,
					"--gateway=" + set.GatewayURL,
					"--gateway-listen=" + podGatewayListen,
					"--token-file=" + podTokenDir + "/token",
				},
				Ports: []corev1.ContainerPort{{Name: "pane-host", ContainerPort: int32(port)}},
				// The relay listens once the pane server answers.
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}},
					PeriodSeconds: 1,
				},
				Resources:       *paneHostResources.DeepCopy(),
				SecurityContext: paneHostSecurity,
				VolumeMounts: []corev1.VolumeMount{
					{Name: "pane-host-tls", MountPath: podTLSDir, ReadOnly: true},
					{Name: "fleetd-token", MountPath: podTokenDir, ReadOnly: true},
					{Name: "run", MountPath: podSocketDir},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "workspace", VolumeSource: workspace},
				{Name: "fleetd-tools", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(toolsVolumeSize.DeepCopy())}}},
				{Name: "run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(runVolumeSize.DeepCopy())}}},
				{Name: "pane-host-tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
					SecretName: id.tlsSecret, DefaultMode: ptr.To[int32](0o400),
				}}},
				{Name: "fleetd-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					DefaultMode: ptr.To[int32](0o400),
					Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
						Audience: fleetv1alpha1.GatewayAudience, ExpirationSeconds: ptr.To[int64](podTokenSeconds), Path: "token",
					}}},
				}}},
			},
		},
	}
	return pod
}
