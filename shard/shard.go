// Package shard splits the fleet among fleetd's replicas: a Member's shard
// is a hash of its namespace and name among a fixed count, each replica
// holds a Lease (coordination.k8s.io) for each shard it owns, and only a
// shard's owner caches and writes its Members' and Delegations' status.
//
// shard.go and plan.go are pure; keeper.go holds the Leases.
package shard

import (
	"hash/fnv"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// DefaultCount is the shard count unless --shards says otherwise: enough
// that 20 replicas each hold a few, few enough that their Leases cost
// nothing to list.
const DefaultCount = 64

// Of is the shard of the Member namespace/name among count shards.
func Of(namespace, name string, count int) int {
	if count <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(namespace))
	h.Write([]byte{'/'})
	h.Write([]byte(name))
	return int(h.Sum32() % uint32(count))
}

// Value is shard i as its label value.
func Value(i int) string { return strconv.Itoa(i) }

// Parse is the shard a label value names, and whether it names one of
// count.
func Parse(v string, count int) (int, bool) {
	i, err := strconv.Atoi(v)
	if err != nil || i < 0 || i >= count || Value(i) != v {
		return 0, false
	}
	return i, true
}

// Labelled reports whether labels carry the shard of namespace/name.
func Labelled(l map[string]string, namespace, name string, count int) bool {
	return l[fleetv1alpha1.LabelShard] == Value(Of(namespace, name, count))
}

// Selector selects the objects of the owned shards. With none owned it
// selects nothing.
func Selector(owned []int) labels.Selector {
	values := make([]string, 0, len(owned))
	for _, i := range owned {
		values = append(values, Value(i))
	}
	if len(values) == 0 {
		// "none" is a valid label value that no shard carries.
		values = []string{"none"}
	}
	slices.Sort(values)
	req, err := labels.NewRequirement(fleetv1alpha1.LabelShard, selection.In, values)
	if err != nil {
		panic(err)
	}
	return labels.NewSelector().Add(*req)
}

// Strays selects the objects labelled with a shard that is not one of
// count: what a fleetd of a larger count labelled. No replica's caches
// hold them.
func Strays(count int) labels.Selector {
	values := make([]string, 0, count)
	for i := range count {
		values = append(values, Value(i))
	}
	labelled, err := labels.NewRequirement(fleetv1alpha1.LabelShard, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	other, err := labels.NewRequirement(fleetv1alpha1.LabelShard, selection.NotIn, values)
	if err != nil {
		panic(err)
	}
	return labels.NewSelector().Add(*labelled, *other)
}

// Owned is a fixed set of owned shards, as a replica's controllers run
// with it until the set changes.
type Owned struct {
	Count  int
	shards []bool
}

// NewOwned is the set of shards among count.
func NewOwned(count int, shards []int) *Owned {
	o := &Owned{Count: count, shards: make([]bool, count)}
	for _, i := range shards {
		o.shards[i] = true
	}
	return o
}

// HasShard reports whether shard i is owned.
func (o *Owned) HasShard(i int) bool {
	return o == nil || i >= 0 && i < len(o.shards) && o.shards[i]
}

// Has reports whether the Member namespace/name is in an owned shard. A
// nil set owns every shard (one fleetd, not sharded).
func (o *Owned) Has(namespace, name string) bool {
	return o == nil || o.shards[Of(namespace, name, o.Count)]
}
