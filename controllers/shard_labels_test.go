package controllers

import (
	"context"
	"fmt"
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
