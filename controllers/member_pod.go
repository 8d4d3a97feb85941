package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
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

// claimRetry is how soon a Member whose workspace claim is another's looks
// again.
const claimRetry = 30 * time.Second

// PaneHostSecretName is the Secret with a pod member's pane host
// credentials.
func PaneHostSecretName(member string) string { return member + "-fleetd-pane-host" }

// WorkspaceClaimName is a pod member's workspace claim.
func WorkspaceClaimName(member string) string { return member + "-workspace" }

// podHookCommand runs `fleetd hook` in a member Pod.
var podHookCommand = []string{podToolsDir + "/fleetd", "hook"}

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
	if err := r.ensurePaneHostSecret(ctx, m, s.now.Time); err != nil {
		return false, ctrl.Result{}, err
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

// recordPod makes pod the Member's.
func recordPod(m *fleetv1alpha1.Member, pod *corev1.Pod) {
	m.Status.PodName, m.Status.PodUID = pod.Name, string(pod.UID)
	m.Status.PodIP, m.Status.NodeName = pod.Status.PodIP, pod.Spec.NodeName
}

// clearPod forgets the Member's Pod.
func clearPod(m *fleetv1alpha1.Member) {
	m.Status.PodName, m.Status.PodUID, m.Status.PodIP, m.Status.NodeName = "", "", "", ""
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
	if r.CA == nil {
		return fmt.Errorf("member %s runs in a pod, and this fleetd has no pane host CA (--pane-host-ca)", m.Name)
	}
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
			Labels: map[string]string{fleetv1alpha1.LabelMember: m.Name, fleetv1alpha1.LabelMemberUID: string(m.UID)},
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

// desiredPod is a member's Pod: an init container brings fleetd's binaries
// from its own image, the agent container runs the pane server, which
// runs the agent in its pane, and the pane host container, as another
// user, relays fleetd's calls to it. The Pod has no token for the
// Kubernetes API; its projected token, for audience fleetd, is how the
// agent is known to the gateway, through the pane host's forwarder, and
// only the pane host's container mounts it.
func desiredPod(m *fleetv1alpha1.Member, spec *fleetv1alpha1.MemberPod, set PodSettings, claim string) *corev1.Pod {
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
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: m.Name + "-",
			Namespace:    m.Namespace,
			Labels: map[string]string{
				fleetv1alpha1.LabelMember:      m.Name,
				fleetv1alpha1.LabelMemberUID:   string(m.UID),
				"app.kubernetes.io/name":       "fleetd-member",
				"app.kubernetes.io/managed-by": "fleetd",
			},
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
					SecretName: PaneHostSecretName(m.Name), DefaultMode: ptr.To[int32](0o400),
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

// NetworkPolicyName is the policy fleetd keeps in each namespace with
// member Pods.
const NetworkPolicyName = "fleetd-member-pane-hosts"

// MemberNetworkPolicy is the policy that walls member Pods in namespace in both
// directions. In: only fleetd's own pods reach a member Pod, on the pane
// host port; nothing else reaches it at all, another member least of all.
// Out: a member Pod reaches cluster DNS and the gateway on fleetd's pods,
// and what its Member's egress policy (MemberEgressPolicy) adds; nothing
// else of the cluster or its network: not another member's pane host, nor
// a port another member serves, nor a node's or the cloud's metadata
// address.
func MemberNetworkPolicy(namespace string, set PodSettings) *networkingv1.NetworkPolicy {
	port := intstr.FromInt32(int32(cmp.Or(set.Port, panehost.DefaultPort)))
	gateway := intstr.FromString(fleetdGatewayPort)
	dns := intstr.FromInt32(53)
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	fleetd := networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": set.FleetdNamespace}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: set.FleetdPodLabels},
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: NetworkPolicyName, Namespace: namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "fleetd"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: memberPodLabels},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{fleetd},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			}},
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{
					To: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": metav1.NamespaceSystem}},
						PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
					}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
				},
				{
					To:    []networkingv1.NetworkPolicyPeer{fleetd},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &gateway}},
				},
			},
		},
	}
}

// EgressPolicyName is the NetworkPolicy that says where a pod member's Pod
// may connect.
func EgressPolicyName(member string) string { return member + "-fleetd-egress" }

// MemberEgressPolicy is where m's Pod may connect beyond what
// MemberNetworkPolicy lets every member Pod reach: the internet unless
// egress says otherwise, and egress's rules. Policies add up, so this one
// only opens. It selects m's Pods by m's uid, and goes with m.
func MemberEgressPolicy(m *fleetv1alpha1.Member, egress *fleetv1alpha1.MemberEgress) *networkingv1.NetworkPolicy {
	rules := []networkingv1.NetworkPolicyEgressRule{}
	if egress == nil || egress.Internet == nil || *egress.Internet {
		rules = append(rules, networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{
			{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: privateIPv4}},
			{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: privateIPv6}},
		}})
	}
	if egress != nil {
		for _, r := range egress.Rules {
			r := r.DeepCopy()
			for i := range r.Ports {
				// As the API server defaults it: the spec fleetd keeps
				// compares equal to the one it reads back.
				if r.Ports[i].Protocol == nil {
					r.Ports[i].Protocol = ptr.To(corev1.ProtocolTCP)
				}
			}
			rules = append(rules, *r)
		}
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name: EgressPolicyName(m.Name), Namespace: m.Namespace,
			Labels: map[string]string{fleetv1alpha1.LabelMember: m.Name, fleetv1alpha1.LabelMemberUID: string(m.UID), "app.kubernetes.io/managed-by": "fleetd"},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{fleetv1alpha1.LabelMemberUID: string(m.UID)}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      rules,
		},
	}
}

// fleetdGatewayPort names the gateway's container port on fleetd's pods
// (config/manager): the one port of theirs a member Pod reaches.
const fleetdGatewayPort = "gateway"

// privateIPv4 and privateIPv6 are the ranges a cluster's pods, Services
// and nodes live in (RFC 1918, shared address space, link-local with the
// cloud's metadata service, loopback, unique local), which a member Pod's
// egress to the internet leaves out.
var (
	privateIPv4 = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "127.0.0.0/8"}
	privateIPv6 = []string{"fc00::/7", "fe80::/10", "::1/128"}
)

// memberPodLabels select every member Pod.
var memberPodLabels = map[string]string{"app.kubernetes.io/name": "fleetd-member"}

// ensureNetworkPolicy keeps the policy in namespace, once per run of the
// controller: it is looked at again after a restart, or when it is deleted
// (it is not watched; a pass after a restart puts it back).
func (r *MemberReconciler) ensureNetworkPolicy(ctx context.Context, namespace string) error {
	if r.Pods.FleetdNamespace == "" {
		return nil
	}
	if _, done := r.policies.Load(namespace); done {
		return nil
	}
	want := MemberNetworkPolicy(namespace, r.Pods)
	var have networkingv1.NetworkPolicy
	err := r.Reader.Get(ctx, client.ObjectKeyFromObject(want), &have)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.Client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating network policy %s/%s: %w", namespace, want.Name, err)
		}
	case err != nil:
		return fmt.Errorf("getting network policy %s/%s: %w", namespace, want.Name, err)
	case !equality.Semantic.DeepEqual(have.Spec, want.Spec):
		have.Spec = want.Spec
		if err := r.Client.Update(ctx, &have); err != nil {
			return fmt.Errorf("updating network policy %s/%s: %w", namespace, want.Name, err)
		}
	}
	r.policies.Store(namespace, true)
	return nil
}

// ensureEgressPolicy keeps m's egress policy as its pod's egress says, and
// owned by m. What it last made for m is remembered by the policy's spec, so an
// unchanged Profile costs no read: it is looked at again after a restart,
// or when the Profile's egress changes. A Pod that runs takes a change at
// once; its network is the policy's, not the Pod's.
func (r *MemberReconciler) ensureEgressPolicy(ctx context.Context, m *fleetv1alpha1.Member, pod *fleetv1alpha1.MemberPod) error {
	var egress *fleetv1alpha1.MemberEgress
	if pod != nil {
		egress = pod.Egress
	}
	want := MemberEgressPolicy(m, egress)
	key := string(m.UID)
	if done, ok := r.egressPolicies.Load(key); ok && equality.Semantic.DeepEqual(done, want.Spec) {
		return nil
	}
	if err := controllerutil.SetControllerReference(m, want, r.Client.Scheme()); err != nil {
		return err
	}
	var have networkingv1.NetworkPolicy
	err := r.Reader.Get(ctx, client.ObjectKeyFromObject(want), &have)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.Client.Create(ctx, want); err != nil {
			return fmt.Errorf("creating egress policy %s: %w", want.Name, err)
		}
	case err != nil:
		return fmt.Errorf("getting egress policy %s: %w", want.Name, err)
	case !metav1.IsControlledBy(&have, m):
		return fmt.Errorf("network policy %s is not this Member's: delete or rename it", want.Name)
	case !equality.Semantic.DeepEqual(have.Spec, want.Spec) || !maps.Equal(have.Labels, want.Labels):
		have.Spec, have.Labels = want.Spec, want.Labels
		if err := r.Client.Update(ctx, &have); err != nil {
			return fmt.Errorf("updating egress policy %s: %w", want.Name, err)
		}
	}
	r.egressPolicies.Store(key, want.Spec)
	return nil
}
