package herdr

import (
	"errors"
	"testing"
)

// responseSeeds are response lines as herdr sends them, plus broken ones.
var responseSeeds = []string{
	`{"id":"1","result":{"type":"pong","version":"0.8.2","protocol":20,"capabilities":{"live_handoff":false}}}`,
	`{"id":"2","result":{"type":"workspace_created","workspace":{"workspace_id":"w1","number":1,"label":"a","focused":true,"pane_count":1,"tab_count":1,"active_tab_id":"w1:t1","agent_status":"unknown"},"tab":{"tab_id":"w1:t1","workspace_id":"w1","number":1,"label":"1","focused":true,"pane_count":1,"agent_status":"unknown"},"root_pane":{"pane_id":"w1:p1","terminal_id":"term_1","workspace_id":"w1","tab_id":"w1:t1","focused":true,"agent_status":"unknown","revision":0}}}`,
	`{"id":"3","result":{"type":"agent_info","agent":{"pane_id":"w1:p1","terminal_id":"term_1","workspace_id":"w1","tab_id":"w1:t1","focused":true,"agent_status":"idle","revision":4,"name":"a1","agent":"claude","state_change_seq":2}}}`,
	`{"id":"4","result":{"type":"pane_read","read":{"pane_id":"w1:p1","workspace_id":"w1","tab_id":"w1:t1","source":"recent","format":"text","text":"$ ls\n","revision":3,"truncated":false}}}`,
	`{"id":"5","result":{"type":"session_snapshot","snapshot":{"version":"0.8.2","protocol":20,"workspaces":[],"tabs":[],"panes":[],"layouts":[],"agents":[]}}}`,
	`{"id":"","error":{"code":"invalid_request","message":"invalid request"}}`,
	`{"id":"6","error":{"code":"agent_blocked","message":"agent a1 is blocked"}}`,
	`{"id":"7","result":null}`,
	`{"id":7}`,
	`[]`,
	`null`,
	`{"id":"8","result":{"type":`,
	"\x00\xff",
}

// eventSeeds are subscription lines as herdr sends them, plus broken ones.
var eventSeeds = []string{
	`{"id":"1","result":{"type":"subscription_started"}}`,
	`{"event":"pane_closed","data":{"type":"pane_closed","pane_id":"w1:p1","workspace_id":"w1"}}`,
	`{"event":"pane_created","data":{"type":"pane_created","pane":{"pane_id":"w1:p1","terminal_id":"t","workspace_id":"w1","tab_id":"w1:t1","focused":false,"agent_status":"unknown","revision":0}}}`,
	`{"event":"pane.agent_status_changed","data":{"pane_id":"w1:p1","workspace_id":"w1","agent_status":"working","agent":"claude"}}`,
	`{"event":"pane.output_matched","data":{"pane_id":"w1:p1","matched_line":"done","read":{"pane_id":"w1:p1","workspace_id":"w1","tab_id":"w1:t1","source":"recent_unwrapped","format":"text","text":"done","revision":1,"truncated":false}}}`,
	`{"event":"workspace_closed","data":{"type":"workspace_closed","workspace_id":"w1","workspace":null}}`,
	`{"id":"1","error":{"code":"pane_not_found","message":"pane w1:p9 not found"}}`,
	`{"event":"pane_closed","data":"x"}`,
	`{"event":5,"data":{}}`,
	`{"event":"pane_closed","data":{"pane":{"revision":-1}}}`,
	`{`,
}

func FuzzDecodeResponse(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		resp, err := decodeResponse(line)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("decodeResponse error %v is not ErrProtocol", err)
			}
			return
		}
		if (resp.Error == nil) == (resp.Result == nil) {
			t.Fatalf("decodeResponse gave %+v: want exactly one of result and error", resp)
		}
		if resp.Error != nil && resp.Error.Code == "" {
			t.Fatalf("decodeResponse accepted an error without a code")
		}
		// Every result decoder must fail cleanly on whatever got through.
		if resp.Result != nil {
			var created WorkspaceCreated
			_ = decodeResult(resp.Result, ResultWorkspaceCreated, &created)
			var snap sessionSnapshotResult
			_ = decodeResult(resp.Result, ResultSessionSnapshot, &snap)
			var agent agentInfoResult
			_ = decodeResult(resp.Result, ResultAgentInfo, &agent)
		}
	})
}

func FuzzDecodeEvent(f *testing.F) {
	for _, s := range eventSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := decodeEvent(line)
		if err != nil {
			var herr *Error
			if !errors.Is(err, ErrProtocol) && !errors.As(err, &herr) {
				t.Fatalf("decodeEvent error %v is neither ErrProtocol nor *Error", err)
			}
			return
		}
		if ev.Kind == "" {
			t.Fatalf("decodeEvent accepted an event without a kind")
		}
	})
}
