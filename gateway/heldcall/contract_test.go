package heldcall

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetd/fleetd/gateway/sse"
)

// The contract with the MCP SDK: what this package relies on in the SDK's
// stateless streamable HTTP handler, driven for real. A failure here after
// an SDK upgrade says which assumption broke; fix the transport (or drop
// it for a hook the SDK grew) before anything else.

// revisions are the protocol revisions a client may speak to the gateway.
var revisions = []string{"2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"}

// sendInput and sendOutput stand for a held tool's types: the SDK derives
// the tool's schemas from them, as the gateway's tools have theirs.
type sendInput struct {
	Content string `json:"content"`
}

type sendOutput struct {
	Outcome string `json:"outcome"`
	Text    string `json:"text,omitempty"`
}

// sdkHandler is the SDK's handler set up as the gateway sets it up,
// serving tools/call to a tool named send that runs tool.
func sdkHandler(tool func(context.Context, *mcp.CallToolRequest) *mcp.CallToolResult) http.Handler {
	server := mcp.NewServer(&mcp.Implementation{Name: "contract", Version: "v0"}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	mcp.AddTool(server, &mcp.Tool{Name: "send"}, func(ctx context.Context, req *mcp.CallToolRequest, _ sendInput) (*mcp.CallToolResult, *sendOutput, error) {
		return tool(ctx, req), nil, nil
	})
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{
		Stateless:                    true,
		PropagateRequestCancellation: true,
	})
}

// toolsCall is a tools/call of send with id (JSON), on revision, with a
// progress token, as a client sends it.
func toolsCall(t *testing.T, url, revision, id string) *http.Request {
	t.Helper()
	meta := `"progressToken":"tok-7"`
	if revision >= "2026-07-28" {
		meta += fmt.Sprintf(`,%q:%q,%q:{}`, mcp.MetaKeyProtocolVersion, revision, mcp.MetaKeyClientCapabilities)
	}
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"send","arguments":{"content":"hello"},"_meta":{%s}}}`, id, meta)
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", revision)
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "send")
	return req
}

// responseState is what a response writer shows at one moment.
type responseState struct {
	ContentType string
	Written     bool
}

// probe is a recorder that tells whether anything was written to it.
type probe struct {
	*httptest.ResponseRecorder
	mu      sync.Mutex
	written bool
}

func newProbe() *probe { return &probe{ResponseRecorder: httptest.NewRecorder()} }

func (p *probe) WriteHeader(code int) {
	p.mark()
	p.ResponseRecorder.WriteHeader(code)
}

func (p *probe) Write(b []byte) (int, error) {
	p.mark()
	return p.ResponseRecorder.Write(b)
}

func (p *probe) Flush() {
	p.mark()
	p.ResponseRecorder.Flush()
}

func (p *probe) mark() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.written = true
}

func (p *probe) state() responseState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return responseState{ContentType: p.Header().Get("Content-Type"), Written: p.written}
}

// TestSDKAnswersThePlaceholder pins what Handler reads and assumes of the
// SDK's answer to a parked call's placeholder, on every revision: when the
// tool handler runs, the response is the event stream's and untouched
// (so the call can be parked and its answer taken over), and the SDK then
// answers with exactly one event named message: the JSON-RPC response to
// the call's id, whose result is the placeholder's fields and the
// envelope the parked answer carries too.
func TestSDKAnswersThePlaceholder(t *testing.T) {
	// The tool's own fields (content, structuredContent: what the SDK
	// makes of the zero output) are dropped; the rest is the envelope.
	const own = `"content":[{"type":"text","text":"{\"outcome\":\"\"}"}],"structuredContent":{"outcome":""}`
	const serverInfo = `{"io.modelcontextprotocol/serverInfo":{"name":"contract","version":"v0"}}`
	wantResult := map[string]string{
		"2025-03-26": `{` + own + `}`,
		"2025-06-18": `{` + own + `}`,
		"2025-11-25": `{` + own + `}`,
		"2026-07-28": `{"_meta":` + serverInfo + `,` + own + `,"resultType":"complete"}`,
	}
	wantEnvelope := map[string][]resultField{
		"2026-07-28": {
			{name: "_meta", value: json.RawMessage(serverInfo)},
			{name: "resultType", value: json.RawMessage(`"complete"`)},
		},
	}
	for _, revision := range revisions {
		for _, id := range []string{`"call-7"`, `7`} {
			t.Run(revision+"/"+id, func(t *testing.T) {
				w := newProbe()
				var atTool responseState
				sdkHandler(func(context.Context, *mcp.CallToolRequest) *mcp.CallToolResult {
					atTool = w.state()
					return &mcp.CallToolResult{}
				}).ServeHTTP(w, toolsCall(t, "/mcp", revision, id))

				if want := (responseState{ContentType: "text/event-stream"}); atTool != want {
					t.Errorf("the response when the tool ran: %+v, want %+v", atTool, want)
				}
				want := fmt.Sprintf(`event: message`+"\n"+`data: {"jsonrpc":"2.0","id":%s,"result":%s}`+"\n\n", id, wantResult[revision])
				if w.Code != http.StatusOK || w.Body.String() != want {
					t.Errorf("the SDK answered %d %q, want 200 %q", w.Code, w.Body.String(), want)
				}
				c, err := newCall(w.Body.Bytes())
				if err != nil {
					t.Fatalf("reading the SDK's answer: %v", err)
				}
				if got := fmt.Sprint(c.id.Raw()); got != strings.Trim(id, `"`) {
					t.Errorf("id %q, want %s", got, id)
				}
				if diff := cmp.Diff(wantEnvelope[revision], c.envelope, cmp.AllowUnexported(resultField{})); diff != "" {
					t.Errorf("envelope (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestParkedAnswerIsTheSDKs pins that a parked call reads, to the byte, as
// the SDK would have sent it: the same progress notification and the same
// response to the same result, on every revision. (An error result differs
// by design; see Call.result.)
func TestParkedAnswerIsTheSDKs(t *testing.T) {
	progress := &mcp.ProgressNotificationParams{ProgressToken: "tok-7", Progress: 1.5, Message: "waiting for w1: <pending> & more"}
	res := &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: "reply: <b>bold</b> & co"}},
		StructuredContent: map[string]any{"outcome": "reply", "text": "<b>bold</b> & co"},
	}
	for _, revision := range revisions {
		t.Run(revision, func(t *testing.T) {
			atOnce := httptest.NewRecorder()
			sdkHandler(func(ctx context.Context, req *mcp.CallToolRequest) *mcp.CallToolResult {
				if err := req.Session.NotifyProgress(ctx, progress); err != nil {
					t.Errorf("NotifyProgress: %v", err)
				}
				return res
			}).ServeHTTP(atOnce, toolsCall(t, "/mcp", revision, `"call-7"`))

			placeholder := httptest.NewRecorder()
			sdkHandler(func(context.Context, *mcp.CallToolRequest) *mcp.CallToolResult {
				return &mcp.CallToolResult{}
			}).ServeHTTP(placeholder, toolsCall(t, "/mcp", revision, `"call-7"`))
			c, err := newCall(placeholder.Body.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			parked := httptest.NewRecorder()
			c.onRequest(parked, httptest.NewRequest(http.MethodPost, "/mcp", nil))
			c.Progress(progress)
			if err := c.answer(res); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(events(t, atOnce.Body.String()), events(t, parked.Body.String())); diff != "" {
				t.Errorf("parked answer (-the SDK's +parked):\n%s", diff)
			}
		})
	}
}

// events splits an event stream into its events, each as AppendEvent
// frames it.
func events(t *testing.T, stream string) []string {
	t.Helper()
	var out []string
	for e := range strings.SplitSeq(strings.TrimSuffix(stream, "\n\n"), "\n\n") {
		if _, _, ok := sse.ParseEvent([]byte(e + "\n\n")); !ok {
			t.Errorf("an event not framed as package sse frames it: %q", e)
		}
		out = append(out, e)
	}
	return out
}

// TestSDKWritesBeforeAProgressNotification pins why a call that sent
// anything before it parks is answered on its request: the SDK writes and
// flushes its event at once, so the response is under way.
func TestSDKWritesBeforeAProgressNotification(t *testing.T) {
	w := newProbe()
	parked := true
	Handler(sdkHandler(func(ctx context.Context, req *mcp.CallToolRequest) *mcp.CallToolResult {
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: "tok-7", Message: "started"})
		parked = Park(ctx, func(*Call) *mcp.CallToolResult { return &mcp.CallToolResult{} })
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "at once"}}}
	}), discard, &sync.WaitGroup{}).ServeHTTP(w, toolsCall(t, "/mcp", "2025-06-18", `"call-7"`))
	if parked || !w.Flushed || !strings.Contains(w.Body.String(), "at once") {
		t.Errorf("parked %v, flushed %v, answer %q: want the call answered at once by the SDK", parked, w.Flushed, w.Body.String())
	}
}
