package herdr

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// streamBuffer is how many events a Stream holds for a slow consumer. Beyond
// it the stream stops reading; herdr then drops the connection after its
// write timeout and the stream reconnects with a resync, so nothing is lost.
const streamBuffer = 256

// Stream delivers the events of a subscription and survives reconnects.
//
// On every (re)connect it subscribes first, then takes a session snapshot and
// delivers an EventResync carrying it, then the events herdr pushes. Events
// pushed between subscribing and the snapshot are delivered after the resync,
// and so are events herdr replays from before it (see EventResync), so a
// consumer that reconciles against each resync and looks again at what each
// later event names ends with herdr's state, whatever was lost while the
// connection was down.
type Stream struct {
	events chan Event
	done   chan struct{}
	cancel context.CancelFunc

	mu  sync.Mutex
	err error
}

// Subscribe opens a Stream of the subscriptions. It returns at once; the
// first event is an EventResync. The stream ends when ctx ends, when Close is
// called, or when herdr rejects a subscription (Err then returns the *Error).
func (c *Client) Subscribe(ctx context.Context, subs []Subscription) *Stream {
	ctx, cancel := context.WithCancel(ctx)
	s := &Stream{
		events: make(chan Event, streamBuffer),
		done:   make(chan struct{}),
		cancel: cancel,
	}
	if subs == nil {
		subs = []Subscription{}
	}
	go s.run(ctx, c, subs)
	return s
}

// Events returns the channel events arrive on. It is closed when the stream ends.
func (s *Stream) Events() <-chan Event {
	return s.events
}

// Err returns why the stream ended: the rejection when herdr refused a
// subscription, else the context's error. It is nil while the stream runs.
func (s *Stream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the stream and waits until its connection is closed.
func (s *Stream) Close() error {
	s.cancel()
	<-s.done
	return nil
}

func (s *Stream) run(ctx context.Context, c *Client, subs []Subscription) {
	defer close(s.done)
	defer close(s.events)

	// Zero settings mean the defaults: a zero delay would spin on a dead socket.
	first, limit := cmp.Or(c.ReconnectMin, DefaultReconnectMin), cmp.Or(c.ReconnectMax, DefaultReconnectMax)
	backoff := first
	for {
		synced, err := s.session(ctx, c, subs)
		if ctx.Err() != nil {
			s.finish(context.Cause(ctx))
			return
		}
		if rejected(err) {
			s.finish(fmt.Errorf("herdr %s: %w", MethodEventsSubscribe, err))
			return
		}
		if synced {
			backoff = first
		}
		if !sleep(ctx, jitter(backoff)) {
			s.finish(context.Cause(ctx))
			return
		}
		backoff = min(2*backoff, limit)
	}
}

// rejected reports whether herdr refused the subscription itself, which no
// retry will change. A server failing on its own account may recover.
func rejected(err error) bool {
	var herr *Error
	if !errors.As(err, &herr) {
		return false
	}
	return herr.Code != CodeInternalError && herr.Code != CodeServerUnavailable
}

func (s *Stream) finish(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// session runs one connection: subscribe, resync, then relay events until the
// connection breaks. It reports whether the resync was delivered, and returns
// an *Error only when herdr rejected the subscription.
func (s *Stream) session(ctx context.Context, c *Client, subs []Subscription) (synced bool, err error) {
	req, err := encodeRequest(c.newID(), MethodEventsSubscribe, EventsSubscribeParams{Subscriptions: subs})
	if err != nil {
		return false, err
	}
	// The request is the only thing ever written: herdr reads any later byte,
	// or a half-close, as the subscriber going away.
	ex, err := c.open(ctx, req)
	if err != nil {
		return false, err
	}
	defer ex.Close()
	stop := context.AfterFunc(ctx, ex.Abort)
	defer stop()

	r := bufio.NewReaderSize(ex, 64<<10)
	if err := s.awaitStart(ctx, c, ex, r); err != nil {
		return false, err
	}

	snap, err := c.SessionSnapshot(ctx)
	if err != nil {
		// A failed snapshot is transient even when herdr sent an error body:
		// the subscription itself was accepted.
		return false, fmt.Errorf("%w: resyncing: %v", ErrUnavailable, err)
	}
	if !s.deliver(ctx, Event{Kind: EventResync, Snapshot: snap}) {
		return true, context.Cause(ctx)
	}

	for {
		line, err := readLine(r, maxResponseLine)
		if err != nil {
			return true, ioError(ctx, "reading events", err)
		}
		ev, err := decodeEvent(line)
		if err != nil {
			// A broken frame may have been an event: reconnecting resyncs
			// instead of silently skipping it.
			return true, fmt.Errorf("%w: decoding event: %v", ErrProtocol, err)
		}
		if !s.deliver(ctx, ev) {
			return true, context.Cause(ctx)
		}
	}
}

// awaitStart reads the first line: subscription_started, or the rejection.
// A server that sends neither within the client's Timeout ends the exchange.
func (s *Stream) awaitStart(ctx context.Context, c *Client, ex exchange, r *bufio.Reader) error {
	var late atomic.Bool
	if c.Timeout > 0 {
		t := time.AfterFunc(c.Timeout, func() { late.Store(true); ex.Abort() })
		defer t.Stop()
	}
	line, err := readLine(r, maxResponseLine)
	if late.Load() {
		return fmt.Errorf("%w: no subscription start within %s", ErrUnavailable, c.Timeout)
	}
	if err != nil {
		return ioError(ctx, "reading subscription start", err)
	}
	resp, err := decodeResponse(line)
	if err != nil {
		return err
	}
	if resp.Error != nil {
		return resp.Error
	}
	return decodeResult(resp.Result, ResultSubscriptionStarted, nil)
}

func (s *Stream) deliver(ctx context.Context, ev Event) bool {
	select {
	case s.events <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// jitter spreads reconnects of many streams after a herdr restart.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}
