// Package helm tests charts/fleetd with the pinned Helm CLI (make helm
// builds it into bin/helm from hack/helm): that its default render is what
// config/default applies, that each value lands where it says, and that
// bad values are refused with the value's name. Where bin/helm or kubectl
// (make controlplane) is missing the tests are skipped, or fail when
// FLEETD_REQUIRE_HELM=1 (make test sets it).
package helm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/fleetd/fleetd/internal/testenv"
)

const (
	chart     = "charts/fleetd"
	allValues = "charts/fleetd/ci/all-values.yaml"
)

// tool returns the path of a binary the tests run, skipping (or failing,
// with FLEETD_REQUIRE_HELM=1) when it is not built.
func tool(t *testing.T, path, build string) string {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("FLEETD_REQUIRE_HELM") == "1" {
			t.Fatalf("%s is not built (%s): %v", path, build, err)
		}
		t.Skipf("%s is not built: run %s", path, build)
	}
	return path
}

func helmBin(t *testing.T) string {
	return tool(t, filepath.Join(testenv.RepoRoot(), "bin", "helm"), "make helm")
}

func kubectlBin(t *testing.T) string {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join(testenv.RepoRoot(), "bin", "controlplane")
	}
	return tool(t, filepath.Join(dir, "kubectl"), "make controlplane")
}

// run runs a binary in the repository's root and returns its standard
// output, or its error with what it printed.
func run(bin string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = testenv.RepoRoot()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), errors.New(err.Error() + ": " + stderr.String())
	}
	return stdout.String(), nil
}

// helmTemplate renders the chart as release fleetd in namespace ns, CRDs
// included.
func helmTemplate(t *testing.T, ns string, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := run(helmBin(t), append([]string{"template", "fleetd", chart, "--namespace", ns, "--include-crds"}, args...)...)
	if err != nil {
		t.Fatalf("helm template %s: %v", strings.Join(args, " "), err)
	}
	return decode(t, out)
}

// decode reads a stream of YAML documents, leaving out empty ones.
func decode(t *testing.T, stream string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(stream), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("decoding %q: %v", stream, err)
		}
		if obj != nil {
			objs = append(objs, &unstructured.Unstructured{Object: obj})
		}
	}
}

// key names an object in a render.
func key(o *unstructured.Unstructured) string {
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

func byKey(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	m := make(map[string]*unstructured.Unstructured, len(objs))
	for _, o := range objs {
		m[key(o)] = o
	}
	return m
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("the render has no %s %s", kind, name)
	return nil
}

// clusterScoped are the cluster-scoped kinds fleetd's manifests hold.
var clusterScoped = map[string]bool{
	"CustomResourceDefinition": true, "ClusterRole": true, "ClusterRoleBinding": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
	"MutatingAdmissionPolicy": true, "MutatingAdmissionPolicyBinding": true,
	"FlowSchema": true,
}

// TestDefaultsMatchConfigDefault holds the chart to config/default, the one
// source of what fleetd needs in a cluster: rendered with its default
// values in fleetd-system, the chart has the same objects as `kubectl
// kustomize config/default` (but the Namespace, which helm install
// --create-namespace makes), each the same but for the labels Helm's
// conventions add: the same RBAC rules, admission policies, CRDs, Service,
// and the same pod (flags, images, security contexts, volumes, resources).
func TestDefaultsMatchConfigDefault(t *testing.T) {
	out, err := run(kubectlBin(t), "kustomize", "config/default")
	if err != nil {
		t.Fatal(err)
	}
	kustomized := slices.DeleteFunc(decode(t, out), func(o *unstructured.Unstructured) bool { return o.GetKind() == "Namespace" })
	for _, o := range kustomized {
		// kustomize does not know the admission policies and flow schemas
		// for cluster-scoped, and gives them a namespace, which the API
		// server leaves out.
		if clusterScoped[o.GetKind()] {
			o.SetNamespace("")
		}
	}
	want := byKey(kustomized)
	got := byKey(helmTemplate(t, "fleetd-system"))

	if diff := cmp.Diff(slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(got))); diff != "" {
		t.Errorf("objects (-config/default +chart):\n%s", diff)
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			continue
		}
		w, g = w.DeepCopy(), g.DeepCopy()
		for _, o := range []*unstructured.Unstructured{w, g} {
			o.SetLabels(nil)
			o.SetAnnotations(nil)
		}
		if w.GetKind() == "Deployment" {
			// The pod keeps config/default's labels (fleetd's NetworkPolicies
			// select app.kubernetes.io/name=fleetd) and adds Helm's.
			wl, _, _ := unstructured.NestedStringMap(w.Object, "spec", "template", "metadata", "labels")
			gl, _, _ := unstructured.NestedStringMap(g.Object, "spec", "template", "metadata", "labels")
			for l, v := range wl {
				if gl[l] != v {
					t.Errorf("the chart's pod has label %s=%q, want %q as config/default", l, gl[l], v)
				}
			}
			unstructured.RemoveNestedField(w.Object, "spec", "template", "metadata", "labels")
			unstructured.RemoveNestedField(g.Object, "spec", "template", "metadata", "labels")
		}
		if diff := cmp.Diff(w.Object, g.Object, sameWords); diff != "" {
			t.Errorf("%s (-config/default +chart):\n%s", k, diff)
		}
	}
}

// sameWords compares strings word for word: kustomize and Helm fold the
// admission policies' multi-line CEL expressions (YAML's >-) with different
// line breaks, which CEL reads alike.
var sameWords = cmp.Transformer("words", func(s string) string { return strings.Join(strings.Fields(s), " ") })

// TestReleaseNamespace checks that a release in another namespace puts
// everything there: no object, subject or flag is left naming
// fleetd-system.
func TestReleaseNamespace(t *testing.T) {
	objs := helmTemplate(t, "fleet-ops")
	for _, o := range objs {
		switch ns := o.GetNamespace(); {
		case clusterScoped[o.GetKind()] && ns != "":
			t.Errorf("%s is cluster-scoped, yet in namespace %s", key(o), ns)
		case !clusterScoped[o.GetKind()] && ns != "fleet-ops":
			t.Errorf("%s is in namespace %q, want fleet-ops", key(o), ns)
		}
	}
	out, err := yaml.Marshal(objs)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "fleetd-system") {
		t.Errorf("a release in fleet-ops still names fleetd-system:\n%s", out)
	}
	subjects, _, _ := unstructured.NestedSlice(find(t, objs, "ClusterRoleBinding", "fleetd-manager").Object, "subjects")
	if diff := cmp.Diff([]any{map[string]any{"kind": "ServiceAccount", "name": "fleetd", "namespace": "fleet-ops"}}, subjects); diff != "" {
		t.Errorf("fleetd-manager's subjects (-want +got):\n%s", diff)
	}
}

// TestAllValues renders the chart with ci/all-values.yaml, which sets every
// value the chart documents, and checks that each lands where it should.
func TestAllValues(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), allValues))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Image struct {
			Repository, Tag, PullPolicy string
		}
		WorkerImage struct {
			Repository, Tag string
		}
		Replicas       int64
		Affinity       map[string]any
		DefaultRuntime string
		Limits         struct {
			MaxQueue, MaxHops, MaxSpawns, MaxMembers int64
		}
		ExtraArgs          []string
		Resources          map[string]any
		PodSecurityContext map[string]any
		SecurityContext    map[string]any
		RBAC               struct {
			Create    bool
			UserRoles []string
		}
	}
	if err := yaml.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	objs := helmTemplate(t, "fleetd-system", "-f", allValues)
	d := find(t, objs, "Deployment", "fleetd")

	if got, _, _ := unstructured.NestedFieldNoCopy(d.Object, "spec", "replicas"); fmt.Sprint(got) != fmt.Sprint(v.Replicas) {
		t.Errorf("replicas = %v, want %d", got, v.Replicas)
	}
	if got, _, _ := unstructured.NestedFieldNoCopy(d.Object, "spec", "template", "spec", "affinity"); !cmp.Equal(got, v.Affinity) {
		t.Errorf("affinity = %v, want %v", got, v.Affinity)
	}
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	image := v.Image.Repository + ":" + v.Image.Tag
	byName := map[string]map[string]any{}
	for _, c := range containers {
		c := c.(map[string]any)
		byName[c["name"].(string)] = c
		if c["image"] != image || c["imagePullPolicy"] != v.Image.PullPolicy {
			t.Errorf("container %s runs %v (%v), want %s (%s)", c["name"], c["image"], c["imagePullPolicy"], image, v.Image.PullPolicy)
		}
	}
	var args []string
	for _, a := range byName["fleetd"]["args"].([]any) {
		args = append(args, a.(string))
	}
	for _, want := range append([]string{
		"--default-runtime=" + v.DefaultRuntime,
		"--worker-image=" + v.WorkerImage.Repository + ":" + v.WorkerImage.Tag,
		"--tools-image=" + image,
		"--member-image-pull-policy=" + v.Image.PullPolicy,
		"--max-queue=" + itoa(v.Limits.MaxQueue),
		"--max-hops=" + itoa(v.Limits.MaxHops),
		"--max-spawns=" + itoa(v.Limits.MaxSpawns),
		// A large number as Helm reads it is a float: it must still be
		// written as an integer fleetd parses.
		"--max-members=" + itoa(v.Limits.MaxMembers),
	}, v.ExtraArgs...) {
		if !slices.Contains(args, want) {
			t.Errorf("fleetd's args lack %s: %q", want, args)
		}
	}
	for _, c := range []string{"fleetd", "herdr"} {
		if diff := cmp.Diff(v.Resources[c], byName[c]["resources"]); diff != "" {
			t.Errorf("%s's resources (-values +render):\n%s", c, diff)
		}
		if diff := cmp.Diff(v.SecurityContext[c], byName[c]["securityContext"]); diff != "" {
			t.Errorf("%s's securityContext (-values +render):\n%s", c, diff)
		}
	}
	podSC, _, _ := unstructured.NestedMap(d.Object, "spec", "template", "spec", "securityContext")
	if diff := cmp.Diff(v.PodSecurityContext, podSC); diff != "" {
		t.Errorf("the pod's securityContext (-values +render):\n%s", diff)
	}

	var roles, others []string
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole":
			roles = append(roles, o.GetName())
		case "ClusterRoleBinding", "Role", "RoleBinding":
			others = append(others, key(o))
		}
	}
	if !v.RBAC.Create && len(others) > 0 {
		t.Errorf("rbac.create is false, yet the chart makes %q", others)
	}
	if diff := cmp.Diff(v.RBAC.UserRoles, roles); diff != "" {
		t.Errorf("ClusterRoles (-rbac.userRoles +render):\n%s", diff)
	}
	find(t, objs, "ServiceAccount", "fleetd")
}

func itoa(n int64) string {
	b, _ := yaml.Marshal(n)
	return strings.TrimSpace(string(b))
}

// TestAllValuesSetsEveryValue keeps ci/all-values.yaml whole: every value
// of values.yaml must be set there, to something else than its default, so
// that make verify and TestAllValues render each one.
func TestAllValuesSetsEveryValue(t *testing.T) {
	read := func(path string) map[string]any {
		raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), path))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	defaults, all := read(chart+"/values.yaml"), read(allValues)
	// Values whose whole object is the value (a securityContext, resources)
	// are compared whole; the others value by value.
	whole := map[string]bool{
		"resources.fleetd": true, "resources.herdr": true,
		"podSecurityContext": true, "affinity": true, "securityContext.fleetd": true, "securityContext.herdr": true,
	}
	var walk func(path string, d, a map[string]any)
	walk = func(path string, d, a map[string]any) {
		for k, dv := range d {
			p := strings.TrimPrefix(path+"."+k, ".")
			av, ok := a[k]
			if !ok {
				t.Errorf("%s: %s is not set", allValues, p)
				continue
			}
			if dm, isMap := dv.(map[string]any); isMap && !whole[p] {
				am, _ := av.(map[string]any)
				walk(p, dm, am)
				continue
			}
			if cmp.Equal(dv, av) {
				t.Errorf("%s: %s is set to its default, %v", allValues, p, dv)
			}
		}
	}
	walk("", defaults, all)
}

// TestRejectsBadValues checks that the chart's schema refuses values fleetd
// would refuse, or that would make another chart than the one asked for,
// and says which.
func TestRejectsBadValues(t *testing.T) {
	helm := helmBin(t)
	cases := map[string]struct {
		set  string
		want string
	}{
		"unknown runtime":        {set: "defaultRuntime=Nowhere", want: "defaultRuntime"},
		"no hops":                {set: "limits.maxHops=0", want: "maxHops"},
		"too many hops":          {set: "limits.maxHops=1001", want: "maxHops"},
		"a limit that is a word": {set: "limits.maxQueue=lots", want: "maxQueue"},
		"negative replicas":      {set: "replicas=-1", want: "replicas"},
		"unknown role":           {set: "rbac.userRoles={fleetd-admin}", want: "userRoles"},
		"misspelt value":         {set: "replica=2", want: "replica"},
		"flag without dashes":    {set: "extraArgs={max-queue=3}", want: "extraArgs"},
		"unknown pull policy":    {set: "image.pullPolicy=Sometimes", want: "pullPolicy"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			out, err := run(helm, "template", "fleetd", chart, "--namespace", "fleetd-system", "--set", tc.set)
			if err == nil {
				t.Fatalf("helm template --set %s rendered:\n%s", tc.set, out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template --set %s: %v; want it to name %s", tc.set, err, tc.want)
			}
		})
	}
}

// TestLint runs helm lint --strict with the default values and with every
// value set.
func TestLint(t *testing.T) {
	helm := helmBin(t)
	for _, args := range [][]string{nil, {"-f", allValues}} {
		if out, err := run(helm, append([]string{"lint", "--strict", chart}, args...)...); err != nil {
			t.Errorf("helm lint %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
