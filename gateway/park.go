package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/toolerr"
)

// Parked calls. A tool call that has to wait for an outcome (bridge_send,
// bridge_ask) would otherwise keep, for as long as it waits, everything
// that serves one MCP request over HTTP: net/http's connection goroutine
// and background reader with their buffers, the MCP SDK's per-request
// session with its jsonrpc2 reader and handler goroutines. That is about
// 40 KB a call, and a gateway holds thousands.
//
// So the SDK serves every request as usual (authentication, validation,
// the tool handler, errors) up to the moment a handler would wait. Then the
// handler parks the call: it hands the rest of its work to the gateway and
// returns a placeholder, which the SDK answers into the request's writer
// and the writer swallows. The SDK's request ends, and with it its session
// and goroutines. The gateway takes the HTTP/1.1 connection over (hijack)
// and answers the call on it itself, on the same wire as the SDK: a
// server-sent event stream with the progress notifications and then the
// JSON-RPC response, chunked, after which it closes the connection. One
// goroutine waits for the outcome and one for the client to hang up, each
// with a stack of its own that never grew through the request's serving.
// Where the connection cannot be taken over (HTTP/2), the call is answered
// on its request, which then stays open as before.

// errParked says a tool handler parked its call: the gateway answers it.
var errParked = errors.New("the call is parked: the gateway answers it on its connection")

// parkedWriteTimeout bounds each write to a parked call's client.
const parkedWriteTimeout = 10 * time.Second

// parkedStart starts the hold of a parked call that is answered on stream.
type parkedStart func(ctx context.Context, stream *heldStream) *parkedHold

// parkedHold is a parked call's hold, and what the call makes of its end.
type parkedHold struct {
	h      *holding
	decide func(*fleetv1alpha1.Delegation) bool
	end    func(ctx context.Context, last *fleetv1alpha1.Delegation, err error) *mcp.CallToolResult
	ended  bool
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

// parkingContextKey carries a request's parking in its context.
type parkingContextKey struct{}

// parking is where the tool handler of one MCP request leaves its call
// when it parks it, and what the SDK then wrote in answer to the
// placeholder.
type parking struct {
	mu sync.Mutex
	// wrote says the SDK wrote to the response before any park: a
	// response already under way cannot be taken over.
	wrote bool
	wait  parkedStart
	// answer is what the SDK wrote after the park: the placeholder's
	// response, whose JSON-RPC id the gateway answers with.
	answer bytes.Buffer
}

// parkingOf is the parking of the request behind ctx, nil when it has none.
func parkingOf(ctx context.Context) *parking {
	p, _ := ctx.Value(parkingContextKey{}).(*parking)
	return p
}

// park leaves wait for the gateway to run; false when the call cannot be
// parked (its response is under way) and the handler must wait itself.
func (p *parking) park(wait parkedStart) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wrote || p.wait != nil {
		return false
	}
	p.wait = wait
	return true
}

func (p *parking) parked() parkedStart {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wait
}

// parkingWriter passes what the SDK writes through until the call is
// parked, and keeps what it writes afterwards.
type parkingWriter struct {
	http.ResponseWriter
	p *parking
}

func (w *parkingWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	if w.p.wait != nil {
		return w.p.answer.Write(b)
	}
	w.p.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *parkingWriter) WriteHeader(code int) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	if w.p.wait != nil {
		return
	}
	w.p.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

// Flush implements http.Flusher, so that the SDK's flushes reach the
// connection only while the response is the SDK's.
func (w *parkingWriter) Flush() {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	if w.p.wait != nil {
		return
	}
	w.p.wrote = true
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the writer underneath.
func (w *parkingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// parkingHandler serves MCP requests through next, the SDK's handler, and
// answers the calls their handlers park.
func (g *Gateway) parkingHandler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := &parking{}
		next.ServeHTTP(&parkingWriter{ResponseWriter: w, p: p}, r.WithContext(context.WithValue(r.Context(), parkingContextKey{}, p)))
		wait := p.parked()
		if wait == nil {
			return
		}
		msg, err := jsonrpc.DecodeMessage(sseData(p.answer.Bytes()))
		resp, ok := msg.(*jsonrpc.Response)
		var envelope map[string]json.RawMessage
		if err == nil && ok && resp.Error == nil {
			err = json.Unmarshal(resp.Result, &envelope)
		}
		if err != nil || !ok || !resp.ID.IsValid() || resp.Error != nil {
			// The SDK answered the placeholder with something else: the
			// call cannot be answered. It ends as if its client had hung
			// up, so its message records the departed waiter.
			g.log.Error(err, "Answering a parked call", "answer", excerpt(p.answer.String(), 200))
			g.runParked(wait, &heldStream{gone: closedChan(), events: discardEvents{}})
			http.Error(w, "the gateway could not answer the call", http.StatusInternalServerError)
			return
		}
		for _, k := range []string{"content", "structuredContent", "isError"} {
			delete(envelope, k)
		}
		g.answerParked(w, r, &heldStream{id: resp.ID, envelope: envelope}, wait)
	})
}

// sseData is the data of the one server-sent event in b.
func sseData(b []byte) []byte {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			return data
		}
	}
	return nil
}

// answerParked answers a parked call on s: on the HTTP/1.1 connection,
// taken over, when it can, else on the request.
func (g *Gateway) answerParked(w http.ResponseWriter, r *http.Request, s *heldStream, wait parkedStart) {
	header := w.Header().Clone()
	if r.ProtoMajor == 1 && r.ProtoMinor >= 1 {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			events, err := newConnEvents(conn, header)
			if err != nil {
				_ = conn.Close()
				s.gone, s.events = closedChan(), discardEvents{}
				g.runParked(wait, s)
				return
			}
			s.conn, s.events = conn, events
			g.parkedCalls.Add(1)
			go func() {
				defer g.parkedCalls.Done()
				g.runParked(wait, s)
			}()
			return
		}
	}
	s.gone, s.events = r.Context().Done(), &writerEvents{w: w}
	g.parkedCalls.Add(1)
	defer g.parkedCalls.Done()
	g.runParked(wait, s)
}

// runParked holds a parked call until it ends, and answers it on s.
func (g *Gateway) runParked(start parkedStart, s *heldStream) {
	s.answer(g, g.holdParked(start, s))
}

// holdParked holds a parked call and returns its result; a panic becomes
// an internal error, as in any tool handler. The loop is the one of hold,
// in a frame with little in it, so that the goroutine waits shallow and
// its stack shrinks to its smallest at the next collection.
func (g *Gateway) holdParked(start parkedStart, s *heldStream) (res *mcp.CallToolResult) {
	var p *parkedHold
	defer func() {
		if r := recover(); r != nil {
			g.panics.Add(1)
			g.log.Error(fmt.Errorf("%v", r), "Parked call panicked", "stack", string(debug.Stack()))
			if p != nil && !p.ended {
				p.h.end()
			}
			res = errorResult(toolerr.New(toolerr.Internal, "the gateway failed while holding the call"))
		}
	}()
	p = start(g.svc.holds, s)
	for res = p.look(); res == nil; {
		if res = p.handle(p.h.wait.next()); res == nil {
			res = p.look()
		}
	}
	return res
}

// answer sends res as the call's response and ends the stream.
func (s *heldStream) answer(g *Gateway, res *mcp.CallToolResult) {
	raw, err := json.Marshal(res)
	if err == nil && len(s.envelope) > 0 {
		raw, err = s.enclose(raw, res.IsError)
	}
	if err == nil {
		var data []byte
		if data, err = jsonrpc.EncodeMessage(&jsonrpc.Response{ID: s.id, Result: raw}); err == nil {
			err = s.events.send(data)
		}
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		g.log.V(1).Info("Could not answer a parked call", "error", err.Error())
	}
	s.events.end()
}

// heldStream is the event stream a parked call is answered on.
type heldStream struct {
	// id is the JSON-RPC id of the call.
	id jsonrpc.ID
	// envelope is what the SDK put in its result beside the tool's own
	// fields (content, structuredContent, isError), for the protocol
	// revision of the call: the parked call's result carries it too.
	envelope map[string]json.RawMessage
	// conn is the connection taken over, which the hold reads to see its
	// client hang up; nil when the call is answered on its request, and
	// then gone is closed when the client hangs up.
	conn   net.Conn
	gone   <-chan struct{}
	events eventSink
}

// enclose adds the envelope's fields to a result. An error result has no
// resultType: answered at once, it is the one toolMiddleware makes, after
// the SDK typed the handler's.
func (s *heldStream) enclose(raw []byte, isError bool) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	for k, v := range s.envelope {
		if _, ok := fields[k]; !ok && !(isError && k == "resultType") {
			fields[k] = v
		}
	}
	return json.Marshal(fields)
}

// progress sends a progress notification; a client that is gone ends the
// hold through gone.
func (s *heldStream) progress(p *mcp.ProgressNotificationParams) {
	raw, err := json.Marshal(p)
	if err != nil {
		return
	}
	data, err := jsonrpc.EncodeMessage(&jsonrpc.Request{Method: "notifications/progress", Params: raw})
	if err != nil {
		return
	}
	_ = s.events.send(data)
}

// eventSink writes the server-sent events of a response.
type eventSink interface {
	// send writes one JSON-RPC message as an event, and flushes it.
	send(data []byte) error
	// end ends the response.
	end()
}

// sseEvent frames data as the SDK does: an event named message.
func sseEvent(data []byte) []byte {
	b := make([]byte, 0, len(data)+len("event: message\ndata: \n\n"))
	b = append(b, "event: message\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}

// connEvents writes a response on a connection taken over from net/http:
// the status line and headers at once, then each event as a chunk, then
// the last chunk, and closes the connection.
type connEvents struct {
	conn net.Conn
}

func newConnEvents(conn net.Conn, header http.Header) (*connEvents, error) {
	header.Set("Connection", "close")
	header.Set("Transfer-Encoding", "chunked")
	header.Del("Content-Length")
	header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	var head bytes.Buffer
	head.WriteString("HTTP/1.1 200 OK\r\n")
	if err := header.Write(&head); err != nil {
		return nil, err
	}
	head.WriteString("\r\n")
	c := &connEvents{conn: conn}
	if err := c.write(head.Bytes()); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *connEvents) write(b []byte) error {
	if err := c.conn.SetWriteDeadline(time.Now().Add(parkedWriteTimeout)); err != nil {
		return err
	}
	_, err := c.conn.Write(b)
	return err
}

func (c *connEvents) send(data []byte) error {
	event := sseEvent(data)
	chunk := make([]byte, 0, len(event)+16)
	chunk = fmt.Appendf(chunk, "%x\r\n", len(event))
	chunk = append(chunk, event...)
	chunk = append(chunk, "\r\n"...)
	return c.write(chunk)
}

func (c *connEvents) end() {
	_ = c.write([]byte("0\r\n\r\n"))
	_ = c.conn.Close()
}

// writerEvents writes a response on its request's writer.
type writerEvents struct {
	mu sync.Mutex
	w  http.ResponseWriter
}

func (e *writerEvents) send(data []byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.w.Write(sseEvent(data)); err != nil {
		return err
	}
	return http.NewResponseController(e.w).Flush()
}

func (e *writerEvents) end() {}

// discardEvents answers nobody: the call's client is gone.
type discardEvents struct{}

func (discardEvents) send([]byte) error { return net.ErrClosed }
func (discardEvents) end()              {}

func closedChan() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// connWaiter is the waiter of a parked call on a connection taken over:
// its goroutine waits in a read of the connection, which returns when the
// client hangs up, and which every other event (a change of the
// Delegation, the timeout, a progress tick, the gateway stopping) ends by
// setting a read deadline in the past, after it recorded itself in
// pending. One goroutine, resting in a shallow read, is all a parked call
// keeps.
type connWaiter struct {
	svc      *service
	key      types.NamespacedName
	conn     net.Conn
	interval time.Duration
	w        *waiter
	pending  atomic.Uint32
	timeout  clock.Timer
	tick     clock.Timer
	buf      [1]byte
}

// aLongTimeAgo is a read deadline that has passed.
var aLongTimeAgo = time.Unix(1, 0)

// waitOnConn subscribes to key and starts the hold's timers; interval 0
// means no progress notifications. The gateway's stopping reaches it
// through the rendezvous.
func (s *service) waitOnConn(key types.NamespacedName, conn net.Conn, timeout, interval time.Duration) *connWaiter {
	cw := &connWaiter{svc: s, key: key, conn: conn, interval: interval}
	cw.w = s.rv.subscribePoke(key, cw.raise)
	select {
	case <-s.stopping:
		// It began before the subscription: nothing will poke it.
		cw.raise(eventStopping)
	default:
	}
	cw.timeout = s.opts.Clock.AfterFunc(timeout, func() { cw.raise(eventTimeout) })
	if interval > 0 {
		cw.tick = s.opts.Clock.AfterFunc(interval, func() { cw.raise(eventProgress) })
	}
	return cw
}

// raise records ev and wakes the read.
func (cw *connWaiter) raise(ev holdEvent) {
	cw.pending.Or(1 << ev)
	_ = cw.conn.SetReadDeadline(aLongTimeAgo)
}

// take returns the first pending event and forgets it.
func (cw *connWaiter) take() (holdEvent, bool) {
	for {
		p := cw.pending.Load()
		if p == 0 {
			return 0, false
		}
		ev := holdEvent(bits.TrailingZeros32(p))
		if cw.pending.CompareAndSwap(p, p&^(1<<ev)) {
			return ev, true
		}
	}
}

func (cw *connWaiter) next() holdEvent {
	for {
		if ev, ok := cw.take(); ok {
			if ev == eventProgress {
				cw.tick.Reset(cw.interval)
			}
			return ev
		}
		_, err := cw.conn.Read(cw.buf[:])
		switch {
		case err == nil:
			// A client sends nothing more on the connection (HTTP/1.1 waits
			// for the response); anything it does send is dropped.
		case errors.Is(err, os.ErrDeadlineExceeded):
			// Cleared before the next take, so that an event raised after
			// it wakes the next read.
			_ = cw.conn.SetReadDeadline(time.Time{})
		default:
			return eventHangup
		}
	}
}

func (cw *connWaiter) stop() {
	cw.svc.rv.unsubscribe(cw.key, cw.w)
	cw.timeout.Stop()
	if cw.tick != nil {
		cw.tick.Stop()
	}
}
