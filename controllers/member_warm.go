package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/panehost"
)

// A Member's claim on a warm Pod of its Profile's pool (profile_pool.go):
// instead of starting a Pod, a new member takes one whose pane host is up
// and whose tools are in place, and starts its agent there at once.

// claimedRecheck is when a member that claimed a warm Pod with no agent
// to take over looks again, to start its own once its status names the
// Pod, if the Pod's own change has not brought it back sooner.
const claimedRecheck = 100 * time.Millisecond

// claimWarmPod claims a free warm Pod of w's pool for m, and returns it;
// nil when w has no pool or none of its Pods is free and exactly like the
// one m would start. The claim is one write, conditional on the Pod's
// resourceVersion, so two members never claim one Pod: the Pod is
// labelled m's and its controller becomes m. From then its token is m's
// at the gateway, once m's status names it (identity: a Pod's token
// stands for the Member whose status.podUID it is).
func (r *MemberReconciler) claimWarmPod(ctx context.Context, m *fleetv1alpha1.Member, w Worker) (*corev1.Pod, error) {
	if w.Pool == "" || r.CA == nil {
		return nil, nil
	}
	var pods corev1.PodList
	// A pool's Pods are in its Profile's shard until claimed.
	if err := r.fleet(r.Client).List(ctx, &pods, client.InNamespace(m.Namespace),
		client.MatchingLabels{fleetv1alpha1.LabelPool: w.Pool, fleetv1alpha1.LabelMember: ""}); err != nil {
		return nil, fmt.Errorf("listing warm pods: %w", err)
	}
	for _, pod := range claimCandidates(pods.Items, warmTemplate(w.Pod, r.Pods), m.UID, r.Clock.Now()) {
		claimed := pod.DeepCopy()
		claimed.Labels[fleetv1alpha1.LabelMember] = m.Name
		claimed.Labels[fleetv1alpha1.LabelMemberUID] = string(m.UID)
		claimed.Labels[fleetv1alpha1.LabelShard] = r.shardOf(m.Namespace, m.Name)
		claimed.OwnerReferences = nil
		if err := controllerutil.SetControllerReference(m, claimed, r.Client.Scheme()); err != nil {
			return nil, err
		}
		err := r.Client.Patch(ctx, claimed, client.MergeFromWithOptions(pod, client.MergeFromWithOptimisticLock{}))
		switch {
		case err == nil:
			return claimed, nil
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			// Another member took it, or it went: try the next one.
			continue
		default:
			return nil, fmt.Errorf("claiming warm pod %s: %w", pod.Name, err)
		}
	}
	return nil, nil
}

// ensureClaimedPodSecret renews the credentials of the warm Pod m claimed
// before they expire: they were minted for the Pod (panehost.WarmHostID),
// and go with it.
func (r *MemberReconciler) ensureClaimedPodSecret(ctx context.Context, m *fleetv1alpha1.Member) error {
	secret := &corev1.Secret{}
	key := types.NamespacedName{Namespace: m.Namespace, Name: WarmPodSecretName(m.Status.PodName)}
	// It stays in the pool's shard: the Pod's claim does not move it.
	if err := r.fleet(r.Client).Get(ctx, key, secret); err != nil {
		// Gone with its Pod: the Pod's loss is judged elsewhere.
		return client.IgnoreNotFound(err)
	}
	now := r.Clock.Now()
	if !r.CA.NeedsRenewal(secret.Data[panehost.CertKey], now) {
		return nil
	}
	certPEM, keyPEM, err := r.CA.IssueServer(panehost.WarmHostID(m.Namespace, m.Status.PodName), now)
	if err != nil {
		return err
	}
	secret.Data = map[string][]byte{panehost.CertKey: certPEM, panehost.KeyKey: keyPEM, panehost.CAKey: r.CA.CertPEM}
	if err := r.Client.Update(ctx, secret); err != nil {
		return fmt.Errorf("renewing pane host secret %s: %w", key.Name, err)
	}
	return nil
}

// paneRenamer is a pane host that renames workspaces and agents, as
// herdr's own and fleetd's pane hosts do.
type paneRenamer interface {
	WorkspaceRename(ctx context.Context, workspaceID, label string) error
	AgentRename(ctx context.Context, target, name string) error
}

// takeWarmAgent takes over the agent the pool started in the warm Pod m
// claimed (profile_pool.go), when it was started from m's own launch l:
// its workspace and its agent are given m's label and name, and adopt
// then records it as m's pane. A warm agent of another launch (m has args
// of its own, or the Profile changed since) is closed, and m's own starts
// as in a Pod started for it. It reports whether it took one over.
func (r *MemberReconciler) takeWarmAgent(ctx context.Context, s *memberScope, l Launch) (bool, error) {
	renamer, ok := s.panes.(paneRenamer)
	if !ok {
		return false, nil
	}
	snap, err := s.panes.SessionSnapshot(ctx)
	if err != nil {
		return false, fmt.Errorf("taking a herdr snapshot: %w", err)
	}
	m, want := s.member, warmPaneLabelPrefix+warmLaunchKey(l)
	took := false
	for _, ws := range snap.Workspaces {
		if !strings.HasPrefix(ws.Label, warmPaneLabelPrefix) {
			continue
		}
		if ws.Label != want || took {
			if err := s.panes.WorkspaceClose(ctx, ws.WorkspaceID); err != nil && !errors.Is(err, herdr.ErrNotFound) {
				return false, fmt.Errorf("closing the warm pod's agent: %w", err)
			}
			continue
		}
		for _, a := range snap.Agents {
			if a.WorkspaceID == ws.WorkspaceID && a.Name != nil {
				if err := renamer.AgentRename(ctx, *a.Name, agentName(m.Namespace, m.Name)); err != nil {
					return false, fmt.Errorf("naming the warm pod's agent: %w", err)
				}
			}
		}
		if err := renamer.WorkspaceRename(ctx, ws.WorkspaceID, workspaceLabel(m)); err != nil {
			return false, fmt.Errorf("labelling the warm pod's workspace: %w", err)
		}
		s.event(corev1.EventTypeNormal, fleetv1alpha1.ReasonPodClaimed, "Took over the agent started ahead in warm pod %s", m.Status.PodName)
		took = true
	}
	return took, nil
}
