package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCallOneTool: `scripted-agent call` reads the token from the file a
// Pod mounts, prints the result as JSON or the tool's error code, and
// fails when the gateway refuses the token.
func TestCallOneTool(t *testing.T) {
	g := newFakeGateway(t, "teal", "refused")
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envMCPURL, g.url)
	t.Setenv(envTokenFile, tokenFile)
	call := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := callOneTool(args, &out)
		result, took, _ := strings.Cut(strings.TrimSpace(out.String()), "\ntook ")
		if code == 0 {
			if _, err := time.ParseDuration(took); err != nil {
				t.Errorf("%s: no time after the result: %q", args[0], out.String())
			}
		}
		return code, result
	}
	if code, out := call(toolReply, `{"content":"done"}`); code != 0 || out != `{"delivered":true}` {
		t.Errorf("reply: %d %q", code, out)
	}
	if code, out := call(toolReply, `{"content":"refused"}`); code != 0 || out != "error no_delegation: no delegation in flight" {
		t.Errorf("refused reply: %d %q", code, out)
	}
	if code, out := call(toolReply, `["not", "an object"]`); code != 2 || !strings.Contains(out, "not a JSON object") {
		t.Errorf("bad arguments: %d %q", code, out)
	}
	if err := os.WriteFile(tokenFile, []byte("someone-else"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := call(toolReply, `{"content":"done"}`); code != 1 || !strings.HasPrefix(out, "error: ") {
		t.Errorf("with a token the gateway refuses: %d %q", code, out)
	}
	if g.unauthorized.Load() == 0 {
		t.Error("the gateway saw no refused token: the file was not read again")
	}
}
