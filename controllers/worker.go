package controllers

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// Environment variables fleetd sets in every member's pane.
const (
	EnvMCPURL = "FLEETD_MCP_URL"
	EnvToken  = "FLEETD_TOKEN"
	EnvMember = "FLEETD_MEMBER"
)

// credentialEnv are variables that carry API billing or credentials. They
// may come only from a Profile billed through an API, never from elsewhere.
var credentialEnv = []string{"ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"}

// Worker is how to run a Member, resolved from its Profile or inline spec.
type Worker struct {
	Agent      fleetv1alpha1.AgentKind
	Command    []string
	Args       []string
	Env        []fleetv1alpha1.EnvVar
	WorkingDir string
	Model      string
	Effort     fleetv1alpha1.Effort
	Billing    fleetv1alpha1.Billing
}

// resolveWorker merges a Member's spec with its Profile (nil for an inline
// Member). Member args are appended to the profile's.
func resolveWorker(m *fleetv1alpha1.Member, p *fleetv1alpha1.Profile) Worker {
	if p == nil {
		return Worker{
			Agent:      m.Spec.Agent,
			Command:    m.Spec.Command,
			Args:       m.Spec.Args,
			Env:        m.Spec.Env,
			WorkingDir: m.Spec.WorkingDir,
			Billing:    fleetv1alpha1.BillingSubscription,
		}
	}
	billing := p.Spec.Billing
	if billing == "" {
		billing = fleetv1alpha1.BillingSubscription
	}
	return Worker{
		Agent:      p.Spec.Agent,
		Command:    p.Spec.Command,
		Args:       append(append([]string(nil), p.Spec.Args...), m.Spec.Args...),
		Env:        p.Spec.Env,
		WorkingDir: p.Spec.WorkingDir,
		Model:      p.Spec.Model,
		Effort:     p.Spec.Effort,
		Billing:    billing,
	}
}

// Launch is everything needed to start a Member's agent in a fresh pane.
type Launch struct {
	// Env is the pane's whole environment beyond herdr's own variables.
	Env map[string]string
	// WorkingDir is the pane's starting directory.
	WorkingDir string
	// AgentKind and AgentArgs start a known agent with agent.start.
	AgentKind string
	AgentArgs []string
	// CommandLine is typed into the shell for a plain command.
	CommandLine string
}

// agentNameHashLen is how many hex digits of a hash agentName appends.
const agentNameHashLen = 8

// agentName is the herdr agent name of a Member. herdr agent names are
// unique per herdr server and match [a-z][a-z0-9_-]{0,31}; Member names are
// only unique per namespace. So the herdr name is the Member's name (cut to
// fit) and a hash of namespace/name: Members of one name in two namespaces
// share a herdr, and a person reading herdr's agent list still sees which
// Member each agent is.
func agentName(namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	suffix := hex.EncodeToString(sum[:])[:agentNameHashLen]
	if keep := 32 - 1 - agentNameHashLen; len(name) > keep {
		name = strings.TrimRight(name[:keep], "-_")
	}
	return name + "-" + suffix
}

// boundaryError says why a launch would cross the subscription boundary.
type boundaryError struct{ reason string }

func (e *boundaryError) Error() string { return e.reason }

// planLaunch decides the pane's environment and the command that starts the
// agent. env holds the resolved values of w.Env. It refuses (with a
// *boundaryError) any launch that would carry API billing or credentials from
// anywhere but a Profile billed through an API.
func planLaunch(w Worker, env map[string]string, mcpURL, token, member string) (Launch, error) {
	if err := checkBoundary(w, env); err != nil {
		return Launch{}, err
	}
	l := Launch{Env: map[string]string{}, WorkingDir: w.WorkingDir}
	for k, v := range env {
		l.Env[k] = v
	}
	if w.Billing != fleetv1alpha1.BillingAPI {
		// herdr's panes inherit herdr's own environment: empty what would
		// take a subscription worker to an API endpoint or key.
		for _, name := range credentialEnv {
			l.Env[name] = ""
		}
	}
	l.Env[EnvMCPURL] = mcpURL
	l.Env[EnvToken] = token
	l.Env[EnvMember] = member
	if w.Agent != "" {
		l.AgentKind = string(w.Agent)
		l.AgentArgs = agentArgs(w, mcpURL)
		return l, nil
	}
	// exec replaces the shell, so the pane's process ends when the agent
	// does and herdr reports the exit.
	l.CommandLine = "exec " + shellJoin(w.Command)
	return l, nil
}

func checkBoundary(w Worker, env map[string]string) error {
	for _, arg := range append(append([]string(nil), w.Command...), w.Args...) {
		for _, name := range credentialEnv {
			if strings.Contains(arg, name+"=") {
				return &boundaryError{fmt.Sprintf("the command line sets %s; credentials and API endpoints come only from a Profile's env with billing: api", name)}
			}
		}
	}
	if w.Billing == fleetv1alpha1.BillingAPI {
		if env["ANTHROPIC_BASE_URL"] == "" {
			return &boundaryError{"billing: api needs a non-empty ANTHROPIC_BASE_URL in the Profile's env"}
		}
		return nil
	}
	for _, name := range credentialEnv {
		if _, ok := env[name]; ok {
			return &boundaryError{fmt.Sprintf("%s would reach a worker billed by subscription; only a Profile with billing: api may set it", name)}
		}
	}
	return nil
}

// agentArgs adds the model, effort and the agent's MCP configuration pointing
// at the gateway. The token stays in the environment: the configuration names
// the variable, so it never shows on the command line.
func agentArgs(w Worker, mcpURL string) []string {
	var args []string
	switch w.Agent {
	case fleetv1alpha1.AgentClaude:
		if w.Model != "" {
			args = append(args, "--model", w.Model)
		}
		args = append(args, "--mcp-config", claudeMCPConfig(mcpURL))
	case fleetv1alpha1.AgentCodex:
		if w.Model != "" {
			args = append(args, "--model", w.Model)
		}
		if w.Effort != "" {
			args = append(args, "-c", fmt.Sprintf("model_reasoning_effort=%q", string(w.Effort)))
		}
		args = append(args, codexMCPConfig(mcpURL)...)
	}
	return append(args, w.Args...)
}

// claudeMCPConfig is Claude Code's --mcp-config: an http server whose
// Authorization header Claude Code expands from the pane's environment.
func claudeMCPConfig(mcpURL string) string {
	cfg := map[string]any{"mcpServers": map[string]any{"fleetd": map[string]any{
		"type":    "http",
		"url":     mcpURL,
		"headers": map[string]string{"Authorization": "Bearer ${" + EnvToken + "}"},
	}}}
	b, _ := json.Marshal(cfg)
	return string(b)
}

// codexMCPConfig configures Codex's streamable HTTP MCP client; Codex reads
// the bearer token from the named environment variable.
func codexMCPConfig(mcpURL string) []string {
	return []string{
		"-c", fmt.Sprintf("mcp_servers.fleetd.url=%q", mcpURL),
		"-c", `mcp_servers.fleetd.bearer_token_env_var="` + EnvToken + `"`,
	}
}

// shellJoin quotes words for a POSIX shell.
func shellJoin(words []string) string {
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
