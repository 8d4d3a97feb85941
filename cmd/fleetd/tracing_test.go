package main

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

func TestTracingWanted(t *testing.T) {
	cases := map[string]struct {
		env     map[string]string
		want    bool
		wantErr string
	}{
		"nothing set":              {},
		"an OTLP endpoint":         {env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, want: true},
		"a traces endpoint":        {env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, want: true},
		"the otlp exporter":        {env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: true},
		"the none exporter":        {env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		"the SDK disabled":         {env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
		"an exporter fleetd lacks": {env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: "OTEL_TRACES_EXPORTER=zipkin"},
		"http/protobuf":            {env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, want: true},
		"grpc":                     {env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, wantErr: "http/protobuf only"},
		"grpc for traces":          {env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, wantErr: "http/protobuf only"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := tracingWanted(func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("tracingWanted() error = %v, want one that says %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("tracingWanted() = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// Off by default: without the variables fleetd installs no provider, and
// its spans are not recorded.
func TestTracingOffByDefault(t *testing.T) {
	stop, err := setUpTracing(context.Background(), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	stop()
	_, span := otel.Tracer("test").Start(context.Background(), "bridge_send")
	defer span.End()
	if span.IsRecording() || span.SpanContext().IsValid() || trace.SpanFromContext(context.Background()).IsRecording() {
		t.Errorf("a span was recorded with tracing off: %v", span.SpanContext())
	}
}
