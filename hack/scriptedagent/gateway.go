package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetd/fleetd/internal/mcpclient"
)

// Tools of fleetd's gateway the scripted agent calls.
const (
	toolReply = "bridge_reply"
	toolAsk   = "bridge_ask"
)

// gateway calls fleetd's MCP gateway as the member whose token it holds. It
// connects on the first call, so an agent that never replies never needs a
// gateway, and reconnects when the session breaks, as a gateway restart does.
type gateway struct {
	endpoint string
	client   *mcp.Client
	http     *http.Client
	// attempts bounds how many times one call is tried; backoff is the pause
	// before the second attempt, doubled before each further one.
	attempts int
	backoff  time.Duration

	mu      sync.Mutex
	session *mcp.ClientSession
}

// newGateway returns a gateway client for the MCP endpoint that sends token
// as a bearer token on every request.
func newGateway(endpoint, token, version string) *gateway {
	return &gateway{
		endpoint: endpoint,
		client:   mcp.NewClient(&mcp.Implementation{Name: reportSource, Version: version}, nil),
		// No Timeout: bridge_ask is held open until the primary answers.
		http:     mcpclient.BearerClient(token),
		attempts: 3,
		backoff:  250 * time.Millisecond,
	}
}

// callTool calls the named tool. A result with isError is returned, not an
// error: the tool answered, and the agent prints what it said. Failures of
// the connection are retried on a fresh session, a few times; that may
// repeat a call the gateway did receive, which a test agent accepts.
func (g *gateway) callTool(ctx context.Context, name string, args map[string]any) (*mcp.CallToolResult, error) {
	var err error
	delay := g.backoff
	for attempt := 1; attempt <= g.attempts; attempt++ {
		if attempt > 1 {
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("calling %s: %w (after %w)", name, ctx.Err(), err)
			case <-time.After(delay):
			}
			delay *= 2
		}
		var session *mcp.ClientSession
		session, err = g.connect(ctx)
		if err != nil {
			continue
		}
		params := &mcp.CallToolParams{Name: name, Arguments: args}
		// A progress token lets the gateway keep a held call alive with
		// progress notifications.
		params.SetProgressToken(fmt.Sprintf("%s-%d", name, time.Now().UnixNano()))
		var res *mcp.CallToolResult
		res, err = session.CallTool(ctx, params)
		if err == nil {
			return res, nil
		}
		var wireErr *jsonrpc.Error
		if ctx.Err() != nil || errors.As(err, &wireErr) {
			// The gateway refused the request itself; asking again on a new
			// session would get the same refusal.
			return nil, fmt.Errorf("calling %s: %w", name, err)
		}
		g.drop(session)
	}
	return nil, fmt.Errorf("calling %s at %s, %d attempts: %w", name, g.endpoint, g.attempts, err)
}

// connect returns the open session, or opens one.
func (g *gateway) connect(ctx context.Context) (*mcp.ClientSession, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.session != nil {
		return g.session, nil
	}
	transport := &mcp.StreamableClientTransport{
		Endpoint:   g.endpoint,
		HTTPClient: g.http,
		// The agent never needs server-initiated messages, and a standalone
		// stream would only hold a connection open.
		DisableStandaloneSSE: true,
	}
	session, err := g.client.Connect(ctx, transport, nil)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", g.endpoint, err)
	}
	g.session = session
	return session, nil
}

// drop forgets a broken session so that the next call opens a new one.
func (g *gateway) drop(session *mcp.ClientSession) {
	g.mu.Lock()
	if g.session == session {
		g.session = nil
	}
	g.mu.Unlock()
	_ = session.Close()
}

// close ends the session, if one is open.
func (g *gateway) close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.session == nil {
		return nil
	}
	err := g.session.Close()
	g.session = nil
	return err
}

// toolError is the structured content of a failed gateway tool call.
type toolError struct {
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// describeToolError says what a result with isError reports, preferring the
// gateway's error code and message over the free text.
func describeToolError(res *mcp.CallToolResult) string {
	var te toolError
	if decodeStructured(res, &te) == nil && te.Error != nil {
		return te.Error.Code + ": " + te.Error.Message
	}
	if text := resultText(res); text != "" {
		return text
	}
	return "tool reported an error without a message"
}

// answerOf returns the answer in a bridge_ask result.
func answerOf(res *mcp.CallToolResult) (string, error) {
	var out struct {
		Answer *string `json:"answer"`
	}
	if err := decodeStructured(res, &out); err != nil {
		return "", err
	}
	if out.Answer == nil {
		return "", errors.New("bridge_ask result has no answer")
	}
	return *out.Answer, nil
}

// decodeStructured decodes the structured content of res into v. Servers
// that predate structured content send the same JSON as the text content,
// so that is the fallback.
func decodeStructured(res *mcp.CallToolResult, v any) error {
	var raw []byte
	if res.StructuredContent != nil {
		var err error
		if raw, err = json.Marshal(res.StructuredContent); err != nil {
			return fmt.Errorf("encoding structured content: %w", err)
		}
	} else {
		raw = []byte(resultText(res))
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("decoding tool result: %w", err)
	}
	return nil
}

// resultText joins the text content of res.
func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, "\n")
}
