// Package heldcall answers the MCP tool calls that wait (a bridge_send
// held until its message has an outcome) outside the request that
// carried them, so that a waiting call costs the gateway little.
//
// Served as usual, a waiting call keeps everything that serves one MCP
// request over HTTP: net/http's connection goroutine and background
// reader with their buffers, and the MCP SDK's per-request session with
// its jsonrpc2 reader and handler goroutines, about 40 KB a call. So the
// SDK serves every request as usual (authentication, validation, the tool
// handler, errors) up to the moment a handler would wait. Then the handler
// parks the call (Park): it hands the wait to a Hold and returns a
// placeholder result, which the SDK answers into the request's writer and
// Handler swallows. The SDK's request ends, and with it its session and
// goroutines. Handler reads the call's JSON-RPC id off the swallowed
// answer, takes the HTTP/1.1 connection over from net/http, and answers
// the call on it itself, on the same wire as the SDK: a server-sent event
// stream with the progress notifications and then the JSON-RPC response,
// chunked, after which it closes the connection. One goroutine, with a
// stack that never grew through the request's serving, runs the Hold and
// waits in a read of the connection. Where the connection cannot be taken
// over (HTTP/2), the call is answered on its request, which then stays
// open as before.
//
// What this relies on in the SDK (github.com/modelcontextprotocol/go-sdk
// v1.8.0, stateless streamable HTTP) is pinned by contract_test.go, which
// drives the SDK's own handler: before a tool handler returns, it has
// set Content-Type: text/event-stream and written nothing; then it
// answers the result with exactly one event named message whose data is
// the JSON-RPC response, framed as package sse frames it.
//
// The SDK offers no hook that would make this unnecessary. Its
// StreamableHTTPOptions (mcp/streamable.go) configure statelessness, JSON
// responses, an EventStore, timeouts, body limits and cancellation, none a
// deferred response. A tool handler's return value is the response:
// streamableServerConn.servePOST holds the request in hangResponse until
// streamableServerConn.Write has delivered it through stream.deliverLocked
// and the unexported writeEvent (mcp/event.go), and serveStateless closes
// the session when the request ends. RequestExtra.CloseSSEStream
// (mcp/shared.go) ends the request's stream for the client to resume it
// with Last-Event-ID, which takes an EventStore and a GET on a session: a
// stateless handler answers GET with 405, and the 2026-07-28 revision
// drops resumption. Input-required results (mcp/mrtr.go) ask the client
// for input and a retry, not for patience, and v1.8.0 has no tasks. What
// would let a handler answer later (jsonrpc2.Async) is in the SDK's
// internal packages.
package heldcall

import (
	"bytes"
	"context"
	"net/http"
	"sync"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A Hold holds a parked call until its outcome and returns its result
// (never nil), on a goroutine of its own. Call tells it of the call's client and carries
// its progress notifications. Every parked call's Hold runs exactly once,
// also when the call cannot be answered: then its client is gone from the
// start (Call.Wait returns false).
type Hold func(call *Call) *mcp.CallToolResult

// Handler serves MCP requests with next, the SDK's streamable HTTP
// handler, and answers the calls parked while it serves them. log records
// the calls it could not answer. answering counts the calls it answers
// after their requests ended, which the HTTP server does not wait for.
func Handler(next http.Handler, log logr.Logger, answering *sync.WaitGroup) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := &parking{ResponseWriter: w}
		next.ServeHTTP(p, r.WithContext(context.WithValue(r.Context(), parkingContextKey{}, p)))
		hold := p.parked()
		if hold == nil {
			return
		}
		c, err := newCall(p.answer.Bytes())
		if err != nil {
			// The SDK answered the placeholder with something else, or
			// with nothing when the client hung up first: the call cannot
			// be answered, and ends as if its client had hung up.
			if r.Context().Err() == nil {
				log.Error(err, "Answering a parked call")
			}
			hold(&Call{})
			http.Error(w, "the gateway could not answer the call", http.StatusInternalServerError)
			return
		}
		if r.ProtoMajor == 1 && r.ProtoMinor >= 1 {
			header := w.Header().Clone()
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				if err := c.takeOver(conn, header); err != nil {
					_ = conn.Close()
					hold(&Call{})
					return
				}
				answering.Go(func() { c.run(hold, log) })
				return
			}
		}
		c.onRequest(w, r)
		answering.Add(1)
		defer answering.Done()
		c.run(hold, log)
	})
}

// Park parks the call whose tool handler runs under ctx: hold finishes
// it, once the SDK's request is over, and the handler returns any result
// at once (the SDK's answer to it is never sent). It reports false, and
// the handler must wait itself, when the call cannot be parked: ctx is
// not a tool handler's under Handler, the SDK wrote to the response
// already, or the call is parked already.
func Park(ctx context.Context, hold Hold) bool {
	p, ok := ctx.Value(parkingContextKey{}).(*parking)
	return ok && p.park(hold)
}

// parkingContextKey carries a request's parking in its context.
type parkingContextKey struct{}

// parking is the response writer of one MCP request while the SDK serves
// it: it passes what the SDK writes through until the call is parked, and
// keeps what it writes afterwards, its answer to the placeholder.
type parking struct {
	http.ResponseWriter

	mu sync.Mutex
	// wrote says the SDK wrote to the response before any park: a
	// response already under way cannot be taken over.
	wrote  bool
	hold   Hold
	answer bytes.Buffer
}

func (p *parking) park(hold Hold) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wrote || p.hold != nil {
		return false
	}
	p.hold = hold
	return true
}

func (p *parking) parked() Hold {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hold
}

func (p *parking) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold != nil {
		return p.answer.Write(b)
	}
	p.wrote = true
	return p.ResponseWriter.Write(b)
}

func (p *parking) WriteHeader(code int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold != nil {
		return
	}
	p.wrote = true
	p.ResponseWriter.WriteHeader(code)
}

// Flush implements http.Flusher, so that the SDK's flushes reach the
// connection only while the response is the SDK's.
func (p *parking) Flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold != nil {
		return
	}
	p.wrote = true
	_ = http.NewResponseController(p.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the writer underneath.
func (p *parking) Unwrap() http.ResponseWriter { return p.ResponseWriter }
