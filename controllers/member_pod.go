package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/panehost"
)

// The Pod of a pod member: its credentials, its workspace claim and the Pod
// itself, replaced with backoff when it is lost. Once its pane host answers,
// the pane's lifecycle (member_pane.go) runs against it as against the
// shared pane server.

// runtimeOf is where m runs: what its status says once it started, else
// what its spec (or Profile) asks, else fleetd's default.
func runtimeOf(m *fleetv1alpha1.Member, w Worker, def fleetv1alpha1.Runtime) fleetv1alpha1.Runtime {
	return cmp.Or(m.Status.Runtime, w.Runtime, def, fleetv1alpha1.RuntimeShared)
}

// podVerdict is what to do about a pod member's Pod.
type podVerdict int

const (
	// podNone: there is no Pod; make one.
	podNone podVerdict = iota
	// podStarting: it is scheduled and its pane host is not up yet.
	podStarting
	// podUnschedulable: no node fits it.
	podUnschedulable
	// podRunning: its pane host answers.
	podRunning
	// podLost: it ended or its node is gone; replace it.
	podLost
)

// judgePod decides about a member's Pod (nil when there is none) on its
// node (nil when unknown), and says why.
func judgePod(pod *corev1.Pod, node *corev1.Node) (podVerdict, string) {
	if pod == nil {
		return podNone, ""
	}
	if pod.DeletionTimestamp != nil {
		return podLost, fmt.Sprintf("pod %s is being deleted", pod.Name)
	}
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return podLost, fmt.Sprintf("pod %s ended: %s", pod.Name, podEnd(pod))
	}
	// The Pod restarts no container: one that ended leaves the other
	// running in a Pod that never gets Ready again.
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Terminated != nil {
			return podLost, fmt.Sprintf("pod %s ended: %s", pod.Name, podEnd(pod))
		}
	}
	if node != nil && pod.Spec.NodeName != "" {
		if c := nodeReady(node); c == nil || c.Status != corev1.ConditionTrue {
			why := "its Ready condition is missing"
			if c != nil {
				why = fmt.Sprintf("Ready is %s: %s", c.Status, cmp.Or(c.Message, c.Reason))
			}
			return podLost, fmt.Sprintf("node %s of pod %s is lost (%s)", node.Name, pod.Name, why)
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return podUnschedulable, c.Message
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && pod.Status.PodIP != "" {
			return podRunning, ""
		}
	}
	return podStarting, podWaiting(pod)
}

// podEnd says how a Pod's container ended, the agent's first.
func podEnd(pod *corev1.Pod) string {
	statuses := slices.Clone(pod.Status.ContainerStatuses)
	agentFirst := func(cs corev1.ContainerStatus) int {
		if cs.Name == agentContainer {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(statuses, func(a, b corev1.ContainerStatus) int { return cmp.Compare(agentFirst(a), agentFirst(b)) })
	for _, cs := range statuses {
		if t := cs.State.Terminated; t != nil {
			s := fmt.Sprintf("container %s %s (exit code %d)", cs.Name, cmp.Or(t.Reason, "terminated"), t.ExitCode)
			if t.Message != "" {
				s += ": " + t.Message
			}
			return s
		}
	}
	if pod.Status.Reason != "" {
		return pod.Status.Reason + ": " + pod.Status.Message
	}
	return string(pod.Status.Phase)
}

// podWaiting says what a starting Pod waits for.
func podWaiting(pod *corev1.Pod) string {
	for _, cs := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return fmt.Sprintf("container %s: %s %s", cs.Name, w.Reason, w.Message)
		}
	}
	if pod.Spec.NodeName == "" {
		return "waiting for a node"
	}
	return "starting on node " + pod.Spec.NodeName
}

func nodeReady(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// podStart is a pod member's Pod that is not up yet.
type podStart struct {
	// unschedulable is the scheduler's message when no node fits.
	unschedulable string
	// waiting says what the Pod waits for otherwise.
	waiting string
}

// reconcilePod brings a pod member's Pod up and reports whether its pane
// host answers; until it does, the pane's lifecycle waits.
func (r *MemberReconciler) reconcilePod(ctx context.Context, s *memberScope, w Worker) (bool, ctrl.Result, error) {
	m := s.member
	if r.CA == nil {
		return false, ctrl.Result{}, fmt.Errorf("member %s runs in a pod, and this fleetd has no pane host CA (--pane-host-ca)", m.Name)
	}
	// A Pod started for the member has its credentials minted for it (just
	// before the Pod is made); a claimed warm Pod has its own.
	switch {
	case m.Status.PodPool != "":
		if err := r.ensureClaimedPodSecret(ctx, m); err != nil {
			return false, ctrl.Result{}, err
		}
	case m.Status.PodName != "":
		if err := r.ensurePaneHostSecret(ctx, m, s.now.Time); err != nil {
			return false, ctrl.Result{}, err
		}
	}
	claim, err := r.ensureWorkspaceClaim(ctx, m, w.Pod)
	var taken *errClaimTaken
	if errors.As(err, &taken) {
		// The operator deletes or hands over the claim; nothing watches
		// claims, so look again a while later.
		if cond := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionPaneReady); cond == nil || cond.Reason != fleetv1alpha1.ReasonWorkspaceClaimTaken {
			s.event(corev1.EventTypeWarning, fleetv1alpha1.ReasonWorkspaceClaimTaken, "Refusing to make the member's pod: %s", taken.why)
		}
		s.facts.claimTaken = taken.why
		return false, ctrl.Result{RequeueAfter: claimRetry}, nil
	}
	if err != nil {
		return false, ctrl.Result{}, err
	}
	if err := r.ensureNetworkPolicy(ctx, m.Namespace); err != nil {
		return false, ctrl.Result{}, err
	}
	if r.Pods.FleetdNamespace != "" {
		// Where the network is walled at all.
		if err := r.ensureEgressPolicy(ctx, m, w.Pod); err != nil {
			return false, ctrl.Result{}, err
		}
	}
	pod, stale, err := r.currentPod(ctx, m)
	if err != nil {
		return false, ctrl.Result{}, err
	}
	if stale {
		return false, ctrl.Result{RequeueAfter: staleRetry}, nil
	}
	var node *corev1.Node
	if pod != nil && pod.Spec.NodeName != "" {
		node = &corev1.Node{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, node); err != nil {
			if !apierrors.IsNotFound(err) {
				return false, ctrl.Result{}, fmt.Errorf("getting node %s: %w", pod.Spec.NodeName, err)
			}
			node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: pod.Spec.NodeName}}
		}
	}
	verdict, why := judgePod(pod, node)
	if pod == nil && m.Status.PodName != "" {
		// currentPod saw the view fresh: the Pod is gone for real.
		verdict, why = podLost, fmt.Sprintf("pod %s was deleted", m.Status.PodName)
	}
	if verdict == podLost {
		fresh, err := r.isFresh(ctx, m)
		if err != nil {
			return false, ctrl.Result{}, err
		}
		if !fresh {
			return false, ctrl.Result{RequeueAfter: staleRetry}, nil
		}
		if err := r.dropPod(ctx, pod, node != nil && nodeReady(node) != nil && nodeReady(node).Status != corev1.ConditionTrue); err != nil {
			return false, ctrl.Result{}, err
		}
		s.event(corev1.EventTypeWarning, fleetv1alpha1.ReasonPodLost, "%s", why)
		clearPane(m)
		clearPod(m)
		m.Status.Restarts++
		m.Status.LastRestartReason = why
		m.Status.LastRestartTime = &s.now
		s.facts.recreated = true
		pod, verdict = nil, podNone
	}
	switch verdict {
	case podNone:
		if wait := backoffLeft(m, s.now.Time); wait > 0 {
			s.facts.waiting = &paneWait{why: m.Status.LastRestartReason, left: wait, reason: fleetv1alpha1.ReasonPodLost}
			return false, ctrl.Result{RequeueAfter: wait}, nil
		}
		fresh, err := r.isFresh(ctx, m)
		if err != nil {
			return false, ctrl.Result{}, err
		}
		if !fresh {
			return false, ctrl.Result{RequeueAfter: staleRetry}, nil
		}
		warm, err := r.claimWarmPod(ctx, m, w)
		if err != nil {
			return false, ctrl.Result{}, err
		}
		if warm != nil {
			// Its pane host is up, and the agent started in it ahead is
			// taken over in this pass (reconcilePane).
			recordPod(m, warm)
			s.event(corev1.EventTypeNormal, fleetv1alpha1.ReasonPodClaimed, "Claimed warm pod %s from profile %s's pool", warm.Name, w.Pool)
			s.facts.podScheduled, s.claimedNow = true, true
			return true, ctrl.Result{}, nil
		}
		if err := r.ensurePaneHostSecret(ctx, m, s.now.Time); err != nil {
			return false, ctrl.Result{}, err
		}
		created, err := r.createPod(ctx, m, w, claim)
		if err != nil {
			return false, ctrl.Result{}, err
		}
		recordPod(m, created)
		s.event(corev1.EventTypeNormal, fleetv1alpha1.ReasonPodStarting, "Created pod %s", created.Name)
		s.facts.pod = &podStart{waiting: "waiting for a node"}
		return false, ctrl.Result{}, nil
	case podUnschedulable:
		recordPod(m, pod)
		s.facts.pod = &podStart{unschedulable: why}
		return false, ctrl.Result{}, nil
	case podStarting:
		recordPod(m, pod)
		s.facts.pod = &podStart{waiting: why}
		return false, ctrl.Result{}, nil
	}
	recordPod(m, pod)
	s.facts.podScheduled = true
	return true, ctrl.Result{}, nil
}

// refusePod makes no Pod for a Member whose own pod asks for more than a
// Member may (why), and deletes one made before: fleetd creates Pods with
// its own rights, so the Member's author must not choose what they are.
// Only a new spec brings the Member back.
func (r *MemberReconciler) refusePod(ctx context.Context, s *memberScope, why error) (ctrl.Result, error) {
	m := s.member
	if err := r.deletePods(ctx, m); err != nil {
		return ctrl.Result{}, err
	}
	clearPane(m)
	clearPod(m)
	if cond := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionPaneReady); cond == nil || cond.Reason != fleetv1alpha1.ReasonPodForbidden {
		s.event(corev1.EventTypeWarning, fleetv1alpha1.ReasonPodForbidden, "Refusing to make the member's pod: %s", why)
	}
	s.facts.podForbidden = why.Error()
	return ctrl.Result{}, reconcile.TerminalError(why)
}

// recordPod makes pod the Member's, and says whether it was a warm Pod of
// a pool.
func recordPod(m *fleetv1alpha1.Member, pod *corev1.Pod) {
	m.Status.PodName, m.Status.PodUID = pod.Name, string(pod.UID)
	m.Status.PodIP, m.Status.NodeName = pod.Status.PodIP, pod.Spec.NodeName
	m.Status.PodPool = pod.Labels[fleetv1alpha1.LabelPool]
}

// clearPod forgets the Member's Pod.
func clearPod(m *fleetv1alpha1.Member) {
	m.Status.PodName, m.Status.PodUID, m.Status.PodIP, m.Status.NodeName = "", "", "", ""
	m.Status.PodPool = ""
}

// currentPod is the Member's Pod: the one its status names, else (a pass
// that created one and did not get to record it) the newest of this Member
// incarnation's. Any other Pod of it is left over and deleted. What it
// decides on a stale view of the Member (the cache lags this controller's
// own status writes) could delete the Pod a newer pass made, so whenever
// it would delete or adopt a Pod it first checks that the view is fresh;
// stale says it was not, and nothing was done.
func (r *MemberReconciler) currentPod(ctx context.Context, m *fleetv1alpha1.Member) (current *corev1.Pod, stale bool, err error) {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(m.Namespace), client.MatchingLabels{fleetv1alpha1.LabelMemberUID: string(m.UID)}); err != nil {
		return nil, false, fmt.Errorf("listing the member's pods: %w", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		switch {
		case m.Status.PodName != "" && p.Name == m.Status.PodName:
			current = p
		case m.Status.PodName == "" && p.DeletionTimestamp == nil && (current == nil || current.CreationTimestamp.Before(&p.CreationTimestamp)):
			current = p
		}
	}
	var extras []*corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; p != current && p.DeletionTimestamp == nil {
			extras = append(extras, p)
		}
	}
	adopting := m.Status.PodName == "" && current != nil
	missing := m.Status.PodName != "" && current == nil
	if len(extras) > 0 || adopting || missing {
		fresh, err := r.isFresh(ctx, m)
		if err != nil || !fresh {
			return nil, true, err
		}
	}
	for _, p := range extras {
		if err := r.dropPod(ctx, p, false); err != nil {
			return nil, false, err
		}
	}
	return current, false, nil
}

// dropPod deletes a Pod; force skips the grace a kubelet that is gone
// would never confirm, so the Pod (and with it the token bound to it) goes
// at once.
func (r *MemberReconciler) dropPod(ctx context.Context, pod *corev1.Pod, force bool) error {
	if pod == nil {
		return nil
	}
	opts := []client.DeleteOption{client.Preconditions{UID: &pod.UID}}
	if force {
		opts = append(opts, client.GracePeriodSeconds(0))
	}
	if err := r.Client.Delete(ctx, pod, opts...); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting pod %s: %w", pod.Name, err)
	}
	return nil
}

// createPod starts the Member's Pod.
func (r *MemberReconciler) createPod(ctx context.Context, m *fleetv1alpha1.Member, w Worker, claim string) (*corev1.Pod, error) {
	pod := desiredPod(m, w.Pod, r.Pods, claim)
	pod.Labels[fleetv1alpha1.LabelShard] = r.shardOf(m.Namespace, m.Name)
	if err := controllerutil.SetControllerReference(m, pod, r.Client.Scheme()); err != nil {
		return nil, err
	}
	if err := r.Client.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("creating the member's pod: %w", err)
	}
	return pod, nil
}

// ensurePaneHostSecret keeps the Member's pane host credentials: a serving
// certificate minted for this Member's UID, and the CA that admits
// fleetd's controllers. It is minted again before it expires; the pane host
// reloads it from its volume.
func (r *MemberReconciler) ensurePaneHostSecret(ctx context.Context, m *fleetv1alpha1.Member, now time.Time) error {
	key := types.NamespacedName{Namespace: m.Namespace, Name: PaneHostSecretName(m.Name)}
	secret := &corev1.Secret{}
	err := r.Client.Get(ctx, key, secret)
	switch {
	case err == nil && secret.Labels[fleetv1alpha1.LabelMemberUID] == string(m.UID) && !r.CA.NeedsRenewal(secret.Data[panehost.CertKey], now):
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("getting pane host secret %s: %w", key.Name, err)
	}
	certPEM, keyPEM, merr := r.CA.IssueServer(string(m.UID), now)
	if merr != nil {
		return merr
	}
	data := map[string][]byte{panehost.CertKey: certPEM, panehost.KeyKey: keyPEM, panehost.CAKey: r.CA.CertPEM}
	if err == nil {
		secret.Labels[fleetv1alpha1.LabelMemberUID] = string(m.UID)
		secret.Data = data
		if err := controllerutil.SetControllerReference(m, secret, r.Client.Scheme()); err != nil {
			return err
		}
		return r.Client.Update(ctx, secret)
	}
	secret = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: key.Name, Namespace: key.Namespace,
			Labels: map[string]string{
				fleetv1alpha1.LabelMember: m.Name, fleetv1alpha1.LabelMemberUID: string(m.UID),
				fleetv1alpha1.LabelShard: r.shardOf(m.Namespace, m.Name),
			},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	if err := controllerutil.SetControllerReference(m, secret, r.Client.Scheme()); err != nil {
		return err
	}
	if err := r.Client.Create(ctx, secret); err != nil {
		return fmt.Errorf("creating pane host secret %s: %w", key.Name, err)
	}
	return nil
}

// deletePods deletes every Pod of this Member incarnation.
func (r *MemberReconciler) deletePods(ctx context.Context, m *fleetv1alpha1.Member) error {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(m.Namespace), client.MatchingLabels{fleetv1alpha1.LabelMemberUID: string(m.UID)}); err != nil {
		return fmt.Errorf("listing the member's pods: %w", err)
	}
	for i := range pods.Items {
		if err := r.dropPod(ctx, &pods.Items[i], false); err != nil {
			return err
		}
	}
	return nil
}
