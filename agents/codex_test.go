package agents

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
)

// TestCodexHookHash checks the trust hash against ones Codex 0.171.0 wrote
// itself when a person trusted the hooks on its review screen.
func TestCodexHookHash(t *testing.T) {
	cases := []struct{ key, command, want string }{
		{"session_start", "/usr/local/bin/fleetd hook codex", "sha256:c6b2e19b24eac04f520652b2673da144416e954ff986cb448210d19c86278ca0"},
		{"stop", "/usr/local/bin/fleetd hook codex", "sha256:bf361095ca8fa3efd5d587d556afd653d2ccdac217f176e69f120e32c34a871a"},
		{"permission_request", "'/opt/fleet d/fleetd' hook codex", "sha256:ff798fc6345482bec6214c68fc95262c66600bec15a38790b52666cf04739c8c"},
	}
	for _, tc := range cases {
		got, err := codexHookHash(tc.key, tc.command)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("hash of the %s hook %q = %s, want %s", tc.key, tc.command, got, tc.want)
		}
	}
}

func TestCodexConfig(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	cfg, err := Configure(Spec{
		Kind: fleetv1alpha1.AgentCodex, Dir: dir, WorkingDir: work,
		Env:   map[string]string{CodexBaseURLEnv: "http://model:8080/v1", CodexAPIKeyEnv: "sk-test", CodexAuthEnv: `{"tokens":{}}`},
		Model: "gpt-5.2", Effort: fleetv1alpha1.Effort("high"), Args: []string{"--search"},
		MCPURL: "http://gw/mcp", HookCommand: []string{"/opt/fleet d/fleetd", "hook"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"--search"}, cfg.Args); diff != "" {
		t.Errorf("args (-want +got):\n%s: everything else is in config.toml, so Codex runs with no -c override", diff)
	}
	if cfg.Env["CODEX_HOME"] != CodexHome(dir) || cfg.Env[EnvAgentDir] != dir || cfg.Env[CodexAuthEnv] != "" {
		t.Errorf("env %v: want the member's own CODEX_HOME and the login kept out of the pane", cfg.Env)
	}
	if err := Install(cfg.Files, work); err != nil {
		t.Fatal(err)
	}
	if auth, err := os.ReadFile(filepath.Join(CodexHome(dir), "auth.json")); err != nil || string(auth) != `{"tokens":{}}` {
		t.Errorf("auth.json = %q (%v), want the login from the Profile", auth, err)
	}

	configPath := filepath.Join(CodexHome(dir), "config.toml")
	var got struct {
		Model          string `toml:"model"`
		Effort         string `toml:"model_reasoning_effort"`
		ApprovalPolicy string `toml:"approval_policy"`
		Provider       string `toml:"model_provider"`
		Providers      map[string]struct {
			BaseURL string `toml:"base_url"`
			EnvKey  string `toml:"env_key"`
			WireAPI string `toml:"wire_api"`
		} `toml:"model_providers"`
		Features map[string]bool `toml:"features"`
		TUI      map[string]bool `toml:"tui"`
		MCP      map[string]struct {
			URL      string `toml:"url"`
			TokenEnv string `toml:"bearer_token_env_var"`
			Approval string `toml:"default_tools_approval_mode"`
		} `toml:"mcp_servers"`
		Projects map[string]struct {
			Trust string `toml:"trust_level"`
		} `toml:"projects"`
		Hooks map[string]any `toml:"hooks"`
	}
	if _, err := toml.DecodeFile(configPath, &got); err != nil {
		t.Fatal(err)
	}
	if got.Model != "gpt-5.2" || got.Effort != "high" || got.ApprovalPolicy != CodexNever {
		t.Errorf("model %q effort %q approval %q", got.Model, got.Effort, got.ApprovalPolicy)
	}
	if p := got.Providers["fleetd"]; got.Provider != "fleetd" || p.BaseURL != "http://model:8080/v1" || p.EnvKey != CodexAPIKeyEnv || p.WireAPI != "responses" {
		t.Errorf("model provider %q %+v, want the Profile's endpoint", got.Provider, p)
	}
	if got.Features["daemon_auto_start"] || got.Features["plugins"] || !got.TUI["screen_reader_detection_done"] {
		t.Errorf("features %v tui %v", got.Features, got.TUI)
	}
	if m := got.MCP["fleetd"]; m.URL != "http://gw/mcp" || m.TokenEnv != EnvToken || m.Approval != "approve" {
		t.Errorf("mcp server %+v", m)
	}
	if got.Projects[work].Trust != "trusted" {
		t.Errorf("projects %+v: want the working directory trusted", got.Projects)
	}
	state, _ := got.Hooks["state"].(map[string]any)
	for _, ev := range codexHookEvents {
		groups, _ := got.Hooks[ev.name].([]map[string]any)
		if len(groups) != 1 {
			t.Errorf("hook %s: %v", ev.name, got.Hooks[ev.name])
			continue
		}
		handlers, _ := groups[0]["hooks"].([]map[string]any)
		if len(handlers) != 1 || handlers[0]["command"] != `'/opt/fleet d/fleetd' hook codex` {
			t.Errorf("hook %s handlers %v, want fleetd hook codex", ev.name, handlers)
		}
		want, _ := codexHookHash(ev.key, `'/opt/fleet d/fleetd' hook codex`)
		trusted, _ := state[configPath+":"+ev.key+":0:0"].(map[string]any)
		if trusted["trusted_hash"] != want {
			t.Errorf("hook %s trusted by %v, want %s", ev.name, trusted, want)
		}
	}
}

// TestCodexBehindTheForwarder: behind a member Pod's forwarder Codex names
// no token variable, which it would refuse to start the server without.
func TestCodexBehindTheForwarder(t *testing.T) {
	for _, forwarded := range []bool{false, true} {
		server := codexMCPServer(Spec{MCPURL: "http://127.0.0.1:7444/mcp", ForwardedMCP: forwarded})
		if _, names := server["bearer_token_env_var"]; names == forwarded || server["url"] != "http://127.0.0.1:7444/mcp" {
			t.Errorf("forwarded=%v: server %v", forwarded, server)
		}
	}
}

func TestCodexSubscriptionUsesItsOwnLogin(t *testing.T) {
	dir := t.TempDir()
	cfg, err := Configure(Spec{Kind: fleetv1alpha1.AgentCodex, Dir: dir, WorkingDir: filepath.Join(dir, "work"), PermissionMode: CodexOnRequest})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if _, err := toml.Decode(string(cfg.Files[0].Content), &got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got["model_provider"]; ok {
		t.Errorf("a subscription member got a model provider: %v", got["model_provider"])
	}
	if got["approval_policy"] != CodexOnRequest {
		t.Errorf("approval_policy %v, want the Profile's", got["approval_policy"])
	}
	if len(cfg.Files) != 1 {
		t.Errorf("files %d, want only config.toml without a login", len(cfg.Files))
	}
}

func TestCodexHook(t *testing.T) {
	shell := HookInput{Event: "PermissionRequest", ToolName: "Bash"}
	shell.ToolInput.Command = "touch /tmp/x"
	cases := map[string]struct {
		in   HookInput
		want HookResult
	}{
		// It fires with the first prompt, whose own event follows.
		"session start reports nothing": {in: HookInput{Event: "SessionStart", SessionID: "s"}, want: HookResult{Action: HookIgnore}},
		"a prompt is work":              {in: HookInput{Event: "UserPromptSubmit"}, want: HookResult{Action: HookReport, State: herdr.AgentStateWorking}},
		"a tool is work":                {in: HookInput{Event: "PreToolUse", ToolName: "mcp__fleetd__bridge_reply"}, want: HookResult{Action: HookReport, State: herdr.AgentStateWorking}},
		"after a tool, work":            {in: HookInput{Event: "PostToolUse"}, want: HookResult{Action: HookReport, State: herdr.AgentStateWorking}},
		"an approval prompt blocks, saying what it runs": {
			in: shell, want: HookResult{Action: HookReport, State: herdr.AgentStateBlocked, Message: "Codex asks for approval to run: touch /tmp/x"},
		},
		"an MCP approval names the tool": {
			in:   HookInput{Event: "PermissionRequest", ToolName: "mcp__github__create_issue"},
			want: HookResult{Action: HookReport, State: herdr.AgentStateBlocked, Message: "Codex asks for approval to use mcp__github__create_issue"},
		},
		"turn ends idle":              {in: HookInput{Event: "Stop"}, want: HookResult{Action: HookReport, State: herdr.AgentStateIdle}},
		"other events change nothing": {in: HookInput{Event: "PreCompact"}, want: HookResult{Action: HookIgnore}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := Hook(fleetv1alpha1.AgentCodex, tc.in)
			if !ok || got != tc.want {
				t.Errorf("Hook(codex, %+v) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}
