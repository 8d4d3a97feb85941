// Package agents knows how fleetd runs each agent CLI it knows (Claude Code,
// Codex) unattended: the configuration that starts it with no first-run
// screen and with fleetd's own tools allowed, the MCP mount of the gateway,
// and how the agent's hooks report its status. Configure and ClaudeHook
// decide (files, flags, reports) without doing anything; Install writes the
// files, and the hook record is read and written here too, for the
// controllers and `fleetd hook`.
package agents

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// Environment variables fleetd sets in every member's pane.
const (
	EnvMCPURL = "FLEETD_MCP_URL"
	EnvToken  = "FLEETD_TOKEN"
	EnvMember = "FLEETD_MEMBER"
	// EnvAgentDir is the member's agent directory, where its hooks keep
	// their record.
	EnvAgentDir = "FLEETD_AGENT_DIR"
)

// ReportSource is the one source fleetd's hooks and screen reading report
// under to herdr.
const ReportSource = "fleetd"

// Spec is what Configure needs to know of one member.
type Spec struct {
	// Kind is the agent.
	Kind fleetv1alpha1.AgentKind
	// Dir is the member's own agent directory: absolute, owned by fleetd,
	// never the user's home.
	Dir string
	// WorkingDir is where the agent works, absolute.
	WorkingDir string
	// Env is the worker's resolved environment (values of secrets too).
	Env map[string]string
	// Model and Effort come from the Profile.
	Model  string
	Effort fleetv1alpha1.Effort
	// PermissionMode and AllowedTools come from the Profile; empty mode is
	// the agent's unattended default.
	PermissionMode string
	AllowedTools   []string
	// Args are the Profile's and Member's extra arguments, last.
	Args []string
	// MCPURL is the gateway's MCP endpoint as the pane reaches it.
	MCPURL string
	// ForwardedMCP says MCPURL is the forwarder in the member's own Pod,
	// which adds the Pod's credential to every request: the agent sends
	// none, and has no EnvToken to send.
	ForwardedMCP bool
	// HookCommand runs `fleetd hook`; the agent kind is appended.
	HookCommand []string
}

// Config is how to start one member's agent.
type Config struct {
	// Args follow the agent's executable.
	Args []string
	// Env is added to the pane's environment over the worker's own env:
	// fleetd's choices that make the member what it is (its config
	// directory), which no Profile may change.
	Env map[string]string
	// DefaultEnv is added under the worker's env: defaults a Profile may
	// override.
	DefaultEnv map[string]string
	// Files are written before the agent starts.
	Files []File
}

// File is a file the agent reads.
type File struct {
	// Path is absolute.
	Path string
	// Content is the file's content, or for a merged file a JSON object.
	Content []byte
	// Merge says the file is the agent's own JSON state: Content's keys are
	// set in it, recursively, and the agent's other keys are kept.
	Merge bool
}

// Configure decides the configuration of a known agent. It knows Claude
// Code and Codex; any other kind gets the gateway mount only where fleetd
// knows how to give one, and nothing else.
func Configure(s Spec) (Config, error) {
	if !filepath.IsAbs(s.Dir) {
		return Config{}, fmt.Errorf("agent directory %q is not absolute", s.Dir)
	}
	switch s.Kind {
	case fleetv1alpha1.AgentClaude:
		return claude(s)
	case fleetv1alpha1.AgentCodex:
		return codex(s)
	}
	return Config{Args: s.Args}, nil
}

// Hooked reports whether fleetd configures hooks for an agent kind: its
// status then comes from fleetd's reports.
func Hooked(kind fleetv1alpha1.AgentKind) bool {
	return kind == fleetv1alpha1.AgentClaude || kind == fleetv1alpha1.AgentCodex
}

// ShellJoin quotes words for a POSIX shell.
func ShellJoin(words []string) string {
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = shellQuote(w)
	}
	return strings.Join(quoted, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ResumeArgs are the arguments that start a known agent on a session it
// saved before, given the arguments that start it afresh (Configure's):
// Claude Code's `--resume <id>`, Codex's `resume <id>` subcommand (after
// the options, which Codex takes before a subcommand). Both CLIs exit at
// once when they cannot find the session. ok is false for an agent fleetd
// knows no resume for, or no session.
func ResumeArgs(kind fleetv1alpha1.AgentKind, args []string, session string) (resumed []string, ok bool) {
	if session == "" {
		return nil, false
	}
	switch kind {
	case fleetv1alpha1.AgentClaude:
		return append([]string{"--resume", session}, args...), true
	case fleetv1alpha1.AgentCodex:
		return append(slices.Clone(args), "resume", session), true
	}
	return nil, false
}
