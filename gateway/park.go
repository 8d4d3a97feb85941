package gateway

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"net/http"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/heldcall"
	"github.com/fleetd/fleetd/gateway/toolerr"
)

// Parked calls. A tool call that has to wait for an outcome (bridge_send,
// bridge_ask) is parked where its request allows: holdThen hands the rest
// of its hold to package heldcall, which answers the call once the SDK's
// request is over, on the connection it took over, with one goroutine
// that waits shallow. This file is the gateway's side of it: the hold of
// a parked call, and its waiter, which waits in the call's own Wait.

// errParked says a tool handler parked its call: the gateway answers it.
var errParked = errors.New("the call is parked: the gateway answers it on its connection")

// parkingHandler serves MCP requests through next, the SDK's handler, and
// answers the calls their handlers park.
func (g *Gateway) parkingHandler(next http.Handler) http.Handler {
	return heldcall.Handler(next, g.log, &g.parkedCalls)
}

// parkedHold is a parked call's hold, and what the call makes of its end.
type parkedHold struct {
	h      *holding
	decide func(*fleetv1alpha1.Delegation) bool
	end    func(ctx context.Context, last *fleetv1alpha1.Delegation, err error) *mcp.CallToolResult
	ended  bool
}

// park parks the call of the tool handler running under ctx, when its
// request allows: start then begins its hold, under the gateway's context,
// once the SDK's request is over. False when the handler must wait itself.
func (s *service) park(ctx context.Context, start func(context.Context, *heldcall.Call) *parkedHold) bool {
	return heldcall.Park(ctx, func(c *heldcall.Call) *mcp.CallToolResult { return s.holdParked(start, c) })
}

// holdParked holds a parked call and returns its result; a panic becomes
// an internal error, as in any tool handler. The loop is the one of hold,
// in a frame with little in it, so that the goroutine waits shallow and
// its stack shrinks to its smallest at the next collection.
func (s *service) holdParked(start func(context.Context, *heldcall.Call) *parkedHold, c *heldcall.Call) (res *mcp.CallToolResult) {
	var p *parkedHold
	defer func() {
		if r := recover(); r != nil {
			s.panics.Add(1)
			s.log.Error(fmt.Errorf("%v", r), "Parked call panicked", "stack", string(debug.Stack()))
			if p != nil && !p.ended {
				p.h.end()
			}
			res = errorResult(toolerr.New(toolerr.Internal, "the gateway failed while holding the call"))
		}
	}()
	p = start(s.holds, c)
	for res = p.look(); res == nil; {
		if res = p.handle(p.h.wait.next()); res == nil {
			res = p.look()
		}
	}
	return res
}

// look reads the Delegation and decides; the call's result once the hold
// is over, else nil.
func (p *parkedHold) look() *mcp.CallToolResult {
	d, ended, err := p.h.look(p.decide)
	if !ended {
		return nil
	}
	return p.finish(d, err)
}

// handle acts on ev; the call's result once the hold is over, else nil.
func (p *parkedHold) handle(ev holdEvent) *mcp.CallToolResult {
	d, ended, err := p.h.handle(ev)
	if !ended {
		return nil
	}
	return p.finish(d, err)
}

func (p *parkedHold) finish(d *fleetv1alpha1.Delegation, err error) *mcp.CallToolResult {
	p.ended = true
	p.h.end()
	return p.end(p.h.ctx, d, err)
}

// parkedWaiter waits for the events of a parked call's hold in the call's
// Wait, which returns when the client hangs up, and which every other
// event (a change of the Delegation, the timeout, a progress tick, the
// gateway stopping) ends with the call's Wake, after it recorded itself
// in pending. On a connection taken over, Wait is a shallow read of it:
// one goroutine, resting there, is all a parked call keeps.
type parkedWaiter struct {
	svc      *service
	key      types.NamespacedName
	call     *heldcall.Call
	interval time.Duration
	w        *waiter
	pending  atomic.Uint32
	timeout  clock.Timer
	tick     clock.Timer
}

// waitOnCall subscribes to key and starts the hold's timers; interval 0
// means no progress notifications. The gateway's stopping reaches it
// through the rendezvous.
func (s *service) waitOnCall(key types.NamespacedName, call *heldcall.Call, timeout, interval time.Duration) *parkedWaiter {
	pw := &parkedWaiter{svc: s, key: key, call: call, interval: interval}
	pw.w = s.rv.subscribePoke(key, pw.raise)
	select {
	case <-s.stopping:
		// It began before the subscription: nothing will poke it.
		pw.raise(eventStopping)
	default:
	}
	pw.timeout = s.opts.Clock.AfterFunc(timeout, func() { pw.raise(eventTimeout) })
	if interval > 0 {
		pw.tick = s.opts.Clock.AfterFunc(interval, func() { pw.raise(eventProgress) })
	}
	return pw
}

// raise records ev and wakes the wait.
func (pw *parkedWaiter) raise(ev holdEvent) {
	pw.pending.Or(1 << ev)
	pw.call.Wake()
}

// take returns the first pending event and forgets it.
func (pw *parkedWaiter) take() (holdEvent, bool) {
	for {
		p := pw.pending.Load()
		if p == 0 {
			return 0, false
		}
		ev := holdEvent(bits.TrailingZeros32(p))
		if pw.pending.CompareAndSwap(p, p&^(1<<ev)) {
			return ev, true
		}
	}
}

func (pw *parkedWaiter) next() holdEvent {
	for {
		if ev, ok := pw.take(); ok {
			if ev == eventProgress {
				pw.tick.Reset(pw.interval)
			}
			return ev
		}
		if !pw.call.Wait() {
			return eventHangup
		}
	}
}

func (pw *parkedWaiter) stop() {
	pw.svc.rv.unsubscribe(pw.key, pw.w)
	pw.timeout.Stop()
	if pw.tick != nil {
		pw.tick.Stop()
	}
}
