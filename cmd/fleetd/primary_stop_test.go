package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetd/fleetd/agents"
)

// TestPrimaryStopNeverFailsTheTurn: without a gateway to ask, or with one
// that does not answer, the hook lets the turn end (prints nothing, exits
// 0) and says why on stderr.
func TestPrimaryStopNeverFailsTheTurn(t *testing.T) {
	cases := map[string]struct {
		env     map[string]string
		args    []string
		stdin   string
		wantErr string
	}{
		"no gateway":           {wantErr: agents.EnvMCPURL},
		"no token":             {env: map[string]string{agents.EnvMCPURL: "http://127.0.0.1:9/mcp"}, wantErr: agents.EnvToken},
		"an unknown flag":      {args: []string{"--sideways"}, wantErr: "usage"},
		"a token file missing": {args: []string{"--gateway", "http://127.0.0.1:9/mcp", "--token-file", "/nonexistent/token"}, wantErr: "reading the token"},
		"a gateway that is not there": {
			env: map[string]string{agents.EnvMCPURL: "http://127.0.0.1:9/mcp", agents.EnvToken: "t"}, stdin: `{"hook_event_name":"Stop"}`, wantErr: "127.0.0.1:9",
		},
		"input that is not JSON": {env: map[string]string{agents.EnvMCPURL: "http://127.0.0.1:9/mcp", agents.EnvToken: "t"}, stdin: "{", wantErr: "decoding"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv(agents.EnvMCPURL, "")
			t.Setenv(agents.EnvToken, "")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			if code := primaryStop(tc.args, strings.NewReader(tc.stdin), &stdout, &stderr); code != 0 {
				t.Errorf("exit %d, want 0", code)
			}
			if stdout.Len() != 0 {
				t.Errorf("printed %q: the turn would not end", stdout.String())
			}
			if !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("stderr %q, want it to say %q", stderr.String(), tc.wantErr)
			}
		})
	}
}

// polledOutcome is an outcome as bridge_poll puts it on the wire.
type polledOutcome struct {
	DispatchID string `json:"dispatchId"`
	Member     string `json:"member"`
	Outcome    string `json:"outcome"`
	Text       string `json:"text,omitempty"`
	Content    string `json:"content,omitempty"`
	SettledAt  string `json:"settledAt,omitempty"`
}

// pollGateway is a gateway with a pile of outcomes waiting for one token:
// bridge_poll lists them oldest first; bridge_ack takes them away and
// records what was acknowledged.
type pollGateway struct {
	mu       sync.Mutex
	outcomes []polledOutcome
	acked    []string
}

func newPollGateway(t *testing.T, outcomes []polledOutcome) (*pollGateway, string) {
	t.Helper()
	g := &pollGateway{outcomes: outcomes}
	server := mcp.NewServer(&mcp.Implementation{Name: "poll-gateway", Version: "test"}, nil)
	type pollOut struct {
		Outcomes  []polledOutcome          `json:"outcomes"`
		Questions []agents.PrimaryQuestion `json:"questions"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "bridge_poll"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, pollOut, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return nil, pollOut{Outcomes: slices.Clone(g.outcomes), Questions: []agents.PrimaryQuestion{}}, nil
	})
	type ackIn struct {
		IDs []string `json:"ids"`
	}
	type ackOut struct {
		Acknowledged int `json:"acknowledged"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "bridge_ack"}, func(_ context.Context, _ *mcp.CallToolRequest, in ackIn) (*mcp.CallToolResult, ackOut, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.acked = append(g.acked, in.IDs...)
		g.outcomes = slices.DeleteFunc(g.outcomes, func(o polledOutcome) bool { return slices.Contains(in.IDs, o.DispatchID) })
		return nil, ackOut{Acknowledged: len(in.IDs)}, nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	t.Cleanup(srv.Close)
	return g, srv.URL
}

// TestPrimaryStopOnASharedToken: a Claude Code primary on a token that 30
// outcomes of earlier clients wait behind sends one message and stops.
// The hook hands over the reply to that message alone, acknowledges it
// alone, and says how many more wait; without a transcript it hands over
// the newest 20, and acknowledges those. Nothing else is acknowledged.
func TestPrimaryStopOnASharedToken(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	var pile []polledOutcome
	for i := range 30 {
		pile = append(pile, polledOutcome{
			DispatchID: fmt.Sprintf("old-%02d", i), Member: "w", Outcome: "reply", Text: fmt.Sprintf("old reply %02d", i),
			SettledAt: start.Add(time.Duration(i) * time.Minute).Format(time.RFC3339),
		})
	}
	mine := polledOutcome{DispatchID: "d-mine", Member: "w1", Outcome: "reply", Text: "the tests pass", Content: "run the tests", SettledAt: start.Add(time.Hour).Format(time.RFC3339)}
	// Claude Code's transcript of the session: the bridge_send and its result.
	transcript := `{"sessionId":"s1","type":"assistant","message":{"role":"assistant","content":[{"type":"tool_use","id":"toolu_01","name":"mcp__fleetd__bridge_send","input":{"to":"w1","content":"run the tests","wait":false}}]}}
{"sessionId":"s1","type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_01","type":"tool_result","content":[{"type":"text","text":"{\"outcome\":\"dispatched\",\"dispatchId\":\"d-mine\"}"}]}]}}
`
	dir := t.TempDir()
	path := filepath.Join(dir, "s1.jsonl")
	if err := os.WriteFile(path, []byte(transcript), 0o600); err != nil {
		t.Fatal(err)
	}
	input, err := json.Marshal(map[string]any{"hook_event_name": "Stop", "session_id": "s1", "transcript_path": path, "stop_hook_active": false})
	if err != nil {
		t.Fatal(err)
	}
	var newest20 []string
	for i := 29; i >= 10; i-- {
		newest20 = append(newest20, fmt.Sprintf("old-%02d", i))
	}
	cases := map[string]struct {
		stdin   string
		wantAck []string
		wantIn  []string
		wantOut []string
	}{
		"the session's transcript names its message": {
			stdin: string(input), wantAck: []string{"d-mine"},
			wantIn:  []string{"w1 replied to d-mine", "the tests pass", "30 more outcomes wait in bridge_poll"},
			wantOut: []string{"old reply"},
		},
		"no transcript": {
			stdin: `{"hook_event_name":"Stop","stop_hook_active":false}`, wantAck: append([]string{"d-mine"}, newest20[:19]...),
			wantIn:  []string{"the tests pass", "old reply 29", "old reply 11", "11 more outcomes wait in bridge_poll"},
			wantOut: []string{"old reply 10", "old reply 00"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g, url := newPollGateway(t, append(slices.Clone(pile), mine))
			t.Setenv(agents.EnvMCPURL, url)
			t.Setenv(agents.EnvToken, "primary")
			var stdout, stderr bytes.Buffer
			if code := primaryStop(nil, strings.NewReader(tc.stdin), &stdout, &stderr); code != 0 || stderr.Len() != 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr.String())
			}
			var d agents.StopDecision
			if err := json.Unmarshal(stdout.Bytes(), &d); err != nil || !d.Block() {
				t.Fatalf("printed %q (%v), want a block decision", stdout.String(), err)
			}
			if !cmp.Equal(g.acked, tc.wantAck) {
				t.Errorf("acknowledged %q, want %q", g.acked, tc.wantAck)
			}
			for _, s := range tc.wantIn {
				if !strings.Contains(d.Reason, s) {
					t.Errorf("the reason lacks %q:\n%s", s, d.Reason)
				}
			}
			for _, s := range tc.wantOut {
				if strings.Contains(d.Reason, s) {
					t.Errorf("the reason hands over %q, which it does not acknowledge:\n%s", s, d.Reason)
				}
			}
		})
	}
}
