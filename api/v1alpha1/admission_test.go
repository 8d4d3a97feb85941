package v1alpha1_test

import (
	"context"
	"fmt"
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

// TestMemberPodBounds: a person who may create Members and not Pods gets
// a Pod within Pod Security restricted, under the namespace's default
// service account, from fleetd's image: each field beyond is refused with
// a message naming it. A Profile opens more only when its writer may
// create Pods in the namespace.
func TestMemberPodBounds(t *testing.T) {
	ns := env.Namespace(t)
	c := fleetManager(t, ns)
	ctx := context.Background()
	member := func(name, pod string) *unstructured.Unstructured {
		return decode(t, `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: `+name+`}, spec: {command: [sh], runtime: Pod, pod: `+pod+`}}`, ns)
	}
	const restricted = `runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}`
	refused := map[string]struct{ pod, want string }{
		"an image":                {pod: `{image: "evil:latest"}`, want: "spec.pod.image: a Member may not name an image"},
		"another service account": {pod: `{serviceAccountName: deployer}`, want: "spec.pod.serviceAccountName: a Member may not run as a service account other than the namespace's default; only a Profile may open it"},
		"every taint tolerated":   {pod: `{tolerations: [{operator: Exists}]}`, want: "spec.pod.tolerations: a Member may not let its Pod onto tainted nodes"},
		"a runtime class":         {pod: `{runtimeClassName: runc}`, want: "spec.pod.runtimeClassName: a Member may not choose a runtime class"},
		"egress":                  {pod: `{egress: {internet: false}}`, want: "spec.pod.egress: a Member may not say where its Pod connects"},
		"egress rules":            {pod: `{egress: {rules: [{to: [{ipBlock: {cidr: 10.0.0.0/8}}]}]}}`, want: "spec.pod.egress: a Member may not say where its Pod connects"},
		"root by runAsNonRoot":    {pod: `{securityContext: {runAsNonRoot: false, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}}`, want: "spec.pod.securityContext.runAsNonRoot: must be true"},
		"runAsNonRoot left out":   {pod: `{securityContext: {runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}}`, want: "spec.pod.securityContext.runAsNonRoot: must be true"},
		"root by uid":             {pod: `{securityContext: {runAsNonRoot: true, runAsUser: 0, seccompProfile: {type: RuntimeDefault}}}`, want: "spec.pod.securityContext.runAsUser: must not be 0"},
		"seccomp Unconfined":      {pod: `{securityContext: {runAsNonRoot: true, seccompProfile: {type: Unconfined}}}`, want: "spec.pod.securityContext.seccompProfile.type: must be RuntimeDefault or Localhost"},
		"seccomp left out":        {pod: `{securityContext: {runAsNonRoot: true}}`, want: "spec.pod.securityContext.seccompProfile.type: must be RuntimeDefault or Localhost"},
		"AppArmor Unconfined":     {pod: `{securityContext: {` + restricted + `, appArmorProfile: {type: Unconfined}}}`, want: "spec.pod.securityContext.appArmorProfile.type: must be RuntimeDefault or Localhost"},
		"an SELinux user":         {pod: `{securityContext: {` + restricted + `, seLinuxOptions: {user: system_u}}}`, want: "spec.pod.securityContext.seLinuxOptions: no user or role"},
		"an SELinux type":         {pod: `{securityContext: {` + restricted + `, seLinuxOptions: {type: spc_t}}}`, want: "spec.pod.securityContext.seLinuxOptions: no user or role"},
		"sysctls":                 {pod: `{securityContext: {` + restricted + `, sysctls: [{name: kernel.msgmax, value: "1"}]}}`, want: "spec.pod.securityContext.sysctls: a Member may not set sysctls"},
		"a Windows host process":  {pod: `{securityContext: {` + restricted + `, windowsOptions: {hostProcess: true}}}`, want: "spec.pod.securityContext.windowsOptions.hostProcess: must not be true"},
		"the report's attack": {
			pod:  `{serviceAccountName: deployer, tolerations: [{operator: Exists}], securityContext: {runAsUser: 0, seccompProfile: {type: Unconfined}}}`,
			want: "a Member may not",
		},
	}
	for name, tc := range refused {
		t.Run(name, func(t *testing.T) {
			err := c.Create(ctx, member("refused", tc.pod))
			if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("create = %v, want a refusal saying %q", err, tc.want)
			}
		})
	}
	allowed := map[string]string{
		"scheduling and resources": `{nodeSelector: {pool: agents}, resources: {limits: {memory: 1Gi}}, imagePullPolicy: Always, workspace: {volumeClaim: {size: 1Gi}}}`,
		"the default account":      `{serviceAccountName: default}`,
		"a restricted context":     `{securityContext: {` + restricted + `, fsGroup: 1000, appArmorProfile: {type: RuntimeDefault}, seLinuxOptions: {type: container_t, level: "s0:c1,c2"}}}`,
		"a local seccomp profile":  `{securityContext: {runAsNonRoot: true, seccompProfile: {type: Localhost, localhostProfile: agents.json}}}`,
	}
	i := 0
	for name, pod := range allowed {
		i++
		t.Run(name, func(t *testing.T) {
			if err := c.Create(ctx, member(fmt.Sprintf("allowed-%d", i), pod)); err != nil {
				t.Errorf("create = %v, want it allowed", err)
			}
		})
	}

	// A Profile opens more when its writer may create Pods in the
	// namespace (here the administrator); a Member uses it without asking
	// for anything itself.
	profile := func(name, pod string) *unstructured.Unstructured {
		return decode(t, `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Profile, metadata: {name: `+name+`}, spec: {command: [sh], runtime: Pod, pod: `+pod+`}}`, ns)
	}
	const opened = `{image: "agents:1", serviceAccountName: agents, runtimeClassName: gvisor, tolerations: [{key: agents, operator: Exists}], securityContext: {runAsUser: 0}, egress: {internet: false, rules: [{to: [{ipBlock: {cidr: 10.1.2.3/32}}], ports: [{port: 443}]}]}}`
	if err := env.Client.Create(ctx, profile("opened", opened)); err != nil {
		t.Fatalf("an administrator's Profile that opens more: %v, want it allowed", err)
	}
	if err := c.Create(ctx, decode(t, `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: on-profile}, spec: {profile: opened}}`, ns)); err != nil {
		t.Errorf("a Member on that Profile: %v, want it allowed", err)
	}
	// Someone granted Profiles and not Pods cannot open more with one.
	writer := profileWriter(t, ns)
	err := writer.Create(ctx, profile("widened", `{image: "evil:latest"}`))
	if want := "spec.pod.image: you may not create Pods in namespace " + ns + ", so a Profile of yours may not name an image"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a Profile that names an image, from someone who may not create Pods: %v, want a refusal saying %q", err, want)
	}
	err = writer.Create(ctx, profile("private", `{egress: {rules: [{to: [{ipBlock: {cidr: 10.0.0.0/8}}]}]}}`))
	if want := "spec.pod.egress.rules: you may not create Pods in namespace " + ns + ", so a Profile of yours may not open connections beyond the internet"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a Profile that opens a private range, from someone who may not create Pods: %v, want a refusal saying %q", err, want)
	}
	if err := writer.Create(ctx, profile("narrow", `{resources: {limits: {memory: 1Gi}}, egress: {internet: false}}`)); err != nil {
		t.Errorf("a Profile within the bounds, from someone who may not create Pods: %v, want it allowed", err)
	}
}

// profileWriter is a client for a person who may write Profiles in ns and
// may not create Pods.
func profileWriter(t *testing.T, ns string) client.Client {
	t.Helper()
	const user = "profile-writer@example.com"
	ctx := context.Background()
	if err := env.Client.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "profile-writer", Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"fleet.fleetd.dev"}, Resources: []string{"profiles"}, Verbs: []string{"create", "get", "update"}}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "profile-writer", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "profile-writer"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}); err != nil {
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
