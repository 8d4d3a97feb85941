package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway/heldcall"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/tracing"
)

var (
	// errHoldTimeout ends a hold whose own timeout passed.
	errHoldTimeout = errors.New("hold timed out")
	// errDelegationDeleted ends a hold whose Delegation was deleted.
	errDelegationDeleted = errors.New("delegation deleted")
	// errGatewayStopping ends a hold because this gateway is shutting down;
	// the call still gets a result that says how to carry on.
	errGatewayStopping = errors.New("the gateway is shutting down")
)

// interruptedText tells a caller whose held call a stopping gateway ended
// how to get the outcome of message id.
func interruptedText(id string) string {
	return fmt.Sprintf("This gateway replica is shutting down (a restart or a rollout) and ended the wait; message %s carries on. "+
		"Call bridge_send {\"dispatchId\": %q} to wait for its outcome again (the same idempotencyKey works too), or collect it later with bridge_poll.", id, id)
}

// detachTimeout bounds the status write that records a departed waiter; it
// runs after the call's own context ended.
const detachTimeout = 10 * time.Second

// detachWriters bounds the departed-waiter writes in flight at once. When
// the gateway stops, or a burst of calls times out together, thousands of
// holds end at the same moment; unbounded, their writes would open more
// connections to the API server than the process has file descriptors.
const detachWriters = 32

// requestContextKey carries the HTTP request's context to the tool handlers.
// The MCP SDK derives handler contexts from the request without its
// cancellation for older protocol revisions; a held call watches the
// request itself so that a client that hangs up always ends the hold.
type requestContextKey struct{}

// requestDone is closed when the HTTP request behind ctx ends.
func requestDone(ctx context.Context) <-chan struct{} {
	if rc, ok := ctx.Value(requestContextKey{}).(context.Context); ok {
		return rc.Done()
	}
	return nil
}

// hold waits on the Delegation at key until decide reports done, the
// timeout passes, or the call ends. It subscribes before its first read, so
// no change is missed, and reads from the cache the informer updated before
// it woke the waiter. seed, when set, is the Delegation as the caller last
// saw it (the create or update response), decided on until the cache
// catches up with it. While it waits a hold keeps no copy of the
// Delegation: it returns the one decide passed, or else the latest there
// is.
func (s *service) hold(ctx context.Context, c *call, key types.NamespacedName, seed *fleetv1alpha1.Delegation, timeout time.Duration, decide func(*fleetv1alpha1.Delegation) bool) (*fleetv1alpha1.Delegation, error) {
	// The loop keeps its state in h, and looks and handles events in
	// calls of their own, so that what a parked call's goroutine keeps on
	// its stack while it waits is small.
	h := s.startHold(ctx, c, key, seed, timeout)
	defer h.end()
	for {
		if d, ended, err := h.look(decide); ended {
			return d, err
		}
		if d, ended, err := h.handle(h.wait.next()); ended {
			return d, err
		}
	}
}

// holding is one hold's state.
type holding struct {
	svc     *service
	ctx     context.Context
	c       *call
	key     types.NamespacedName
	seed    *fleetv1alpha1.Delegation
	token   any
	started time.Time
	wait    holdWaiter
	// seen says the cache showed the Delegation; looked that it was read
	// once (every later read follows an event or a tick).
	seen, looked bool
	status       progressStatus
}

// startHold counts the hold, and subscribes to key and starts the timers
// before the first read. The deadline and the progress ticks run on the
// gateway's clock, so a test steps them instead of waiting.
func (s *service) startHold(ctx context.Context, c *call, key types.NamespacedName, seed *fleetv1alpha1.Delegation, timeout time.Duration) *holding {
	s.metrics.openHolds.WithLabelValues(c.tool).Inc()
	h := &holding{svc: s, ctx: ctx, c: c, key: key, seed: seed, token: c.progressToken(), started: s.opts.Clock.Now()}
	var interval time.Duration
	if h.token != nil {
		interval = s.opts.ProgressInterval
	}
	if c.stream != nil {
		h.wait = s.waitOnCall(key, c.stream, timeout, interval)
	} else {
		h.wait = s.waitOnChannels(ctx, key, requestDone(ctx), timeout, interval)
	}
	return h
}

func (h *holding) end() {
	h.wait.stop()
	h.svc.metrics.openHolds.WithLabelValues(h.c.tool).Dec()
	h.svc.metrics.holdDuration.WithLabelValues(h.c.tool).Observe(h.svc.opts.Clock.Since(h.started).Seconds())
}

// look reads the Delegation and decides; ended says the hold is over.
func (h *holding) look(decide func(*fleetv1alpha1.Delegation) bool) (*fleetv1alpha1.Delegation, bool, error) {
	current := h.seed
	var d fleetv1alpha1.Delegation
	err := h.svc.cache.Get(h.ctx, h.key, &d)
	if apierrors.IsNotFound(err) && (h.seen || h.looked) {
		// It left the cache: closed as it settled (the cache leaves closed
		// ones out; a quick one leaves before this reads it once), or
		// deleted.
		err = h.svc.live.Get(h.ctx, h.key, &d)
		if apierrors.IsNotFound(err) {
			return nil, true, errDelegationDeleted
		}
	}
	h.looked = true
	switch {
	case err == nil:
		// A cached copy may trail what this gateway just wrote; decide
		// copes (answered turns are passed in), and the informer wakes
		// the waiter again once the cache catches up.
		current, h.seen, h.seed = &d, true, nil
	case apierrors.IsNotFound(err):
	default:
		return h.latest(), true, fmt.Errorf("reading delegation %s: %w", h.key, err)
	}
	if current == nil {
		return nil, false, nil
	}
	if decide(current) {
		return current, true, nil
	}
	h.status = progressStatus{to: current.Spec.To, phase: delegation.Phase(current), namespace: current.Namespace}
	return nil, false, nil
}

// handle acts on an event; ended says the hold is over.
func (h *holding) handle(ev holdEvent) (*fleetv1alpha1.Delegation, bool, error) {
	var err error
	switch ev {
	case eventChanged:
		return nil, false, nil
	case eventProgress:
		h.svc.notifyProgress(h.ctx, h.c, h.token, h.started, h.key.Name, h.status)
		return nil, false, nil
	case eventTimeout:
		err = errHoldTimeout
	case eventHangup:
		err = context.Canceled
	case eventStopping:
		err = errGatewayStopping
	default:
		err = h.ctx.Err()
	}
	return h.latest(), true, err
}

// latest is the Delegation as it is at the end of the hold.
func (h *holding) latest() *fleetv1alpha1.Delegation {
	return h.svc.latestDelegation(h.ctx, h.key, h.seed)
}

// holdEvent is what ends one wait of a hold.
type holdEvent int

// Events of a hold, in the order a waiter reports those that come at once.
const (
	// eventStopping: the gateway is shutting down.
	eventStopping holdEvent = iota
	// eventDone: the call's context ended.
	eventDone
	// eventHangup: the client hung up.
	eventHangup
	// eventChanged: the Delegation may have changed.
	eventChanged
	// eventTimeout: the hold's own timeout passed.
	eventTimeout
	// eventProgress: a progress notification is due.
	eventProgress
)

// holdWaiter waits for the events of one hold.
type holdWaiter interface {
	// next blocks until the next event.
	next() holdEvent
	// stop releases the subscription and the timers.
	stop()
}

// chanWaiter waits in a select, on the goroutine of a call held on its
// request.
type chanWaiter struct {
	svc    *service
	key    types.NamespacedName
	w      *waiter
	timer  clock.Timer
	ticker clock.Ticker
	tick   <-chan time.Time
	hangup <-chan struct{}
	done   <-chan struct{}
}

// waitOnChannels subscribes to key and starts the hold's timers; interval 0
// means no progress notifications.
func (s *service) waitOnChannels(ctx context.Context, key types.NamespacedName, hangup <-chan struct{}, timeout, interval time.Duration) *chanWaiter {
	cw := &chanWaiter{svc: s, key: key, w: s.rv.subscribe(key), timer: s.opts.Clock.NewTimer(timeout), hangup: hangup, done: ctx.Done()}
	if interval > 0 {
		cw.ticker = s.opts.Clock.NewTicker(interval)
		cw.tick = cw.ticker.C()
	}
	return cw
}

func (cw *chanWaiter) next() holdEvent {
	select {
	case <-cw.w.wake:
		return eventChanged
	case <-cw.tick:
		return eventProgress
	case <-cw.timer.C():
		return eventTimeout
	case <-cw.hangup:
		return eventHangup
	case <-cw.svc.stopping:
		return eventStopping
	case <-cw.done:
		return eventDone
	}
}

func (cw *chanWaiter) stop() {
	cw.svc.rv.unsubscribe(cw.key, cw.w)
	cw.timer.Stop()
	if cw.ticker != nil {
		cw.ticker.Stop()
	}
}

// latestDelegation is the Delegation at key as the cache shows it, else as
// the API server does, else seed; nil when it is gone.
func (s *service) latestDelegation(ctx context.Context, key types.NamespacedName, seed *fleetv1alpha1.Delegation) *fleetv1alpha1.Delegation {
	d, err := s.getDelegation(context.WithoutCancel(ctx), key)
	if err == nil {
		return d
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	return seed
}

// holdThen holds the call on seed until decide, as hold does, and returns
// what then makes of the end of the wait. A call whose outcome is not
// there yet is parked where its request allows (see park.go): holdThen
// returns errParked at once, and the gateway finishes the wait and then on
// a goroutine of its own, under its own context (which ends only after it
// started stopping, and parked holds end then).
func holdThen[Out any](s *service, ctx context.Context, c *call, seed *fleetv1alpha1.Delegation, timeout time.Duration,
	decide func(*fleetv1alpha1.Delegation) bool, then func(context.Context, *fleetv1alpha1.Delegation, error) (*Out, error)) (*Out, error) {
	key := types.NamespacedName{Namespace: seed.Namespace, Name: seed.Name}
	release, err := s.reserveHold(c)
	if err != nil {
		return nil, err
	}
	ctx, span := startHoldSpan(ctx, seed)
	if c.finish != nil {
		current := seed
		var cached fleetv1alpha1.Delegation
		if err := s.cache.Get(ctx, key, &cached); err == nil {
			current = &cached
		}
		if decide(current) {
			release()
			endHoldSpan(span, current, nil)
			return then(ctx, current, nil)
		}
		clk := s.opts.Clock
		deadline := clk.Now().Add(timeout)
		parked := &call{tool: c.tool, who: c.who, token: c.progressToken()}
		finish := c.finish
		if s.park(ctx, func(ctx context.Context, stream *heldcall.Call) *parkedHold {
			parked.stream = stream
			return &parkedHold{
				h:      s.startHold(ctx, parked, key, nil, max(deadline.Sub(clk.Now()), 0)),
				decide: decide,
				end: func(ctx context.Context, last *fleetv1alpha1.Delegation, err error) *mcp.CallToolResult {
					release()
					endHoldSpan(span, last, err)
					out, err := then(ctx, last, err)
					return finish(out, err)
				},
			}
		}) {
			return nil, errParked
		}
	}
	last, err := s.hold(ctx, c, key, seed, timeout, decide)
	release()
	endHoldSpan(span, last, err)
	return then(ctx, last, err)
}

// startHoldSpan starts the span of a held call on d: in the trace of the
// message, linked to the call's own when that is another (a re-attach, a
// question's wait), or a child of the call when the message carries none.
func startHoldSpan(ctx context.Context, d *fleetv1alpha1.Delegation) (context.Context, trace.Span) {
	caller := trace.SpanContextFromContext(ctx)
	if msg := tracing.SpanContext(d); msg.IsValid() {
		var opts []trace.SpanStartOption
		if caller.IsValid() && caller.TraceID() != msg.TraceID() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: caller}))
		}
		return tracing.Start(ctx, d, tracing.SpanHold, opts...)
	}
	return tracing.Tracer().Start(ctx, tracing.SpanHold)
}

// endHoldSpan ends a held call's span with what the wait came to: the
// message's phase then, or why it ended without an outcome.
func endHoldSpan(span trace.Span, last *fleetv1alpha1.Delegation, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	if last != nil {
		span.SetAttributes(tracing.AttrPhase.String(string(last.Status.Phase)))
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// reserveHold takes one of the caller's held-call slots, or refuses the
// call when it holds as many as it may: one principal's calls, held on one
// message or many, cannot take the gateway's memory and goroutines from
// everyone else.
func (s *service) reserveHold(c *call) (release func(), err error) {
	release, ok := s.heldCalls.reserve(c.who)
	if !ok {
		s.metrics.throttled.WithLabelValues("held_calls").Inc()
		return nil, toolerr.New(toolerr.Throttled, "you hold %d calls open already, the most one caller may (--max-held-calls); "+
			"wait for some to return, or send with wait:false and collect the outcomes with bridge_poll", s.heldCalls.max)
	}
	return release, nil
}

// progressToken is the request's progress token, nil when the client gave
// none.
func progressToken(req *mcp.CallToolRequest) any {
	if req == nil || req.Params == nil {
		return nil
	}
	return req.Params.GetProgressToken()
}

// progressStatus is what a progress notification says of the Delegation.
type progressStatus struct {
	to        string
	namespace string
	phase     fleetv1alpha1.DelegationPhase
}

// notifyProgress tells the client the call is alive, so that it does not cut
// off a silent call. Failures are ignored: the next tick tries again, and a
// client that is gone ends the hold through its context.
func (s *service) notifyProgress(ctx context.Context, c *call, token any, started time.Time, name string, st progressStatus) {
	p := &mcp.ProgressNotificationParams{
		ProgressToken: token,
		Progress:      s.opts.Clock.Since(started).Seconds(),
		Message:       fmt.Sprintf("waiting for %s: %s (%s)", st.to, cmp.Or(st.phase, fleetv1alpha1.DelegationPending), name),
	}
	if resuming := s.resumeProgress(ctx, st); resuming != "" {
		p.Message = fmt.Sprintf("waiting for %s: %s (%s)", st.to, resuming, name)
	}
	if c.stream != nil {
		c.stream.Progress(p)
		return
	}
	_ = c.req.Session.NotifyProgress(ctx, p)
}

// resumeProgress says, for a progress notification, how far the receiver
// of a message still in its queue is from taking it when it is suspended
// or being resumed; "" otherwise. It reads the gateway's cache.
func (s *service) resumeProgress(ctx context.Context, st progressStatus) string {
	if st.namespace == "" || (st.phase != "" && st.phase != fleetv1alpha1.DelegationPending && st.phase != fleetv1alpha1.DelegationQueued) {
		return ""
	}
	var m fleetv1alpha1.Member
	if err := s.cache.Get(ctx, types.NamespacedName{Namespace: st.namespace, Name: st.to}, &m); err != nil {
		return ""
	}
	c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionSuspended)
	switch {
	case m.Status.SuspendedAt != nil && m.Spec.Suspend != nil && *m.Spec.Suspend:
		return "the member is suspended (spec.suspend); the message waits in its queue until it is resumed"
	case m.Status.SuspendedAt != nil:
		return "the member is suspended; resuming it for this message"
	case c != nil && c.Reason == fleetv1alpha1.ReasonResuming:
		return fmt.Sprintf("resuming the member (%s); the message is typed once its agent is ready", strings.ToLower(string(cmp.Or(m.Status.Phase, fleetv1alpha1.MemberPending))))
	}
	return ""
}

// detach records that the blocking sender stopped waiting, so that a later
// reply takes the detached path. It runs after the call's context may have
// ended, so it writes under a context of its own. If the Delegation reached
// an outcome meanwhile, detach returns it instead of writing.
func (s *service) detach(ctx context.Context, d *fleetv1alpha1.Delegation, answered func(*fleetv1alpha1.Delegation) bool) (*fleetv1alpha1.Delegation, bool) {
	if d == nil {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), detachTimeout)
	defer cancel()
	select {
	case s.detachSlots <- struct{}{}:
		defer func() { <-s.detachSlots }()
	case <-ctx.Done():
		s.log.Error(ctx.Err(), "Recording a departed waiter", "delegation", klog.KObj(d))
		return d, false
	}
	reached := false
	now := s.opts.Clock.Now()
	updated, err := s.updateStatus(ctx, d, func(d *fleetv1alpha1.Delegation) (bool, error) {
		if reached = answered != nil && answered(d); reached {
			// The waiter gets its outcome after all.
			return false, nil
		}
		return delegation.Detach(d, now), nil
	})
	if err != nil {
		s.log.Error(err, "Recording a departed waiter", "delegation", klog.KObj(d))
	}
	return updated, reached
}

// acknowledge records that a waiter handed a detached Delegation's outcome
// to its sender (a re-attached call), so bridge_poll does not show it again.
func (s *service) acknowledge(ctx context.Context, d *fleetv1alpha1.Delegation) {
	if d == nil || !delegation.Unclaimed(d) {
		return
	}
	now := s.opts.Clock.Now()
	if _, err := s.updateStatus(ctx, d, func(d *fleetv1alpha1.Delegation) (bool, error) {
		return delegation.Acknowledge(d, now)
	}); err != nil {
		s.log.Error(err, "Acknowledging a delivered outcome", "delegation", klog.KObj(d))
	}
}

// reattach clears detachedAt of a Delegation whose sender waits on it again
// (a retried bridge_send with the same idempotency key, or an answer), so a
// reply goes to the waiter rather than down the detached path.
func (s *service) reattach(ctx context.Context, d *fleetv1alpha1.Delegation) *fleetv1alpha1.Delegation {
	if !delegation.Reattach(d.DeepCopy()) {
		return d
	}
	updated, err := s.updateStatus(ctx, d, func(d *fleetv1alpha1.Delegation) (bool, error) {
		return delegation.Reattach(d), nil
	})
	if err != nil {
		s.log.Error(err, "Re-attaching a waiter", "delegation", klog.KObj(d))
	}
	return updated
}
