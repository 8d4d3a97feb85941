package shard

import (
	"hash/fnv"
	"slices"

	"k8s.io/apimachinery/pkg/util/sets"
)

// View is what a replica knows of the shards' Leases at one look.
type View struct {
	// Count is the number of shards.
	Count int
	// Me is this replica's identity.
	Me string
	// Holders maps a shard to the holder its Lease names; a shard with no
	// Lease, or one naming no holder, is free.
	Holders map[int]string
	// Alive are the replicas whose own Lease was renewed within the lease
	// duration, Me among them.
	Alive sets.Set[string]
}

// Plan is what a replica does with the shards' Leases next.
type Plan struct {
	// Release are shards this replica holds beyond its share: it stops
	// their controllers first, then frees their Leases.
	Release []int
	// Acquire are free shards, or shards of replicas that stopped
	// renewing, that it takes up to its share.
	Acquire []int
}

// Share is the most shards one of alive replicas holds: the count divided
// among them, rounded up, so that together they hold every shard.
func Share(count, alive int) int {
	if alive < 1 {
		alive = 1
	}
	return (count + alive - 1) / alive
}

// Decide is the next step toward an even spread: a replica over its share
// releases the highest of its shards; one under it takes free ones,
// looking from a place of its own so that replicas starting together do
// not all reach for the same shards (a Lease's resourceVersion settles who
// gets one anyway).
func Decide(v View) Plan {
	alive := v.Alive.Len()
	if !v.Alive.Has(v.Me) {
		alive++
	}
	share := Share(v.Count, alive)
	var mine, free []int
	for i := 0; i < v.Count; i++ {
		switch h := v.Holders[i]; {
		case h == v.Me:
			mine = append(mine, i)
		case h == "" || !v.Alive.Has(h):
			free = append(free, i)
		}
	}
	if len(mine) > share {
		return Plan{Release: mine[share:]}
	}
	want := share - len(mine)
	if want == 0 || len(free) == 0 {
		return Plan{}
	}
	start := slices.IndexFunc(free, func(i int) bool { return i >= offset(v.Me, v.Count) })
	if start < 0 {
		start = 0
	}
	free = append(free[start:], free[:start]...)
	return Plan{Acquire: free[:min(want, len(free))]}
}

// offset is where replica me starts looking for free shards.
func offset(me string, count int) int {
	h := fnv.New32a()
	h.Write([]byte(me))
	return int(h.Sum32() % uint32(count))
}
