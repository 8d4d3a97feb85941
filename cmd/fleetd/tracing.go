package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	ctrl "sigs.k8s.io/controller-runtime"
)

// tracingShutdownTimeout bounds the flush of the spans still buffered when
// fleetd stops.
const tracingShutdownTimeout = 5 * time.Second

// tracingWanted says whether the environment asks for traces, the way the
// OpenTelemetry SDKs read it: OTEL_TRACES_EXPORTER=otlp, or an OTLP
// endpoint (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// with no exporter named; OTEL_SDK_DISABLED=true and
// OTEL_TRACES_EXPORTER=none turn it off. fleetd exports OTLP over HTTP
// only, and says so to a configuration that asks for anything else.
func tracingWanted(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	switch exporter := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exporter {
	case "none":
		return false, nil
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return false, nil
		}
	case "otlp":
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: fleetd exports traces with otlp, or none", exporter)
	}
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if protocol != "" && protocol != "http/protobuf" {
		return false, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s: fleetd exports OTLP over http/protobuf only", protocol)
	}
	return true, nil
}

// setUpTracing installs the global tracer provider that exports fleetd's
// spans over OTLP/HTTP when the environment asks for traces (see
// tracingWanted). The exporter and the SDK read the rest of the standard
// OTEL_* variables themselves (endpoint, headers, timeout, sampler,
// resource attributes). Otherwise it installs nothing, and every span is a
// no-op. The returned stop flushes what is buffered.
func setUpTracing(ctx context.Context, getenv func(string) string) (stop func(), err error) {
	wanted, err := tracingWanted(getenv)
	if err != nil || !wanted {
		return func() {}, err
	}
	exporter, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("creating the OTLP trace exporter: %w", err)
	}
	// service.name is fleetd unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES say otherwise.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "fleetd")),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, fmt.Errorf("describing fleetd for its traces: %w", err)
	}
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	log := ctrl.Log.WithName("tracing")
	otel.SetLogger(log)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Error(err, "Exporting traces") }))
	otel.SetTracerProvider(provider)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	log.Info("Exporting traces over OTLP")
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingShutdownTimeout)
		defer cancel()
		if err := provider.Shutdown(ctx); err != nil {
			log.Error(err, "Flushing the last traces")
		}
	}, nil
}
