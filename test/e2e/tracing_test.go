package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/devenv"
	"github.com/fleetd/fleetd/internal/testenv"
	"github.com/fleetd/fleetd/internal/testutil"
)

// The local suite exports fleetd's traces to a real Jaeger (all-in-one, in
// memory, pinned in hack/jaeger and built by make jaeger) when it is
// there, configured the standard way (OTEL_EXPORTER_OTLP_ENDPOINT); the
// tracing test reads the traces back from Jaeger's query API. Everything
// listens on loopback.

// Environment variables of the tracing test.
const (
	// jaegerRequireEnv turns a missing Jaeger from a skip into a failure
	// (make test sets it).
	jaegerRequireEnv = "FLEETD_REQUIRE_JAEGER"
	// jaegerPathEnv names a Jaeger binary other than the one make jaeger
	// builds.
	jaegerPathEnv = "FLEETD_JAEGER"
)

// errNoJaeger says Jaeger is not built here.
var errNoJaeger = errors.New("no Jaeger binary: run make jaeger")

// jaegerConfig runs Jaeger all-in-one on in-memory storage, with only the
// OTLP/HTTP receiver and the query service, on the loopback ports given
// (OTLP, query HTTP, query gRPC), and no telemetry server of its own.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memory
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
  jaeger_storage:
    backends:
      memory:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memory
`

// jaeger is a running Jaeger all-in-one.
type jaeger struct {
	proc *devenv.Process
	// otlp is the OTLP/HTTP endpoint, as OTEL_EXPORTER_OTLP_ENDPOINT
	// takes it; query is the base URL of the query API.
	otlp, query string
}

// jaegerBinary is the Jaeger make jaeger builds, or the one jaegerPathEnv
// names.
func jaegerBinary() (string, error) {
	bin := os.Getenv(jaegerPathEnv)
	if bin == "" {
		bin = filepath.Join(testenv.RepoRoot(), "bin", "jaeger")
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%w (%v)", errNoJaeger, err)
	}
	return bin, nil
}

// startJaeger starts Jaeger with its state and log in dir, and returns
// once its query API answers.
func startJaeger(dir string) (*jaeger, error) {
	bin, err := jaegerBinary()
	if err != nil {
		return nil, err
	}
	otlp, query, queryGRPC := freePorts(1), freePorts(1), freePorts(1)
	config := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, jaegerConfig, query, queryGRPC, otlp), 0o600); err != nil {
		return nil, err
	}
	j := &jaeger{
		proc:  &devenv.Process{Name: "jaeger", Path: bin, Args: []string{"--config=" + config}, Log: filepath.Join(dir, "logs", "jaeger.log")},
		otlp:  fmt.Sprintf("http://127.0.0.1:%d", otlp),
		query: fmt.Sprintf("http://127.0.0.1:%d", query),
	}
	if err := j.proc.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(j.query + "/api/services")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return j, nil
			}
		}
		select {
		case <-j.proc.Exited():
			return nil, fmt.Errorf("jaeger exited: %v; see %s", j.proc.Err(), j.proc.Log)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			j.proc.Stop(5 * time.Second)
			return nil, fmt.Errorf("jaeger's query API at %s does not answer: %v; see %s", j.query, err, j.proc.Log)
		}
	}
}

// fleetdEnv is how fleetd is told to export to j: the standard variables,
// with a short batch delay so that a test reads a trace soon after it.
func (j *jaeger) fleetdEnv() []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + j.otlp, "OTEL_BSP_SCHEDULE_DELAY=100"}
}

// jaegerSpan is a span as Jaeger's query API returns it.
type jaegerSpan struct {
	TraceID       string      `json:"traceID"`
	SpanID        string      `json:"spanID"`
	OperationName string      `json:"operationName"`
	References    []jaegerRef `json:"references"`
	StartTime     int64       `json:"startTime"`
	Duration      int64       `json:"duration"`
	ProcessID     string      `json:"processID"`
}

// jaegerRef is a span's reference to another: its parent (CHILD_OF), or a
// link (FOLLOWS_FROM).
type jaegerRef struct {
	RefType string `json:"refType"`
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

// jaegerTrace is a trace as Jaeger's query API returns it.
type jaegerTrace struct {
	Spans     []jaegerSpan `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

// trace reads trace id from Jaeger; an empty trace when it has none yet.
func (j *jaeger) trace(id string) (jaegerTrace, error) {
	resp, err := http.Get(j.query + "/api/traces/" + id)
	if err != nil {
		return jaegerTrace{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return jaegerTrace{}, err
	}
	if resp.StatusCode == http.StatusNotFound {
		return jaegerTrace{}, nil
	}
	if resp.StatusCode != http.StatusOK {
		return jaegerTrace{}, fmt.Errorf("GET /api/traces/%s: %s: %s", id, resp.Status, tail(body, 512))
	}
	var out struct {
		Data []jaegerTrace `json:"data"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return jaegerTrace{}, fmt.Errorf("decoding trace %s: %w", id, err)
	}
	if len(out.Data) == 0 {
		return jaegerTrace{}, nil
	}
	return out.Data[0], nil
}

// named are the trace's spans by name.
func (tr jaegerTrace) named() map[string][]jaegerSpan {
	byName := map[string][]jaegerSpan{}
	for _, s := range tr.Spans {
		byName[s.OperationName] = append(byName[s.OperationName], s)
	}
	return byName
}

// parentOf is the span s is a child of, "" for a root.
func parentOf(s jaegerSpan) string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" && r.TraceID == s.TraceID {
			return r.SpanID
		}
	}
	return ""
}

// tracing is the Jaeger the suite's fleetd exports to; the test skips, or
// fails when jaegerRequireEnv is set, where it has none.
func tracing(t *testing.T) *jaeger {
	t.Helper()
	l, ok := w.mode.(*local)
	switch {
	case ok && l.jaeger != nil:
		return l.jaeger
	case os.Getenv(jaegerRequireEnv) != "" && ok:
		t.Fatalf("%s is set and the suite's fleetd has no Jaeger: %v", jaegerRequireEnv, l.jaegerErr)
	case !ok:
		t.Skip("traces are read from a Jaeger the local suite starts; fleetd in a cluster exports wherever it is configured to")
	}
	t.Skipf("%v; or set %s to a Jaeger binary", l.jaegerErr, jaegerPathEnv)
	return nil
}

// traceOf is the trace id and span id a Delegation's traceparent names.
func traceOf(t *testing.T, name string) (traceID, spanID string) {
	t.Helper()
	d := &fleetv1alpha1.Delegation{}
	if err := w.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
		t.Fatal(err)
	}
	tp := d.Annotations[fleetv1alpha1.AnnotationTraceparent]
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || len(parts[1]) != 32 || len(parts[2]) != 16 {
		t.Fatalf("delegation %s has traceparent %q, want a W3C traceparent", name, tp)
	}
	return parts[1], parts[2]
}

// awaitSpans reads trace id from j until it has every span in want.
func awaitSpans(t *testing.T, j *jaeger, id string, want ...string) jaegerTrace {
	t.Helper()
	var tr jaegerTrace
	testutil.Eventually(t, "the spans of trace "+id+" in Jaeger", func() (bool, string) {
		var err error
		if tr, err = j.trace(id); err != nil {
			return false, err.Error()
		}
		byName := tr.named()
		var missing []string
		for _, name := range want {
			if len(byName[name]) == 0 {
				missing = append(missing, name)
			}
		}
		return len(missing) == 0, fmt.Sprintf("missing %q of %d spans", missing, len(tr.Spans))
	})
	return tr
}

// The spans of one message sent with bridge_send and replied to by its
// worker: one trace, from the call through the queue, the intent, the
// typing, the pickup and the reply to the held call's return, across the
// gateway and the controllers, each with the right parent.
func TestTracingOfAMessage(t *testing.T) {
	j := tracing(t)
	dumpOnFailure(t)
	member(t, "e2e-traced")
	s := session(t, w.token)
	r := call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-traced", "content": "reply: traced"})
	wantOutcome(t, r, "reply")
	traceID, sendSpan := traceOf(t, r.Str("dispatchId"))

	children := []string{"hold", "queued", "intent written", "typed", "picked up", "reply"}
	tr := awaitSpans(t, j, traceID, append([]string{"bridge_send"}, children...)...)
	byName := tr.named()

	send := byName["bridge_send"]
	if len(send) != 1 || send[0].SpanID != sendSpan || parentOf(send[0]) != "" {
		t.Fatalf("bridge_send spans %+v; want one root, span %s of the delegation's traceparent", send, sendSpan)
	}
	if svc := tr.Processes[send[0].ProcessID].ServiceName; svc != "fleetd" {
		t.Errorf("bridge_send comes from service %q, want fleetd", svc)
	}
	for _, name := range children {
		spans := byName[name]
		if len(spans) != 1 {
			t.Errorf("trace has %d %q spans, want 1", len(spans), name)
			continue
		}
		if p := parentOf(spans[0]); p != sendSpan {
			t.Errorf("span %q has parent %q, want bridge_send's %s", name, p, sendSpan)
		}
	}
	// The story reads in order: queued, then the intent, then the typing;
	// the reply starts before the held call ends (its write may return
	// after the held call has already seen it, so not its end).
	start := func(name string) int64 { return byName[name][0].StartTime }
	end := func(name string) int64 { return byName[name][0].StartTime + byName[name][0].Duration }
	if !(start("queued") <= start("intent written") && end("intent written") <= start("typed") && start("reply") <= end("hold") && end("hold") <= end("bridge_send")) {
		t.Errorf("spans out of order: %+v", tr.Spans)
	}
	// The worker's reply links to its own bridge_reply call, in a trace of
	// its own.
	reply := byName["reply"][0]
	if !slices.ContainsFunc(reply.References, func(ref jaegerRef) bool { return ref.TraceID != traceID }) {
		t.Errorf("the reply span has no link to the worker's call: %+v", reply.References)
	}
}

// A Delegation created with kubectl, with a traceparent of the user's, is
// traced in the user's trace.
func TestTracingOfAMessageCreatedWithKubectl(t *testing.T) {
	j := tracing(t)
	dumpOnFailure(t)
	member(t, "e2e-traced-kubectl")
	const traceID, parent = "5bf92f3577b34da6a3ce929d0e0e4737", "10f067aa0ba902b8"
	apply(t, fmt.Sprintf(`apiVersion: fleet.fleetd.dev/v1alpha1
kind: Delegation
metadata:
  name: e2e-traced-kubectl
  namespace: %s
  annotations: {%s: 00-%s-%s-01}
spec:
  to: e2e-traced-kubectl
  content: "reply: traced from kubectl"
  wait: false
`, ns, fleetv1alpha1.AnnotationTraceparent, traceID, parent))
	t.Cleanup(func() { _, _ = w.kubectl("delete", "delegation", "-n", ns, "e2e-traced-kubectl", "--wait=false") })

	want := []string{"queued", "intent written", "typed", "picked up", "reply"}
	tr := awaitSpans(t, j, traceID, want...)
	for name, spans := range tr.named() {
		for _, s := range spans {
			if p := parentOf(s); p != parent {
				t.Errorf("span %q has parent %q, want the user's %s", name, p, parent)
			}
		}
	}
}
