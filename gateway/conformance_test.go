package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetd/fleetd/internal/testenv"
)

// The official MCP conformance suite (@modelcontextprotocol/conformance,
// pinned in hack/conformance, installed by make conformance) run against a
// real gateway on a real API server: the protocol's own test client is the
// judge of the gateway's MCP, not our reading of the spec.

// Environment variables of the conformance test.
const (
	// conformanceRequireEnv turns a missing suite from a skip into a
	// failure (make test sets it).
	conformanceRequireEnv = "FLEETD_REQUIRE_CONFORMANCE"
	// conformancePathEnv names a conformance CLI other than the one make
	// conformance installs.
	conformancePathEnv = "FLEETD_MCP_CONFORMANCE"
)

// conformanceScenarios are the suite's server scenarios that apply to the
// gateway: those that need no tool, resource or prompt of the suite's own.
var conformanceScenarios = []string{
	"server-initialize",
	"ping",
	"tools-list",
	"logging-set-level",
	"resources-list",
	"prompts-list",
	"dns-rebinding-protection",
}

// conformanceNotApplicable are the suite's other server scenarios, each
// with the reason it does not apply. Every one of them tests a fixture the
// suite expects a server under test to carry (its test tools, resources
// and prompts, by fixed names); the gateway's tools are fleetd's own.
var conformanceNotApplicable = map[string]string{
	"completion-complete":           "completes an argument of the suite's prompt test_prompt_with_arguments; the gateway has no prompts",
	"tools-call-simple-text":        "calls the suite's tool test_simple_text",
	"tools-call-image":              "calls the suite's tool test_image_content",
	"tools-call-audio":              "calls the suite's tool test_audio_content",
	"tools-call-embedded-resource":  "calls the suite's tool test_embedded_resource",
	"tools-call-mixed-content":      "calls the suite's tool test_multiple_content_types",
	"tools-call-with-logging":       "calls the suite's tool test_tool_with_logging",
	"tools-call-error":              "calls the suite's tool test_error_handling",
	"tools-call-with-progress":      "calls the suite's tool test_tool_with_progress",
	"tools-call-sampling":           "calls the suite's tool test_sampling; the gateway never samples its client",
	"tools-call-elicitation":        "calls the suite's tool test_elicitation; the gateway never elicits",
	"json-schema-2020-12":           "inspects the input schema of the suite's tool json_schema_2020_12_tool",
	"elicitation-sep1034-defaults":  "calls the suite's tool test_elicitation_sep1034_defaults; the gateway never elicits",
	"elicitation-sep1330-enums":     "calls the suite's tool test_elicitation_sep1330_enums; the gateway never elicits",
	"server-sse-polling":            "calls the suite's tool test_reconnection over an MCP session; the gateway is stateless, with no sessions to resume",
	"server-sse-multiple-streams":   "opens several streams on one MCP session; the gateway is stateless, with no sessions",
	"resources-read-text":           "reads the suite's resource test://static-text; the gateway has no resources",
	"resources-read-binary":         "reads the suite's resource test://static-binary; the gateway has no resources",
	"resources-templates-read":      "reads the suite's resource template test://template/{id}/data; the gateway has no resources",
	"resources-subscribe":           "subscribes to the suite's resource test://watched-resource; the gateway has no resources",
	"resources-unsubscribe":         "unsubscribes from the suite's resource test://watched-resource; the gateway has no resources",
	"prompts-get-simple":            "gets the suite's prompt test_simple_prompt; the gateway has no prompts",
	"prompts-get-with-args":         "gets the suite's prompt test_prompt_with_arguments; the gateway has no prompts",
	"prompts-get-embedded-resource": "gets the suite's prompt test_prompt_with_embedded_resource; the gateway has no prompts",
	"prompts-get-with-image":        "gets the suite's prompt test_prompt_with_image; the gateway has no prompts",
}

// conformanceCLI returns the suite's CLI; without one the test is skipped,
// or fails under conformanceRequireEnv.
func conformanceCLI(t *testing.T) string {
	t.Helper()
	cli := os.Getenv(conformancePathEnv)
	if cli == "" {
		cli = filepath.Join(testenv.RepoRoot(), "bin", "mcp-conformance")
	}
	if _, err := os.Stat(cli); err != nil {
		if os.Getenv(conformanceRequireEnv) != "" {
			t.Fatalf("no MCP conformance suite at %s (%v): run make conformance, as make test does", cli, err)
		}
		t.Skipf("needs the MCP conformance suite at %s (make conformance installs it): %v", cli, err)
	}
	return cli
}

// runConformance runs the suite's CLI with args in dir and returns its
// output, and its error when it exits other than 0. The bound catches a
// hang, not slowness.
func runConformance(t *testing.T, cli, dir string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return ansiEscape.ReplaceAllString(string(out), ""), err
}

// ansiEscape matches the colours the suite prints whether or not its
// output is a terminal.
var ansiEscape = regexp.MustCompile("\x1b\\[[0-9;]*m")

// TestMCPConformance runs each applicable server scenario of the official
// MCP conformance suite against a real gateway. The suite's client sends
// no token, so it talks to the gateway through a proxy that adds the
// static primary's, and leaves every other header as the suite sent it
// (dns-rebinding-protection sends Host and Origin of its own choosing).
func TestMCPConformance(t *testing.T) {
	cli := conformanceCLI(t)
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	proxy := bearerProxy(t, h.url, staticToken)

	t.Run("every scenario is run or said not to apply", func(t *testing.T) {
		out, err := runConformance(t, cli, t.TempDir(), "list", "--server")
		if err != nil {
			t.Fatalf("listing the suite's server scenarios: %v\n%s", err, out)
		}
		var listed []string
		for _, m := range regexp.MustCompile(`(?m)^\s+- (\S+)`).FindAllStringSubmatch(out, -1) {
			listed = append(listed, m[1])
		}
		known := slices.Concat(conformanceScenarios, slices.Collect(maps.Keys(conformanceNotApplicable)))
		if diff := cmp.Diff(known, listed, cmpSorted); diff != "" {
			t.Errorf("the suite's server scenarios (-ours +the suite's): a new one must be run or said not to apply, a gone one removed:\n%s", diff)
		}
	})

	for _, scenario := range conformanceScenarios {
		t.Run(scenario, func(t *testing.T) {
			results := t.TempDir()
			out, err := runConformance(t, cli, results, "server", "--url", proxy+"/mcp", "--scenario", scenario, "--output-dir", results)
			if err != nil {
				t.Fatalf("MCP conformance scenario %s failed (%v):\n%s", scenario, err, out)
			}
			// A scenario that checked nothing passes too: at least one check
			// must have succeeded.
			checks, err := conformanceChecks(results)
			if err != nil {
				t.Fatalf("MCP conformance scenario %s: %v\n%s", scenario, err, out)
			}
			if !slices.ContainsFunc(checks, func(c conformanceCheck) bool { return c.Status == "SUCCESS" }) {
				t.Fatalf("MCP conformance scenario %s passed no check:\n%s", scenario, out)
			}
			for _, c := range checks {
				if c.Status == "WARNING" {
					t.Errorf("MCP conformance scenario %s warns: %s: %s %s", scenario, c.ID, c.Description, c.ErrorMessage)
				}
			}
		})
	}
}

// conformanceCheck is one check of a scenario's checks.json.
type conformanceCheck struct {
	ID           string `json:"id"`
	Status       string `json:"status"`
	Description  string `json:"description"`
	ErrorMessage string `json:"errorMessage"`
}

// conformanceChecks reads the checks.json the suite wrote under dir.
func conformanceChecks(dir string) ([]conformanceCheck, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*", "checks.json"))
	if err != nil || len(files) != 1 {
		return nil, fmt.Errorf("want one checks.json under the results, found %v (%v)", files, err)
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		return nil, err
	}
	var checks []conformanceCheck
	if err := json.Unmarshal(raw, &checks); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", filepath.Base(files[0]), err)
	}
	return checks, nil
}

// bearerProxy serves a loopback proxy to target that sends token with
// every request, and returns its URL. The Host header goes through as the
// client sent it, as a TCP-level forwarder would pass it.
func bearerProxy(t *testing.T, target, token string) string {
	t.Helper()
	to, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(to)
			r.Out.Host = r.In.Host
			r.Out.Header.Set("Authorization", "Bearer "+token)
		},
		// Server-sent events go through as they come.
		FlushInterval: -1,
	})
	t.Cleanup(srv.Close)
	if !strings.HasPrefix(srv.URL, "http://127.0.0.1:") {
		t.Fatalf("the proxy is not on loopback: %s", srv.URL)
	}
	return srv.URL
}

// TestREADMEListsConformanceScenarios: the README names every scenario the
// conformance test runs and every one it says does not apply.
func TestREADMEListsConformanceScenarios(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(readme), "### MCP conformance")
	section, _, _ = strings.Cut(section, "\n## ")
	for _, s := range slices.Concat(conformanceScenarios, slices.Collect(maps.Keys(conformanceNotApplicable))) {
		if !strings.Contains(section, "`"+s+"`") {
			t.Errorf("the README's MCP conformance section does not name %s", s)
		}
	}
}
