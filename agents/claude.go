package agents

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"slices"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// Claude Code's permission modes (--permission-mode).
const (
	// ClaudeDontAsk runs allowed tools and refuses every other one without
	// asking: the unattended default.
	ClaudeDontAsk = "dontAsk"
	// ClaudeDefault asks before any tool that is not allowed: a dialog
	// that blocks the worker until someone answers it.
	ClaudeDefault = "default"
	// ClaudeAcceptEdits also runs file edits without asking.
	ClaudeAcceptEdits = "acceptEdits"
	// ClaudePlan only plans; it changes nothing.
	ClaudePlan = "plan"
	// ClaudeAuto has a classifier (a model request) decide each tool call.
	ClaudeAuto = "auto"
	// ClaudeBypassPermissions runs every tool without asking. Claude Code
	// refuses it as root unless IS_SANDBOX=1 is in the Profile's env.
	ClaudeBypassPermissions = "bypassPermissions"
)

// ClaudePermissionModes lists the modes a Profile may choose for Claude: the
// ones the Profile CRD's CEL rule admits (TestPermissionModesMatchTheAPI).
var ClaudePermissionModes = []string{ClaudeDontAsk, ClaudeDefault, ClaudeAcceptEdits, ClaudePlan, ClaudeAuto, ClaudeBypassPermissions}

// claudeFleetdTools allows every tool of fleetd's MCP server: a worker's
// bridge_reply must never wait for a permission check.
const claudeFleetdTools = "mcp__fleetd__*"

// claudeHookEvents are the hook events whose reports keep the Member's
// status; SessionEnd releases herdr's status authority.
var claudeHookEvents = []string{
	"SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "PostToolUseFailure",
	"PermissionRequest", "Notification", "Stop", "StopFailure", "SessionEnd",
}

// claudeEnv keeps an unattended Claude Code to itself: no auto-update of
// the pinned version, no traffic but to its model endpoint (offline, the
// onboarding check and marketplace installs would stall it), and every
// tool's schema loaded up front rather than behind ToolSearch.
var claudeEnv = map[string]string{
	"DISABLE_AUTOUPDATER":                                  "1",
	"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC":             "1",
	"CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL": "1",
	"ENABLE_TOOL_SEARCH":                                   "false",
}

// farFuture is when Claude Code's auto-mode billing notice was last
// acknowledged, as far as it will know: the notice never blocks a worker.
const farFuture = 4102444800000 // 2100-01-01 in ms

// ClaudeConfigDir is the member's CLAUDE_CONFIG_DIR within its agent dir.
func ClaudeConfigDir(dir string) string { return filepath.Join(dir, "claude") }

// claudeSettings is the file passed with --settings.
func claudeSettings(dir string) string { return filepath.Join(dir, "claude-settings.json") }

// claude configures Claude Code: its own config directory seeded so that
// no first-run screen waits for a key (onboarding done, the working
// directory trusted, an API key approved), a settings file whose hooks
// report status through `fleetd hook claude` and whose permissions allow
// fleetd's tools, and the gateway as an MCP server.
func claude(s Spec) (Config, error) {
	configDir := ClaudeConfigDir(s.Dir)
	state := map[string]any{
		"hasCompletedOnboarding": true,
		"projects": map[string]any{
			s.WorkingDir: map[string]any{"hasTrustDialogAccepted": true},
		},
		"autoModeClassifierBillingNoticeAcknowledgedAt": farFuture,
	}
	if key := s.Env["ANTHROPIC_API_KEY"]; key != "" {
		// Claude Code asks whether to use a custom key, and remembers the
		// answer by the key's last 20 characters.
		state["customApiKeyResponses"] = map[string]any{"approved": []string{lastN(key, 20)}, "rejected": []string{}}
	}
	stateJSON, err := json.Marshal(state)
	if err != nil {
		return Config{}, err
	}

	mode := s.PermissionMode
	if mode == "" {
		mode = ClaudeDontAsk
	}
	allow := append([]string{claudeFleetdTools}, s.AllowedTools...)
	hook := ShellJoin(append(slices.Clone(s.HookCommand), string(fleetv1alpha1.AgentClaude)))
	hooks := map[string]any{}
	for _, event := range claudeHookEvents {
		h := map[string]any{"type": "command", "command": hook}
		if event != "SessionEnd" {
			// Reporting never holds up a turn; the release at the end
			// runs before the process goes.
			h["async"] = true
		}
		hooks[event] = []any{map[string]any{"hooks": []any{h}}}
	}
	settings := map[string]any{
		"permissions": map[string]any{"allow": allow},
		"hooks":       hooks,
	}
	if mode == ClaudeBypassPermissions {
		// Chosen in the Profile: the warning dialog would only block.
		settings["skipDangerousModePermissionPrompt"] = true
	}
	settingsJSON, err := json.MarshalIndent(settings, "", "  ")
	if err != nil {
		return Config{}, err
	}

	var args []string
	if s.Model != "" {
		args = append(args, "--model", s.Model)
	}
	args = append(args,
		"--settings", claudeSettings(s.Dir),
		"--permission-mode", mode,
		"--mcp-config", claudeMCPConfig(s.MCPURL, s.ForwardedMCP),
	)
	return Config{
		Args:       append(args, s.Args...),
		Env:        map[string]string{"CLAUDE_CONFIG_DIR": configDir, EnvAgentDir: s.Dir},
		DefaultEnv: maps.Clone(claudeEnv),
		Files: []File{
			{Path: filepath.Join(configDir, ".claude.json"), Content: stateJSON, Merge: true},
			{Path: claudeSettings(s.Dir), Content: settingsJSON},
		},
	}, nil
}

// claudeMCPConfig is Claude Code's --mcp-config: an http server whose
// Authorization header Claude Code expands from the pane's environment, so
// the token never shows on the command line; behind a forwarder, no header.
func claudeMCPConfig(mcpURL string, forwarded bool) string {
	server := map[string]any{"type": "http", "url": mcpURL}
	if !forwarded {
		server["headers"] = map[string]string{"Authorization": "Bearer ${" + EnvToken + "}"}
	}
	cfg := map[string]any{"mcpServers": map[string]any{"fleetd": server}}
	b, _ := json.Marshal(cfg)
	return string(b)
}

func lastN(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
