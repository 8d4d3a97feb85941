package identity

import (
	"context"
	"strings"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// A member Pod's projected token, and the Member it stands for.

// ReasonUnclaimedPod is the Failure reason of a token of a warm Pod no
// Member has claimed.
const ReasonUnclaimedPod = "unclaimed_pod"

// podMember resolves a service-account token bound to a Member's Pod to
// that Member: a pod member has no token of its own, its Pod's projected
// token is its identity. A token of a member Pod that is no longer its
// Member's current one (replaced after a crash, or on a lost node) is
// refused, which fences a stale agent; so is a token of a Pod that is gone,
// since nothing is left to tell whether it was a member's. Only a token of
// a Pod that exists and is no member's is its service account's, and nil
// is returned.
func (a *Authenticator) podMember(ctx context.Context, p *Principal) (*Principal, *Failure) {
	if p.user == nil {
		return nil, nil
	}
	uid, name := first(p.user.Extra[extraPodUID]), first(p.user.Extra[extraPodName])
	if uid == "" {
		return nil, nil
	}
	var members fleetv1alpha1.MemberList
	if err := a.cfg.Cache.List(ctx, &members, client.InNamespace(p.Namespace), client.MatchingFields{IndexMemberPodUID: uid}); err != nil {
		return nil, internal("lookup_error", "looking up the pod's member: %v", err)
	}
	if len(members.Items) > 0 {
		return podTokenVerdict(name, uid, members.Items, nil)
	}
	if known, ok := a.pods.get(uid); ok && known {
		return nil, nil
	}
	pod, err := a.tokenPod(ctx, p.Namespace, name, uid)
	if err != nil {
		return nil, internal("lookup_error", "looking up the token's pod: %v", err)
	}
	m, f := podTokenVerdict(name, uid, nil, pod)
	if m == nil && f == nil {
		// A Pod's UID is never reused and a Pod that is no member's (nor a
		// warm Pod, which is refused) never becomes one: the answer holds
		// as long as a TokenReview's.
		a.pods.put(uid, true, reviewTTL)
	}
	return m, f
}

// tokenPod is the Pod named name if it is the one with uid, else nil. The
// cache holds members' Pods only; any other Pod is read from the API
// server.
func (a *Authenticator) tokenPod(ctx context.Context, namespace, name, uid string) (*corev1.Pod, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	for _, r := range []client.Reader{a.cfg.Cache, a.cfg.Live} {
		if r == nil {
			continue
		}
		var pod corev1.Pod
		err := r.Get(ctx, key, &pod)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, err
		case string(pod.UID) == uid:
			return &pod, nil
		}
	}
	return nil, nil
}

// podTokenVerdict decides who a token bound to the Pod podName with podUID
// stands for, from the Members whose current Pod that is and from the Pod
// itself (nil when no Pod has that name and UID any more). It returns a
// member principal, a refusal, or neither: the token is its service
// account's. A token of a Pod that is, or was, a member's never is: a
// member's agent holds it, and would act as a primary with the account's
// RBAC.
func podTokenVerdict(podName, podUID string, members []fleetv1alpha1.Member, pod *corev1.Pod) (*Principal, *Failure) {
	switch len(members) {
	case 0:
	case 1:
		m := &members[0]
		if m.DeletionTimestamp != nil {
			return nil, unauthorized("member_closed", "member %s is stopped (being deleted): its pod's token no longer works", m.Name)
		}
		return &Principal{Kind: fleetv1alpha1.PrincipalMember, Name: m.Name, Namespace: m.Namespace, Member: m}, nil
	default:
		return nil, unauthorized("ambiguous_token", "the pod's token belongs to more than one member")
	}
	if pod == nil || string(pod.UID) != podUID {
		return nil, unauthorized("pod_gone", "pod %s is gone: a token bound to a pod works only while the pod exists", podName)
	}
	if pool := pod.Labels[fleetv1alpha1.LabelPool]; pool != "" && pod.Labels[fleetv1alpha1.LabelMember] == "" {
		return nil, unauthorized(ReasonUnclaimedPod, "pod %s is a warm pod of profile %s that no member has claimed: its token opens nothing until one does", podName, pool)
	}
	if member, ok := memberOfPod(pod); ok {
		return nil, unauthorized("replaced_pod", "pod %s no longer runs member %s: the member runs in another pod now, or none", podName, member)
	}
	return nil, nil
}

// memberOfPod names the Member a Pod was made for, by the labels fleetd
// puts on member Pods or by its controller, a Member.
func memberOfPod(pod *corev1.Pod) (string, bool) {
	if m, ok := pod.Labels[fleetv1alpha1.LabelMember]; ok {
		return m, true
	}
	if _, ok := pod.Labels[fleetv1alpha1.LabelMemberUID]; ok {
		return pod.Labels[fleetv1alpha1.LabelMember], true
	}
	for _, ref := range pod.OwnerReferences {
		if ref.Kind == "Member" && strings.HasPrefix(ref.APIVersion, fleetv1alpha1.GroupVersion.Group+"/") {
			return ref.Name, true
		}
	}
	return "", false
}

func first(v authnv1.ExtraValue) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
