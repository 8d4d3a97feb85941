package controllers

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/internal/tracing"
)

// spanRecorder keeps the spans every test of the package ends, from the
// first test that asks for it on: the tracer provider is the process's.
var (
	spanRecorderOnce sync.Once
	spanRecorder     *tracetest.SpanRecorder
)

func recordSpans() *tracetest.SpanRecorder {
	spanRecorderOnce.Do(func() {
		spanRecorder = tracetest.NewSpanRecorder()
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spanRecorder)))
	})
	return spanRecorder
}

// spansOf are the ended spans of trace id, by name.
func spansOf(rec *tracetest.SpanRecorder, id trace.TraceID) map[string][]sdktrace.ReadOnlySpan {
	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == id {
			byName[s.Name()] = append(byName[s.Name()], s)
		}
	}
	return byName
}

// The injector's spans of a message are children of the trace its
// annotation names, one for each step: queued, intent written, typed,
// picked up, settled.
func TestInjectorSpansJoinTheMessagesTrace(t *testing.T) {
	rec := recordSpans()
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	agentWithLog(t, ns, "w1")

	const traceID, parent = "6bf92f3577b34da6a3ce929d0e0e4736", "20f067aa0ba902b7"
	d := sequenced(testutil.MakeDelegation("traced", ns, "w1", "silent: traced").Obj(), 1)
	d.Annotations[fleetv1alpha1.AnnotationTraceparent] = fmt.Sprintf("00-%s-%s-01", traceID, parent)
	create(t, d)
	waitPhase(t, ns, "traced", fleetv1alpha1.DelegationTurnDone)

	id, _ := trace.TraceIDFromHex(traceID)
	want := []string{tracing.SpanQueued, tracing.SpanIntentWritten, tracing.SpanTyped, tracing.SpanPickedUp, tracing.SpanSettled}
	var byName map[string][]sdktrace.ReadOnlySpan
	testutil.Eventually(t, "the injector's spans", func() (bool, string) {
		byName = spansOf(rec, id)
		for _, name := range want {
			if len(byName[name]) == 0 {
				return false, fmt.Sprintf("no %q span among %d", name, len(byName))
			}
		}
		return true, ""
	})
	for _, name := range want {
		spans := byName[name]
		if len(spans) != 1 {
			t.Errorf("%d %q spans, want 1", len(spans), name)
			continue
		}
		if p := spans[0].Parent(); p.SpanID().String() != parent || !p.IsRemote() {
			t.Errorf("span %q has parent %v, want the annotation's %s", name, p, parent)
		}
	}
	settled := byName[tracing.SpanSettled][0]
	if !hasAttr(settled, tracing.AttrPhase.String(string(fleetv1alpha1.DelegationTurnDone))) {
		t.Errorf("settled span attributes %v, want phase TurnDone", settled.Attributes())
	}
	if q, i := byName[tracing.SpanQueued][0], byName[tracing.SpanIntentWritten][0]; q.EndTime().After(i.StartTime()) {
		t.Errorf("queued ends at %v, after the intent's write starts at %v", q.EndTime(), i.StartTime())
	}
}

// A reply carried to a member sender keeps the trace of its message.
func TestCarrierKeepsItsMessagesTrace(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	agentWithLog(t, ns, "lead")
	agentWithLog(t, ns, "w1")

	const tp = "00-7bf92f3577b34da6a3ce929d0e0e4736-30f067aa0ba902b7-01"
	d := testutil.MakeDelegation("task", ns, "w1", "sleep: 30").Obj()
	d.Spec.Wait = ptrTo(false)
	d.Spec.From = fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalMember, Name: "lead"}
	d.Annotations = map[string]string{fleetv1alpha1.AnnotationTraceparent: tp}
	create(t, d)
	d = waitPhase(t, ns, "task", fleetv1alpha1.DelegationWorking)
	if err := delegation.Reply(d, time.Now(), "done"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Status().Update(context.Background(), d); err != nil {
		t.Fatal(err)
	}

	carrier := waitPhase(t, ns, "task-reply", fleetv1alpha1.DelegationTurnDone)
	if got := carrier.Annotations[fleetv1alpha1.AnnotationTraceparent]; got != tp {
		t.Errorf("the carried reply has traceparent %q, want its message's %q", got, tp)
	}
}

func hasAttr(s sdktrace.ReadOnlySpan, want attribute.KeyValue) bool {
	for _, kv := range s.Attributes() {
		if kv == want {
			return true
		}
	}
	return false
}
