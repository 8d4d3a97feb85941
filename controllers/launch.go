package controllers

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"path/filepath"
	"strings"

	"k8s.io/utils/ptr"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// credentialEnv are variables that carry API billing or credentials. They
// may come only from a Profile billed through an API, never from elsewhere.
var credentialEnv = []string{
	"ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN",
	agents.CodexBaseURLEnv, agents.CodexAPIKeyEnv, "CODEX_API_KEY",
}

// baseURLEnv names the variable of an API-billed Profile that says where
// its agent's model is.
func baseURLEnv(kind fleetv1alpha1.AgentKind) string {
	if kind == fleetv1alpha1.AgentCodex {
		return agents.CodexBaseURLEnv
	}
	return "ANTHROPIC_BASE_URL"
}

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
	// PermissionMode and AllowedTools tune how the agent asks before it
	// runs tools.
	PermissionMode string
	AllowedTools   []string
	// Runtime is where the Member asks to run (the Member's, else the
	// Profile's), empty for fleetd's default; Pod shapes its Pod.
	Runtime fleetv1alpha1.Runtime
	Pod     *fleetv1alpha1.MemberPod
	// Pricing is what the model costs (the Profile's), nil for none.
	Pricing *fleetv1alpha1.Pricing
	// Idle says when the idle member is suspended (the Member's, else the
	// Profile's), nil for never.
	Idle *fleetv1alpha1.MemberIdle
	// Pool is the Profile whose warm pool the member may claim its Pod
	// from (profile_pool.go); empty for none.
	Pool string
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
			Billing:    fleetv1alpha1.BillingOf(nil),
			Runtime:    m.Spec.Runtime,
			Pod:        mergePod(nil, m.Spec.Pod),
			Idle:       m.Spec.Idle,
		}
	}
	w := Worker{
		Agent:          p.Spec.Agent,
		Command:        p.Spec.Command,
		Args:           append(append([]string(nil), p.Spec.Args...), m.Spec.Args...),
		Env:            append(gitEnv(p.Spec.Git), p.Spec.Env...),
		WorkingDir:     p.Spec.WorkingDir,
		Model:          p.Spec.Model,
		Effort:         p.Spec.Effort,
		Billing:        fleetv1alpha1.BillingOf(p),
		PermissionMode: p.Spec.PermissionMode,
		AllowedTools:   p.Spec.AllowedTools,
		Runtime:        cmp.Or(m.Spec.Runtime, p.Spec.Runtime),
		Pod:            mergePod(p.Spec.Pod, m.Spec.Pod),
		Pricing:        p.Spec.Pricing,
		Idle:           cmp.Or(m.Spec.Idle, p.Spec.Idle),
	}
	if p.Spec.WarmPool != nil && p.Spec.WarmPool.Size > 0 {
		w.Pool = p.Name
	}
	return w
}

// gitEnv sets who a worker's commits are by; env listed after it wins.
func gitEnv(g *fleetv1alpha1.GitIdentity) []fleetv1alpha1.EnvVar {
	if g == nil {
		return nil
	}
	env := make([]fleetv1alpha1.EnvVar, 0, 4)
	for _, who := range []string{"AUTHOR", "COMMITTER"} {
		env = append(env,
			fleetv1alpha1.EnvVar{Name: "GIT_" + who + "_NAME", Value: ptr.To(g.Name)},
			fleetv1alpha1.EnvVar{Name: "GIT_" + who + "_EMAIL", Value: ptr.To(g.Email)})
	}
	return env
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
	// Files are written before the agent starts: its own configuration.
	Files []agents.File
}

// agentHome is where a known agent keeps what fleetd seeds for it: one
// directory per Member incarnation, under the state directory fleetd owns.
type agentHome struct {
	// Dir is the member's agent directory.
	Dir string
	// HookCommand runs `fleetd hook`.
	HookCommand []string
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
// anywhere but a Profile billed through an API. A known agent runs unattended
// from its own directory in home: a working directory of its own unless the
// spec names one, and the configuration package agents decides.
func planLaunch(w Worker, env map[string]string, mcpURL, token, member string, home agentHome) (Launch, error) {
	if err := checkCredentialBoundary(w, env); err != nil {
		return Launch{}, err
	}
	l := Launch{Env: map[string]string{}, WorkingDir: w.WorkingDir}
	if w.Agent != "" {
		if l.WorkingDir == "" {
			l.WorkingDir = filepath.Join(home.Dir, "work")
		}
		cfg, err := agents.Configure(agents.Spec{
			Kind: w.Agent, Dir: home.Dir, WorkingDir: l.WorkingDir, Env: env,
			Model: w.Model, Effort: w.Effort, PermissionMode: w.PermissionMode, AllowedTools: w.AllowedTools,
			Args: w.Args, MCPURL: mcpURL, HookCommand: home.HookCommand,
			// A pod member has no token: its MCP URL is its Pod's forwarder.
			ForwardedMCP: token == "",
		})
		if err != nil {
			return Launch{}, err
		}
		maps.Copy(l.Env, cfg.DefaultEnv)
		maps.Copy(l.Env, env)
		maps.Copy(l.Env, cfg.Env)
		l.AgentKind, l.AgentArgs, l.Files = string(w.Agent), cfg.Args, cfg.Files
	} else {
		// exec replaces the shell, so the pane's process ends when the
		// agent does and herdr reports the exit.
		l.CommandLine = "exec " + agents.ShellJoin(w.Command)
		maps.Copy(l.Env, env)
	}
	if w.Billing != fleetv1alpha1.BillingAPI {
		// herdr's panes inherit herdr's own environment: empty what would
		// take a subscription worker to an API endpoint or key.
		for _, name := range credentialEnv {
			l.Env[name] = ""
		}
	}
	l.Env[agents.EnvMCPURL] = mcpURL
	// Empty for a pod member, which holds no credential at all.
	l.Env[agents.EnvToken] = token
	l.Env[agents.EnvMember] = member
	return l, nil
}

// checkCredentialBoundary says (with a *boundaryError) whether a launch
// would carry API billing or credentials across the subscription boundary:
// a credential or endpoint on the command line, in the env of a worker billed
// by subscription, or a worker billed through an API without its endpoint.
func checkCredentialBoundary(w Worker, env map[string]string) error {
	for _, arg := range append(append([]string(nil), w.Command...), w.Args...) {
		for _, name := range credentialEnv {
			if strings.Contains(arg, name+"=") {
				return &boundaryError{fmt.Sprintf("the command line sets %s; credentials and API endpoints come only from a Profile's env with billing: api", name)}
			}
		}
	}
	if w.Billing == fleetv1alpha1.BillingAPI {
		if name := baseURLEnv(w.Agent); env[name] == "" {
			return &boundaryError{"billing: api needs a non-empty " + name + " in the Profile's env"}
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
