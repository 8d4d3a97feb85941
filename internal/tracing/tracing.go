// Package tracing carries a message's trace across fleetd. The gateway
// records the W3C trace context of the call that sends a Delegation in its
// traceparent annotation; the controllers and the gateway's later calls
// start their spans of that message as children of it, so one message is
// one trace, whichever process handles which part of it.
//
// Spans go to the global OpenTelemetry tracer provider, which cmd/fleetd
// sets only when tracing is configured. Until then every span is a no-op,
// and a Delegation without the annotation costs a map lookup.
package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// Span names, from the life of a message.
const (
	// SpanQueued is the time a message waited in its member's queue, from
	// its creation to the intent to type it.
	SpanQueued = "queued"
	// SpanIntentWritten is the status write that records the intent to type
	// a message, before it is typed.
	SpanIntentWritten = "intent written"
	// SpanTyped is the typing of a message into its member's pane.
	SpanTyped = "typed"
	// SpanPickedUp is the time from the typing of a message to its member
	// being seen working on it.
	SpanPickedUp = "picked up"
	// SpanSettled is the status write that settles a message without a
	// reply (turn done, timed out, failed, cancelled, worker gone).
	SpanSettled = "settled"
	// SpanReply is a worker's bridge_reply settling the message.
	SpanReply = "reply"
	// SpanHold is a held call waiting for the message's outcome.
	SpanHold = "hold"
)

// Attribute keys fleetd puts on its spans.
const (
	AttrDelegation = attribute.Key("fleet.delegation")
	AttrNamespace  = attribute.Key("fleet.namespace")
	AttrMember     = attribute.Key("fleet.member")
	AttrPhase      = attribute.Key("fleet.phase")
	AttrLate       = attribute.Key("fleet.late")
)

// tracerName names fleetd's tracer, as the instrumentation scope.
const tracerName = "github.com/fleetd/fleetd"

// Tracer is fleetd's tracer, from the global provider at the time of the
// call: a provider set after start-up is used from then on.
func Tracer() trace.Tracer {
	return otel.Tracer(tracerName)
}

// w3c reads and writes the annotation: it is the W3C Trace Context format,
// whatever propagator the process uses on the wire.
var w3c propagation.TraceContext

// traceparentKey is the W3C header the annotation holds.
const traceparentKey = "traceparent"

// annotationCarrier maps the W3C traceparent header onto a Delegation's
// annotation, and leaves tracestate out: a Delegation carries the trace,
// not vendors' state.
type annotationCarrier struct {
	annotations map[string]string
}

func (c annotationCarrier) Get(key string) string {
	if key != traceparentKey {
		return ""
	}
	return c.annotations[fleetv1alpha1.AnnotationTraceparent]
}

func (c annotationCarrier) Set(key, value string) {
	if key == traceparentKey {
		c.annotations[fleetv1alpha1.AnnotationTraceparent] = value
	}
}

func (annotationCarrier) Keys() []string { return []string{traceparentKey} }

// Object is what carries a trace: a Delegation.
type Object interface {
	GetName() string
	GetNamespace() string
	GetAnnotations() map[string]string
	SetAnnotations(map[string]string)
}

// Inject records the span context of ctx on o, when ctx has a valid one
// (tracing is on, or the caller sent one).
func Inject(ctx context.Context, o Object) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	a := o.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	w3c.Inject(ctx, annotationCarrier{annotations: a})
	o.SetAnnotations(a)
}

// Copy gives to the trace from carries: a Delegation that carries another's
// reply or question into its sender's pane is part of that message's story.
func Copy(from, to Object) {
	tp, ok := from.GetAnnotations()[fleetv1alpha1.AnnotationTraceparent]
	if !ok {
		return
	}
	a := to.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[fleetv1alpha1.AnnotationTraceparent] = tp
	to.SetAnnotations(a)
}

// Carries says whether o carries a trace: a map lookup, for callers that
// would otherwise build a span's attributes for nothing.
func Carries(o Object) bool {
	return o.GetAnnotations()[fleetv1alpha1.AnnotationTraceparent] != ""
}

// SpanContext is the trace o carries; not valid when it carries none or a
// malformed one.
func SpanContext(o Object) trace.SpanContext {
	if !Carries(o) {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(w3c.Extract(context.Background(), annotationCarrier{annotations: o.GetAnnotations()}))
}

// Start starts span name of the message o as a child of the trace o
// carries, in ctx. When o carries none it starts nothing: it returns ctx
// and a no-op span.
func Start(ctx context.Context, o Object, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	sc := SpanContext(o)
	if !sc.IsValid() {
		return ctx, noop.Span{}
	}
	opts = append(opts, trace.WithAttributes(
		AttrDelegation.String(o.GetName()),
		AttrNamespace.String(o.GetNamespace()),
	))
	return Tracer().Start(trace.ContextWithRemoteSpanContext(ctx, sc), name, opts...)
}

// Record records span name of the message o, which began at start and ends
// now: a stretch of the message's life measured after the fact (its time
// in the queue, the time to its pickup).
func Record(ctx context.Context, o Object, name string, start time.Time, attrs ...attribute.KeyValue) {
	if !Carries(o) {
		// The options would escape to the heap for nothing.
		return
	}
	_, span := Start(ctx, o, name, trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	span.End()
}
