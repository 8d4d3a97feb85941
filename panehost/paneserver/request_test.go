package paneserver

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetd/fleetd/herdr"
)

func TestDecodeRequest(t *testing.T) {
	lines := 5
	timeout := uint64(4000)
	working := herdr.AgentStatusWorking
	cases := map[string]struct {
		line string
		want request
		// wantInvalid means herdr's invalid_request with an empty id.
		wantInvalid bool
	}{
		"ping": {
			line: `{"id":"1","method":"ping","params":{}}`,
			want: request{id: "1", method: herdr.MethodPing, params: herdr.EmptyParams{}},
		},
		"params may be left out when none are required": {
			line: `{"id":"1","method":"session.snapshot"}`,
			want: request{id: "1", method: herdr.MethodSessionSnapshot, params: herdr.EmptyParams{}},
		},
		"pane read": {
			line: `{"id":"r","method":"pane.read","params":{"pane_id":"w1:p1","source":"recent","lines":5,"strip_ansi":true}}`,
			want: request{id: "r", method: herdr.MethodPaneRead, params: herdr.ReadParams{
				PaneID: "w1:p1", Source: herdr.ReadSourceRecent, Lines: &lines, StripANSI: ptr(true),
			}},
		},
		"agent start": {
			line: `{"id":"s","method":"agent.start","params":{"name":"a1","kind":"claude","pane_id":"w1:p1","args":["--x"],"timeout_ms":4000}}`,
			want: request{id: "s", method: herdr.MethodAgentStart, params: herdr.AgentStartParams{
				Name: "a1", Kind: "claude", PaneID: "w1:p1", Args: []string{"--x"}, TimeoutMS: &timeout,
			}},
		},
		"nullable fields may be null": {
			line: `{"id":"c","method":"workspace.create","params":{"cwd":null,"label":null}}`,
			want: request{id: "c", method: herdr.MethodWorkspaceCreate, params: herdr.WorkspaceCreateParams{}},
		},
		"subscription": {
			line: `{"id":"e","method":"events.subscribe","params":{"subscriptions":[{"type":"pane.closed"},{"type":"pane.agent_status_changed","pane_id":"w1:p1","agent_status":"working"}]}}`,
			want: request{id: "e", method: herdr.MethodEventsSubscribe, params: herdr.EventsSubscribeParams{Subscriptions: []herdr.Subscription{
				{Type: herdr.SubscribePaneClosed},
				{Type: herdr.SubscribePaneAgentStatusChanged, PaneID: "w1:p1", AgentStatus: &working},
			}}},
		},
		"not json":                      {line: `{"id":"1",`, wantInvalid: true},
		"not an object":                 {line: `[1]`, wantInvalid: true},
		"no id":                         {line: `{"method":"ping","params":{}}`, wantInvalid: true},
		"numeric id":                    {line: `{"id":1,"method":"ping","params":{}}`, wantInvalid: true},
		"no method":                     {line: `{"id":"1","params":{}}`, wantInvalid: true},
		"unknown method":                {line: `{"id":"1","method":"pane.explode","params":{}}`, wantInvalid: true},
		"params not an object":          {line: `{"id":"1","method":"ping","params":[]}`, wantInvalid: true},
		"missing required field":        {line: `{"id":"1","method":"pane.close","params":{}}`, wantInvalid: true},
		"required field null":           {line: `{"id":"1","method":"pane.close","params":{"pane_id":null}}`, wantInvalid: true},
		"wrong field type":              {line: `{"id":"1","method":"pane.send_keys","params":{"pane_id":"p","keys":"enter"}}`, wantInvalid: true},
		"bad read source":               {line: `{"id":"1","method":"pane.read","params":{"pane_id":"p","source":"all"}}`, wantInvalid: true},
		"bad read format":               {line: `{"id":"1","method":"pane.read","params":{"pane_id":"p","source":"visible","format":"html"}}`, wantInvalid: true},
		"negative lines":                {line: `{"id":"1","method":"pane.read","params":{"pane_id":"p","source":"visible","lines":-1}}`, wantInvalid: true},
		"bad reported state":            {line: `{"id":"1","method":"pane.report_agent","params":{"pane_id":"p","source":"s","agent":"a","state":"done"}}`, wantInvalid: true},
		"bad wait status":               {line: `{"id":"1","method":"agent.wait","params":{"target":"a","until":["sleeping"]}}`, wantInvalid: true},
		"unknown subscription":          {line: `{"id":"1","method":"events.subscribe","params":{"subscriptions":[{"type":"pane.sneezed"}]}}`, wantInvalid: true},
		"filtered subscription no pane": {line: `{"id":"1","method":"events.subscribe","params":{"subscriptions":[{"type":"pane.agent_status_changed"}]}}`, wantInvalid: true},
		"output match no match":         {line: `{"id":"1","method":"events.subscribe","params":{"subscriptions":[{"type":"pane.output_matched","pane_id":"p","source":"recent"}]}}`, wantInvalid: true},
		"negative timeout":              {line: `{"id":"1","method":"agent.start","params":{"name":"a","kind":"claude","pane_id":"p","timeout_ms":-1}}`, wantInvalid: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, herr := decodeRequest([]byte(tc.line), nil)
			if tc.wantInvalid {
				if herr == nil || herr.Code != herdr.CodeInvalidRequest {
					t.Fatalf("decodeRequest() = %+v, %v; want invalid_request", got, herr)
				}
				return
			}
			if herr != nil {
				t.Fatalf("decodeRequest() error = %v", herr)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(request{})); diff != "" {
				t.Errorf("decodeRequest() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzDecodeRequest feeds arbitrary request lines to the server's decoder:
// it must never panic, and everything it rejects is invalid_request.
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{
		`{"id":"1","method":"ping","params":{}}`,
		`{"id":"2","method":"workspace.create","params":{"cwd":"/tmp","env":{"A":"b"},"focus":true,"label":"x"}}`,
		`{"id":"3","method":"agent.start","params":{"name":"a1","kind":"claude","pane_id":"w1:p1","args":["-x"],"timeout_ms":4000}}`,
		`{"id":"4","method":"agent.prompt","params":{"target":"a1","text":"hi","wait":{"until":["idle"],"timeout_ms":10}}}`,
		`{"id":"5","method":"pane.read","params":{"pane_id":"w1:p1","source":"visible","lines":3}}`,
		`{"id":"6","method":"pane.report_agent","params":{"pane_id":"w1:p1","source":"s","agent":"x","state":"blocked","seq":9}}`,
		`{"id":"7","method":"events.subscribe","params":{"subscriptions":[{"type":"pane.output_matched","pane_id":"w1:p1","source":"recent","match":{"type":"regex","value":"a+"}}]}}`,
		`{"id":"8","method":"pane.send_input","params":{"pane_id":"w1:p1","text":"ls","keys":["enter"]}}`,
		`{"id":9}`,
		`{"id":"10","method":"pane.read","params":{"pane_id":"p","source":"nope"}}`,
		`{"id":"11","method":"agent.wait","params":null}`,
		`garbage`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		req, herr := decodeRequest(line, nil)
		if herr != nil {
			if herr.Code != herdr.CodeInvalidRequest {
				t.Fatalf("decodeRequest rejected with %q, want invalid_request", herr.Code)
			}
			return
		}
		m, ok := methods[req.method]
		if !ok {
			t.Fatalf("decodeRequest accepted unknown method %q", req.method)
		}
		// The held check must cope with anything the decoder let through.
		_ = m.held(req.params)
	})
}

func ptr[T any](v T) *T { return &v }
