package agents

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// TestPermissionModesMatchTheAPI: the API server admits a Profile's
// permissionMode by a CEL rule on the Profile CRD, and the agents package
// configures each agent from it; the two lists of modes must agree, or a
// Profile the API server admits gets a mode its agent does not know.
func TestPermissionModesMatchTheAPI(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "config", "crd", "bases", "fleet.fleetd.dev_profiles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	modes := regexp.MustCompile(`self\.agent == '(\w+)' && self\.permissionMode in \[([^\]]*)\]`)
	inCEL := map[fleetv1alpha1.AgentKind][]string{}
	for _, v := range crd.Spec.Versions {
		for _, rule := range v.Schema.OpenAPIV3Schema.Properties["spec"].XValidations {
			for _, m := range modes.FindAllStringSubmatch(rule.Rule, -1) {
				var list []string
				for q := range strings.SplitSeq(m[2], ",") {
					list = append(list, strings.Trim(strings.TrimSpace(q), "'"))
				}
				inCEL[fleetv1alpha1.AgentKind(m[1])] = list
			}
		}
	}
	cases := map[fleetv1alpha1.AgentKind][]string{
		fleetv1alpha1.AgentClaude: ClaudePermissionModes,
		fleetv1alpha1.AgentCodex:  CodexPermissionModes,
	}
	for kind, inGo := range cases {
		t.Run(string(kind), func(t *testing.T) {
			if diff := cmp.Diff(inGo, inCEL[kind]); diff != "" {
				t.Errorf("permission modes of %s (-agents +CEL rule):\n%s", kind, diff)
			}
		})
	}
	if len(inCEL) != len(cases) {
		t.Errorf("the CEL rule names permission modes for %d agents, the agents package for %d: %v", len(inCEL), len(cases), inCEL)
	}
}

func TestResumeArgs(t *testing.T) {
	cases := map[string]struct {
		kind    fleetv1alpha1.AgentKind
		args    []string
		session string
		want    []string
		ok      bool
	}{
		"claude resumes with --resume first": {
			kind: fleetv1alpha1.AgentClaude, args: []string{"--settings", "/s.json"}, session: "abc",
			want: []string{"--resume", "abc", "--settings", "/s.json"}, ok: true,
		},
		"codex resumes with its subcommand after the options": {
			kind: fleetv1alpha1.AgentCodex, args: []string{"-c", "x=1"}, session: "abc",
			want: []string{"-c", "x=1", "resume", "abc"}, ok: true,
		},
		"codex without options": {
			kind: fleetv1alpha1.AgentCodex, session: "abc", want: []string{"resume", "abc"}, ok: true,
		},
		"no session":    {kind: fleetv1alpha1.AgentClaude, args: []string{"-x"}},
		"unknown agent": {kind: "aider", args: []string{"-x"}, session: "abc"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := ResumeArgs(tc.kind, tc.args, tc.session)
			if ok != tc.ok || !slices.Equal(got, tc.want) {
				t.Errorf("ResumeArgs = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
