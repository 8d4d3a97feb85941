package tracing

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/testutil"
)

// recorder installs a tracer provider that keeps every span in memory, for
// the test.
func recorder(t *testing.T) *tracetest.SpanRecorder {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	return rec
}

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestSpanContextOfAnnotation(t *testing.T) {
	cases := map[string]struct {
		annotation string
		wantValid  bool
	}{
		"none":                 {},
		"a W3C traceparent":    {annotation: traceparent, wantValid: true},
		"garbage":              {annotation: "not a traceparent"},
		"an all-zero trace id": {annotation: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"},
		"too long":             {annotation: traceparent + "-" + traceparent},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := testutil.MakeDelegation("m", "ns", "w1", "hi").Obj()
			if tc.annotation != "" {
				d.Annotations = map[string]string{fleetv1alpha1.AnnotationTraceparent: tc.annotation}
			}
			sc := SpanContext(d)
			if sc.IsValid() != tc.wantValid {
				t.Fatalf("SpanContext(%q) valid = %v, want %v", tc.annotation, sc.IsValid(), tc.wantValid)
			}
			if tc.wantValid && (sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsRemote()) {
				t.Errorf("SpanContext(%q) = %v", tc.annotation, sc)
			}
		})
	}
}

func TestInjectRecordsTheSpanOfTheCall(t *testing.T) {
	recorder(t)
	d := testutil.MakeDelegation("m", "ns", "w1", "hi").Obj()
	Inject(context.Background(), d)
	if d.Annotations != nil {
		t.Fatalf("a call without a span marked the message: %v", d.Annotations)
	}
	ctx, span := Tracer().Start(context.Background(), "bridge_send")
	defer span.End()
	Inject(ctx, d)
	if got, want := SpanContext(d), span.SpanContext(); got.TraceID() != want.TraceID() || got.SpanID() != want.SpanID() {
		t.Fatalf("annotation %q names %v, want the call's span %v", d.Annotations[fleetv1alpha1.AnnotationTraceparent], got, want)
	}

	carrier := testutil.MakeDelegation("m-reply", "ns", "sender", "reply").Obj()
	Copy(d, carrier)
	if diff := cmp.Diff(d.Annotations, carrier.Annotations); diff != "" {
		t.Errorf("the carrier's trace differs from its message's (-message +carrier):\n%s", diff)
	}
}

func TestSpansOfAMessageAreChildrenOfItsTrace(t *testing.T) {
	rec := recorder(t)
	d := testutil.MakeDelegation("m", "ns", "w1", "hi").Obj()
	d.Annotations = map[string]string{fleetv1alpha1.AnnotationTraceparent: traceparent}
	_, span := Start(context.Background(), d, SpanTyped)
	span.End()
	Record(context.Background(), d, SpanQueued, time.Now().Add(-time.Second), AttrMember.String("w1"))

	ended := rec.Ended()
	if len(ended) != 2 {
		t.Fatalf("got %d spans, want 2", len(ended))
	}
	for _, s := range ended {
		if s.Parent().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent().SpanID().String() != "00f067aa0ba902b7" {
			t.Errorf("span %s has parent %v, want the annotation's span", s.Name(), s.Parent())
		}
		if got := attr(s, AttrDelegation); got != "m" {
			t.Errorf("span %s names delegation %q, want m", s.Name(), got)
		}
	}
	if q := ended[1]; q.Name() != SpanQueued || q.EndTime().Sub(q.StartTime()) < time.Second || attr(q, AttrMember) != "w1" {
		t.Errorf("queued span %s lasted %v with member %q; want at least 1s, member w1", q.Name(), q.EndTime().Sub(q.StartTime()), attr(q, AttrMember))
	}
}

func TestAMessageWithoutATraceGetsNoSpans(t *testing.T) {
	rec := recorder(t)
	d := testutil.MakeDelegation("m", "ns", "w1", "hi").Obj()
	ctx := context.Background()
	got, span := Start(ctx, d, SpanTyped)
	span.End()
	Record(ctx, d, SpanQueued, time.Now())
	if got != ctx || span.IsRecording() || trace.SpanContextFromContext(got).IsValid() {
		t.Errorf("Start on a message without a trace returned a span %v", span.SpanContext())
	}
	if n := len(rec.Ended()); n != 0 {
		t.Errorf("got %d spans for a message without a trace", n)
	}
}

// attr is the value of the span's attribute key, "" when it has none.
func attr(s sdktrace.ReadOnlySpan, key attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value.String()
		}
	}
	return ""
}

// With tracing off, or on a message without a trace, the spans of a
// message cost nothing per call: the injector does this for every message.
func TestNoAllocationsWithoutATrace(t *testing.T) {
	d := testutil.MakeDelegation("m", "ns", "w1", "hi").Obj()
	d.Annotations = map[string]string{fleetv1alpha1.AnnotationSequence: "2026-01-01T00:00:00.000000001Z"}
	ctx := context.Background()
	start := time.Now()
	allocs := testing.AllocsPerRun(100, func() {
		_, span := Start(ctx, d, SpanTyped)
		span.End()
		Record(ctx, d, SpanQueued, start)
		if Carries(d) {
			t.Fatal("an unannotated message carries a trace")
		}
	})
	if allocs != 0 {
		t.Errorf("the spans of a message without a trace allocate %v times a call, want 0", allocs)
	}
}
