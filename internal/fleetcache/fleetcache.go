// Package fleetcache holds fleetd's manager cache options, the one place
// cmd/fleetd and the test suites take them from, so every manager caches
// the same objects the same way.
package fleetcache

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/shard"
)

// Options are fleetd's manager cache options: Secrets and Pods limited to
// the members' own (labelled fleet.fleetd.dev/member: token and pane host
// Secrets, member Pods), so that fleetd never caches every Secret or Pod
// of the cluster, and no
// managedFields in cached objects. Nothing fleetd does reads them, and they
// are a large part of every cached Delegation; an update that leaves them
// out keeps the server's. Anything that reads other Secrets through the
// manager's client must use the API reader for them.
func Options() cache.Options {
	req, err := labels.NewRequirement(fleetv1alpha1.LabelMember, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	// Members' Pods carry the same label: fleetd caches its own Pods, not
	// the cluster's.
	own := labels.NewSelector().Add(*req)
	return cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Label: own},
			&corev1.Pod{}:    {Label: own},
		},
		DefaultTransform: cache.TransformStripManagedFields(),
	}
}

// GatewayOptions are the cache options of a manager whose Delegations
// only the gateway reads (the controllers run on caches of their shards,
// or elsewhere): as Options, without closed Delegations
// (fleet.fleetd.dev/closed), which the gateway reads from the API server
// when asked for one. Its memory then grows with the messages in flight
// and owed, not with the retention window.
func GatewayOptions() cache.Options {
	o := Options()
	open, err := labels.NewRequirement(fleetv1alpha1.LabelClosed, selection.DoesNotExist, nil)
	if err != nil {
		panic(err)
	}
	o.ByObject[&fleetv1alpha1.Delegation{}] = cache.ByObject{Label: labels.NewSelector().Add(*open)}
	return o
}

// ShardOptions are the cache options of the controllers of the owned
// shards: as Options, with Delegations, and members' Pods and Secrets,
// limited to those labelled with an owned shard. Members and Profiles
// stay whole: they are small, the controllers look up a message's sender
// whatever its shard, and a warm pool's Profile counts every Member.
func ShardOptions(owned []int) cache.Options {
	o := Options()
	sel := shard.Selector(owned)
	for obj, by := range o.ByObject {
		reqs, _ := sel.Requirements()
		by.Label = by.Label.Add(reqs...)
		o.ByObject[obj] = by
	}
	o.ByObject[&fleetv1alpha1.Delegation{}] = cache.ByObject{Label: sel}
	return o
}
