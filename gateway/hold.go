package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
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

// hold waits on one Delegation until decide reports done, the timeout
// passes, or the call ends. It subscribes before its first read, so no
// change is missed, and reads from the cache the informer updated before it
// woke the waiter. seed is the Delegation as the caller last saw it (the
// create or update response), used until the cache catches up with it.
func (g *Gateway) hold(ctx context.Context, c *call, seed *fleetv1alpha1.Delegation, timeout time.Duration, decide func(*fleetv1alpha1.Delegation) bool) (*fleetv1alpha1.Delegation, error) {
	key := types.NamespacedName{Namespace: seed.Namespace, Name: seed.Name}
	w := g.rv.subscribe(key)
	defer g.rv.unsubscribe(key, w)

	gauge := g.metrics.openHolds.WithLabelValues(c.tool)
	gauge.Inc()
	// The deadline and the progress ticks run on the gateway's clock, so a
	// test steps them instead of waiting.
	clk := g.opts.Clock
	started := clk.Now()
	defer func() {
		gauge.Dec()
		g.metrics.holdDuration.WithLabelValues(c.tool).Observe(clk.Since(started).Seconds())
	}()

	timer := clk.NewTimer(timeout)
	defer timer.Stop()
	var tick <-chan time.Time
	token := progressToken(c.req)
	if token != nil && g.opts.ProgressInterval > 0 {
		t := clk.NewTicker(g.opts.ProgressInterval)
		defer t.Stop()
		tick = t.C()
	}
	hangup := requestDone(ctx)

	current, seen := seed, false
	for {
		var d fleetv1alpha1.Delegation
		switch err := g.cache.Get(ctx, key, &d); {
		case err == nil:
			// A cached copy may trail what this gateway just wrote; decide
			// copes (answered turns are passed in), and the informer wakes
			// the waiter again once the cache catches up.
			current, seen = &d, true
		case apierrors.IsNotFound(err):
			if seen {
				return current, errDelegationDeleted
			}
		default:
			return current, fmt.Errorf("reading delegation %s: %w", key, err)
		}
		if decide(current) {
			return current, nil
		}
		select {
		case <-w.wake:
		case <-tick:
			g.notifyProgress(ctx, c, token, started, current)
		case <-timer.C():
			return current, errHoldTimeout
		case <-hangup:
			return current, context.Canceled
		case <-g.stopping:
			return current, errGatewayStopping
		case <-ctx.Done():
			return current, ctx.Err()
		}
	}
}

// progressToken is the request's progress token, nil when the client gave
// none.
func progressToken(req *mcp.CallToolRequest) any {
	if req == nil || req.Params == nil {
		return nil
	}
	return req.Params.GetProgressToken()
}

// notifyProgress tells the client the call is alive, so that it does not cut
// off a silent call. Failures are ignored: the next tick tries again, and a
// client that is gone ends the hold through its context.
func (g *Gateway) notifyProgress(ctx context.Context, c *call, token any, started time.Time, d *fleetv1alpha1.Delegation) {
	phase := delegation.Phase(d)
	_ = c.req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
		ProgressToken: token,
		Progress:      g.opts.Clock.Since(started).Seconds(),
		Message:       fmt.Sprintf("waiting for %s: %s (%s)", d.Spec.To, phase, d.Name),
	})
}

// detach records that the blocking sender stopped waiting, so that a later
// reply takes the detached path. It runs after the call's context may have
// ended, so it writes under a context of its own. If the Delegation reached
// an outcome meanwhile, detach returns it instead of writing.
func (g *Gateway) detach(ctx context.Context, d *fleetv1alpha1.Delegation, answered func(*fleetv1alpha1.Delegation) bool) (*fleetv1alpha1.Delegation, bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), detachTimeout)
	defer cancel()
	select {
	case g.detachSlots <- struct{}{}:
		defer func() { <-g.detachSlots }()
	case <-ctx.Done():
		g.log.Error(ctx.Err(), "Recording a departed waiter", "delegation", klog.KObj(d))
		return d, false
	}
	reached := false
	now := g.opts.Clock.Now()
	updated, err := g.updateStatus(ctx, d, func(d *fleetv1alpha1.Delegation) (bool, error) {
		if reached = answered != nil && answered(d); reached {
			// The waiter gets its outcome after all.
			return false, nil
		}
		return delegation.Detach(d, now), nil
	})
	if err != nil {
		g.log.Error(err, "Recording a departed waiter", "delegation", klog.KObj(d))
	}
	return updated, reached
}

// acknowledge records that a waiter handed a detached Delegation's outcome
// to its sender (a re-attached call), so bridge_poll does not show it again.
func (g *Gateway) acknowledge(ctx context.Context, d *fleetv1alpha1.Delegation) {
	if !delegation.Unclaimed(d) {
		return
	}
	now := g.opts.Clock.Now()
	if _, err := g.updateStatus(ctx, d, func(d *fleetv1alpha1.Delegation) (bool, error) {
		return delegation.Acknowledge(d, now)
	}); err != nil {
		g.log.Error(err, "Acknowledging a delivered outcome", "delegation", klog.KObj(d))
	}
}

// reattach clears detachedAt of a Delegation whose sender waits on it again
// (a retried bridge_send with the same idempotency key, or an answer), so a
// reply goes to the waiter rather than down the detached path.
func (g *Gateway) reattach(ctx context.Context, d *fleetv1alpha1.Delegation) *fleetv1alpha1.Delegation {
	if !delegation.Reattach(d.DeepCopy()) {
		return d
	}
	updated, err := g.updateStatus(ctx, d, func(d *fleetv1alpha1.Delegation) (bool, error) {
		return delegation.Reattach(d), nil
	})
	if err != nil {
		g.log.Error(err, "Re-attaching a waiter", "delegation", klog.KObj(d))
	}
	return updated
}
