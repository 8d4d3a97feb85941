package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Runtime says where a Member's agent runs.
// +kubebuilder:validation:Enum=Shared;Pod
type Runtime string

const (
	// RuntimeShared runs the agent in a pane of the pane server beside
	// fleetd (herdr, or fleetd's herdr-compatible one), shared with other
	// members: fleetd dev, single-node installs, small teams.
	RuntimeShared Runtime = "Shared"
	// RuntimePod runs the agent in a Pod of its own, with a pane host of its
	// own that the controllers reach over mutually authenticated TLS.
	// Kubernetes schedules, limits and isolates it.
	RuntimePod Runtime = "Pod"
)

// MemberPod shapes the Pod a Member runs in when its runtime is Pod: what a
// platform team sets for any workload.
type MemberPod struct {
	// image runs the agent and its pane host; only a Profile sets it.
	// Default: fleetd's worker image
	// (the pinned Claude Code and Codex CLIs with node, git and a shell).
	// Any image that holds the agent's CLI and a POSIX shell works: fleetd's
	// own binaries come in by an init container.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`

	// imagePullPolicy is the agent container's pull policy.
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// resources are the agent container's requests and limits. A real
	// Claude Code process holds about 250 MB. A resource left out keeps
	// fleetd's default (requests 100m CPU, 512Mi memory, 1Gi ephemeral
	// storage; limits 2 CPUs, 4Gi, 10Gi), so a member Pod is never
	// unbounded; the ephemeral storage limit also bounds an emptyDir
	// workspace.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// nodeSelector constrains the nodes the Pod may run on.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// affinity is the Pod's scheduling affinity.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// tolerations let the Pod run on tainted nodes; only a Profile sets
	// them.
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// runtimeClassName selects a container runtime class, such as gVisor or
	// Kata, for stronger isolation; only a Profile sets it.
	// +optional
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`

	// serviceAccountName is the Pod's service account. Its token, projected
	// for audience fleetd and bound to the Pod, is how the agent is known to
	// the gateway; the Pod gets no token for the Kubernetes API. Default:
	// the namespace's default service account; only a Profile names
	// another.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// securityContext is the Pod's security context. Default: a non-root
	// user (65532), its group, and the runtime's default seccomp profile.
	// A Member's must stay within Pod Security restricted (runAsNonRoot
	// true, runAsUser not 0, seccompProfile RuntimeDefault or Localhost,
	// no unconfined AppArmor, SELinux user, role or sysctls); only a
	// Profile opens more.
	// +optional
	SecurityContext *corev1.PodSecurityContext `json:"securityContext,omitempty"`

	// workspace is the volume the agent works in. Default: an emptyDir, gone
	// with the Pod.
	// +optional
	Workspace *Workspace `json:"workspace,omitempty"`

	// egress is where the Pod may connect besides cluster DNS and fleetd's
	// gateway, which it always reaches; nothing else of the cluster reaches
	// it but fleetd. Default: the internet (every address outside the
	// private ranges), such as the model's public API. Only a Profile sets
	// it; a Profile whose writer may not create Pods in its namespace may
	// only narrow it (internet, no rules).
	// +optional
	Egress *MemberEgress `json:"egress,omitempty"`
}

// MemberEgress is where a member's Pod may connect, enforced by a
// NetworkPolicy fleetd keeps for the Member.
type MemberEgress struct {
	// internet lets the Pod reach every address outside the private ranges
	// (RFC 1918, shared address space, link-local with the cloud's metadata
	// service, loopback, unique local): the model's public API and the rest
	// of the internet. Default true.
	// +optional
	// +kubebuilder:default=true
	Internet *bool `json:"internet,omitempty"`

	// rules open more, as NetworkPolicy egress rules do: a model's API
	// inside the cluster or on a private network, a package mirror.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Rules []networkingv1.NetworkPolicyEgressRule `json:"rules,omitempty"`
}

// Workspace is where a pod member keeps its work.
type Workspace struct {
	// volumeClaim gives the Member a PersistentVolumeClaim of its own that
	// survives the Pod's restarts and goes with the Member unless kept.
	// +optional
	VolumeClaim *WorkspaceVolumeClaim `json:"volumeClaim,omitempty"`
}

// WorkspaceVolumeClaim asks for a PersistentVolumeClaim per Member.
type WorkspaceVolumeClaim struct {
	// storageClassName is the claim's storage class; default the cluster's.
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`

	// size is how much storage to ask for.
	// +required
	Size resource.Quantity `json:"size"`

	// keep leaves the claim in place when the Member is deleted, for a
	// person to look at or a new Member to take over.
	// +optional
	Keep bool `json:"keep,omitempty"`
}
