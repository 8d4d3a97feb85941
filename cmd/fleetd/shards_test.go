package main

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/controllers"
	"github.com/fleetd/fleetd/internal/testenv"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/shard"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// TestShardControllersSeeTheirShardsOnly: the controllers of a set of
// shards cache the Delegations of those shards only, and a new set stops
// the controllers of the last one before it starts.
func TestShardControllersSeeTheirShardsOnly(t *testing.T) {
	ns := env.Namespace(t)
	const count = 8
	// One Delegation in each shard, to members named for it.
	byShard := map[int]string{}
	for i := 0; len(byShard) < count; i++ {
		to := "m" + shard.Value(i)
		s := shard.Of(ns, to, count)
		if _, ok := byShard[s]; ok {
			continue
		}
		d := testutil.MakeDelegation("d-"+to, ns, to, "hello").Obj()
		d.Labels = map[string]string{fleetv1alpha1.LabelShard: shard.Value(s)}
		if err := env.Client.Create(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		byShard[s] = d.Name
	}

	var mu sync.Mutex
	running := 0
	seen := make(chan []string, 4)
	runner := newShardControllers(env.Config, ns, logr.Discard(), func(ctx context.Context, mgr ctrl.Manager, s controllers.Sharding) error {
		return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			mu.Lock()
			running++
			if running > 1 {
				t.Error("the controllers of two sets of shards run at once")
			}
			mu.Unlock()
			defer func() {
				mu.Lock()
				running--
				mu.Unlock()
			}()
			var list fleetv1alpha1.DelegationList
			if err := mgr.GetCache().List(ctx, &list); err != nil {
				t.Error(err)
			}
			var names []string
			for _, d := range list.Items {
				if !s.Owned.Has(d.Namespace, d.Spec.To) {
					t.Errorf("the controllers of shards %v cache %s, of another shard", s, d.Name)
				}
				names = append(names, d.Name)
			}
			slices.Sort(names)
			seen <- names
			<-ctx.Done()
			return nil
		}))
	})
	for _, owned := range [][]int{{1, 3}, {0, 1, 2, 3, 4, 5, 6, 7}, {6}} {
		if err := runner.Apply(context.Background(), count, owned); err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, i := range owned {
			want = append(want, byShard[i])
		}
		slices.Sort(want)
		select {
		case got := <-seen:
			if !slices.Equal(got, want) {
				t.Errorf("shards %v: the cache holds %v, want %v", owned, got, want)
			}
		case <-time.After(time.Minute):
			t.Fatalf("shards %v: the controllers did not start", owned)
		}
	}
	if err := runner.Apply(context.Background(), count, nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if running != 0 {
		t.Errorf("%d sets of controllers run with no shard owned", running)
	}
}

// TestShardLeaseSettings: the flags refuse lease settings under
// which a replica could not stop before the others take its shards.
func TestShardLeaseSettings(t *testing.T) {
	o := parseOptions(t, "--shard-lease-namespace=fleetd-system", "--shard-lease-duration=3s", "--shard-renew-deadline=3s")
	if _, err := keeperWith(o, newShardControllers(nil, "", logr.Discard(), nil), nil, logr.Discard(), nil); err == nil || !strings.Contains(err.Error(), "--shard-lease-duration") {
		t.Errorf("a renew deadline as long as the lease: %v, want refused", err)
	}
	o = parseOptions(t, "--shard-lease-namespace=fleetd-system", "--replica-id=r")
	k, err := keeperWith(o, newShardControllers(nil, "", logr.Discard(), nil), nil, logr.Discard(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if k.Identity != "r" {
		t.Errorf("identity %q: want the replica id", k.Identity)
	}
	o.replicaID = ""
	if k, err = keeperWith(o, newShardControllers(nil, "", logr.Discard(), nil), nil, logr.Discard(), nil); err != nil {
		t.Fatal(err)
	}
	if host, _ := os.Hostname(); !strings.HasPrefix(k.Identity, host+"-") || len(k.Identity) != len(host)+6 {
		t.Errorf("identity %q with no replica id: want the host name and a suffix of its own", k.Identity)
	}
	if k.LeaseDuration != shard.DefaultLeaseDuration || k.Count != shard.DefaultCount {
		t.Errorf("defaults: lease %s, %d shards", k.LeaseDuration, k.Count)
	}
}

// TestReplicaPodsGone: a replica is gone once its Pod is deleted from the
// API server; one whose Pod is there is not, nor is any before the Pods
// are known.
func TestReplicaPodsGone(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "fleetd-abc", Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "fleetd", Image: "fleetd"}}},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pods, err := newReplicaPods(env.Config, ns)
	if err != nil {
		t.Fatal(err)
	}
	if pods.Gone("fleetd-never") {
		t.Error("a replica is gone before the Pods are known")
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- pods.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	testutil.Eventually(t, "the Pods known", func() (bool, string) {
		return pods.Gone("fleetd-never"), "fleetd-never not gone"
	})
	if pods.Gone("fleetd-abc") {
		t.Fatal("fleetd-abc is gone while its Pod is there")
	}
	if err := env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "fleetd-abc gone", func() (bool, string) {
		return pods.Gone("fleetd-abc"), "fleetd-abc not gone"
	})
}
