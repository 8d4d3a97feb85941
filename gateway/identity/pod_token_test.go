package identity

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/fleetcache"
	"github.com/fleetd/fleetd/internal/testenv"
	"github.com/fleetd/fleetd/internal/testutil"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// TestDeletedMemberPodTokenIsNoServiceAccount reproduces a member Pod's
// token outliving its Pod: the token is its Member's while the Pod runs
// it; once the Pod is deleted, the same token, whose TokenReview the
// gateway still remembers, must open nothing, never the Pod's service
// account, which RBAC lets act as a primary. A token of a Pod that is no
// member's stays that account's.
func TestDeletedMemberPodTokenIsNoServiceAccount(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	c := env.Client

	sa := primaryAccount(t, ns)
	member := testutil.MakeMember("w1", ns).Command("sh").Obj()
	if err := c.Create(ctx, member); err != nil {
		t.Fatal(err)
	}
	memberPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "w1-abcde", Namespace: ns, Labels: map[string]string{
			fleetv1alpha1.LabelMember: member.Name, fleetv1alpha1.LabelMemberUID: string(member.UID),
		}},
		Spec: corev1.PodSpec{ServiceAccountName: sa.Name, Containers: []corev1.Container{{Name: "agent", Image: "worker"}}},
	}
	primaryPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "primary", Namespace: ns},
		Spec:       corev1.PodSpec{ServiceAccountName: sa.Name, Containers: []corev1.Container{{Name: "primary", Image: "primary"}}},
	}
	for _, o := range []client.Object{memberPod, primaryPod} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	member.Status.PodName, member.Status.PodUID = memberPod.Name, string(memberPod.UID)
	if err := c.Status().Update(ctx, member); err != nil {
		t.Fatal(err)
	}
	memberToken, primaryToken := env.PodToken(t, memberPod), env.PodToken(t, primaryPod)

	informers := gatewayCache(t, ns)
	a := NewAuthenticator(Config{Cache: informers, Live: c, Reviews: c})

	testutil.Eventually(t, "the member pod's token to be the member's", func() error {
		p, f := a.Authenticate(ctx, memberToken)
		if f != nil || p.Kind != fleetv1alpha1.PrincipalMember || p.Name != member.Name {
			return fmt.Errorf("%+v, %+v", p, f)
		}
		return nil
	})
	if p, f := a.Authenticate(ctx, primaryToken); f != nil || p.Kind != fleetv1alpha1.PrincipalServiceAccount {
		t.Fatalf("a primary pod's token: %+v, %+v; want its service account", p, f)
	}

	// The Pod is deleted and fleetd forgets it, as after a crash.
	if err := c.Delete(ctx, memberPod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	member.Status.PodName, member.Status.PodUID = "", ""
	if err := c.Status().Update(ctx, member); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the cache to see the pod gone and the member without it", func() error {
		var pods corev1.PodList
		if err := informers.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return err
		}
		var m fleetv1alpha1.Member
		if err := informers.Get(ctx, client.ObjectKeyFromObject(member), &m); err != nil {
			return err
		}
		if len(pods.Items) > 0 || m.Status.PodUID != "" {
			return fmt.Errorf("%d pods, member's pod %q", len(pods.Items), m.Status.PodUID)
		}
		return nil
	})

	p, f := a.Authenticate(ctx, memberToken)
	if f == nil {
		t.Fatalf("the deleted member pod's token was accepted as %s %s", p.Kind, p.Name)
	}
	if f.Code != toolerr.Unauthorized {
		t.Errorf("refused with %+v, want unauthorized", f)
	}
}

// TestWarmPodTokenIsBoundAtClaim: a warm Pod's token opens nothing while
// no Member has claimed the Pod, though its service account may act as a
// primary; from the claim (the Pod labelled the Member's, and the
// Member's status naming it) it is that Member's.
func TestWarmPodTokenIsBoundAtClaim(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	c := env.Client
	sa := primaryAccount(t, ns)
	warm := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "coders-warm-abcde", Namespace: ns, Labels: map[string]string{
			fleetv1alpha1.LabelMember: "", fleetv1alpha1.LabelPool: "coders",
		}},
		Spec: corev1.PodSpec{ServiceAccountName: sa.Name, Containers: []corev1.Container{{Name: "agent", Image: "worker"}}},
	}
	member := testutil.MakeMember("w1", ns).Profile("coders").Obj()
	for _, o := range []client.Object{warm, member} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	token := env.PodToken(t, warm)
	informers := gatewayCache(t, ns)
	a := NewAuthenticator(Config{Cache: informers, Live: c, Reviews: c})

	testutil.Eventually(t, "the unclaimed warm pod's token to be refused", func() error {
		p, f := a.Authenticate(ctx, token)
		if f == nil {
			return fmt.Errorf("accepted as %s %s", p.Kind, p.Name)
		}
		if f.Code != toolerr.Unauthorized || f.Reason != "unclaimed_pod" || !strings.Contains(f.Message, "no member has claimed") {
			return fmt.Errorf("refused with %+v, want unauthorized, unclaimed_pod", f)
		}
		return nil
	})
	// Asked again, still nothing: the refusal is not remembered as "no
	// member's", which would make it the account's.
	if p, f := a.Authenticate(ctx, token); f == nil {
		t.Fatalf("asked again, the unclaimed warm pod's token was accepted as %s %s", p.Kind, p.Name)
	}

	// The claim, as the Member reconciler makes it.
	warm.Labels[fleetv1alpha1.LabelMember], warm.Labels[fleetv1alpha1.LabelMemberUID] = member.Name, string(member.UID)
	if err := c.Update(ctx, warm); err != nil {
		t.Fatal(err)
	}
	member.Status.PodName, member.Status.PodUID, member.Status.PodPool = warm.Name, string(warm.UID), "coders"
	if err := c.Status().Update(ctx, member); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the claimed pod's token to be the member's", func() error {
		p, f := a.Authenticate(ctx, token)
		if f != nil || p.Kind != fleetv1alpha1.PrincipalMember || p.Name != member.Name {
			return fmt.Errorf("%+v, %+v", p, f)
		}
		return nil
	})
}

// primaryAccount is a service account in ns that RBAC lets act as a
// primary through the gateway.
func primaryAccount(t *testing.T, ns string) *corev1.ServiceAccount {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "runner", Namespace: ns}}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "delegator", Namespace: ns}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{fleetv1alpha1.GroupVersion.Group}, Resources: []string{"delegations"}, Verbs: []string{"create"},
	}}}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "delegator", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: ns}},
	}
	for _, o := range []client.Object{sa, role, binding} {
		if err := env.Client.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	return sa
}

// gatewayCache is the gateway's own cache of ns: Members with their
// indexes, members' Pods. It stops with the test.
func gatewayCache(t *testing.T, ns string) cache.Cache {
	t.Helper()
	opts := fleetcache.Options()
	opts.Scheme, opts.DefaultNamespaces = env.Scheme, map[string]cache.Config{ns: {}}
	informers, err := cache.New(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	if err := informers.IndexField(ctx, &fleetv1alpha1.Member{}, IndexMemberPodUID, IndexMemberPod); err != nil {
		t.Fatal(err)
	}
	if err := informers.IndexField(ctx, &fleetv1alpha1.Member{}, IndexMemberTokenHash, IndexMemberToken); err != nil {
		t.Fatal(err)
	}
	go func() { _ = informers.Start(ctx) }()
	return informers
}
