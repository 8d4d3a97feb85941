package v1alpha1_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/devenv"
	"github.com/fleetd/fleetd/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// decode turns one YAML manifest into an object in namespace ns.
func decode(t *testing.T, manifest, ns string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatalf("decoding manifest: %v\n%s", err, manifest)
	}
	u.SetNamespace(ns)
	return u
}

// readSamples returns every object in config/samples.
func readSamples(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	dir := filepath.Join(testenv.RepoRoot(), "config", "samples")
	files, err := filepath.Glob(filepath.Join(dir, "fleet_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples in %s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(u.Object) > 0 {
				objs = append(objs, u)
			}
		}
	}
	return objs
}

func TestSamplesAreAccepted(t *testing.T) {
	ns := env.Namespace(t)
	// The sample Delegation leaves its sender out, as a kubectl user does:
	// fleetd's admission policies fill it in.
	if err := devenv.InstallPolicies(context.Background(), env.Client, ns); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, u := range readSamples(t) {
		u.SetNamespace(ns)
		if err := env.Client.Create(context.Background(), u); err != nil {
			t.Errorf("sample %s %s refused: %v", u.GetKind(), u.GetName(), err)
		}
		if from, _, _ := unstructured.NestedString(u.Object, "spec", "from", "kind"); u.GetKind() == "Delegation" && from != string(fleetv1alpha1.PrincipalUser) {
			t.Errorf("sample Delegation %s: the API server set its sender's kind to %q, want User", u.GetName(), from)
		}
		kinds[u.GetKind()]++
	}
	for _, k := range []string{"Member", "Delegation", "Profile"} {
		if kinds[k] == 0 {
			t.Errorf("no sample of kind %s", k)
		}
	}
}

func TestBadManifestsAreRefused(t *testing.T) {
	ns := env.Namespace(t)
	long := strings.Repeat("x", fleetv1alpha1.MaxContentBytes+1)
	cases := map[string]struct {
		manifest string
		// want are substrings the API server's message must contain: the
		// offending field and what is wrong with it.
		want []string
	}{
		"member without profile, agent or command": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: m1}, spec: {team: core}}`,
			want:     []string{"spec", "set exactly one of profile, agent or command"},
		},
		"member with profile and command": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: m2}, spec: {profile: p, command: [sh]}}`,
			want:     []string{"spec", "set exactly one of profile, agent or command"},
		},
		"member with a pod in the shared runtime": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: m-pod}, spec: {command: [sh], runtime: Shared, pod: {image: x}}}`,
			want:     []string{"spec", "pod applies only to runtime: Pod"},
		},
		"member with an unknown runtime": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: m-rt}, spec: {command: [sh], runtime: VM}}`,
			want:     []string{"spec.runtime", "Unsupported value", "Shared", "Pod"},
		},
		"member pod workspace claim without a size": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: m-pvc}, spec: {command: [sh], runtime: Pod, pod: {workspace: {volumeClaim: {keep: true}}}}}`,
			want:     []string{"spec.pod.workspace.volumeClaim.size", "Required"},
		},
		"member suspending in the shared runtime": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: m-sus}, spec: {command: [sh], runtime: Shared, suspend: true}}`,
			want:     []string{"spec", "suspend and idle apply only to runtime: Pod"},
		},
		"member idle with a zero suspendAfter": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: m-idle0}, spec: {command: [sh], runtime: Pod, idle: {suspendAfter: 0s}}}`,
			want:     []string{"spec.idle.suspendAfter", "at least 1s"},
		},
		"member idle with a negative suspendAfter": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: m-idleneg}, spec: {command: [sh], runtime: Pod, idle: {suspendAfter: -5m}}}`,
			want:     []string{"spec.idle.suspendAfter", "at least 1s"},
		},
		"member idle without suspendAfter": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: m-idlenone}, spec: {command: [sh], runtime: Pod, idle: {}}}`,
			want:     []string{"spec.idle.suspendAfter", "Required"},
		},
		"profile idle with a zero suspendAfter": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Profile, metadata: {name: p-idle0}, spec: {command: [sh], idle: {suspendAfter: 0s}}}`,
			want:     []string{"spec.idle.suspendAfter", "at least 1s"},
		},
		"profile warm pool without runtime Pod": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Profile, metadata: {name: p-warm-rt}, spec: {command: [sh], warmPool: {size: 2}}}`,
			want:     []string{"spec", "warmPool needs runtime: Pod"},
		},
		"profile warm pool with a workspace claim": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Profile, metadata: {name: p-warm-pvc}, spec: {command: [sh], runtime: Pod, warmPool: {size: 2}, pod: {workspace: {volumeClaim: {size: 1Gi}}}}}`,
			want:     []string{"spec", "warmPool needs an emptyDir workspace"},
		},
		"profile warm pool too large": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Profile, metadata: {name: p-warm-big}, spec: {command: [sh], runtime: Pod, warmPool: {size: 1000}}}`,
			want:     []string{"spec.warmPool.size", "100"},
		},
		"profile with a pod in the shared runtime": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Profile, metadata: {name: p-pod}, spec: {command: [sh], runtime: Shared, pod: {image: x}}}`,
			want:     []string{"spec", "pod applies only to runtime: Pod"},
		},
		"member with agent and command": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: m3}, spec: {agent: claude, command: [sh]}}`,
			want:     []string{"spec", "set exactly one of profile, agent or command"},
		},
		"member name not a herdr agent name": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: 1worker}, spec: {agent: claude}}`,
			want:     []string{"metadata.name", "herdr agent name"},
		},
		"member name longer than 32": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: a23456789012345678901234567890123}, spec: {agent: claude}}`,
			want:     []string{"metadata.name", "herdr agent name"},
		},
		"member role not in enum": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: m4}, spec: {agent: claude, role: boss}}`,
			want:     []string{"spec.role", `"lead", "member"`},
		},
		"member env with value and valueFrom": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: m5}, spec: {command: [sh], env: [{name: A, value: x, valueFrom: {secretKeyRef: {name: s, key: k}}}]}}`,
			want:     []string{"spec.env", "exactly one of value or valueFrom"},
		},
		"member env sets a reserved FLEETD_ name": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: m6}, spec: {command: [sh], env: [{name: FLEETD_TOKEN, value: x}]}}`,
			want:     []string{"spec.env", "reserved for fleetd and herdr"},
		},
		"member inline env carries ANTHROPIC_BASE_URL": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: m7}, spec: {agent: claude, env: [{name: ANTHROPIC_BASE_URL, value: "http://x"}]}}`,
			want:     []string{"spec.env", "ANTHROPIC_BASE_URL"},
		},
		"member with profile and env": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: m8}, spec: {profile: p, env: [{name: A, value: x}]}}`,
			want:     []string{"spec", "env and workingDir come from the profile"},
		},
		"member command with args": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: m9}, spec: {command: [sh], args: [-c]}}`,
			want:     []string{"spec", "args apply only to an agent or a profile"},
		},
		"member bad env name": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: m10}, spec: {command: [sh], env: [{name: "1-A", value: x}]}}`,
			want:     []string{"spec.env[0].name", "should match"},
		},
		"member agent kind with uppercase": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: m11}, spec: {agent: Claude}}`,
			want:     []string{"spec.agent", "should match"},
		},
		"profile billing api without ANTHROPIC_BASE_URL": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Profile, metadata: {name: p1}, spec: {agent: claude, billing: api}}`,
			want:     []string{"spec", "billing: api requires ANTHROPIC_BASE_URL in env"},
		},
		"profile subscription with ANTHROPIC_BASE_URL": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Profile, metadata: {name: p2}, spec: {agent: claude, env: [{name: ANTHROPIC_BASE_URL, value: "http://x"}]}}`,
			want:     []string{"spec", "billing: subscription must not set ANTHROPIC_BASE_URL"},
		},
		"codex profile billing api without OPENAI_BASE_URL": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Profile, metadata: {name: p8}, spec: {agent: codex, billing: api, env: [{name: ANTHROPIC_BASE_URL, value: "http://x"}]}}`,
			want:     []string{"spec", "OPENAI_BASE_URL for agent: codex"},
		},
		"codex profile subscription with OPENAI_API_KEY": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Profile, metadata: {name: p9}, spec: {agent: codex, env: [{name: OPENAI_API_KEY, value: "sk"}]}}`,
			want:     []string{"spec", "billing: subscription must not set", "OPENAI_API_KEY"},
		},
		"codex profile with a claude permission mode": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Profile, metadata: {name: p10}, spec: {agent: codex, permissionMode: dontAsk}}`,
			want:     []string{"spec", "never or on-request for agent: codex"},
		},
		"claude profile with a codex permission mode": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Profile, metadata: {name: p11}, spec: {agent: claude, permissionMode: on-request}}`,
			want:     []string{"spec", "dontAsk, default, acceptEdits, plan, auto, bypassPermissions for agent: claude"},
		},
		"member with an OpenAI key inline": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Member, metadata: {name: m12}, spec: {agent: codex, env: [{name: OPENAI_API_KEY, value: "sk"}]}}`,
			want:     []string{"spec.env", "belong in a Profile with billing: api"},
		},
		"profile billing not in enum": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Profile, metadata: {name: p3}, spec: {agent: claude, billing: free}}`,
			want:     []string{"spec.billing", `"subscription", "api"`},
		},
		"profile without agent or command": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Profile, metadata: {name: p4}, spec: {model: sonnet}}`,
			want:     []string{"spec", "exactly one of agent (a herdr agent kind) or command"},
		},
		"profile effort not in enum": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Profile, metadata: {name: p5}, spec: {agent: claude, effort: extreme}}`,
			want:     []string{"spec.effort", `"low"`},
		},
		"profile without spec": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Profile, metadata: {name: p6}}`,
			want:     []string{"spec", "Required value"},
		},
		"profile model with spaces": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Profile, metadata: {name: p7}, spec: {agent: claude, model: "rm -rf"}}`,
			want:     []string{"spec.model", "should match"},
		},
		"profile git email with a space": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Profile, metadata: {name: p12}, spec: {agent: claude, git: {name: Agent, email: "agent @example.com"}}}`,
			want:     []string{"spec.git.email", "email must be an address"},
		},
		"profile git email with angle brackets": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Profile, metadata: {name: p13}, spec: {agent: claude, git: {name: Agent, email: "<agent@example.com>"}}}`,
			want:     []string{"spec.git.email", "email must be an address"},
		},
		"delegation without to": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Delegation, metadata: {name: d1}, spec: {from: {kind: Static, name: dev}, content: hi}}`,
			want:     []string{"spec.to", "Required value"},
		},
		"delegation with empty content": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Delegation, metadata: {name: d2}, spec: {from: {kind: Static, name: dev}, to: w, content: ""}}`,
			want:     []string{"spec.content", "at least 1"},
		},
		"delegation content over 64 KiB": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Delegation, metadata: {name: d3}, spec: {from: {kind: Static, name: dev}, to: w, content: ` + long + `}}`,
			want:     []string{"spec.content", "Too long"},
		},
		"delegation timeout over a day": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Delegation, metadata: {name: d4}, spec: {from: {kind: Static, name: dev}, to: w, content: hi, timeoutSeconds: 86401}}`,
			want:     []string{"spec.timeoutSeconds", "less than or equal to 86400"},
		},
		"delegation timeout zero": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Delegation, metadata: {name: d5}, spec: {from: {kind: Static, name: dev}, to: w, content: hi, timeoutSeconds: 0}}`,
			want:     []string{"spec.timeoutSeconds", "greater than or equal to 1"},
		},
		"delegation sender kind not in enum": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Delegation, metadata: {name: d6}, spec: {from: {kind: Human, name: dev}, to: w, content: hi}}`,
			want:     []string{"spec.from.kind", `"Member", "ServiceAccount", "Static"`},
		},
		"delegation to an invalid member name": {
			manifest: `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Delegation, metadata: {name: d7}, spec: {from: {kind: Static, name: dev}, to: "Worker 1", content: hi}}`,
			want:     []string{"spec.to", "should match"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := env.Client.Create(context.Background(), decode(t, tc.manifest, ns))
			if err == nil {
				t.Fatalf("the API server accepted a bad manifest")
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message does not mention %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestDelegationSpecIsImmutable(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	d := decode(t, `{apiVersion: fleet.fleetd.dev/v1alpha1, kind: Delegation, metadata: {name: d}, spec: {from: {kind: Static, name: dev}, to: w, content: hi}}`, ns)
	if err := env.Client.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"spec":{"content":"changed"}}`)
	err := env.Client.Patch(ctx, d, client.RawPatch(types.MergePatchType, patch))
	if err == nil || !strings.Contains(err.Error(), "spec is immutable") {
		t.Fatalf("changing spec.content: want the immutability message, got %v", err)
	}
	// Metadata stays mutable: labels are how delegations are found.
	labels := []byte(`{"metadata":{"labels":{"x":"y"}}}`)
	if err := env.Client.Patch(ctx, d, client.RawPatch(types.MergePatchType, labels)); err != nil {
		t.Fatalf("labelling a delegation: %v", err)
	}
}

func TestDefaults(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	d := &fleetv1alpha1.Delegation{}
	d.Name, d.Namespace = "d", ns
	d.Spec = fleetv1alpha1.DelegationSpec{From: fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "dev"}, To: "w", Content: "hi"}
	if err := env.Client.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	if d.Spec.Wait == nil || !*d.Spec.Wait || d.Spec.TimeoutSeconds != fleetv1alpha1.DefaultTimeoutSeconds {
		t.Errorf("defaults: wait=%v timeoutSeconds=%d, want true and %d", d.Spec.Wait, d.Spec.TimeoutSeconds, fleetv1alpha1.DefaultTimeoutSeconds)
	}
	// A new Delegation shows as Queued without anyone writing its status:
	// the create itself is the queueing.
	if d.Status.Phase != fleetv1alpha1.DelegationQueued {
		t.Errorf("a new delegation's phase = %q, want Queued", d.Status.Phase)
	}
	got := &fleetv1alpha1.Delegation{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(d), got); err != nil || got.Status.Phase != fleetv1alpha1.DelegationQueued {
		t.Errorf("read back: phase = %q (err %v), want Queued", got.Status.Phase, err)
	}
	m := &fleetv1alpha1.Member{}
	m.Name, m.Namespace = "w", ns
	m.Spec.Command = []string{"sh"}
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	if m.Spec.Role != fleetv1alpha1.RoleMember {
		t.Errorf("default role = %q, want member", m.Spec.Role)
	}
}

func TestStatusSubresource(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	m := &fleetv1alpha1.Member{}
	m.Name, m.Namespace = "w", ns
	m.Spec.Command = []string{"sh"}
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	// A status in the main resource's write is ignored ...
	m.Status.Phase = fleetv1alpha1.MemberReady
	if err := env.Client.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	got := &fleetv1alpha1.Member{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(m), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != "" {
		t.Errorf("status written through the main resource: phase=%q", got.Status.Phase)
	}
	// ... and lands through the status subresource, without touching spec.
	got.Status.Phase = fleetv1alpha1.MemberReady
	got.Status.PaneID = "w1:p1"
	got.Spec.Team = "ignored"
	if err := env.Client.Status().Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	final := &fleetv1alpha1.Member{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(m), final); err != nil {
		t.Fatal(err)
	}
	if final.Status.Phase != fleetv1alpha1.MemberReady || final.Status.PaneID != "w1:p1" || final.Spec.Team != "" {
		t.Errorf("after a status update: phase=%q pane=%q team=%q", final.Status.Phase, final.Status.PaneID, final.Spec.Team)
	}
}

func TestPrinterColumnsAndCategories(t *testing.T) {
	env.Require(t)
	want := map[string][]string{
		"members":     {"Phase", "Agent Status", "Pane", "Team", "Role", "Age"},
		"delegations": {"From", "To", "Phase", "Outcome", "Replied", "Age"},
		"profiles":    {"Agent", "Model", "Billing", "Age"},
	}
	for plural, cols := range want {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: plural + ".fleet.fleetd.dev"}, crd); err != nil {
			t.Fatalf("getting CRD %s: %v", plural, err)
		}
		have := map[string]bool{}
		for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
			have[c.Name] = true
		}
		for _, c := range cols {
			if !have[c] {
				t.Errorf("%s: no printer column %q", plural, c)
			}
		}
		if !contains(crd.Spec.Names.Categories, "fleet") {
			t.Errorf("%s: not in category fleet: %v", plural, crd.Spec.Names.Categories)
		}
		if len(crd.Spec.Names.ShortNames) == 0 {
			t.Errorf("%s: no short name", plural)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
