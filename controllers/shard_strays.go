package controllers

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/shard"
)

// strayEvery is how often the owner of shard 0 looks for Delegations
// labelled with a shard of a larger count.
const strayEvery = time.Minute

// setupShardStrays relabels, on the manager of a set of shards, the
// Delegations its caches hold that belong to another shard, and, where it
// owns shard 0, those labelled with a shard beyond the count.
//
// The labellers of SetupShardLabels read the gateway's cache, which leaves
// closed Delegations out. After a change of the shard count, a closed
// Delegation keeps its old label: one whose old shard is still a shard
// sits in that shard's caches, where no controller reconciles its
// receiver, and one whose old shard is past the count sits in none.
// Retention, which runs in the receiver's shard, would never delete
// either.
func setupShardStrays(mgr ctrl.Manager, s Sharding) error {
	if s.Owned == nil {
		return nil
	}
	l := &shardLabeller{
		client: mgr.GetClient(),
		kind:   "delegation",
		object: func() client.Object { return &fleetv1alpha1.Delegation{} },
		want:   delegationShard(s.Owned.Count),
	}
	err := ctrl.NewControllerManagedBy(mgr).
		Named("shard-strays-delegation").
		For(&fleetv1alpha1.Delegation{}).
		WithEventFilter(predicate.NewPredicateFuncs(l.needed)).
		Complete(l)
	if err != nil {
		return fmt.Errorf("setting up the stray delegation labeller: %w", err)
	}
	if !s.Owned.HasShard(0) {
		return nil
	}
	return mgr.Add(&strayDelegations{
		reader: mgr.GetAPIReader(), labeller: l, count: s.Owned.Count, namespace: s.Namespace,
		every: strayEvery, log: mgr.GetLogger().WithName("shard-strays"),
	})
}

// strayDelegations labels, every every, the Delegations labelled with a
// shard past count with their receiver's shard.
type strayDelegations struct {
	reader    client.Reader
	labeller  *shardLabeller
	count     int
	namespace string
	every     time.Duration
	log       logr.Logger
}

// Start implements manager.Runnable.
func (s *strayDelegations) Start(ctx context.Context) error {
	for {
		if err := s.sweep(ctx); err != nil && ctx.Err() == nil {
			s.log.Error(err, "Labelling delegations of a shard past the count")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(s.every):
		}
	}
}

// sweep labels the strays there are now. The list is served from the API
// server's watch cache: in the usual case it finds none.
func (s *strayDelegations) sweep(ctx context.Context) error {
	var list fleetv1alpha1.DelegationList
	err := s.reader.List(ctx, &list, client.InNamespace(s.namespace),
		client.MatchingLabelsSelector{Selector: shard.Strays(s.count)},
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}})
	if err != nil {
		return fmt.Errorf("listing delegations of a shard past %d: %w", s.count, err)
	}
	for i := range list.Items {
		if err := s.labeller.label(ctx, &list.Items[i]); err != nil {
			return err
		}
	}
	return nil
}
