package shard_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	api     *api
}

// api is the API server as one replica reaches it; down cuts it off,
// refused refuses its credentials.
type api struct {
	client.Client
	down    atomic.Bool
	refused atomic.Bool
	// slow holds each write that long, as a busy API server does;
	// writing and mostWriting count the writes under way.
	slow                 time.Duration
	writing, mostWriting atomic.Int32
	// gets counts the reads this replica made.
	gets atomic.Int64
}

var errCutOff = errors.New("the API server is out of reach")

func (a *api) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if a.down.Load() {
		return errCutOff
	}
	a.gets.Add(1)
	return a.Client.Get(ctx, key, obj, opts...)
}

func (a *api) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if a.down.Load() {
		return errCutOff
	}
	return a.Client.List(ctx, list, opts...)
}

// write is one write under way, held for slow.
func (a *api) write() func() {
	n := a.writing.Add(1)
	for {
		m := a.mostWriting.Load()
		if n <= m || a.mostWriting.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(a.slow)
	return func() { a.writing.Add(-1) }
}

func (a *api) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if a.down.Load() {
		return errCutOff
	}
	defer a.write()()
	return a.Client.Create(ctx, obj, opts...)
}

func (a *api) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if a.down.Load() {
		return errCutOff
	}
	if a.refused.Load() {
		return apierrors.NewUnauthorized("the token's Pod is gone")
	}
	defer a.write()()
	return a.Client.Update(ctx, obj, opts...)
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
	reach := &api{Client: env.Client}
	return &replica{Keeper: &shard.Keeper{
		Client: reach, Namespace: ns, Identity: id, Count: 8,
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RenewPeriod: time.Second,
		Clock: c, Apply: run.apply(id),
	}, running: run, api: reach}
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
	b.api.down.Store(true)
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
	b.api.down.Store(false)
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
	// It is cut off: every renewal fails from now on.
	a.api.down.Store(true)
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

// TestKeeperTakesTheShardsOfAReplicaGone: a replica whose Pod is deleted
// sees its next renewal refused and stops its shards at once; the others
// take them two renewal periods after they see its Pod gone, without
// waiting out its Lease. One whose Pod is there keeps them for the
// Lease's length.
func TestKeeperTakesTheShardsOfAReplicaGone(t *testing.T) {
	ns := env.Namespace(t)
	clk := clocktesting.NewFakeClock(time.Now())
	run := &running{t: t, by: map[int]string{}}
	a, b := newReplica(ns, "a", clk, run), newReplica(ns, "b", clk, run)
	a.LeaseDuration, a.RenewDeadline = time.Hour, 50*time.Minute
	var podGone atomic.Bool
	a.Gone = func(id string) bool { return id == "b" && podGone.Load() }
	a.tick(t)
	evenly(t, clk, run, a, b)

	// b's Pod is deleted: its token is refused from then on.
	podGone.Store(true)
	b.api.refused.Store(true)
	_ = b.Tick(context.Background())
	if got := run.count("b"); got != 0 {
		t.Fatalf("b runs %d shards after its renewal was refused, want none", got)
	}
	a.tick(t)
	clk.Step(time.Second)
	a.tick(t)
	if got := run.count("a"); got != 4 {
		t.Fatalf("a runs %d shards a second after it saw b's Pod gone; want its own 4 until b had time to stop", got)
	}
	clk.Step(time.Second)
	a.tick(t)
	if got := run.count("a"); got != 8 {
		t.Fatalf("a runs %d shards two renewal periods after b's Pod went, want 8", got)
	}
}

// TestKeeperTakesShardsAtOnce: the shards a step takes are written side
// by side, not one after another: on a busy API server each write takes
// a while, and a takeover of many shards took seconds.
func TestKeeperTakesShardsAtOnce(t *testing.T) {
	ns := env.Namespace(t)
	run := &running{t: t, by: map[int]string{}}
	a := newReplica(ns, "a", clocktesting.NewFakeClock(time.Now()), run)
	a.api.slow = 100 * time.Millisecond
	a.tick(t)
	if got := run.count("a"); got != 8 {
		t.Fatalf("a alone runs %d shards, want 8", got)
	}
	if got := a.api.mostWriting.Load(); got != 8 {
		t.Errorf("at most %d of the 8 shards' Leases were written at once, want all 8", got)
	}
}

// TestKeeperRenewsInOneRequest: a renewal is one update of the Lease as
// last written, not a read and a write: on a busy API server each
// request a renewal waits for brings its deadline closer.
func TestKeeperRenewsInOneRequest(t *testing.T) {
	ns := env.Namespace(t)
	clk := clocktesting.NewFakeClock(time.Now())
	a := newReplica(ns, "a", clk, &running{t: t, by: map[int]string{}})
	for range 5 {
		if err := a.Renew(context.Background()); err != nil {
			t.Fatal(err)
		}
		clk.Step(time.Second)
	}
	if got := a.api.gets.Load(); got > 1 {
		t.Errorf("5 renewals read the Lease %d times, want at most once", got)
	}
	var l coordinationv1.Lease
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: shard.ReplicaLeaseName("a")}, &l); err != nil {
		t.Fatal(err)
	}
	if want := clk.Now().Add(-time.Second); !l.Spec.RenewTime.Time.Equal(want.Truncate(time.Microsecond)) {
		t.Errorf("renewed at %v, want %v", l.Spec.RenewTime.Time, want)
	}
}

// TestKeeperQuietFor: a replica knows how long another's Lease has gone
// unrenewed, by its own clock, and knows nothing of a replica it never
// saw.
func TestKeeperQuietFor(t *testing.T) {
	ns := env.Namespace(t)
	clk := clocktesting.NewFakeClock(time.Now())
	run := &running{t: t, by: map[int]string{}}
	a, b := newReplica(ns, "a", clk, run), newReplica(ns, "b", clk, run)
	if _, ok := a.QuietFor("b", clk.Now()); ok {
		t.Fatal("a knows of b before either looked at the Leases")
	}
	evenly(t, clk, run, a, b)
	if quiet, ok := a.QuietFor("b", clk.Now()); !ok || quiet != 0 {
		t.Fatalf("b renewed this second: a says quiet %v (known %v), want 0", quiet, ok)
	}
	// b's last renewal came after a's last look: a sees it at its next
	// one, and from then on nothing new.
	b.api.down.Store(true)
	for range 3 {
		clk.Step(time.Second)
		_ = b.Tick(context.Background())
		a.tick(t)
	}
	if quiet, ok := a.QuietFor("b", clk.Now()); !ok || quiet != 2*time.Second {
		t.Fatalf("a saw b's last renewal 2 s ago: a says quiet %v (known %v), want 2s", quiet, ok)
	}
	if _, ok := a.QuietFor("nobody", clk.Now()); ok {
		t.Fatal("a knows of a replica that never had a Lease")
	}
}
