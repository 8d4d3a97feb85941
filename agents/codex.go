package agents

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/BurntSushi/toml"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// Codex's approval policies (approval_policy) a Profile may choose as its
// permissionMode.
const (
	// CodexNever never asks: a command that needs more than the sandbox
	// allows is refused, and the model is told so. The unattended default.
	CodexNever = "never"
	// CodexOnRequest asks when the model wants to run a command outside the
	// sandbox: a dialog that blocks the worker until someone answers it.
	CodexOnRequest = "on-request"
)

// CodexPermissionModes lists the modes a Profile may choose for Codex: the
// ones the Profile CRD's CEL rule admits (TestPermissionModesMatchTheAPI).
var CodexPermissionModes = []string{CodexNever, CodexOnRequest}

// Variables of a Codex member's environment.
const (
	// CodexBaseURLEnv names the model endpoint of a Profile billed through
	// an API: fleetd gives Codex a model provider of its own for it, since
	// Codex's built-in one asks for a login.
	CodexBaseURLEnv = "OPENAI_BASE_URL"
	// CodexAPIKeyEnv is that provider's key.
	CodexAPIKeyEnv = "OPENAI_API_KEY"
	// CodexAuthEnv carries a ChatGPT login for a Profile billed by
	// subscription: the content of Codex's auth.json, from a Secret. fleetd
	// writes it into the member's CODEX_HOME and keeps it out of the pane.
	CodexAuthEnv = "CODEX_AUTH_JSON"
)

// codexHookEvents are Codex's hook events whose reports keep the Member's
// status, with their names in Codex's hook trust keys. Codex has no event
// for the end of a session.
var codexHookEvents = []struct{ name, key string }{
	{"SessionStart", "session_start"},
	{"UserPromptSubmit", "user_prompt_submit"},
	{"PreToolUse", "pre_tool_use"},
	{"PermissionRequest", "permission_request"},
	{"PostToolUse", "post_tool_use"},
	{"Stop", "stop"},
}

// codexHookTimeout is the timeout Codex gives a hook that names none; it is
// part of the hook's trust hash.
const codexHookTimeout = 600

// CodexHome is the member's CODEX_HOME within its agent dir.
func CodexHome(dir string) string { return filepath.Join(dir, "codex") }

// codexMCPServer is fleetd's gateway as Codex's MCP server. Codex refuses
// to start a server whose bearer_token_env_var is unset or empty, so behind
// a forwarder, which adds the credential itself, it names none.
func codexMCPServer(s Spec) map[string]any {
	server := map[string]any{"url": s.MCPURL, "default_tools_approval_mode": "approve"}
	if !s.ForwardedMCP {
		server["bearer_token_env_var"] = EnvToken
	}
	return server
}

// codex configures Codex: its own CODEX_HOME holding a config.toml that
// starts it with no first-run screen and nothing to press (the working
// directory trusted, no update check, no shared background server, fleetd's
// hooks trusted by hash), reports its status through `fleetd hook codex`,
// runs fleetd's MCP tools without asking, and, for a Profile billed
// through an API, talks to the Profile's endpoint through a model provider
// of its own.
func codex(s Spec) (Config, error) {
	home := CodexHome(s.Dir)
	configPath := filepath.Join(home, "config.toml")
	policy := s.PermissionMode
	if policy == "" {
		policy = CodexNever
	}
	cfg := map[string]any{
		"approval_policy":             policy,
		"sandbox_mode":                "workspace-write",
		"check_for_update_on_startup": false,
		// No plugin marketplace (it is fetched at start) and no shared
		// background server: it would outlive the pane, and copies the
		// whole binary into CODEX_HOME first.
		"features": map[string]any{"plugins": false, "daemon_auto_start": false},
		// Codex writes screen_reader_detection_done itself on first start;
		// seeding it keeps that write from adding a second [tui] table.
		"tui":         map[string]any{"show_tooltips": false, "screen_reader_detection_done": true},
		"analytics":   map[string]any{"enabled": false},
		"feedback":    map[string]any{"enabled": false},
		"mcp_servers": map[string]any{"fleetd": codexMCPServer(s)},
		"projects":    map[string]any{s.WorkingDir: map[string]any{"trust_level": "trusted"}},
	}
	if s.Model != "" {
		cfg["model"] = s.Model
	}
	if s.Effort != "" {
		cfg["model_reasoning_effort"] = string(s.Effort)
	}
	if base := s.Env[CodexBaseURLEnv]; base != "" {
		cfg["model_provider"] = "fleetd"
		cfg["model_providers"] = map[string]any{"fleetd": map[string]any{
			"name":     "fleetd",
			"base_url": base,
			"env_key":  CodexAPIKeyEnv,
			"wire_api": "responses",
		}}
	}

	hook := ShellJoin(append(slices.Clone(s.HookCommand), string(fleetv1alpha1.AgentCodex)))
	hooks := map[string]any{}
	state := map[string]any{}
	for _, ev := range codexHookEvents {
		hooks[ev.name] = []map[string]any{{"hooks": []map[string]any{{"type": "command", "command": hook}}}}
		key, trust, err := CodexHookTrust(configPath, ev.name, hook)
		if err != nil {
			return Config{}, err
		}
		state[key] = map[string]any{"trusted_hash": trust}
	}
	hooks["state"] = state
	cfg["hooks"] = hooks

	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(cfg); err != nil {
		return Config{}, fmt.Errorf("encoding Codex's config.toml: %w", err)
	}
	files := []File{{Path: configPath, Content: buf.Bytes()}}
	if auth := s.Env[CodexAuthEnv]; auth != "" {
		files = append(files, File{Path: filepath.Join(home, "auth.json"), Content: []byte(auth)})
	}
	return Config{
		Args: s.Args,
		// The login, once written to auth.json, stays out of the pane.
		Env:   map[string]string{"CODEX_HOME": home, EnvAgentDir: s.Dir, CodexAuthEnv: ""},
		Files: files,
	}, nil
}

// codexHookHash is the hash by which Codex trusts a hook without asking: a
// SHA-256 of the hook's identity (its event and its handler with Codex's
// defaults filled in) as compact JSON with sorted keys.
func codexHookHash(eventKey, command string) (string, error) {
	identity := map[string]any{
		"event_name": eventKey,
		"hooks": []map[string]any{{
			"type": "command", "command": command, "timeout": codexHookTimeout, "async": false,
		}},
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(identity); err != nil {
		return "", err
	}
	sum := sha256.Sum256(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
