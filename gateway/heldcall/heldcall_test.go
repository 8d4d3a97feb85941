package heldcall

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var discard = logr.Discard()

// rpcMessage is a JSON-RPC message as a client reads it off the stream.
type rpcMessage struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params *struct {
		ProgressToken any    `json:"progressToken"`
		Message       string `json:"message"`
	} `json:"params,omitempty"`
	Result *struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"result,omitempty"`
}

// readMessages reads the JSON-RPC messages of an event stream until it
// ends.
func readMessages(t *testing.T, body io.Reader) []rpcMessage {
	t.Helper()
	var out []rpcMessage
	lines := bufio.NewScanner(body)
	for lines.Scan() {
		data, ok := strings.CutPrefix(lines.Text(), "data: ")
		if !ok {
			continue
		}
		var m rpcMessage
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("an event that is not JSON-RPC: %q: %v", data, err)
		}
		out = append(out, m)
	}
	return out
}

// parkingTool parks every call with hold.
func parkingTool(t *testing.T, hold Hold) func(context.Context, *mcp.CallToolRequest) *mcp.CallToolResult {
	return func(ctx context.Context, _ *mcp.CallToolRequest) *mcp.CallToolResult {
		if !Park(ctx, hold) {
			t.Error("the call could not be parked")
		}
		return &mcp.CallToolResult{}
	}
}

func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// heldMessages are what a client reads of a call held through one progress
// notification, then answered.
var heldMessages = []rpcMessage{
	{Method: "notifications/progress", Params: &struct {
		ProgressToken any    `json:"progressToken"`
		Message       string `json:"message"`
	}{ProgressToken: "tok-7", Message: "waiting"}},
	{ID: json.RawMessage(`"call-7"`), Result: &struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}{Content: []struct {
		Text string `json:"text"`
	}{{Text: "answered"}}}},
}

// holdUntilWoken sends a progress notification, and answers once woken.
func holdUntilWoken(held chan<- *Call) Hold {
	return func(c *Call) *mcp.CallToolResult {
		c.Progress(&mcp.ProgressNotificationParams{ProgressToken: "tok-7", Message: "waiting"})
		held <- c
		if c.Wait() {
			return textResult("answered")
		}
		return textResult("client gone")
	}
}

// TestParkedCallOnItsConnection: over HTTP/1.1 a parked call is answered
// on its connection, which Handler took over after the SDK's request
// ended: an event stream, chunked, with the hold's progress notifications
// and then the response to the call's id, after which the connection
// closes; and answering counts the call until then.
func TestParkedCallOnItsConnection(t *testing.T) {
	var answering sync.WaitGroup
	held := make(chan *Call, 1)
	srv := httptest.NewServer(Handler(sdkHandler(parkingTool(t, holdUntilWoken(held))), discard, &answering))
	defer srv.Close()

	resp, err := http.DefaultClient.Do(toolsCall(t, srv.URL, "2025-06-18", `"call-7"`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" || !resp.Close || !cmp.Equal(resp.TransferEncoding, []string{"chunked"}) {
		t.Fatalf("response %s, Content-Type %q, Close %v, Transfer-Encoding %v: want 200, an event stream, chunked, on a connection that closes after it",
			resp.Status, resp.Header.Get("Content-Type"), resp.Close, resp.TransferEncoding)
	}
	c := <-held
	if c.conn == nil {
		t.Fatal("the call is not answered on its connection")
	}
	c.Wake()
	if diff := cmp.Diff(heldMessages, readMessages(t, resp.Body)); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
	answering.Wait()
}

// TestParkedCallOnItsRequest: where the connection cannot be taken over
// (HTTP/2, or any writer without one), a parked call is answered on its
// request: the same stream, written through the request's writer.
func TestParkedCallOnItsRequest(t *testing.T) {
	held := make(chan *Call, 1)
	rec := httptest.NewRecorder()
	served := make(chan struct{})
	go func() {
		defer close(served)
		Handler(sdkHandler(parkingTool(t, holdUntilWoken(held))), discard, &sync.WaitGroup{}).ServeHTTP(rec, toolsCall(t, "/mcp", "2025-06-18", `"call-7"`))
	}()
	c := <-held
	c.Wake()
	<-served
	if ct := rec.Header().Get("Content-Type"); rec.Code != http.StatusOK || ct != "text/event-stream" {
		t.Errorf("response %d, Content-Type %q", rec.Code, ct)
	}
	if diff := cmp.Diff(heldMessages, readMessages(t, rec.Body)); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
}

// TestWaitSeesTheClientHangUp: a client that hangs up ends Wait with
// false, on its connection and on its request.
func TestWaitSeesTheClientHangUp(t *testing.T) {
	cases := map[string]func(t *testing.T, h http.Handler) (hangUp func()){
		"connection": func(t *testing.T, h http.Handler) func() {
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			if err := toolsCall(t, srv.URL, "2025-06-18", `"call-7"`).Write(conn); err != nil {
				t.Fatal(err)
			}
			return func() { _ = conn.Close() }
		},
		"request": func(t *testing.T, h http.Handler) func() {
			ctx, cancel := context.WithCancel(context.Background())
			go h.ServeHTTP(httptest.NewRecorder(), toolsCall(t, "/mcp", "2025-06-18", `"call-7"`).WithContext(ctx))
			return cancel
		},
	}
	for name, serve := range cases {
		t.Run(name, func(t *testing.T) {
			held := make(chan *Call, 1)
			waited := make(chan bool, 2)
			hangUp := serve(t, Handler(sdkHandler(parkingTool(t, func(c *Call) *mcp.CallToolResult {
				held <- c
				waited <- c.Wait()
				waited <- c.Wait()
				return textResult("nobody reads this")
			})), discard, &sync.WaitGroup{}))
			<-held
			hangUp()
			for range 2 {
				if <-waited {
					t.Fatal("Wait returned true after the client hung up, and without a Wake")
				}
			}
		})
	}
}

// TestWakeBeforeWait: a Wake that comes while the hold is busy elsewhere
// ends its next Wait, on its connection and on its request.
func TestWakeBeforeWait(t *testing.T) {
	for name, onConnection := range map[string]bool{"connection": true, "request": false} {
		t.Run(name, func(t *testing.T) {
			woken := make(chan bool, 1)
			h := Handler(sdkHandler(parkingTool(t, func(c *Call) *mcp.CallToolResult {
				c.Wake()
				woken <- c.Wait()
				return textResult("woken")
			})), discard, &sync.WaitGroup{})
			if onConnection {
				srv := httptest.NewServer(h)
				defer srv.Close()
				resp, err := http.DefaultClient.Do(toolsCall(t, srv.URL, "2025-06-18", `"call-7"`))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
			} else {
				h.ServeHTTP(httptest.NewRecorder(), toolsCall(t, "/mcp", "2025-06-18", `"call-7"`))
			}
			select {
			case ok := <-woken:
				if !ok {
					t.Error("Wait reported a hangup")
				}
			case <-time.After(time.Minute):
				t.Fatal("the Wake was lost")
			}
		})
	}
}

// TestUnreadableAnswer: when the SDK answers a parked call with something
// other than a result, the call cannot be answered: its hold runs with
// the client gone, and the client gets a 500.
func TestUnreadableAnswer(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "contract", Version: "v0"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "send"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ sendInput) (*mcp.CallToolResult, *sendOutput, error) {
		return parkingTool(t, func(c *Call) *mcp.CallToolResult {
			if c.Wait() {
				t.Error("Wait on a call that cannot be answered returned true")
			}
			return textResult("nobody reads this")
		})(ctx, nil), nil, nil
	})
	server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if method == "tools/call" {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "a middleware failed"}
			}
			return res, err
		}
	})
	rec := httptest.NewRecorder()
	Handler(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{Stateless: true}), discard, &sync.WaitGroup{}).
		ServeHTTP(rec, toolsCall(t, "/mcp", "2025-06-18", `"call-7"`))
	if rec.Code != http.StatusInternalServerError {
		t.Errorf("response %d %q, want 500", rec.Code, rec.Body.String())
	}
}

// TestResultCarriesTheEnvelope: a parked call's result carries what the
// SDK added to the placeholder's, after the tool's fields and unless the
// tool's result has it, and an error result no resultType.
func TestResultCarriesTheEnvelope(t *testing.T) {
	complete := []resultField{{name: "resultType", value: json.RawMessage(`"complete"`)}}
	cases := map[string]struct {
		envelope []resultField
		res      *mcp.CallToolResult
		want     string
	}{
		"no envelope": {
			res:  textResult("ok"),
			want: `{"content":[{"type":"text","text":"ok"}]}`,
		},
		"typed": {
			envelope: complete,
			res:      textResult("ok"),
			want:     `{"content":[{"type":"text","text":"ok"}],"resultType":"complete"}`,
		},
		"an error is not typed": {
			envelope: complete,
			res:      &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "failed"}}},
			want:     `{"content":[{"type":"text","text":"failed"}],"isError":true}`,
		},
		"_meta joins the tool's": {
			envelope: []resultField{{name: "_meta", value: json.RawMessage(`{"sdk":{"name":"x"},"both":"sdk"}`)}},
			res:      &mcp.CallToolResult{Meta: mcp.Meta{"tool": true, "both": "tool"}, Content: []mcp.Content{}},
			want:     `{"_meta":{"both":"tool","sdk":{"name":"x"},"tool":true},"content":[]}`,
		},
		"the tool's own field wins": {
			envelope: []resultField{{name: "isError", value: json.RawMessage(`false`)}},
			res:      &mcp.CallToolResult{IsError: true, Content: []mcp.Content{}},
			want:     `{"content":[],"isError":true}`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := (&Call{envelope: tc.envelope}).result(tc.res)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("result %s, want %s", got, tc.want)
			}
		})
	}
}
