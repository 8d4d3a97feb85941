package main

import (
	"bytes"
	"strings"
	"testing"

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
