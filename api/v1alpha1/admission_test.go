package v1alpha1_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetd/fleetd/internal/devenv"
	"github.com/fleetd/fleetd/internal/testenv"
)

// fleetManager is a client for a person bound in ns to fleetd-delegator and
// fleetd-fleet-manager (config/rbac): they may create Members and
// Delegations, read Profiles, and nothing else; in particular they may not
// create Pods or read Secrets. fleetd's admission policies are installed.
func fleetManager(t *testing.T, ns string) client.Client {
	t.Helper()
	ctx := context.Background()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "delegator_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := env.Client.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	const user = "fleet-manager@example.com"
	for _, role := range []string{"fleetd-delegator", "fleetd-fleet-manager"} {
		if err := env.Client.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := devenv.InstallPolicies(ctx, env.Client, ns); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestOnlyFleetdNamesImages: a person who may create Delegations, and may
// not read Secrets, cannot name another message's images' Secret: fleetd,
// which reads every Secret, would deliver those images for them.
func TestOnlyFleetdNamesImages(t *testing.T) {
	ns := env.Namespace(t)
	c := fleetManager(t, ns)
	ctx := context.Background()
	withImages := decode(t, `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Delegation, metadata: {name: copied}, spec: {to: mine, content: look,
	  images: {secretName: images-of-the-primarys-message, items: [{key: 0.png, mediaType: image/png, size: 3, sha256: "`+strings.Repeat("0", 64)+`"}]}}}`, ns)
	err := c.Create(ctx, withImages)
	if err == nil || !strings.Contains(err.Error(), "only fleetd may set spec.images") {
		t.Errorf("creating a Delegation that names images: %v, want a refusal saying only fleetd may set spec.images", err)
	}
	without := decode(t, `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Delegation, metadata: {name: words}, spec: {to: mine, content: look}}`, ns)
	if err := c.Create(ctx, without); err != nil {
		t.Errorf("creating a Delegation without images: %v, want it allowed", err)
	}
	// fleetd's own identity (here the administrator, who holds every verb
	// and so "relay") names the Secret it wrote.
	withImages.SetName("relayed")
	if err := env.Client.Create(ctx, withImages); err != nil {
		t.Errorf("fleetd creating a Delegation with images: %v, want it allowed", err)
	}
}
