package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/panehost"
)

// A Profile's warm pool, kept: the Profile reconciler starts warm Pods up
// to the pool's size and drops those planPool says go. A warm Pod is a
// member Pod (desiredPod) of the Profile's pod, with no Member yet: its
// pane host comes up with credentials of its own (WarmPodSecretName,
// minted for panehost.WarmHostID), fleetd's tools are copied in, and no
// agent runs. Its token opens nothing at the gateway until a Member claims
// it (member_warm.go).

// WarmPodSecretName is the Secret with a warm Pod's pane host credentials.
func WarmPodSecretName(pod string) string { return pod + "-fleetd-warm-tls" }

// warmPodName is a new name for a warm Pod of profile.
func warmPodName(profile string) string {
	// Short enough for a hostname and a certificate's name.
	if len(profile) > 40 {
		profile = strings.TrimRight(profile[:40], "-.")
	}
	return profile + "-warm-" + utilrand.String(5)
}

// reconcilePool keeps p's warm pool, and returns its status (nil when p
// has no pool and no warm Pod is left) and, when the pool cannot be kept,
// why.
func (r *ProfileReconciler) reconcilePool(ctx context.Context, p *fleetv1alpha1.Profile, claimed int32) (*fleetv1alpha1.WarmPoolStatus, string, error) {
	var size int32
	if p.Spec.WarmPool != nil && p.DeletionTimestamp == nil {
		size = p.Spec.WarmPool.Size
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(p.Namespace),
		client.MatchingLabels{fleetv1alpha1.LabelPool: p.Name, fleetv1alpha1.LabelMember: ""}); err != nil {
		return nil, "", fmt.Errorf("listing the warm pods: %w", err)
	}
	if size == 0 && len(pods.Items) == 0 {
		if claimed == 0 {
			return nil, "", nil
		}
		return &fleetv1alpha1.WarmPoolStatus{Claimed: claimed}, "", nil
	}
	var problem string
	if size > 0 && r.CA == nil {
		// Nothing to start warm Pods with: say so, and keep none.
		problem, size = "this fleetd runs no pod members (it has no pane host CA, --pane-host-ca)", 0
	}
	// What a Member of p with no pod of its own runs in: the Profile's
	// pod, which the API server's admission bounds (a Member's own is
	// bounded by fleetd too, in prepare).
	w := resolveWorker(&fleetv1alpha1.Member{Spec: fleetv1alpha1.MemberSpec{Profile: p.Name}}, p)
	template := warmTemplate(w.Pod, r.Pods)
	plan := planPool(size, template, pods.Items, time.Now())
	for _, d := range plan.drop {
		log.FromContext(ctx).V(1).Info("Dropping a warm pod", "pod", d.pod.Name, "why", d.why)
		opts := []client.DeleteOption{client.Preconditions{UID: &d.pod.UID}}
		if err := r.Client.Delete(ctx, d.pod, opts...); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return nil, "", fmt.Errorf("deleting warm pod %s: %w", d.pod.Name, err)
		}
	}
	if plan.start > 0 {
		if err := ensureNetworkPolicy(ctx, r.Client, r.Reader, r.Pods, &r.policies, p.Namespace); err != nil {
			return nil, "", err
		}
	}
	for range plan.start {
		if err := r.startWarmPod(ctx, p, w.Pod, template); err != nil {
			return nil, "", err
		}
		plan.starting++
	}
	return &fleetv1alpha1.WarmPoolStatus{Free: plan.free, Starting: plan.starting, Claimed: claimed}, problem, nil
}

// startWarmPod starts one warm Pod of p, made from spec, and its pane
// host's credentials, which go with it.
func (r *ProfileReconciler) startWarmPod(ctx context.Context, p *fleetv1alpha1.Profile, spec *fleetv1alpha1.MemberPod, template string) error {
	name := warmPodName(p.Name)
	pod := podFrom(podIdentity{
		name: name,
		labels: map[string]string{
			// Empty until a Member claims it, and there so that fleetd's
			// caches hold it.
			fleetv1alpha1.LabelMember: "",
			fleetv1alpha1.LabelPool:   p.Name,
			labelPoolTemplate:         template,
		},
		tlsSecret: WarmPodSecretName(name),
	}, p.Namespace, spec, r.Pods, "")
	if err := controllerutil.SetControllerReference(p, pod, r.Client.Scheme()); err != nil {
		return err
	}
	if err := r.Client.Create(ctx, pod); err != nil {
		return fmt.Errorf("creating warm pod %s: %w", name, err)
	}
	certPEM, keyPEM, err := r.CA.IssueServer(panehost.WarmHostID(p.Namespace, name), time.Now())
	if err != nil {
		return err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: WarmPodSecretName(name), Namespace: p.Namespace,
			Labels: map[string]string{fleetv1alpha1.LabelMember: "", fleetv1alpha1.LabelPool: p.Name},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{panehost.CertKey: certPEM, panehost.KeyKey: keyPEM, panehost.CAKey: r.CA.CertPEM},
	}
	// It goes with the Pod, whoever comes to own the Pod.
	if err := controllerutil.SetControllerReference(pod, secret, r.Client.Scheme()); err != nil {
		return err
	}
	if err := r.Client.Create(ctx, secret); err != nil {
		// The Pod cannot start without it: drop it, and the next pass
		// starts another.
		_ = r.Client.Delete(ctx, pod)
		return fmt.Errorf("creating warm pod secret %s: %w", secret.Name, err)
	}
	return nil
}
