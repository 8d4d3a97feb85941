package controllers

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"hash/fnv"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// A Profile's warm pool, decided: which warm Pods to keep, start and drop
// (the Profile reconciler, profile_pool.go), and which ones a new Member
// may claim (the Member reconciler, member_warm.go). No I/O here.

// labelPoolTemplate is the hash of the pod spec a warm Pod was made from
// (warmTemplate): a Member claims only a Pod exactly like the one it would
// start, and a Profile whose pod changes replaces its free warm Pods.
const labelPoolTemplate = "fleet.fleetd.dev/pool-template"

// annotationWarmLaunch, on a warm Pod, is the warmLaunchKey of the agent
// started in it ahead of the claim.
const annotationWarmLaunch = "fleet.fleetd.dev/warm-launch"

// annotationWarmStarted, on a warm Pod, is when its agent was started
// (RFC 3339).
const annotationWarmStarted = "fleet.fleetd.dev/warm-started"

// warmAgentSettle is how long an agent started in a warm Pod must have
// run before the Pod counts as free. Claude Code and Codex show their
// prompt, which is what herdr reads as ready, before they have connected
// to their MCP servers, which they do in the background; a member that
// took one over at once could get its first message before its tools. A
// cold start waits as long for its Pod and more.
const warmAgentSettle = 5 * time.Second

// warmAgentSettled says whether the agent started in pod has run for
// warmAgentSettle at now; an unreadable start time has not.
func warmAgentSettled(pod *corev1.Pod, now time.Time) bool {
	started, err := time.Parse(time.RFC3339, pod.Annotations[annotationWarmStarted])
	return err == nil && now.Sub(started) >= warmAgentSettle
}

// annotationWarmReady, on a warm Pod, says the agent started in it ahead
// of the claim is ready for work.
const annotationWarmReady = "fleet.fleetd.dev/warm-ready"

// warmPaneLabelPrefix starts the label of the workspace an agent is
// started in ahead of any Member; the rest is its warmLaunchKey.
const warmPaneLabelPrefix = "fleetd-warm:"

// warmLaunchKey is what a pane started by l is, apart from the Member it
// is for: the agent started in a warm Pod is a member's only when the
// member's own launch has the same key.
func warmLaunchKey(l Launch) string {
	l.Env = maps.Clone(l.Env)
	delete(l.Env, agents.EnvMember)
	b, err := json.Marshal(l)
	if err != nil {
		panic(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

// staleWarmAgents are the Pods of pods whose agent was started from a
// launch other than key's: the Profile changed since. None when key is
// unknown ("").
func staleWarmAgents(pods []*corev1.Pod, key string) []*corev1.Pod {
	var stale []*corev1.Pod
	for _, pod := range pods {
		if started, ok := pod.Annotations[annotationWarmLaunch]; ok && key != "" && started != key {
			stale = append(stale, pod)
		}
	}
	return stale
}

// warmPodMaxAge is how long a free warm Pod is kept before it is
// replaced: well before its pane host's certificate needs renewing, so a
// free one never does.
const warmPodMaxAge = 30 * 24 * time.Hour

// warmStartAtOnce is how many warm Pods of one pool start at once: a
// pool refills in the background, and Pods starting by the dozen (each
// scheduled, its tools copied in, its pane host started) would take the
// nodes' CPU from the members claiming Pods meanwhile.
const warmStartAtOnce = 2

// warmTemplate is the hash of the Pod a member of pod spec spec runs in,
// apart from what makes it one member's (podIdentity).
func warmTemplate(spec *fleetv1alpha1.MemberPod, set PodSettings) string {
	pod := podFrom(podIdentity{}, "", spec, set, "")
	b, err := json.Marshal(pod.Spec)
	if err != nil {
		// A PodSpec always encodes.
		panic(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

// isFreeWarmPod says whether pod is a warm Pod no Member has claimed.
func isFreeWarmPod(pod *corev1.Pod) bool {
	member, labelled := pod.Labels[fleetv1alpha1.LabelMember]
	return labelled && member == "" && pod.Labels[fleetv1alpha1.LabelPool] != ""
}

// poolPlan is what to do about a Profile's warm pool.
type poolPlan struct {
	// start is how many warm Pods to start.
	start int
	// drop are free warm Pods to delete, each with why; keep are those
	// kept.
	drop []droppedWarmPod
	keep []*corev1.Pod
	// free are ready to be claimed; starting are not ready yet.
	free, starting int32
}

// droppedWarmPod is a warm Pod to delete, and why.
type droppedWarmPod struct {
	pod *corev1.Pod
	why string
}

// planPool decides about the free warm Pods of a pool of size whose
// members' Pods are made from template: those of another template, ended
// or older than warmPodMaxAge go; the ready ones are kept first, the
// oldest first, up to size; and as many start as are missing, with at
// most warmStartAtOnce starting at a time. With agents (the pool starts
// its members' agent in each Pod ahead), a Pod is ready once its agent
// is (annotationWarmReady).
func planPool(size int32, template string, pods []corev1.Pod, agents bool, now time.Time) poolPlan {
	var plan poolPlan
	type kept struct {
		pod   *corev1.Pod
		ready bool
	}
	var keep []kept
	for i := range pods {
		pod := &pods[i]
		if !isFreeWarmPod(pod) || pod.DeletionTimestamp != nil {
			continue
		}
		verdict, why := judgePod(pod, nil)
		switch {
		case pod.Labels[labelPoolTemplate] != template:
			plan.drop = append(plan.drop, droppedWarmPod{pod, "its profile's pod changed"})
		case verdict == podLost:
			plan.drop = append(plan.drop, droppedWarmPod{pod, why})
		case now.Sub(pod.CreationTimestamp.Time) > warmPodMaxAge:
			plan.drop = append(plan.drop, droppedWarmPod{pod, "it is older than " + warmPodMaxAge.String()})
		default:
			_, agentReady := pod.Annotations[annotationWarmReady]
			keep = append(keep, kept{pod, verdict == podRunning && (agentReady || !agents)})
		}
	}
	slices.SortStableFunc(keep, func(a, b kept) int {
		if a.ready != b.ready {
			if a.ready {
				return -1
			}
			return 1
		}
		return a.pod.CreationTimestamp.Compare(b.pod.CreationTimestamp.Time)
	})
	for i, k := range keep {
		switch {
		case i >= int(size):
			plan.drop = append(plan.drop, droppedWarmPod{k.pod, "the pool holds more than its size"})
		case k.ready:
			plan.keep = append(plan.keep, k.pod)
			plan.free++
		default:
			plan.keep = append(plan.keep, k.pod)
			plan.starting++
		}
	}
	plan.start = max(min(int(size)-len(keep), warmStartAtOnce-int(plan.starting)), 0)
	return plan
}

// claimCandidates are the warm Pods among pods a member with uid may
// claim, in the order to try them: free, ready, of template and not too
// old. Each member starts at a place of its own in the list, so that
// members claiming at once rarely reach for the same Pod.
func claimCandidates(pods []corev1.Pod, template string, uid types.UID, now time.Time) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range pods {
		pod := &pods[i]
		if !isFreeWarmPod(pod) || pod.DeletionTimestamp != nil || pod.Labels[labelPoolTemplate] != template ||
			now.Sub(pod.CreationTimestamp.Time) > warmPodMaxAge {
			continue
		}
		if verdict, _ := judgePod(pod, nil); verdict == podRunning {
			out = append(out, pod)
		}
	}
	if len(out) < 2 {
		return out
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int { return cmp.Compare(a.Name, b.Name) })
	h := fnv.New32a()
	h.Write([]byte(uid))
	at := int(h.Sum32() % uint32(len(out)))
	out = append(out[at:], out[:at]...)
	// Those whose agent is ready first, then those whose agent starts.
	agentFirst := func(p *corev1.Pod) int {
		if _, ok := p.Annotations[annotationWarmReady]; ok {
			return 0
		}
		if _, ok := p.Annotations[annotationWarmLaunch]; ok {
			return 1
		}
		return 2
	}
	slices.SortStableFunc(out, func(a, b *corev1.Pod) int { return cmp.Compare(agentFirst(a), agentFirst(b)) })
	return out
}
