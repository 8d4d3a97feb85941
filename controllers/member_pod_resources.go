package controllers

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// A member's agent is hostile: without bounds, one agent can take a node's
// memory or fill its disk. Every member Pod is bounded unless its pod spec
// says otherwise; a pids bound is the kubelet's (podPidsLimit), since a
// Pod's spec cannot carry one.
var (
	// defaultAgentResources are the agent container's requests and limits
	// where the member's pod spec names none: a real Claude Code process
	// holds about 250 MB, a build it runs several times that.
	defaultAgentResources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse("100m"),
			corev1.ResourceMemory:           resource.MustParse("512Mi"),
			corev1.ResourceEphemeralStorage: resource.MustParse("1Gi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse("2"),
			corev1.ResourceMemory:           resource.MustParse("4Gi"),
			corev1.ResourceEphemeralStorage: resource.MustParse("10Gi"),
		},
	}
	// paneHostResources bound the pane host container: a relay of
	// fleetd's calls and the agent's gateway traffic.
	paneHostResources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse("10m"),
			corev1.ResourceMemory:           resource.MustParse("32Mi"),
			corev1.ResourceEphemeralStorage: resource.MustParse("16Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse("500m"),
			corev1.ResourceMemory:           resource.MustParse("128Mi"),
			corev1.ResourceEphemeralStorage: resource.MustParse("64Mi"),
		},
	}
	// toolsResources bound the init container that copies fleetd's
	// binaries.
	toolsResources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse("10m"),
			corev1.ResourceMemory:           resource.MustParse("32Mi"),
			corev1.ResourceEphemeralStorage: resource.MustParse("16Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse("500m"),
			corev1.ResourceMemory:           resource.MustParse("128Mi"),
			corev1.ResourceEphemeralStorage: resource.MustParse("64Mi"),
		},
	}
	// toolsVolumeSize holds fleetd's binaries; runVolumeSize the pane
	// host's socket.
	toolsVolumeSize = resource.MustParse("512Mi")
	runVolumeSize   = resource.MustParse("16Mi")
)

// agentResources are the agent container's requests and limits: what the
// member's pod spec names, and the defaults for every resource it leaves
// out. A default request above the spec's limit is lowered to it, and a
// default limit below the spec's request raised to it, so that a spec
// naming one side alone still makes a valid Pod.
func agentResources(spec *corev1.ResourceRequirements) corev1.ResourceRequirements {
	out := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	if spec != nil {
		out.Claims = spec.Claims
		for name, q := range spec.Requests {
			out.Requests[name] = q.DeepCopy()
		}
		for name, q := range spec.Limits {
			out.Limits[name] = q.DeepCopy()
		}
	}
	for name, def := range defaultAgentResources.Requests {
		if _, ok := out.Requests[name]; ok {
			continue
		}
		if limit, ok := out.Limits[name]; ok && limit.Cmp(def) < 0 {
			def = limit
		}
		out.Requests[name] = def.DeepCopy()
	}
	for name, def := range defaultAgentResources.Limits {
		if _, ok := out.Limits[name]; ok {
			continue
		}
		if req := out.Requests[name]; req.Cmp(def) > 0 {
			def = req
		}
		out.Limits[name] = def.DeepCopy()
	}
	return out
}

// workspaceSize bounds the agent's emptyDir workspace: its container's
// ephemeral-storage limit, which the member's pod spec may raise.
func workspaceSize(agent corev1.ResourceRequirements) *resource.Quantity {
	q := agent.Limits[corev1.ResourceEphemeralStorage]
	return &q
}
