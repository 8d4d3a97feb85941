package agents

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// claudeTranscript is a Claude Code session in its transcript's shape: a
// bridge_send with wait:false and its result, a bridge_poll whose result
// names other messages, and a send of another tool's name.
const claudeTranscript = `{"parentUuid":null,"isSidechain":false,"sessionId":"s1","type":"user","message":{"role":"user","content":"ask w1 to run the tests"},"uuid":"u1"}
{"parentUuid":"u1","isSidechain":false,"sessionId":"s1","type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"Sending."},{"type":"tool_use","id":"toolu_01","name":"mcp__fleetd__bridge_send","input":{"to":"w1","content":"run the tests","wait":false}}]},"uuid":"a1"}
{"parentUuid":"a1","isSidechain":false,"sessionId":"s1","type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_01","type":"tool_result","content":[{"type":"text","text":"{\"outcome\":\"dispatched\",\"dispatchId\":\"d-mine\"}"}]}]},"toolUseResult":[{"type":"text","text":"{\"outcome\":\"dispatched\",\"dispatchId\":\"d-mine\"}"}],"uuid":"u2"}
{"parentUuid":"u2","isSidechain":false,"sessionId":"s1","type":"assistant","message":{"role":"assistant","content":[{"type":"tool_use","id":"toolu_02","name":"mcp__fleetd__bridge_poll","input":{}}]},"uuid":"a2"}
{"parentUuid":"a2","isSidechain":false,"sessionId":"s1","type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_02","type":"tool_result","content":"{\"outcomes\":[{\"dispatchId\":\"d-other\",\"member\":\"w2\",\"outcome\":\"reply\"}],\"questions\":[]}"}]},"uuid":"u3"}
{"parentUuid":"u3","isSidechain":false,"sessionId":"s1","type":"assistant","message":{"role":"assistant","content":[{"type":"tool_use","id":"toolu_03","name":"mcp__fleetd__bridge_send","input":{"to":"w3","content":"and lint"}}]},"uuid":"a3"}
{"parentUuid":"a3","isSidechain":false,"sessionId":"s1","type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_03","type":"tool_result","content":"{\"outcome\":\"timeout\",\"dispatchId\":\"d-late\"}"}]},"uuid":"u4"}
{"truncated line
`

// codexTranscript is a Codex rollout with an MCP call recorded both ways
// the reader takes: one end event holding call and result, and a call
// paired with its output by call_id.
const codexTranscript = `{"timestamp":"2026-01-02T03:00:00Z","type":"session_meta","payload":{"id":"s2"}}
{"timestamp":"2026-01-02T03:00:01Z","type":"event_msg","payload":{"type":"mcp_tool_call_end","call_id":"call_1","invocation":{"server":"fleetd","tool":"bridge_send","arguments":{"to":"w1","content":"x","wait":false}},"result":{"Ok":{"content":[{"type":"text","text":"{\"outcome\":\"dispatched\",\"dispatchId\":\"d-codex\"}"}]}}}}
{"timestamp":"2026-01-02T03:00:02Z","type":"response_item","payload":{"type":"function_call","name":"mcp__fleetd__bridge_send","arguments":"{\"to\":\"w2\",\"content\":\"y\",\"wait\":false}","call_id":"call_2"}}
{"timestamp":"2026-01-02T03:00:03Z","type":"response_item","payload":{"type":"function_call_output","call_id":"call_2","output":"{\"outcome\":\"dispatched\",\"dispatchId\":\"d-codex-2\"}"}}
{"timestamp":"2026-01-02T03:00:04Z","type":"response_item","payload":{"type":"function_call","name":"mcp__fleetd__bridge_poll","arguments":"{}","call_id":"call_3"}}
{"timestamp":"2026-01-02T03:00:05Z","type":"response_item","payload":{"type":"function_call_output","call_id":"call_3","output":"{\"outcomes\":[{\"dispatchId\":\"d-other\"}]}"}}
`

func TestSessionSendsOf(t *testing.T) {
	cases := map[string]struct {
		transcript string
		want       SessionSends
	}{
		"claude code": {claudeTranscript, SessionSends{Known: true, DispatchIDs: map[string]bool{"d-mine": true, "d-late": true}}},
		"codex":       {codexTranscript, SessionSends{Known: true, DispatchIDs: map[string]bool{"d-codex": true, "d-codex-2": true}}},
		"no sends": {
			`{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"mcp__fleetd__bridge_poll","input":{}}]}}` + "\n" +
				`{"type":"user","message":{"content":[{"tool_use_id":"t1","type":"tool_result","content":"{\"outcomes\":[{\"dispatchId\":\"d-other\"}]}"}]}}`,
			SessionSends{DispatchIDs: map[string]bool{}},
		},
		"a line too long to read is skipped": {
			`{"type":"user","text":"` + strings.Repeat("x", maxTranscriptLine) + `"}` + "\n" + strings.SplitAfterN(claudeTranscript, "\n", 2)[1],
			SessionSends{Known: true, DispatchIDs: map[string]bool{"d-mine": true, "d-late": true}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := SessionSendsOf(strings.NewReader(tc.transcript))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("sends (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReadSessionSendsTakesOnlyTheSessionsOwn: a transcript whose name is
// not the session's, or that is not a regular file, tells nothing.
func TestReadSessionSendsTakesOnlyTheSessionsOwn(t *testing.T) {
	dir := t.TempDir()
	own := filepath.Join(dir, "s1.jsonl")
	if err := os.WriteFile(own, []byte(claudeTranscript), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadSessionSends("s1", own); err != nil || !got.DispatchIDs["d-mine"] {
		t.Errorf("the session's own transcript: %+v, %v", got, err)
	}
	for name, tc := range map[string]struct{ session, path string }{
		"another session's": {"s2", own},
		"no session":        {"", own},
		"a directory":       {filepath.Base(dir), dir},
		"missing":           {"s3", filepath.Join(dir, "s3.jsonl")},
	} {
		if got, err := ReadSessionSends(tc.session, tc.path); err == nil || got.Known {
			t.Errorf("%s: %+v, %v; want an error and nothing known", name, got, err)
		}
	}
}
