package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/shard"
)

// shardLabeller writes the shard label on objects of one kind that lack
// it, or carry another count's: Members and Delegations made with kubectl,
// Members the gateway spawned by generated name, and the objects of a
// fleetd from before shards. A replica's controllers see only what is
// labelled with their shards, so every replica runs the labellers, on the
// gateway's cache, which holds every Member and every Delegation not
// closed (a controller closes only what its shards hold, so a closed one
// is labelled); two that patch the same label to the same value change
// nothing.
type shardLabeller struct {
	client client.Client
	kind   string
	object func() client.Object
	// want is the shard label obj should carry, "" for none.
	want func(obj client.Object) string
}

// SetupShardLabels runs the shard labellers of Members, Delegations and
// members' Pods and Secrets on mgr, for count shards. They run on every
// replica, elected or not.
func SetupShardLabels(mgr ctrl.Manager, count int) error {
	of := func(namespace, name string) string { return shard.Value(shard.Of(namespace, name, count)) }
	// A member's Pod or Secret is in its Member's shard; a warm Pod, and
	// its Secret, in its pool's Profile's until claimed.
	owned := func(o client.Object) string {
		l := o.GetLabels()
		switch {
		case l[fleetv1alpha1.LabelMember] != "":
			return of(o.GetNamespace(), l[fleetv1alpha1.LabelMember])
		case l[fleetv1alpha1.LabelPool] != "":
			return of(o.GetNamespace(), l[fleetv1alpha1.LabelPool])
		}
		return ""
	}
	for _, l := range []*shardLabeller{
		{kind: "member", object: func() client.Object { return &fleetv1alpha1.Member{} },
			want: func(o client.Object) string { return of(o.GetNamespace(), o.GetName()) }},
		{kind: "delegation", object: func() client.Object { return &fleetv1alpha1.Delegation{} },
			want: delegationShard(count)},
		{kind: "pod", object: func() client.Object { return &corev1.Pod{} }, want: owned},
		{kind: "secret", object: func() client.Object { return &corev1.Secret{} }, want: owned},
	} {
		l.client = mgr.GetClient()
		err := ctrl.NewControllerManagedBy(mgr).
			Named("shard-labels-" + l.kind).
			For(l.object()).
			WithEventFilter(predicate.NewPredicateFuncs(l.needed)).
			WithOptions(controller.Options{NeedLeaderElection: ptr.To(false)}).
			Complete(l)
		if err != nil {
			return fmt.Errorf("setting up the %s shard labeller: %w", l.kind, err)
		}
	}
	return nil
}

// delegationShard is the shard label of a Delegation among count shards:
// its receiver's.
func delegationShard(count int) func(client.Object) string {
	return func(o client.Object) string {
		return shard.Value(shard.Of(o.GetNamespace(), o.(*fleetv1alpha1.Delegation).Spec.To, count))
	}
}

// needed reports whether obj lacks the shard label it should carry.
func (l *shardLabeller) needed(obj client.Object) bool {
	want := l.want(obj)
	return want != "" && obj.GetLabels()[fleetv1alpha1.LabelShard] != want
}

// +kubebuilder:rbac:groups=fleet.fleetd.dev,resources=delegations,verbs=patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=patch

// Reconcile labels one object with its shard.
func (l *shardLabeller) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := l.object()
	if err := l.client.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, l.label(ctx, obj)
}

// label patches obj's shard label to the one it should carry, if it does
// not already. An object gone meanwhile needs none.
func (l *shardLabeller) label(ctx context.Context, obj client.Object) error {
	if !l.needed(obj) {
		return nil
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[fleetv1alpha1.LabelShard] = l.want(obj)
	obj.SetLabels(labels)
	if err := l.client.Patch(ctx, obj, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	return nil
}
