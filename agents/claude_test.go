package agents

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
)

func TestClaudeConfig(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	cfg, err := Configure(Spec{
		Kind: fleetv1alpha1.AgentClaude, Dir: dir, WorkingDir: work,
		Env:          map[string]string{"ANTHROPIC_API_KEY": "sk-ant-test-0123456789abcdefghijklmnop"},
		AllowedTools: []string{"Bash(git diff:*)"}, Args: []string{"--verbose"},
		MCPURL: "http://gw/mcp", HookCommand: []string{"/opt/fleet d/fleetd", "hook"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cfg.Args, "--permission-mode") || cfg.Args[slices.Index(cfg.Args, "--permission-mode")+1] != ClaudeDontAsk {
		t.Errorf("args %q: want dontAsk, the unattended default", cfg.Args)
	}
	if cfg.Args[len(cfg.Args)-1] != "--verbose" {
		t.Errorf("args %q: the profile's args come last", cfg.Args)
	}
	if cfg.Env["CLAUDE_CONFIG_DIR"] != ClaudeConfigDir(dir) || cfg.Env[EnvAgentDir] != dir {
		t.Errorf("env %v: want the member's own config dir", cfg.Env)
	}
	if cfg.DefaultEnv["ENABLE_TOOL_SEARCH"] != "false" || cfg.DefaultEnv["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] != "1" {
		t.Errorf("default env %v: want tools up front and no traffic but to the model", cfg.DefaultEnv)
	}
	if err := Install(cfg.Files, work); err != nil {
		t.Fatal(err)
	}

	var state map[string]any
	readJSON(t, filepath.Join(ClaudeConfigDir(dir), ".claude.json"), &state)
	want := map[string]any{
		"hasCompletedOnboarding": true,
		"projects":               map[string]any{work: map[string]any{"hasTrustDialogAccepted": true}},
		"customApiKeyResponses":  map[string]any{"approved": []any{"6789abcdefghijklmnop"}, "rejected": []any{}},
		"autoModeClassifierBillingNoticeAcknowledgedAt": float64(farFuture),
	}
	if diff := cmp.Diff(want, state); diff != "" {
		t.Errorf(".claude.json (-want +got):\n%s", diff)
	}

	var settings struct {
		Permissions struct{ Allow []string }
		Hooks       map[string][]struct {
			Hooks []struct {
				Type, Command string
				Async         bool
			}
		}
	}
	readJSON(t, filepath.Join(dir, "claude-settings.json"), &settings)
	if diff := cmp.Diff([]string{"mcp__fleetd__*", "Bash(git diff:*)"}, settings.Permissions.Allow); diff != "" {
		t.Errorf("allowed tools (-want +got):\n%s", diff)
	}
	for _, event := range []string{"SessionStart", "UserPromptSubmit", "PreToolUse", "PermissionRequest", "Notification", "Stop", "SessionEnd"} {
		hs := settings.Hooks[event]
		if len(hs) != 1 || len(hs[0].Hooks) != 1 || hs[0].Hooks[0].Command != `'/opt/fleet d/fleetd' hook claude` {
			t.Errorf("hook %s = %+v, want fleetd hook claude", event, hs)
			continue
		}
		if async := hs[0].Hooks[0].Async; async == (event == "SessionEnd") {
			t.Errorf("hook %s async=%v: reports never hold a turn, the release runs before the process goes", event, async)
		}
	}
}

// TestClaudeBehindTheForwarder: behind a member Pod's forwarder Claude
// Code sends no Authorization header of its own.
func TestClaudeBehindTheForwarder(t *testing.T) {
	for _, forwarded := range []bool{false, true} {
		var cfg struct {
			MCPServers map[string]struct {
				URL     string            `json:"url"`
				Headers map[string]string `json:"headers"`
			} `json:"mcpServers"`
		}
		if err := json.Unmarshal([]byte(claudeMCPConfig("http://127.0.0.1:7444/mcp", forwarded)), &cfg); err != nil {
			t.Fatal(err)
		}
		s := cfg.MCPServers["fleetd"]
		if _, has := s.Headers["Authorization"]; has == forwarded || s.URL != "http://127.0.0.1:7444/mcp" {
			t.Errorf("forwarded=%v: server %+v", forwarded, s)
		}
	}
}

// TestClaudeStateKeepsTheAgentsOwnKeys: a restarted member keeps what
// Claude Code wrote into its state file; fleetd only sets its own keys.
func TestClaudeStateKeepsTheAgentsOwnKeys(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(ClaudeConfigDir(dir), ".claude.json")
	if err := os.MkdirAll(filepath.Dir(state), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(state, []byte(`{"numStartups":3,"hasCompletedOnboarding":false,"projects":{"/w":{"history":["x"]}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Configure(Spec{Kind: fleetv1alpha1.AgentClaude, Dir: dir, WorkingDir: "/w", MCPURL: "http://gw/mcp"})
	if err != nil {
		t.Fatal(err)
	}
	if err := Install(cfg.Files, filepath.Join(dir, "w")); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	readJSON(t, state, &got)
	if got["numStartups"] != float64(3) || got["hasCompletedOnboarding"] != true {
		t.Errorf("state = %v: want the agent's keys kept and fleetd's set", got)
	}
	project := got["projects"].(map[string]any)["/w"].(map[string]any)
	if project["hasTrustDialogAccepted"] != true || project["history"] == nil {
		t.Errorf("project = %v: want trust added beside the agent's own keys", project)
	}
	if _, ok := got["customApiKeyResponses"]; ok {
		t.Errorf("no API key, yet an approval was written: %v", got)
	}
}

func TestClaudeHook(t *testing.T) {
	cases := map[string]struct {
		in   HookInput
		want HookResult
	}{
		"session starts idle":       {in: HookInput{Event: "SessionStart"}, want: HookResult{Action: HookReport, State: herdr.AgentStateIdle}},
		"a prompt is work":          {in: HookInput{Event: "UserPromptSubmit"}, want: HookResult{Action: HookReport, State: herdr.AgentStateWorking}},
		"a tool is work":            {in: HookInput{Event: "PreToolUse", ToolName: "Bash"}, want: HookResult{Action: HookReport, State: herdr.AgentStateWorking}},
		"after a dialog, work":      {in: HookInput{Event: "PostToolUse"}, want: HookResult{Action: HookReport, State: herdr.AgentStateWorking}},
		"permission request blocks": {in: HookInput{Event: "PermissionRequest", ToolName: "Bash"}, want: HookResult{Action: HookReport, State: herdr.AgentStateBlocked, Message: "Claude Code asks for permission to use Bash"}},
		"permission notification blocks": {
			in:   HookInput{Event: "Notification", NotificationType: "permission_prompt", Message: "Claude needs your permission"},
			want: HookResult{Action: HookReport, State: herdr.AgentStateBlocked, Message: "Claude needs your permission"},
		},
		"idle notification changes nothing": {in: HookInput{Event: "Notification", NotificationType: "idle_prompt"}, want: HookResult{Action: HookIgnore}},
		"turn ends idle":                    {in: HookInput{Event: "Stop"}, want: HookResult{Action: HookReport, State: herdr.AgentStateIdle}},
		"failed turn ends idle":             {in: HookInput{Event: "StopFailure"}, want: HookResult{Action: HookReport, State: herdr.AgentStateIdle}},
		"session end releases":              {in: HookInput{Event: "SessionEnd", Reason: "other"}, want: HookResult{Action: HookRelease}},
		"other events change nothing":       {in: HookInput{Event: "MessageDisplay"}, want: HookResult{Action: HookIgnore}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ClaudeHook(tc.in); got != tc.want {
				t.Errorf("ClaudeHook(%+v) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

// TestHookStatusKeepsTheNewest: hooks run at once; an older record never
// replaces a newer one.
func TestHookStatusKeepsTheNewest(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := ReadHookStatus(dir); ok || err != nil {
		t.Fatalf("ReadHookStatus() of no record = %v, %v", ok, err)
	}
	for _, st := range []HookStatus{{Event: "Stop", Seq: 20, SessionID: "s"}, {Event: "UserPromptSubmit", Seq: 10}} {
		if err := WriteHookStatus(dir, st); err != nil {
			t.Fatal(err)
		}
	}
	got, ok, err := ReadHookStatus(dir)
	if err != nil || !ok || got.Event != "Stop" || got.SessionID != "s" {
		t.Errorf("ReadHookStatus() = %+v, %v, %v; want the newest record", got, ok, err)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
