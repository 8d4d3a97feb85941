package controllers

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/tracing"
)

// The injector's spans of a message, in the trace its traceparent
// annotation names: queued, intent written, typed, picked up, settled. A
// message without the annotation gets none, and costs a map lookup.

// traceQueued records the time d waited in member's queue, from when it
// was sent until now, when it is about to be typed.
func traceQueued(ctx context.Context, d *fleetv1alpha1.Delegation, member string) {
	if !tracing.Carries(d) {
		return
	}
	since := d.CreationTimestamp.Time
	// The sequence has the nanoseconds that the creation time lacks.
	if t, err := time.Parse(time.RFC3339Nano, d.Annotations[fleetv1alpha1.AnnotationSequence]); err == nil {
		since = t
	}
	tracing.Record(ctx, d, tracing.SpanQueued, since, tracing.AttrMember.String(member))
}

// pickupPending is when d was typed, while its pickup is still to be
// recorded; zero once it is picked up.
func pickupPending(d *fleetv1alpha1.Delegation) time.Time {
	if d.Status.PickedUpAt != nil || d.Status.DeliveringAt == nil {
		return time.Time{}
	}
	return d.Status.DeliveringAt.Time
}

// tracePickup records the time from the typing of d (typedAt, from
// pickupPending) to its pickup, now; nothing for a zero typedAt.
func tracePickup(ctx context.Context, d *fleetv1alpha1.Delegation, typedAt time.Time) {
	if !tracing.Carries(d) || typedAt.IsZero() {
		return
	}
	tracing.Record(ctx, d, tracing.SpanPickedUp, typedAt)
}

// writeTraced is write, as span name of d's trace.
func (r *DelegationReconciler) writeTraced(ctx context.Context, d *fleetv1alpha1.Delegation, name string) error {
	_, span := tracing.Start(ctx, d, name)
	err := r.write(ctx, d)
	endSpan(span, d, err)
	return err
}

// endSpan ends span with the phase d is in, and err as its status.
func endSpan(span trace.Span, d *fleetv1alpha1.Delegation, err error) {
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrPhase.String(string(d.Status.Phase)))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}
