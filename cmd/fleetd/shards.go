package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fleetd/fleetd/controllers"
	"github.com/fleetd/fleetd/internal/fleetcache"
	"github.com/fleetd/fleetd/internal/scheme"
	"github.com/fleetd/fleetd/shard"
)

// shardControllers runs the controllers of one replica's shards in a
// manager of their own, whose cache holds those shards' objects only. A
// change of the shards stops that manager, and with it every controller
// and informer, before the next one starts: a shard a replica gives up is
// never reconciled by it again once its Lease is freed.
type shardControllers struct {
	cfg       *rest.Config
	namespace string
	log       logr.Logger
	// setup adds the controllers, for these shards, to mgr.
	setup func(ctx context.Context, mgr ctrl.Manager, s controllers.Sharding) error
	// failed gets the error of a manager that stopped by itself.
	failed chan error
	// stopped runs once a set of shards' controllers have stopped.
	stopped func()

	mu   sync.Mutex
	stop context.CancelFunc
	done chan struct{}
}

func newShardControllers(cfg *rest.Config, namespace string, log logr.Logger, setup func(context.Context, ctrl.Manager, controllers.Sharding) error) *shardControllers {
	return &shardControllers{cfg: cfg, namespace: namespace, log: log, setup: setup, failed: make(chan error, 1)}
}

// Apply runs the controllers of exactly owned among count shards.
func (s *shardControllers) Apply(ctx context.Context, count int, owned []int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil {
		s.stop()
		<-s.done
		s.stop, s.done = nil, nil
		if s.stopped != nil {
			s.stopped()
		}
	}
	if len(owned) == 0 {
		return nil
	}
	opts := fleetcache.ShardOptions(owned)
	if s.namespace != "" {
		opts.DefaultNamespaces = map[string]cache.Config{s.namespace: {}}
	}
	mgr, err := ctrl.NewManager(s.cfg, ctrl.Options{
		Scheme:  scheme.New(),
		Cache:   opts,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Logger:  s.log.WithValues("shards", len(owned)),
		// The same controllers start again with the next shards.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return fmt.Errorf("creating the shards' manager: %w", err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	if err := s.setup(runCtx, mgr, controllers.Sharding{Owned: shard.NewOwned(count, owned), Count: count, Namespace: s.namespace}); err != nil {
		stop()
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(runCtx); err != nil && runCtx.Err() == nil {
			select {
			case s.failed <- err:
			default:
			}
		}
	}()
	s.stop, s.done = stop, done
	return nil
}

// keeperWith is the Keeper of o's shards, running them with s.
func keeperWith(o options, s *shardControllers, client client.Client, log logr.Logger, metrics *shard.Metrics) (*shard.Keeper, error) {
	// A Pod's name is its replica's: one process at a time runs in its
	// fleetd container, so a container that starts again after a crash is
	// the same replica, and takes its shards back as soon as it runs
	// instead of waiting out its own Lease. Anywhere else two processes
	// may share a host name, so each gets a suffix of its own.
	id := o.replicaID
	if id == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("naming this replica (set --replica-id): %w", err)
		}
		id = host + "-" + utilrand.String(5)
	}
	if o.shardLeaseDuration <= o.shardRenewDeadline || o.shardRenewDeadline <= o.shardRenewPeriod || o.shardRenewPeriod <= 0 {
		return nil, errors.New("--shard-lease-duration must be longer than --shard-renew-deadline, and that longer than --shard-renew-period")
	}
	return &shard.Keeper{
		Client:        client,
		Namespace:     o.shardLeaseNS,
		Identity:      id,
		Count:         o.shards,
		LeaseDuration: o.shardLeaseDuration,
		RenewDeadline: o.shardRenewDeadline,
		RenewPeriod:   o.shardRenewPeriod,
		Log:           log,
		Apply: func(ctx context.Context, owned []int) error {
			return s.Apply(ctx, o.shards, owned)
		},
		Failed:  s.failed,
		Metrics: metrics,
	}, nil
}

// replicaPods knows which replicas' Pods are gone, from a cache of the
// Pods in the namespace the replicas run in (fleetd's own, few). A replica is
// named after its Pod, and a Pod deleted from the API server (forced, or
// after its node was lost) can write nothing more: its service account
// token is bound to the Pod, and the API server refuses it from then on.
// So the Keeper frees such a replica's shards at once instead of waiting
// out its Lease. Until the cache has synced, and when a read fails, no
// replica is gone.
type replicaPods struct {
	cache     cache.Cache
	namespace string
	synced    atomic.Bool
}

func newReplicaPods(cfg *rest.Config, namespace string) (*replicaPods, error) {
	c, err := cache.New(cfg, cache.Options{
		Scheme:            scheme.New(),
		DefaultNamespaces: map[string]cache.Config{namespace: {}},
	})
	if err != nil {
		return nil, err
	}
	if _, err := c.GetInformer(context.Background(), &corev1.Pod{}); err != nil {
		return nil, err
	}
	return &replicaPods{cache: c, namespace: namespace}, nil
}

// Start runs the cache until ctx ends.
func (p *replicaPods) Start(ctx context.Context) error {
	go func() {
		if p.cache.WaitForCacheSync(ctx) {
			p.synced.Store(true)
		}
	}()
	return p.cache.Start(ctx)
}

// NeedLeaderElection: every replica watches.
func (p *replicaPods) NeedLeaderElection() bool { return false }

// Gone reports whether replica id's Pod is gone.
func (p *replicaPods) Gone(id string) bool {
	if !p.synced.Load() {
		return false
	}
	err := p.cache.Get(context.Background(), client.ObjectKey{Namespace: p.namespace, Name: id}, &corev1.Pod{})
	return apierrors.IsNotFound(err)
}
