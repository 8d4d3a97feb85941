// Package mcpclient is a small MCP client for fleetd's gateway: a
// streamable HTTP session with a bearer token, and tool calls whose
// structured results come back as maps. The demo and the end-to-end tests
// use it, as any MCP client would.
package mcpclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// bearer adds an Authorization header to every request: the gateway knows
// who calls from the token alone.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(r)
}

// BearerClient is an HTTP client that sends token with every request. It
// has no timeout: held calls take as long as the gateway holds them.
func BearerClient(token string) *http.Client {
	return &http.Client{Transport: bearer{token: token, next: http.DefaultTransport.(*http.Transport).Clone()}}
}

// Connect opens a session with the gateway at url as the holder of token.
func Connect(ctx context.Context, url, token string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "fleetd-client", Version: "v1"}, nil)
	s, err := c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:             url,
		HTTPClient:           BearerClient(token),
		DisableStandaloneSSE: true,
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", url, err)
	}
	return s, nil
}

// Result is a tool call's outcome as a client reads it.
type Result struct {
	// IsError is the MCP isError flag.
	IsError bool
	// Fields is the structured content.
	Fields map[string]any
	// Text is the text content, joined.
	Text string
}

// Str returns a top-level string field.
func (r Result) Str(key string) string {
	s, _ := r.Fields[key].(string)
	return s
}

// ErrorCode is error.code of a failed call.
func (r Result) ErrorCode() string {
	e, _ := r.Fields["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// Call calls a tool.
func Call(ctx context.Context, s *mcp.ClientSession, tool string, args map[string]any) (Result, error) {
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return Result{}, fmt.Errorf("calling %s: %w", tool, err)
	}
	return Decode(tool, res)
}

// Decode reads the result of a call to tool.
func Decode(tool string, res *mcp.CallToolResult) (Result, error) {
	out := Result{IsError: res.IsError}
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			out.Text += t.Text
		}
	}
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return out, err
		}
		if err := json.Unmarshal(b, &out.Fields); err != nil {
			return out, fmt.Errorf("decoding the structured result of %s: %w", tool, err)
		}
	}
	return out, nil
}
