package shard_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetd/fleetd/internal/testenv"
	"github.com/fleetd/fleetd/shard"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// replica is a Keeper whose Apply records what it runs, and checks that
// no shard runs on two replicas at once.
type replica struct {
	*shard.Keeper
	running *running
}

// running is which replica runs each shard's controllers.
type running struct {
	t  *testing.T
	mu sync.Mutex
	by map[int]string
}

func (r *running) apply(who string) func(context.Context, []int) error {
	return func(_ context.Context, owned []int) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		for i, h := range r.by {
			if h == who && !slices.Contains(owned, i) {
				delete(r.by, i)
			}
		}
		for _, i := range owned {
			if h, ok := r.by[i]; ok && h != who {
				r.t.Errorf("%s starts shard %d, which %s still runs", who, i, h)
			}
			r.by[i] = who
		}
		return nil
	}
}

func (r *running) count(who string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, h := range r.by {
		if h == who {
			n++
		}
	}
	return n
}

func newReplica(ns, id string, c clock.WithTicker, run *running) *replica {
	return &replica{Keeper: &shard.Keeper{
		Client: env.Client, Namespace: ns, Identity: id, Count: 8,
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RenewPeriod: time.Second,
		Clock: c, Apply: run.apply(id),
	}, running: run}
}

func (r *replica) tick(t *testing.T) {
	t.Helper()
	if err := r.Tick(context.Background()); err != nil {
		t.Fatalf("%s: %v", r.Identity, err)
	}
}

// evenly ticks a and b a few seconds and checks that they share the 8
// shards evenly.
func evenly(t *testing.T, clk *clocktesting.FakeClock, run *running, a, b *replica) {
	t.Helper()
	for range 3 {
		clk.Step(time.Second)
		a.tick(t)
		b.tick(t)
	}
	if run.count(a.Identity) != 4 || run.count(b.Identity) != 4 {
		t.Fatalf("two replicas run %d and %d shards, want 4 each", run.count(a.Identity), run.count(b.Identity))
	}
}

func holders(t *testing.T, ns string) map[string]int {
	t.Helper()
	var leases coordinationv1.LeaseList
	if err := env.Client.List(context.Background(), &leases, client.InNamespace(ns), client.MatchingLabels{"fleet.fleetd.dev/lease": shard.LeaseShard}); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, l := range leases.Items {
		out[ptr.Deref(l.Spec.HolderIdentity, "")]++
	}
	return out
}

// TestKeeperSharesAndTakesOver: a replica alone holds every shard; a
// second one gets half; when one stops renewing, the other takes its
// shards after the lease duration, not before; one that stops cleanly
// hands them over at once.
func TestKeeperSharesAndTakesOver(t *testing.T) {
	ns := env.Namespace(t)
	clk := clocktesting.NewFakeClock(time.Now())
	run := &running{t: t, by: map[int]string{}}
	a, b := newReplica(ns, "a", clk, run), newReplica(ns, "b", clk, run)

	a.tick(t)
	if got := run.count("a"); got != 8 {
		t.Fatalf("a alone runs %d shards, want 8", got)
	}
	evenly(t, clk, run, a, b)
	if h := holders(t, ns); h["a"] != 4 || h["b"] != 4 {
		t.Fatalf("leases held %v, want 4 each", h)
	}

	// b is cut off from the API server: it cannot renew, so it stops its
	// shards after its renew deadline, and a keeps off them until b's
	// lease has run out by a's clock.
	ns, b.Namespace = b.Namespace, "gone-"+ns
	for range 3 {
		clk.Step(time.Second)
		_ = b.Tick(context.Background())
		a.tick(t)
	}
	if run.count("a") != 4 {
		t.Fatalf("a took b's shards %d s after b's last renewal, before its lease ran out", 3)
	}
	for range 2 {
		clk.Step(time.Second)
		_ = b.Tick(context.Background())
		a.tick(t)
	}
	if run.count("b") != 0 {
		t.Fatalf("b still runs %d shards 5 s after its last renewal", run.count("b"))
	}
	if run.count("a") != 8 {
		t.Fatalf("a runs %d shards after b's lease ran out, want 8", run.count("a"))
	}
	b.Namespace = ns
	// b comes back: it finds its shards gone, stops them, and gets a share again.
	b.tick(t)
	if got := run.count("b"); got != 0 {
		t.Fatalf("b runs %d shards it lost", got)
	}
	evenly(t, clk, run, a, b)

	// a stops cleanly: its shards are free at once, and b takes them
	// without waiting for a's lease to run out.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Start(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("a's shutdown: %v", err)
	}
	b.tick(t)
	if got := run.count("b"); got != 8 {
		t.Fatalf("b runs %d shards right after a stopped cleanly, want 8", got)
	}
}

// TestKeeperFencesItself: a replica that cannot renew its lease for the
// renew deadline stops its shards before anyone may take them.
func TestKeeperFencesItself(t *testing.T) {
	ns := env.Namespace(t)
	clk := clocktesting.NewFakeClock(time.Now())
	run := &running{t: t, by: map[int]string{}}
	a := newReplica(ns, "a", clk, run)
	a.tick(t)
	if run.count("a") != 8 {
		t.Fatalf("a runs %d", run.count("a"))
	}
	// Its lease namespace goes: every renewal fails from now on.
	a.Namespace = "gone-" + ns
	clk.Step(2 * time.Second)
	_ = a.Tick(context.Background())
	if run.count("a") != 8 {
		t.Fatal("a stopped its shards before its renew deadline")
	}
	clk.Step(2 * time.Second)
	_ = a.Tick(context.Background())
	if run.count("a") != 0 {
		t.Fatalf("a still runs %d shards 4 s after its last renewal", run.count("a"))
	}
}

// TestKeeperRestartedTakesItsShardsBack: a replica whose process starts
// again under the same name runs its shards again at once, without
// waiting out its own lease, and says so on their Leases.
func TestKeeperRestartedTakesItsShardsBack(t *testing.T) {
	ns := env.Namespace(t)
	clk := clocktesting.NewFakeClock(time.Now())
	run := &running{t: t, by: map[int]string{}}
	a := newReplica(ns, "a", clk, run)
	a.tick(t)
	crashed := clk.Now()
	// The process ends: nothing runs.
	run.apply("a")(context.Background(), nil)
	clk.Step(time.Second)
	again := newReplica(ns, "a", clk, run)
	again.tick(t)
	if got := run.count("a"); got != 8 {
		t.Fatalf("the restarted replica runs %d shards, want its 8 back", got)
	}
	var leases coordinationv1.LeaseList
	if err := env.Client.List(context.Background(), &leases, client.InNamespace(ns), client.MatchingLabels{"fleet.fleetd.dev/lease": shard.LeaseShard}); err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Items {
		if l.Spec.AcquireTime == nil || !l.Spec.AcquireTime.After(crashed) {
			t.Errorf("lease %s acquired %v, want after the restart", l.Name, l.Spec.AcquireTime)
		}
	}
}
