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
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/panehost"
)

// A Profile's warm pool, kept: the Profile reconciler starts warm Pods up
// to the pool's size and drops those planPool says go. A warm Pod is a
// member Pod (desiredPod) of the Profile's pod, with no Member yet: its
// pane host comes up with credentials of its own (WarmPodSecretName,
// minted for panehost.WarmHostID), fleetd's tools are copied in, and once
// it is ready the Profile's agent is started in it (startWarmAgents). Its
// token lists the gateway's tools and calls none until a Member claims it
// (member_warm.go).

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

// warmAgentRetry is how soon a pool whose warm Pods' agents are starting
// (or could not be started) looks again.
const warmAgentRetry = time.Second

// poolPass is what a pass over a warm pool found.
type poolPass struct {
	// status is the pool's status; nil when the Profile has no pool and
	// no warm Pod is left.
	status *fleetv1alpha1.WarmPoolStatus
	// problem says why the pool cannot be kept, "" when it can.
	problem string
	// again says to look again soon: an agent did not start.
	again bool
}

// reconcilePool keeps p's warm pool, of which claimed Members run in Pods
// they claimed.
func (r *ProfileReconciler) reconcilePool(ctx context.Context, p *fleetv1alpha1.Profile, claimed int32) (poolPass, error) {
	var size int32
	if p.Spec.WarmPool != nil && p.DeletionTimestamp == nil {
		size = p.Spec.WarmPool.Size
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(p.Namespace),
		client.MatchingLabels{fleetv1alpha1.LabelPool: p.Name, fleetv1alpha1.LabelMember: ""}); err != nil {
		return poolPass{}, fmt.Errorf("listing the warm pods: %w", err)
	}
	if size == 0 && len(pods.Items) == 0 {
		if claimed == 0 {
			return poolPass{}, nil
		}
		return poolPass{status: &fleetv1alpha1.WarmPoolStatus{Claimed: claimed}}, nil
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
	plan := planPool(size, template, pods.Items, r.Hosts != nil, time.Now())
	for _, d := range plan.drop {
		log.FromContext(ctx).V(1).Info("Dropping a warm pod", "pod", d.pod.Name, "why", d.why)
		opts := []client.DeleteOption{client.Preconditions{UID: &d.pod.UID}}
		if err := r.Client.Delete(ctx, d.pod, opts...); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return poolPass{}, fmt.Errorf("deleting warm pod %s: %w", d.pod.Name, err)
		}
	}
	if plan.start > 0 {
		if err := ensureNetworkPolicy(ctx, r.Client, r.Reader, r.Pods, &r.policies, p.Namespace); err != nil {
			return poolPass{}, err
		}
	}
	for range plan.start {
		if err := r.startWarmPod(ctx, p, w.Pod, template); err != nil {
			return poolPass{}, err
		}
		plan.starting++
	}
	pass := poolPass{status: &fleetv1alpha1.WarmPoolStatus{Free: plan.free, Starting: plan.starting, Claimed: claimed}, problem: problem}
	if size > 0 && r.Hosts != nil {
		pass.again = !r.startWarmAgents(ctx, p, w, plan.keep)
	}
	return pass, nil
}

// startWarmAgents starts, in each ready warm Pod of pods with none yet,
// the agent a Member of p with no args and no pod of its own runs (w): in
// a workspace labelled with its launch's key (warmLaunchKey), with the
// Profile's env and files, and under a name of the Pod's. A Member whose
// own launch has that key takes it over at its claim (member_warm.go);
// any other closes it. A failure is logged, ok is false, and it is tried
// again on the next pass: the Pod still serves a claim, with the agent
// started then.
func (r *ProfileReconciler) startWarmAgents(ctx context.Context, p *fleetv1alpha1.Profile, w Worker, pods []*corev1.Pod) (ok bool) {
	ok = true
	// The launch is resolved once, when a Pod needs it: it reads the
	// Profile's Secrets.
	var l *Launch
	var key string
	launch := func() bool {
		if l != nil {
			return true
		}
		env, err := resolveEnv(ctx, r.Reader, p.Namespace, w.Env)
		if err != nil {
			// The Profile's Ready condition says what is missing.
			return false
		}
		planned, err := planLaunch(w, env, podMCPURL, "", "", agentHome{Dir: podAgentDir, HookCommand: podHookCommand})
		if err != nil {
			return false
		}
		l, key = &planned, warmLaunchKey(planned)
		return true
	}
	for _, pod := range pods {
		if _, started := pod.Annotations[annotationWarmLaunch]; started && !launch() {
			return ok
		}
	}
	// An agent started from what the Profile said before (its env, args
	// or agent settings changed since) is no member's: its Pod is replaced.
	for _, pod := range staleWarmAgents(pods, key) {
		log.FromContext(ctx).V(1).Info("Dropping a warm pod whose agent the profile no longer runs", "pod", pod.Name)
		if err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			ok = false
		}
	}
	for _, pod := range pods {
		if verdict, _ := judgePod(pod, nil); verdict != podRunning {
			continue
		}
		if _, ready := pod.Annotations[annotationWarmReady]; ready {
			continue
		}
		if started, isStarted := pod.Annotations[annotationWarmLaunch]; isStarted {
			if started == key {
				if ready, err := r.warmAgentReady(ctx, pod, key); err != nil || !ready {
					ok = false
				}
			}
			continue
		}
		if !launch() {
			return ok
		}
		if err := r.startWarmAgent(ctx, pod, *l); err != nil {
			log.FromContext(ctx).Info("Starting the agent of a warm pod", "pod", pod.Name, "error", err.Error())
			ok = false
		}
	}
	return ok
}

// startWarmAgent starts l in the warm Pod pod, and records its key on the
// Pod. The record is written first, conditional on the Pod's
// resourceVersion: a Member that claimed the Pod meanwhile wins, and
// nothing is started for it.
func (r *ProfileReconciler) startWarmAgent(ctx context.Context, pod *corev1.Pod, l Launch) error {
	key := warmLaunchKey(l)
	marked := pod.DeepCopy()
	if marked.Annotations == nil {
		marked.Annotations = map[string]string{}
	}
	marked.Annotations[annotationWarmLaunch] = key
	marked.Annotations[annotationWarmStarted] = time.Now().UTC().Format(time.RFC3339)
	if err := r.Client.Patch(ctx, marked, client.MergeFromWithOptions(pod, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("marking warm pod %s: %w", pod.Name, err)
	}
	c, err := r.Hosts.ForWarmPod(pod.Namespace, pod.Name, pod.Status.PodIP)
	if err != nil {
		return err
	}
	defer c.CloseIdleConnections()
	hctx, cancel := context.WithTimeout(ctx, herdrTimeout)
	defer cancel()
	ws, err := startLaunch(hctx, c, l, key, warmAgentName(pod.Name))
	if err != nil {
		// Unmarked, the next pass tries again.
		unmarked := marked.DeepCopy()
		delete(unmarked.Annotations, annotationWarmLaunch)
		_ = r.Client.Patch(ctx, unmarked, client.MergeFrom(marked))
		return err
	}
	// A Member that claimed the Pod while the agent started may have
	// started its own: then this one is no one's.
	var now corev1.Pod
	if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(pod), &now); err == nil && now.Labels[fleetv1alpha1.LabelMember] != "" {
		snap, err := c.SessionSnapshot(hctx)
		if err != nil {
			return err
		}
		for _, w := range snap.Workspaces {
			if w.WorkspaceID == ws && w.Label == warmPaneLabelPrefix+key {
				return c.WorkspaceClose(hctx, ws)
			}
		}
	}
	return nil
}

// startLaunch starts l in a new workspace of c labelled with key, as the
// agent name, and returns the workspace's id.
func startLaunch(ctx context.Context, c *herdr.Client, l Launch, key, name string) (string, error) {
	if l.AgentKind != "" {
		if err := (panehost.Remote{Client: c}).Install(ctx, podAgentDir, l.WorkingDir, l.Files); err != nil {
			return "", fmt.Errorf("writing the agent's configuration: %w", err)
		}
	}
	ws, err := c.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Cwd: l.WorkingDir, Env: l.Env, Label: warmPaneLabelPrefix + key})
	if err != nil {
		return "", fmt.Errorf("creating a workspace: %w", err)
	}
	if l.AgentKind != "" {
		_, err = c.AgentStart(ctx, herdr.AgentStartParams{Name: name, Kind: l.AgentKind, PaneID: ws.RootPane.PaneID, Args: l.AgentArgs})
	} else {
		err = c.PaneSendInput(ctx, herdr.PaneSendInputParams{PaneID: ws.RootPane.PaneID, Text: l.CommandLine, Keys: []string{"enter"}})
	}
	if err != nil {
		_ = c.WorkspaceClose(ctx, ws.Workspace.WorkspaceID)
		return "", fmt.Errorf("starting the agent in pane %s: %w", ws.RootPane.PaneID, err)
	}
	return ws.Workspace.WorkspaceID, nil
}

// warmAgentReady looks at the agent started in warm Pod pod from the
// launch of key, and once it is ready for work, and has run for
// warmAgentSettle, says so on the Pod.
func (r *ProfileReconciler) warmAgentReady(ctx context.Context, pod *corev1.Pod, key string) (bool, error) {
	if !warmAgentSettled(pod, time.Now()) {
		return false, nil
	}
	c, err := r.Hosts.ForWarmPod(pod.Namespace, pod.Name, pod.Status.PodIP)
	if err != nil {
		return false, err
	}
	defer c.CloseIdleConnections()
	hctx, cancel := context.WithTimeout(ctx, herdrTimeout)
	defer cancel()
	snap, err := c.SessionSnapshot(hctx)
	if err != nil {
		return false, err
	}
	ready := false
	for _, ws := range snap.Workspaces {
		if ws.Label != warmPaneLabelPrefix+key {
			continue
		}
		ready = true
		// A plain command is ready once typed; a known agent once herdr
		// says it can take work.
		for _, a := range snap.Agents {
			if a.WorkspaceID == ws.WorkspaceID {
				ready = agentIsReady(&a)
			}
		}
	}
	if !ready {
		return false, nil
	}
	marked := pod.DeepCopy()
	marked.Annotations[annotationWarmReady] = "true"
	if err := r.Client.Patch(ctx, marked, client.MergeFromWithOptions(pod, client.MergeFromWithOptimisticLock{})); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return false, fmt.Errorf("marking warm pod %s ready: %w", pod.Name, err)
	}
	return true, nil
}

// warmAgentName is the herdr name of the agent started in warm Pod pod,
// until a Member takes it over and names it its own.
func warmAgentName(pod string) string {
	return "warm-" + pod[max(len(pod)-5, 0):]
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
			fleetv1alpha1.LabelShard:  r.shardOf(p.Namespace, p.Name),
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
			Labels: map[string]string{fleetv1alpha1.LabelMember: "", fleetv1alpha1.LabelPool: p.Name, fleetv1alpha1.LabelShard: r.shardOf(p.Namespace, p.Name)},
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
