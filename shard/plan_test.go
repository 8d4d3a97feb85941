package shard

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

func holders(count int, by map[string][]int) map[int]string {
	h := map[int]string{}
	for who, shards := range by {
		for _, i := range shards {
			h[i] = who
		}
	}
	return h
}

func seq(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name        string
		view        View
		wantRelease []int
		wantAcquire int
		acquireFrom []int
	}{{
		name:        "alone it takes every shard",
		view:        View{Count: 8, Me: "a", Holders: map[int]string{}, Alive: sets.New("a")},
		wantAcquire: 8, acquireFrom: seq(0, 8),
	}, {
		name:        "a second replica makes the first give up half, highest first",
		view:        View{Count: 8, Me: "a", Holders: holders(8, map[string][]int{"a": seq(0, 8)}), Alive: sets.New("a", "b")},
		wantRelease: []int{4, 5, 6, 7},
	}, {
		name:        "the second takes only free shards, not live ones",
		view:        View{Count: 8, Me: "b", Holders: holders(8, map[string][]int{"a": seq(0, 6)}), Alive: sets.New("a", "b")},
		wantAcquire: 2, acquireFrom: []int{6, 7},
	}, {
		name:        "a dead replica's shards are free",
		view:        View{Count: 8, Me: "b", Holders: holders(8, map[string][]int{"a": seq(0, 4), "b": seq(4, 8)}), Alive: sets.New("b")},
		wantAcquire: 4, acquireFrom: seq(0, 4),
	}, {
		name:        "of three, each holds at most its rounded-up share",
		view:        View{Count: 8, Me: "c", Holders: holders(8, map[string][]int{"a": seq(0, 3), "b": seq(3, 6)}), Alive: sets.New("a", "b", "c")},
		wantAcquire: 2, acquireFrom: []int{6, 7},
	}, {
		name: "at its share it does nothing",
		view: View{Count: 8, Me: "a", Holders: holders(8, map[string][]int{"a": seq(0, 4), "b": seq(4, 8)}), Alive: sets.New("a", "b")},
	}, {
		name:        "its own Lease not yet seen, it still counts itself",
		view:        View{Count: 4, Me: "a", Holders: map[int]string{}, Alive: sets.New[string]()},
		wantAcquire: 4, acquireFrom: seq(0, 4),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := Decide(tc.view)
			if !slices.Equal(p.Release, tc.wantRelease) {
				t.Errorf("Release = %v, want %v", p.Release, tc.wantRelease)
			}
			if len(p.Acquire) != tc.wantAcquire {
				t.Fatalf("Acquire = %v, want %d of %v", p.Acquire, tc.wantAcquire, tc.acquireFrom)
			}
			for _, i := range p.Acquire {
				if !slices.Contains(tc.acquireFrom, i) {
					t.Errorf("Acquire = %v: %d is not free", p.Acquire, i)
				}
			}
		})
	}
}

// TestDecideConverges runs replicas' decisions in turn until nothing
// changes: every shard held, none twice, and no replica over its share.
func TestDecideConverges(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 64, 65} {
		count := 64
		alive := sets.New[string]()
		for i := range n {
			alive.Insert(string(rune('a'+i%26)) + Value(i))
		}
		h := map[int]string{}
		for round := 0; ; round++ {
			if round > 10 {
				t.Fatalf("%d replicas: no steady state after 10 rounds: %v", n, h)
			}
			changed := false
			for _, me := range sets.List(alive) {
				p := Decide(View{Count: count, Me: me, Holders: h, Alive: alive})
				for _, i := range p.Release {
					h[i] = ""
					changed = true
				}
				for _, i := range p.Acquire {
					h[i] = me
					changed = true
				}
			}
			if !changed {
				break
			}
		}
		per := map[string]int{}
		for i := range count {
			if h[i] == "" {
				t.Fatalf("%d replicas: shard %d is held by none", n, i)
			}
			per[h[i]]++
		}
		for who, c := range per {
			if c > Share(count, n) {
				t.Errorf("%d replicas: %s holds %d, over its share %d", n, who, c, Share(count, n))
			}
		}
	}
}

func TestOf(t *testing.T) {
	seen := map[int]int{}
	for i := range 6400 {
		s := Of("team", "member-"+Value(i), 64)
		if s != Of("team", "member-"+Value(i), 64) {
			t.Fatal("Of is not stable")
		}
		seen[s]++
	}
	for s := range 64 {
		// 100 expected a shard; a fair hash keeps each within half of it.
		if seen[s] < 50 || seen[s] > 150 {
			t.Errorf("shard %d got %d of 6400 members", s, seen[s])
		}
	}
	if Of("a", "bc", 64) == Of("ab", "c", 64) && Of("x", "yz", 64) == Of("xy", "z", 64) {
		t.Error("namespace and name are not kept apart")
	}
	if _, ok := Parse("07", 64); ok {
		t.Error(`Parse("07") = ok; want refused, it is not how Value writes 7`)
	}
	if i, ok := Parse("63", 64); !ok || i != 63 {
		t.Errorf(`Parse("63") = %d, %v`, i, ok)
	}
	if _, ok := Parse("64", 64); ok {
		t.Error(`Parse("64") among 64 = ok`)
	}
}

func TestSelector(t *testing.T) {
	sel := Selector([]int{3, 12})
	if !sel.Matches(labelSet("12")) || sel.Matches(labelSet("1")) || sel.Matches(labelSet("")) {
		t.Errorf("Selector([3 12]) = %s", sel)
	}
	if none := Selector(nil); none.Matches(labelSet("0")) {
		t.Errorf("Selector(nil) = %s matches shard 0", none)
	}
}

func labelSet(v string) labels.Set { return labels.Set{fleetv1alpha1.LabelShard: v} }

// TestStrays: a shard label of a larger count is a stray; one of this
// count, or none, is not.
func TestStrays(t *testing.T) {
	sel := Strays(8)
	for v, want := range map[string]bool{"8": true, "63": true, "07": true, "0": false, "7": false} {
		if got := sel.Matches(labelSet(v)); got != want {
			t.Errorf("Strays(8) matches shard %q = %v, want %v", v, got, want)
		}
	}
	if sel.Matches(labels.Set{}) {
		t.Error("Strays(8) matches an object with no shard label")
	}
}

func TestOwnedHasShard(t *testing.T) {
	o := NewOwned(8, []int{0, 5})
	if !o.HasShard(0) || !o.HasShard(5) || o.HasShard(1) || o.HasShard(8) || o.HasShard(-1) {
		t.Errorf("NewOwned(8, [0 5]).HasShard wrong")
	}
	var all *Owned
	if !all.HasShard(3) {
		t.Error("a nil set does not own shard 3")
	}
}
