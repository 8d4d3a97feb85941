package gateway

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/internal/testutil"
)

// rpcMessage is a JSON-RPC message as a client reads it off the stream.
type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		ProgressToken any    `json:"progressToken"`
		Message       string `json:"message"`
	} `json:"params"`
	Result *struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	} `json:"result"`
}

// heldSend is a bridge_send to w1 on the 2025-06-18 revision, as the Claude
// Code and Codex CLIs send it, with a progress token.
const heldSend = `{"jsonrpc":"2.0","id":"call-7","method":"tools/call","params":{"name":"bridge_send","arguments":{"content":"park me","sessionId":"w1"},"_meta":{"progressToken":"tok-7"}}}`

func heldSendRequest(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(heldSend))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+staticToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	return req
}

// readEvents reads the JSON-RPC messages of a server-sent event stream to
// messages until it ends.
func readEvents(t *testing.T, body *bufio.Reader, messages chan<- rpcMessage) {
	defer close(messages)
	for {
		line, err := body.ReadString('\n')
		if err != nil {
			return
		}
		data, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data: ")
		if !ok {
			continue
		}
		var m rpcMessage
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Errorf("an event that is not JSON-RPC: %q: %v", data, err)
			return
		}
		messages <- m
	}
}

// TestParkedCallOnItsConnection: a held bridge_send over HTTP/1.1 is
// parked and answered on its connection (package heldcall tests the wire:
// chunked, closed after): progress notifications for the client's token
// that name the message, and then the reply as the response to the call's
// id.
func TestParkedCallOnItsConnection(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{ProgressInterval: 20 * time.Millisecond})
	addMember(t, member("w1", ns).Obj())

	resp, err := http.DefaultClient.Do(heldSendRequest(t, h.url+"/mcp"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" || !resp.Close {
		t.Fatalf("response %s, Content-Type %q, Close %v: want 200, an event stream, on the connection the gateway took over",
			resp.Status, resp.Header.Get("Content-Type"), resp.Close)
	}
	messages := make(chan rpcMessage, 64)
	go readEvents(t, bufio.NewReader(resp.Body), messages)

	d := waitDelegation(t, ns, "w1", nil)
	progress := 0
	for m := range messages {
		if m.Method == "notifications/progress" {
			if m.Params.ProgressToken != "tok-7" || !strings.Contains(m.Params.Message, d.Name) {
				t.Errorf("progress notification %+v, want token tok-7 and a message naming %s", m.Params, d.Name)
			}
			if progress++; progress == 2 {
				env.Settle(t, ns, d.Name, typed, replied("parked and answered"))
			}
			continue
		}
		if string(m.ID) != `"call-7"` || m.Result == nil || m.Result.IsError {
			t.Fatalf("final message %+v, want the result of call-7", m)
		}
		var out SendOutput
		if err := json.Unmarshal(m.Result.StructuredContent, &out); err != nil || out.Outcome != "reply" || out.Text != "parked and answered" || out.DispatchID != d.Name {
			t.Fatalf("result %s (%v), want the reply", m.Result.StructuredContent, err)
		}
		if _, more := <-messages; more {
			t.Error("the stream went on after the response")
		}
		return
	}
	t.Fatal("the stream ended without a response")
}

// TestParkedResultIsTheSDKs: a call answered after it was parked gets the
// same result, to the byte of its content, as a call the SDK answers at
// once: the same message's outcome, once held and once re-attached after
// it settled, for a reply and for an error, on every protocol revision.
func TestParkedResultIsTheSDKs(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	addMember(t, member("w1", ns).Obj())

	cases := map[string]func(d *fleetv1alpha1.Delegation, now time.Time){
		"reply":       replied("the same either way"),
		"worker gone": func(d *fleetv1alpha1.Delegation, now time.Time) { delegation.WorkerGone(d, now, "pane lost") },
	}
	for _, version := range []string{"", "2025-11-25", "2025-06-18", "2025-03-26"} {
		transport := &mcp.StreamableClientTransport{Endpoint: h.url + "/mcp", HTTPClient: httpClient(staticToken), DisableStandaloneSSE: true}
		primary, err := mcp.NewClient(&mcp.Implementation{Name: "revision", Version: "v0"}, nil).Connect(context.Background(), transport, &mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatalf("connecting with revision %q: %v", version, err)
		}
		t.Cleanup(func() { _ = primary.Close() })
		for name, outcome := range cases {
			t.Run(cmp.Or(version, "latest")+"/"+name, func(t *testing.T) {
				held := make(chan *mcp.CallToolResult, 1)
				content := fmt.Sprintf("message for %s on %q", name, version)
				go func() {
					res, err := primary.CallTool(context.Background(), &mcp.CallToolParams{Name: "bridge_send", Arguments: map[string]any{"content": content}})
					if err != nil {
						t.Errorf("bridge_send: %v", err)
					}
					held <- res
				}()
				d := waitDelegation(t, ns, "w1", func(d *fleetv1alpha1.Delegation) bool { return d.Spec.Content == content })
				testutil.Eventually(t, "", func() error { return errIf(h.gw.svc.rv.held() != 1, "the call is not held") })
				env.Settle(t, ns, d.Name, typed, outcome)
				parked := <-held
				if parked == nil {
					t.FailNow()
				}
				again, err := primary.CallTool(context.Background(), &mcp.CallToolParams{Name: "bridge_send", Arguments: map[string]any{"dispatchId": d.Name}})
				if err != nil {
					t.Fatal(err)
				}
				if diff := gocmp.Diff(resultView(t, again), resultView(t, parked)); diff != "" {
					t.Errorf("parked result (-answered at once +parked):\n%s", diff)
				}
			})
		}
	}
}

// resultView is what a client reads of a tool result.
func resultView(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	raw, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if v["content"] == nil {
		t.Errorf("a result without content: %s", raw)
	}
	return v
}

// TestParkedCallsEndWhenTheGatewayStops: held calls parked on their
// connections end with interrupted when the gateway stops, and it waits
// for their answers.
func TestParkedCallsEndWhenTheGatewayStops(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	const calls = 3
	results := make([]<-chan toolCall[SendOutput], calls)
	for i := range results {
		results[i] = async[SendOutput](t, context.Background(), primary, "bridge_send", map[string]any{"content": fmt.Sprintf("held %d", i)})
	}
	testutil.Eventually(t, "", func() error {
		return errIf(h.gw.svc.rv.held() != calls, "%d of %d calls held", h.gw.svc.rv.held(), calls)
	})
	h.stop()
	for _, r := range results {
		if got := wantOK(t, receive(t, r)); got.Outcome != outcomeInterrupted || got.DispatchID == "" {
			t.Errorf("a call held while the gateway stopped: %+v, want interrupted with its dispatchId", got)
		}
	}
}
