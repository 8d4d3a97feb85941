package testenv

import (
	"context"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/testutil"
)

// ServiceAccountToken creates the ServiceAccount name in ns and mints a
// token for it with the TokenRequest API.
func (e *Env) ServiceAccountToken(t testing.TB, ns, name string, audiences ...string) string {
	t.Helper()
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating service account %s: %v", name, err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("minting a token for %s: %v", name, err)
	}
	return tr.Status.Token
}

// PodToken is a token of pod's service account for the gateway, bound to
// pod, as the kubelet projects it into a member Pod.
func (e *Env) PodToken(t testing.TB, pod *corev1.Pod) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(context.Background(), sa, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences:         []string{fleetv1alpha1.GatewayAudience},
		ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("minting a token for pod %s: %v", pod.Name, err)
	}
	return tr.Status.Token
}

// AllowDelegations binds the service account sa to a Role that may create
// Delegations in ns.
func (e *Env) AllowDelegations(t testing.TB, ns, sa string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "delegator-" + sa, Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{fleetv1alpha1.GroupVersion.Group}, Resources: []string{"delegations"}, Verbs: []string{"create"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "delegator-" + sa, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
	}
	if err := e.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
}

// Delegation reads a Delegation from the API server.
func (e *Env) Delegation(t testing.TB, ns, name string) *fleetv1alpha1.Delegation {
	t.Helper()
	var d fleetv1alpha1.Delegation
	if err := e.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &d); err != nil {
		t.Fatalf("reading delegation %s: %v", name, err)
	}
	return &d
}

// Settle plays the Delegation controller: it applies transitions to the
// Delegation and writes its status, again on a conflict.
func (e *Env) Settle(t testing.TB, ns, name string, transitions ...func(d *fleetv1alpha1.Delegation, now time.Time)) {
	t.Helper()
	testutil.Eventually(t, "", func() error {
		var d fleetv1alpha1.Delegation
		if err := e.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &d); err != nil {
			return err
		}
		for _, f := range transitions {
			f(&d, time.Now())
		}
		return e.Client.Status().Update(context.Background(), &d)
	})
}
