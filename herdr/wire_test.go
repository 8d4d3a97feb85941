package herdr

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeResponse(t *testing.T) {
	cases := map[string]struct {
		line    string
		want    *response
		wantErr error
	}{
		"success": {
			line: `{"id":"7","result":{"type":"ok"}}`,
			want: &response{ID: "7", Result: json.RawMessage(`{"type":"ok"}`)},
		},
		"error": {
			line: `{"id":"7","error":{"code":"pane_not_found","message":"pane w1:p9 not found"}}`,
			want: &response{ID: "7", Error: &Error{Code: CodePaneNotFound, Message: "pane w1:p9 not found"}},
		},
		"invalid request has an empty id": {
			line: `{"id":"","error":{"code":"invalid_request","message":"invalid request"}}`,
			want: &response{ID: "", Error: &Error{Code: CodeInvalidRequest, Message: "invalid request"}},
		},
		"not json":              {line: `{"id":"7",`, wantErr: ErrProtocol},
		"array":                 {line: `[1,2]`, wantErr: ErrProtocol},
		"no id":                 {line: `{"result":{"type":"ok"}}`, wantErr: ErrProtocol},
		"numeric id":            {line: `{"id":7,"result":{"type":"ok"}}`, wantErr: ErrProtocol},
		"neither":               {line: `{"id":"7"}`, wantErr: ErrProtocol},
		"null result":           {line: `{"id":"7","result":null}`, wantErr: ErrProtocol},
		"both":                  {line: `{"id":"7","result":{"type":"ok"},"error":{"code":"x","message":""}}`, wantErr: ErrProtocol},
		"error without a code":  {line: `{"id":"7","error":{"message":"boom"}}`, wantErr: ErrProtocol},
		"error of a wrong type": {line: `{"id":"7","error":"boom"}`, wantErr: ErrProtocol},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := decodeResponse([]byte(tc.line))
			if !errors.Is(err, tc.wantErr) || (err != nil) != (tc.wantErr != nil) {
				t.Fatalf("decodeResponse() error = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("decodeResponse() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeResult(t *testing.T) {
	var pong Pong
	err := decodeResult(json.RawMessage(`{"type":"pong","version":"0.9.1","protocol":22}`), ResultPong, &pong)
	if err != nil {
		t.Fatalf("decodeResult(pong) = %v", err)
	}
	if diff := cmp.Diff(Pong{Version: "0.9.1", Protocol: 22}, pong); diff != "" {
		t.Errorf("decodeResult(pong) mismatch (-want +got):\n%s", diff)
	}
	if err := decodeResult(json.RawMessage(`{"type":"ok"}`), ResultPong, &pong); !errors.Is(err, ErrProtocol) {
		t.Errorf("decodeResult of the wrong type = %v, want ErrProtocol", err)
	}
	if err := decodeResult(json.RawMessage(`{"type":"pong","protocol":"x"}`), ResultPong, &pong); !errors.Is(err, ErrProtocol) {
		t.Errorf("decodeResult of a malformed pong = %v, want ErrProtocol", err)
	}
}

func TestDecodeEvent(t *testing.T) {
	cases := map[string]struct {
		line    string
		want    Event
		wantErr error
	}{
		"lifecycle": {
			line: `{"event":"pane_closed","data":{"type":"pane_closed","pane_id":"w1:p2","workspace_id":"w1"}}`,
			want: Event{Kind: EventPaneClosed, Data: EventData{Type: EventPaneClosed, PaneID: "w1:p2", WorkspaceID: "w1"}},
		},
		"status change": {
			line: `{"event":"pane.agent_status_changed","data":{"pane_id":"w1:p1","workspace_id":"w1","agent_status":"blocked","agent":"claude"}}`,
			want: Event{Kind: EventPaneAgentStatusChanged, Data: EventData{
				PaneID: "w1:p1", WorkspaceID: "w1", AgentStatus: AgentStatusBlocked, Agent: ptr("claude"),
			}},
		},
		"unknown kind and fields pass through": {
			line: `{"event":"layout_updated","data":{"type":"layout_updated","layout":{"tab_id":"w1:t1"}}}`,
			want: Event{Kind: "layout_updated", Data: EventData{Type: "layout_updated"}},
		},
		"error line": {
			line:    `{"id":"3","error":{"code":"pane_not_found","message":"pane x not found"}}`,
			wantErr: ErrPaneNotFound,
		},
		"not json":        {line: `{"event":`, wantErr: ErrProtocol},
		"no kind":         {line: `{"data":{}}`, wantErr: ErrProtocol},
		"no data":         {line: `{"event":"pane_closed"}`, wantErr: ErrProtocol},
		"data not object": {line: `{"event":"pane_closed","data":[1]}`, wantErr: ErrProtocol},
		"bad field type":  {line: `{"event":"pane_closed","data":{"pane_id":5}}`, wantErr: ErrProtocol},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := decodeEvent([]byte(tc.line))
			if !errors.Is(err, tc.wantErr) || (err != nil) != (tc.wantErr != nil) {
				t.Fatalf("decodeEvent() error = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("decodeEvent() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadLine(t *testing.T) {
	cases := map[string]struct {
		input   string
		limit   int
		want    []string
		wantErr error
	}{
		"lines":                   {input: "a\nbc\r\n", limit: 10, want: []string{"a", "bc"}, wantErr: io.EOF},
		"unterminated final line": {input: "a\nbc", limit: 10, want: []string{"a"}, wantErr: io.ErrUnexpectedEOF},
		"longer than the buffer":  {input: strings.Repeat("x", 100) + "\n", limit: 200, want: []string{strings.Repeat("x", 100)}, wantErr: io.EOF},
		"over the limit":          {input: strings.Repeat("x", 100) + "\n", limit: 50, wantErr: errLineTooLong},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := bufio.NewReaderSize(strings.NewReader(tc.input), 16)
			var got []string
			var err error
			for {
				var line []byte
				if line, err = readLine(r, tc.limit); err != nil {
					break
				}
				got = append(got, string(line))
			}
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("readLine() final error = %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("readLine() lines mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEncodeRequest(t *testing.T) {
	cases := map[string]struct {
		method string
		params any
		want   string
	}{
		"no params is an empty object": {
			method: MethodPing,
			want:   `{"id":"1","method":"ping","params":{}}` + "\n",
		},
		"optional fields are left out": {
			method: MethodPaneRead,
			params: ReadParams{PaneID: "w1:p1", Source: ReadSourceRecent},
			want:   `{"id":"1","method":"pane.read","params":{"pane_id":"w1:p1","source":"recent"}}` + "\n",
		},
		"keys are required": {
			method: MethodPaneSendKeys,
			params: PaneSendKeysParams{PaneID: "w1:p1", Keys: []string{}},
			want:   `{"id":"1","method":"pane.send_keys","params":{"pane_id":"w1:p1","keys":[]}}` + "\n",
		},
		"filtered subscription": {
			method: MethodEventsSubscribe,
			params: EventsSubscribeParams{Subscriptions: []Subscription{PaneAgentStatusChanged("w1:p1"), Lifecycle(SubscribePaneClosed)}},
			want:   `{"id":"1","method":"events.subscribe","params":{"subscriptions":[{"type":"pane.agent_status_changed","pane_id":"w1:p1"},{"type":"pane.closed"}]}}` + "\n",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := encodeRequest("1", tc.method, tc.params)
			if err != nil {
				t.Fatalf("encodeRequest() = %v", err)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("encodeRequest() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
