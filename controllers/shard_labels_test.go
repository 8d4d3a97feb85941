package controllers

import (
	"context"
	"fmt"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/shard"
)

// TestShardLabels: what kubectl made, or a fleetd of another shard count,
// is labelled with its Member's shard: a Member, a Delegation by its
// receiver, a member's Pod and Secret by their member, a warm Pod by its
// pool.
func TestShardLabels(t *testing.T) {
	ns := env.Namespace(t)
	const count = 16
	mgr := env.Manager(t, ns)
	if err := SetupShardLabels(mgr, count); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = mgr.Start(ctx) }()

	of := func(name string) string { return shard.Value(shard.Of(ns, name, count)) }
	m := testutil.MakeMember("w1", ns).Command("true").Obj()
	d := testutil.MakeDelegation("hello", ns, "w2", "hi").Obj()
	// A label of another count is wrong too.
	d.Labels = map[string]string{fleetv1alpha1.LabelShard: "63"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "w3-abcde", Namespace: ns, Labels: map[string]string{fleetv1alpha1.LabelMember: "w3"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "x"}}},
	}
	warm := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pool-warm", Namespace: ns, Labels: map[string]string{fleetv1alpha1.LabelMember: "", fleetv1alpha1.LabelPool: "coders"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "x"}}},
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "w4-token", Namespace: ns, Labels: map[string]string{fleetv1alpha1.LabelMember: "w4"}}}
	for _, o := range []client.Object{m, d, pod, warm, secret} {
		create(t, o)
	}
	for _, c := range []struct {
		obj  client.Object
		want string
	}{{m, of("w1")}, {d, of("w2")}, {pod, of("w3")}, {warm, of("coders")}, {secret, of("w4")}} {
		testutil.Eventually(t, fmt.Sprintf("%T %s labelled shard %s", c.obj, c.obj.GetName(), c.want), func() (bool, string) {
			if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(c.obj), c.obj); err != nil {
				return false, err.Error()
			}
			return c.obj.GetLabels()[fleetv1alpha1.LabelShard] == c.want, fmt.Sprintf("labels %v", c.obj.GetLabels())
		})
	}
}

// TestShardStraysAfterACountChange: a closed Delegation left out of the
// gateway's cache keeps the label of the shard count it closed under. The
// controllers of the shards relabel it with its receiver's shard: one
// whose old label is a shard they own, and, on the owner of shard 0, one
// whose old label is past the count. Retention, in the receiver's shard,
// then finds it.
func TestShardStraysAfterACountChange(t *testing.T) {
	ns := env.Namespace(t)
	const count = 4
	of := func(name string) string { return shard.Value(shard.Of(ns, name, count)) }
	// A receiver in another shard than 0, labelled 0 by an older count.
	to := ""
	for i := 0; to == ""; i++ {
		if name := fmt.Sprintf("w%d", i); of(name) != "0" {
			to = name
		}
	}
	closed := map[string]string{fleetv1alpha1.LabelClosed: "true"}
	inRange := testutil.MakeDelegation("in-range", ns, to, "hi").Obj()
	inRange.Labels = map[string]string{fleetv1alpha1.LabelShard: "0"}
	past := testutil.MakeDelegation("past-the-count", ns, to, "hi").Obj()
	past.Labels = map[string]string{fleetv1alpha1.LabelShard: "63"}
	for _, d := range []*fleetv1alpha1.Delegation{inRange, past} {
		maps.Copy(d.Labels, closed)
		create(t, d)
	}

	// The controllers of shard 0 alone: neither Delegation is theirs to
	// reconcile, both are theirs to relabel.
	mgr := env.ShardManager(t, ns, []int{0})
	if err := setupShardStrays(mgr, Sharding{Owned: shard.NewOwned(count, []int{0}), Count: count, Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = mgr.Start(ctx) }()
	for _, d := range []*fleetv1alpha1.Delegation{inRange, past} {
		testutil.Eventually(t, fmt.Sprintf("%s labelled shard %s", d.Name, of(to)), func() (bool, string) {
			if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(d), d); err != nil {
				return false, err.Error()
			}
			return d.Labels[fleetv1alpha1.LabelShard] == of(to), fmt.Sprintf("labels %v", d.Labels)
		})
	}
}
