package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// A pod member's workspace: the claim that keeps its files across Pods.

// claimRetry is how soon a Member whose workspace claim is another's looks
// again.
const claimRetry = 30 * time.Second

// claimVerdict is what to do about a Member's existing workspace claim.
type claimVerdict int

const (
	// claimOurs: it was made for this Member incarnation.
	claimOurs claimVerdict = iota
	// claimAdopt: it has no member UID (an older fleetd made it) and was
	// made after this Member, so for it: record the UID and use it.
	claimAdopt
	// claimGoing: it is being deleted; wait, then make a new one.
	claimGoing
	// claimTaken: another Member of the name had it, and kept it with
	// what its agent left; never used silently.
	claimTaken
)

// judgeWorkspaceClaim decides whether pvc, the claim named for Member m,
// is m's to use, and says why not.
func judgeWorkspaceClaim(m *fleetv1alpha1.Member, pvc *corev1.PersistentVolumeClaim) (claimVerdict, string) {
	if pvc.DeletionTimestamp != nil {
		return claimGoing, fmt.Sprintf("workspace claim %s is being deleted", pvc.Name)
	}
	switch uid, ok := pvc.Labels[fleetv1alpha1.LabelMemberUID]; {
	case ok && uid == string(m.UID):
		return claimOurs, ""
	case ok:
		return claimTaken, fmt.Sprintf("workspace claim %s was kept from an earlier Member %s (uid %s) with what its agent left; delete it for a fresh workspace, or label it %s=%s to hand it to this Member", pvc.Name, m.Name, uid, fleetv1alpha1.LabelMemberUID, m.UID)
	case pvc.CreationTimestamp.Before(&m.CreationTimestamp):
		return claimTaken, fmt.Sprintf("workspace claim %s predates this Member and names none; delete it for a fresh workspace, or label it %s=%s to hand it to this Member", pvc.Name, fleetv1alpha1.LabelMemberUID, m.UID)
	}
	return claimAdopt, ""
}

// errClaimTaken says the Member's workspace claim is not its own.
type errClaimTaken struct{ why string }

func (e *errClaimTaken) Error() string { return e.why }

// ensureWorkspaceClaim keeps the Member's workspace claim, when its pod
// asks for one, and returns its name. A claim the Member keeps has no
// owner, so it outlives the Member; it is labelled with the Member's UID,
// and a new Member of the name never uses it unless an operator hands it
// over (judgeWorkspaceClaim).
func (r *MemberReconciler) ensureWorkspaceClaim(ctx context.Context, m *fleetv1alpha1.Member, pod *fleetv1alpha1.MemberPod) (string, error) {
	if pod == nil || pod.Workspace == nil || pod.Workspace.VolumeClaim == nil {
		return "", nil
	}
	vc := pod.Workspace.VolumeClaim
	key := types.NamespacedName{Namespace: m.Namespace, Name: WorkspaceClaimName(m.Name)}
	pvc := &corev1.PersistentVolumeClaim{}
	err := r.Client.Get(ctx, key, pvc)
	if err == nil {
		switch verdict, why := judgeWorkspaceClaim(m, pvc); verdict {
		case claimOurs:
			return key.Name, nil
		case claimAdopt:
			patch := client.MergeFrom(pvc.DeepCopy())
			if pvc.Labels == nil {
				pvc.Labels = map[string]string{}
			}
			pvc.Labels[fleetv1alpha1.LabelMemberUID] = string(m.UID)
			if err := r.Client.Patch(ctx, pvc, patch); err != nil {
				return "", fmt.Errorf("recording member %s's UID on workspace claim %s: %w", m.Name, key.Name, err)
			}
			return key.Name, nil
		default:
			return "", &errClaimTaken{why: why}
		}
	}
	if !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("getting workspace claim %s: %w", key.Name, err)
	}
	pvc = &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: key.Name, Namespace: key.Namespace,
			Labels: map[string]string{fleetv1alpha1.LabelMember: m.Name, fleetv1alpha1.LabelMemberUID: string(m.UID)},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: vc.StorageClassName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: vc.Size}},
		},
	}
	if !vc.Keep {
		if err := controllerutil.SetControllerReference(m, pvc, r.Client.Scheme()); err != nil {
			return "", err
		}
	}
	if err := r.Client.Create(ctx, pvc); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating workspace claim %s: %w", key.Name, err)
	}
	return key.Name, nil
}
