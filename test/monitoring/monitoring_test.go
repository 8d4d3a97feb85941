// Package monitoring checks config/monitoring against fleetd: the
// PrometheusRule's rules load with Prometheus' own rule parser, every
// expression in them and in the Grafana dashboard parses as PromQL, and
// every metric they name is one fleetd serves, so renaming a metric breaks
// this test rather than an alert.
package monitoring

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/fleetd/fleetd/controllers"
	"github.com/fleetd/fleetd/gateway"
	"github.com/fleetd/fleetd/gateway/rotation"
	"github.com/fleetd/fleetd/shard"
)

// dir holds the manifests under test.
var dir = filepath.Join("..", "..", "config", "monitoring")

var promql = parser.NewParser(parser.Options{})

// notFleetd are metrics the rules and dashboard may name that fleetd does
// not serve.
var notFleetd = map[string]bool{"up": true}

func TestPrometheusRuleLoads(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(dir, "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var obj struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Spec       json.RawMessage `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &obj); err != nil {
		t.Fatalf("prometheusrule.yaml: %v", err)
	}
	if obj.APIVersion != "monitoring.coreos.com/v1" || obj.Kind != "PrometheusRule" {
		t.Fatalf("prometheusrule.yaml is a %s %s, want a monitoring.coreos.com/v1 PrometheusRule", obj.APIVersion, obj.Kind)
	}
	// The Operator hands spec to Prometheus as a rule file.
	rules, err := yaml.JSONToYAML(obj.Spec)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(rules, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("Prometheus refuses the rules: %v", err)
	}
	if groups == nil {
		t.FailNow()
	}
	known := fleetdMetrics()
	alerts := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			alerts++
			if r.Alert == "" {
				t.Errorf("group %s: a recording rule %s; the examples are alerts", g.Name, r.Record)
			}
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: want a severity label, a summary and a description", r.Alert)
			}
			unknown, err := unknownMetrics(r.Expr, known)
			if err != nil {
				t.Errorf("alert %s: %v", r.Alert, err)
			}
			if len(unknown) > 0 {
				t.Errorf("alert %s names metrics fleetd does not serve: %v", r.Alert, unknown)
			}
		}
	}
	if alerts == 0 {
		t.Error("no alerts in prometheusrule.yaml")
	}
}

func TestGrafanaDashboardQueries(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(dir, "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash dashboard
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	known := fleetdMetrics()
	queries := 0
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, target := range p.Targets {
				queries++
				unknown, err := unknownMetrics(grafanaVariables(target.Expr), known)
				if err != nil {
					t.Errorf("panel %q: %v", p.Title, err)
				}
				if len(unknown) > 0 {
					t.Errorf("panel %q names metrics fleetd does not serve: %v", p.Title, unknown)
				}
			}
		}
	}
	walk(dash.Panels)
	if queries == 0 {
		t.Error("no queries in grafana-dashboard.json")
	}
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, v.Definition)
			continue
		}
		if !known[m[1]] {
			t.Errorf("variable %s names a metric fleetd does not serve: %s", v.Name, m[1])
		}
	}
}

// TestUnknownMetricsFindsARename: the check above fails for a metric that
// is not fleetd's, a histogram's series pass, and a query that does not
// parse is an error.
func TestUnknownMetricsFindsARename(t *testing.T) {
	known := fleetdMetrics()
	cases := map[string]struct {
		expr    string
		want    []string
		wantErr bool
	}{
		"fleetd's":    {expr: `sum(rate(fleetd_delegation_outcomes_total[5m]))`},
		"a histogram": {expr: `histogram_quantile(0.9, sum by (le) (rate(fleetd_delegation_phase_duration_seconds_bucket[5m])))`},
		"the gateway": {expr: `sum(fleetd_gateway_open_holds)`},
		"renamed":     {expr: `sum(rate(fleetd_delegation_outcome_total[5m])) / sum(fleetd_members)`, want: []string{"fleetd_delegation_outcome_total"}},
		"by __name__": {expr: `{__name__="fleetd_nope"}`, want: []string{"fleetd_nope"}},
		"not PromQL":  {expr: `sum(rate(fleetd_members[5m]`, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := unknownMetrics(tc.expr, known)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("unknown = %v, want %v", got, tc.want)
			}
		})
	}
}

// dashboard is what the test reads of a Grafana dashboard.
type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

var (
	labelValues = regexp.MustCompile(`^label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)
	variable    = regexp.MustCompile(`\$\{?(\w+)\}?`)
	fqName      = regexp.MustCompile(`fqName: "([^"]+)"`)
)

// grafanaVariables replaces Grafana's variables in expr with values that
// parse: an interval for Grafana's own ($__rate_interval), a regular
// expression for the dashboard's ($namespace, used with =~).
func grafanaVariables(expr string) string {
	return variable.ReplaceAllStringFunc(expr, func(v string) string {
		if strings.HasPrefix(strings.Trim(v, "${}"), "__") {
			return "5m"
		}
		return ".*"
	})
}

// fleetdMetrics are the names of the series fleetd serves: the controllers'
// and the gateway's metrics, and a histogram's _bucket, _sum and _count.
func fleetdMetrics() map[string]bool {
	names := map[string]bool{}
	for _, d := range slices.Concat(controllers.MetricDescs(), gateway.MetricDescs(), shard.MetricDescs(), rotation.MetricDescs()) {
		names[descName(d)] = true
	}
	for n := range maps.Clone(names) {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			names[n+suffix] = true
		}
	}
	return names
}

// descName is a Desc's metric name; client_golang has no getter for it but
// its String.
func descName(d *prometheus.Desc) string {
	m := fqName.FindStringSubmatch(d.String())
	if m == nil {
		panic(fmt.Sprintf("no fqName in %s", d))
	}
	return m[1]
}

// unknownMetrics parses expr and lists the metrics it selects that are
// neither in known nor in notFleetd, sorted.
func unknownMetrics(expr string, known map[string]bool) ([]string, error) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, fmt.Errorf("%q does not parse: %w", expr, err)
	}
	var unknown []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel {
				name = m.Value
			}
		}
		if !known[name] && !notFleetd[name] && !slices.Contains(unknown, name) {
			unknown = append(unknown, name)
		}
		return nil
	})
	slices.Sort(unknown)
	return unknown, nil
}
