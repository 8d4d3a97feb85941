package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// testToken is the member token the fake gateway accepts.
const testToken = "member-token-w1"

// toolCall is one tool call the fake gateway served.
type toolCall struct {
	Tool    string
	Content string
}

// fakeGateway is an MCP server over real HTTP with fleetd's bridge_reply and
// bridge_ask, which records the calls it serves.
type fakeGateway struct {
	url string

	// answer is what bridge_ask answers.
	answer string
	// refuse is bridge_reply content that gets an isError result.
	refuse string
	// failNext makes the next that many HTTP requests fail with 404, as a
	// gateway that restarted and forgot the client does.
	failNext atomic.Int32
	// connects counts sessions opened.
	connects atomic.Int32
	// unauthorized counts requests refused for a bad token.
	unauthorized atomic.Int32

	mu    sync.Mutex
	calls []toolCall
}

// newFakeGateway starts a fake gateway that answers every bridge_ask with
// answer and refuses a bridge_reply of refuse, unless that is empty; it
// stops when the test ends.
func newFakeGateway(t *testing.T, answer, refuse string) *fakeGateway {
	t.Helper()
	g := &fakeGateway{answer: answer, refuse: refuse}
	server := mcp.NewServer(&mcp.Implementation{Name: "fake-gateway", Version: "test"}, nil)
	schema := json.RawMessage(`{"type":"object","properties":{"content":{"type":"string"}},"required":["content"]}`)
	server.AddTool(&mcp.Tool{Name: toolReply, InputSchema: schema}, g.handleReply)
	server.AddTool(&mcp.Tool{Name: toolAsk, InputSchema: schema}, g.handleAsk)
	server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			// The client tries server/discover first; this server answers
			// only the initialize handshake, once per session.
			if method == "initialize" {
				g.connects.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			g.unauthorized.Add(1)
			http.Error(w, "unknown token", http.StatusUnauthorized)
			return
		}
		if g.takeFailure() {
			http.Error(w, "session not found", http.StatusNotFound)
			return
		}
		mcpHandler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	g.url = srv.URL
	return g
}

// takeFailure reports whether this request is one of those to fail.
func (g *fakeGateway) takeFailure() bool {
	for {
		n := g.failNext.Load()
		if n <= 0 {
			return false
		}
		if g.failNext.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

func (g *fakeGateway) record(req *mcp.CallToolRequest) (string, error) {
	var args struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
		return "", err
	}
	g.mu.Lock()
	g.calls = append(g.calls, toolCall{Tool: req.Params.Name, Content: args.Content})
	g.mu.Unlock()
	return args.Content, nil
}

func (g *fakeGateway) handleReply(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	content, err := g.record(req)
	if err != nil {
		return nil, err
	}
	if g.refuse != "" && content == g.refuse {
		return &mcp.CallToolResult{
			IsError:           true,
			Content:           []mcp.Content{&mcp.TextContent{Text: "no delegation in flight"}},
			StructuredContent: map[string]any{"error": map[string]any{"code": "no_delegation", "message": "no delegation in flight"}},
		}, nil
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: `{"delivered":true}`}},
		StructuredContent: map[string]any{"delivered": true},
	}, nil
}

func (g *fakeGateway) handleAsk(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if _, err := g.record(req); err != nil {
		return nil, err
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: `{"answer":` + jsonString(g.answer) + `}`}},
		StructuredContent: map[string]any{"answer": g.answer},
	}, nil
}

// recorded returns the calls served so far.
func (g *fakeGateway) recorded() []toolCall {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]toolCall(nil), g.calls...)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// agentReport is one pane.report_agent call as the fake herdr received it.
type agentReport struct {
	PaneID         string  `json:"pane_id"`
	Source         string  `json:"source"`
	Agent          string  `json:"agent"`
	State          string  `json:"state"`
	Message        *string `json:"message"`
	Seq            *uint64 `json:"seq"`
	AgentSessionID *string `json:"agent_session_id"`
}

// fakeHerdr serves herdr's socket protocol, one request line and one
// response line per connection, and records pane.report_agent calls.
type fakeHerdr struct {
	socketPath string

	mu      sync.Mutex
	reports []agentReport
}

// newFakeHerdr listens on a fresh socket until the test ends.
func newFakeHerdr(t *testing.T) *fakeHerdr {
	t.Helper()
	// A short directory: socket paths are limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "herdr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	h := &fakeHerdr{socketPath: filepath.Join(dir, "herdr.sock")}
	ln, err := net.Listen("unix", h.socketPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go h.serve(conn)
		}
	}()
	return h
}

func (h *fakeHerdr) serve(conn net.Conn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		return
	}
	var req struct {
		ID     string          `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(line, &req); err != nil {
		_, _ = conn.Write([]byte(`{"id":"","error":{"code":"invalid_request","message":"bad json"}}` + "\n"))
		return
	}
	if req.Method != "pane.report_agent" {
		_, _ = conn.Write([]byte(`{"id":` + jsonString(req.ID) + `,"error":{"code":"invalid_request","message":"unknown method"}}` + "\n"))
		return
	}
	var r agentReport
	if err := json.Unmarshal(req.Params, &r); err != nil {
		_, _ = conn.Write([]byte(`{"id":` + jsonString(req.ID) + `,"error":{"code":"invalid_request","message":"bad params"}}` + "\n"))
		return
	}
	h.mu.Lock()
	h.reports = append(h.reports, r)
	h.mu.Unlock()
	_, _ = conn.Write([]byte(`{"id":` + jsonString(req.ID) + `,"result":{"type":"ok"}}` + "\n"))
}

// recorded returns the reports received so far.
func (h *fakeHerdr) recorded() []agentReport {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]agentReport(nil), h.reports...)
}

// states returns the reported states, in order.
func (h *fakeHerdr) states() []string {
	var states []string
	for _, r := range h.recorded() {
		states = append(states, r.State)
	}
	return states
}
