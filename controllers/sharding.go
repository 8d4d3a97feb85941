package controllers

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetd/fleetd/shard"
)

// Sharding is which shards a replica's controllers own. They reconcile
// only the Members, member queues and Profiles of those shards, and label
// what they create with its Member's (or a warm Pod's Profile's) shard.
type Sharding struct {
	// Owned are the shards owned; nil owns every one (one fleetd, not
	// sharded).
	Owned *shard.Owned
	// Count is the shard count objects are labelled by: Owned's, else
	// shard.DefaultCount.
	Count int
	// Fleet reads what may be in another shard: a Delegation another
	// member was sent, whose reply this shard's member carries, and the
	// warm Pods of a pool. The controllers' own client when nil.
	Fleet client.Reader
	// Namespace is the one namespace the replica watches; empty for all.
	Namespace string
}

// owns reports whether the Member (or Profile) namespace/name is in an
// owned shard.
func (s Sharding) owns(namespace, name string) bool { return s.Owned.Has(namespace, name) }

// shardOf is the shard label value of the Member (or Profile)
// namespace/name.
func (s Sharding) shardOf(namespace, name string) string {
	count := s.Count
	if s.Owned != nil {
		count = s.Owned.Count
	}
	if count == 0 {
		count = shard.DefaultCount
	}
	return shard.Value(shard.Of(namespace, name, count))
}

// fleet is Fleet, or own when there is none.
func (s Sharding) fleet(own client.Reader) client.Reader {
	if s.Fleet != nil {
		return s.Fleet
	}
	return own
}
