package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/panehost"
)

// secretRecheck is how often a Profile whose Secrets are missing is looked
// at again: fleetd does not cache Secrets it does not own.
const secretRecheck = time.Minute

// ProfileReconciler reports whether Members can be started from a Profile
// (every Secret its env refers to exists) and how many run from it.
type ProfileReconciler struct {
	Sharding
	Client client.Client
	// Reader reads Secrets uncached.
	Reader client.Reader
	// Pods and CA are how member Pods are made, and their pane hosts'
	// credentials minted: a Profile's warm Pods are member Pods. With no
	// CA, no warm Pod is started.
	Pods PodSettings
	CA   *panehost.CA
	// Hosts reaches warm Pods' pane hosts, to start their agents ahead of
	// a claim; nil starts none.
	Hosts *panehost.Hosts

	// policies are the namespaces whose member NetworkPolicy this run
	// has seen to.
	policies sync.Map
}

// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=profiles/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=profiles/finalizers,verbs=update

// Reconcile computes one Profile's status.
func (r *ProfileReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if !r.owns(req.Namespace, req.Name) {
		return ctrl.Result{}, nil
	}
	p := &fleetv1alpha1.Profile{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var members fleetv1alpha1.MemberList
	if err := r.Client.List(ctx, &members, client.InNamespace(p.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	original := p.DeepCopy()
	p.Status.Members = 0
	var claimed int32
	for _, m := range members.Items {
		if m.Spec.Profile == p.Name {
			p.Status.Members++
		}
		if m.Status.PodPool == p.Name && m.Status.PodName != "" {
			claimed++
		}
	}
	pool, err := r.reconcilePool(ctx, p, claimed)
	if err != nil {
		return ctrl.Result{}, err
	}
	p.Status.WarmPool = pool.status
	setWarmPoolCondition(p, pool.problem)
	missing, err := r.missingSecret(ctx, p)
	if err != nil {
		return ctrl.Result{}, err
	}
	ready := metav1.Condition{Type: fleetv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: fleetv1alpha1.ReasonReady,
		Message: "members can start from this profile", ObservedGeneration: p.Generation}
	if missing != nil {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, missing.reason, missing.Error()
	}
	meta.SetStatusCondition(&p.Status.Conditions, ready)
	p.Status.ObservedGeneration = p.Generation
	if !equality.Semantic.DeepEqual(original.Status, p.Status) {
		if err := r.Client.Status().Patch(ctx, p, client.MergeFrom(original)); err != nil {
			return ctrl.Result{}, fmt.Errorf("writing profile status: %w", err)
		}
	}
	if missing != nil {
		return ctrl.Result{RequeueAfter: secretRecheck}, nil
	}
	if pool.again {
		return ctrl.Result{RequeueAfter: warmAgentRetry}, nil
	}
	return ctrl.Result{}, nil
}

// missingSecret says which env Secret or key of p, the first one, does not
// exist or does not allow it: what a Member started from p would be
// refused for.
func (r *ProfileReconciler) missingSecret(ctx context.Context, p *fleetv1alpha1.Profile) (*missingError, error) {
	_, err := resolveEnv(ctx, r.Reader, p.Namespace, p.Spec.Env)
	var missing *missingError
	if errors.As(err, &missing) {
		return missing, nil
	}
	return nil, err
}

// setWarmPoolCondition says how p's warm pool stands, from its status
// and problem, why it cannot be kept ("" when it can); a Profile with no
// pool has no such condition.
func setWarmPoolCondition(p *fleetv1alpha1.Profile, problem string) {
	if p.Spec.WarmPool == nil || p.Spec.WarmPool.Size == 0 {
		meta.RemoveStatusCondition(&p.Status.Conditions, fleetv1alpha1.ConditionWarmPool)
		return
	}
	c := metav1.Condition{Type: fleetv1alpha1.ConditionWarmPool, ObservedGeneration: p.Generation}
	free, size := int32(0), p.Spec.WarmPool.Size
	if p.Status.WarmPool != nil {
		free = p.Status.WarmPool.Free
	}
	switch {
	case problem != "":
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, fleetv1alpha1.ReasonPoolUnavailable, "no warm pod can be started: "+problem
	case free >= size:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, fleetv1alpha1.ReasonPoolFull, fmt.Sprintf("%d warm pods are free", free)
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, fleetv1alpha1.ReasonPoolFilling, fmt.Sprintf("%d of %d warm pods are free; the rest are starting", free, size)
	}
	meta.SetStatusCondition(&p.Status.Conditions, c)
}

// memberCountsChanged says whether a Member's update changes what its
// Profile counts: which Profile it runs from, and the Pod it claimed. The
// Member's other status writes, many a second in a busy fleet, do not.
func memberCountsChanged(old, updated client.Object) bool {
	o, ok1 := old.(*fleetv1alpha1.Member)
	n, ok2 := updated.(*fleetv1alpha1.Member)
	if !ok1 || !ok2 {
		return true
	}
	return o.Spec.Profile != n.Spec.Profile || o.Status.PodPool != n.Status.PodPool || o.Status.PodName != n.Status.PodName ||
		(o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil)
}

// SetupWithManager registers the reconciler; a Member coming or going
// updates its Profile's count, and a warm Pod's changes its pool.
func (r *ProfileReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&fleetv1alpha1.Profile{}).
		Owns(&corev1.Pod{}).
		Watches(&fleetv1alpha1.Member{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			m, ok := o.(*fleetv1alpha1.Member)
			if !ok || m.Spec.Profile == "" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.Profile}}}
		}), builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			return memberCountsChanged(e.ObjectOld, e.ObjectNew)
		}})).
		Named("profile").
		Complete(r)
}
