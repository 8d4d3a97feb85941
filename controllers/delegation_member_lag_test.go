package controllers

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/internal/testutil"
)

// TestAMemberTheCacheHasNotShownIsNotGone: the gateway spawns a member and
// sends to it at once, and a controller's cache may show the message
// before the Member. Its queue waits for the Member; only a member the API
// server does not have either is gone. (CI saw a spawned member's first
// message end worker_gone.)
func TestAMemberTheCacheHasNotShownIsNotGone(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	mgr := env.Manager(t, ns)
	if err := IndexDelegations(ctx, mgr.GetFieldIndexer()); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go func() { _ = mgr.Start(mctx) }()
	if !mgr.GetCache().WaitForCacheSync(mctx) {
		t.Fatal("the cache did not sync")
	}

	// The cache lags: it shows no Member at all.
	lagging := memberlessClient{mgr.GetClient()}
	r := &DelegationReconciler{
		Client: lagging, Reader: env.Client, Clock: clock.RealClock{}, Policy: delegation.DefaultPolicy,
		Recorder: mgr.GetEventRecorder("test"),
	}
	reconcile := func(member string) ctrl.Result {
		t.Helper()
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: member}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	cached := func(name string) {
		t.Helper()
		testutil.Eventually(t, "the cache to show "+name, func() error {
			return mgr.GetClient().Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &fleetv1alpha1.Delegation{})
		})
	}

	create(t, testutil.MakeMember("spawned", ns).Command("true").Obj())
	create(t, testutil.MakeDelegation("first", ns, "spawned", "hello").Obj())
	cached("first")
	if res := reconcile("spawned"); res.RequeueAfter == 0 {
		t.Errorf("the queue of a member the cache does not show yet is not looked at again: %+v", res)
	}
	if d, err := getDelegation(ns, "first"); err != nil || delegation.Settled(d.Status.Phase) {
		t.Fatalf("the message to a member that exists settled: %v %s %s", err, d.Status.Phase, d.Status.Outcome)
	}

	// A member the API server has not either is gone.
	create(t, testutil.MakeDelegation("lost", ns, "nobody", "hello").Obj())
	cached("lost")
	reconcile("nobody")
	testutil.Eventually(t, "the message to a member that does not exist ends worker_gone", func() (bool, string) {
		d, err := getDelegation(ns, "lost")
		if err != nil {
			return false, err.Error()
		}
		return d.Status.Phase == fleetv1alpha1.DelegationWorkerGone, string(d.Status.Phase)
	})
}

// memberlessClient is a client whose reads show no Member, as a cache that
// has not caught up.
type memberlessClient struct{ client.Client }

func (c memberlessClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*fleetv1alpha1.Member); ok {
		return apierrors.NewNotFound(schema.GroupResource{Group: fleetv1alpha1.GroupVersion.Group, Resource: "members"}, key.Name)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}
