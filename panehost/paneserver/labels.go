package paneserver

import (
	"strings"
)

// agentAliases maps every name herdr accepts for an agent kind to the kind's
// canonical label, as herdr's agent lookup does.
var agentAliases = map[string]string{
	"pi": "pi", "claude": "claude", "claude-code": "claude", "codex": "codex",
	"gemini": "gemini", "cursor": "cursor", "cursor-agent": "cursor",
	"devin": "devin", "devin-cli": "devin", "devin cli": "devin",
	"agy": "agy", "antigravity": "agy", "antigravity-cli": "agy",
	"cline": "cline", "omp": "omp",
	"mastracode": "mastracode", "mastra-code": "mastracode", "mastra code": "mastracode",
	"opencode": "opencode", "opencode2": "opencode", "open-code": "opencode",
	"copilot": "copilot", "github-copilot": "copilot", "ghcs": "copilot",
	"kimi": "kimi", "kimi-code": "kimi", "kimi code": "kimi",
	"kiro": "kiro", "kiro-cli": "kiro", "droid": "droid", "amp": "amp", "amp-local": "amp",
	"grok": "grok", "grok-build": "grok", "hermes": "hermes", "hermes-agent": "hermes",
	"kilo": "kilo", "kilo-code": "kilo", "kilo code": "kilo",
	"qodercli": "qodercli", "qoderclicn": "qodercli", "qoder": "qodercli", "qodercn": "qodercli",
	"qwen": "qwen", "qwen-code": "qwen", "qwen code": "qwen",
	"maki": "maki",
}

// agentExecutables lists the labels whose executable is not named after them.
var agentExecutables = map[string]string{
	"cursor": "cursor-agent",
	"kiro":   "kiro-cli",
}

// scriptSuffixes are stripped from a program name before it is looked up.
var scriptSuffixes = []string{".exe", ".cmd", ".bat", ".ps1", ".js"}

// knownAgent returns the canonical label of a name herdr knows as an agent:
// lowercased, without a script suffix, through the alias list.
func knownAgent(name string) (string, bool) {
	name = strings.ToLower(strings.TrimSpace(name))
	for _, suffix := range scriptSuffixes {
		name = strings.TrimSuffix(name, suffix)
	}
	label, ok := agentAliases[name]
	return label, ok
}

// reportedLabel is the label a report sets: a known agent's canonical label,
// else the trimmed label as given.
func reportedLabel(agent string) string {
	if label, ok := knownAgent(agent); ok {
		return label
	}
	return strings.TrimSpace(agent)
}

// Sources herdr's own integrations report under. Only these "official"
// sources have their agent session ids kept. For some of them herdr ignores
// the reported state altogether (the screen decides); others only say which
// session runs; the rest are full-lifecycle sources whose reports replace
// screen detection.
var (
	officialSources = map[string]string{
		"herdr:claude": "claude", "herdr:codex": "codex", "herdr:copilot": "copilot",
		"herdr:devin": "devin", "herdr:droid": "droid", "herdr:kimi": "kimi", "herdr:omp": "omp",
		"herdr:mastracode": "mastracode", "herdr:pi": "pi", "herdr:hermes": "hermes",
		"herdr:opencode": "opencode", "herdr:qodercli": "qodercli", "herdr:qwen": "qwen",
		"herdr:kilo": "kilo", "herdr:cursor": "cursor", "herdr:antigravity_cli": "agy", "herdr:grok": "grok",
	}
	nativeStateSources = map[string]bool{
		"herdr:claude": true, "herdr:codex": true, "herdr:copilot": true, "herdr:devin": true,
		"herdr:droid": true, "herdr:qodercli": true, "herdr:qwen": true, "herdr:cursor": true, "herdr:grok": true,
	}
	sessionOnlySources = map[string]bool{
		"herdr:hermes": true, "herdr:qwen": true, "herdr:antigravity_cli": true,
	}
	fullLifecycleSources = map[string]bool{
		"herdr:pi": true, "herdr:omp": true, "herdr:mastracode": true,
		"herdr:opencode": true, "herdr:kilo": true, "herdr:kimi": true,
	}
)

// official reports whether a report comes from herdr's own integration for
// the agent it names.
func official(source, label string) bool {
	want, ok := officialSources[source]
	return ok && want == label
}

// knownShells are the programs agent.start accepts as an idle pane's
// foreground process.
var knownShells = map[string]bool{
	"sh": true, "bash": true, "dash": true, "zsh": true, "fish": true, "ksh": true, "mksh": true,
	"csh": true, "tcsh": true, "elvish": true, "xonsh": true, "nu": true, "pwsh": true,
	"powershell": true, "cmd": true,
}

// scriptHosts run an agent written as a script: the agent is named by the
// script, not the host.
var scriptHosts = map[string]bool{
	"node": true, "nodejs": true, "bun": true, "deno": true, "python": true, "python3": true,
	"sh": true, "bash": true, "dash": true, "zsh": true,
}

// agentPackages are npm package paths that name an agent whatever its script
// is called.
var agentPackages = map[string]string{
	"node_modules/@anthropic-ai/claude-code/": "claude",
	"node_modules/@openai/codex/":             "codex",
	"node_modules/@qwen-code/qwen-code/":      "qwen",
	"node_modules/@google/gemini-cli/":        "gemini",
}

// envAgentHint is the variable that names a process's agent kind outright.
const envAgentHint = "HERDR_AGENT"

// identifyProcess names the known agent a process is, from what /proc says
// of it: a HERDR_AGENT hint in its environment first, then its program name,
// then, for a script host such as node, the script it runs.
func identifyProcess(argv []string, comm string, environ []string) string {
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, envAgentHint+"="); ok {
			if label, known := knownAgent(v); known {
				return label
			}
		}
	}
	prog := comm
	if len(argv) > 0 && argv[0] != "" {
		prog = baseName(argv[0])
	}
	if label, ok := knownAgent(prog); ok {
		return label
	}
	if label, ok := knownAgent(comm); ok {
		return label
	}
	host := strings.ToLower(prog)
	if len(argv) < 2 || !scriptHosts[host] && !scriptHosts[strings.ToLower(comm)] {
		// An exiting process has no argv left to read.
		return ""
	}
	for _, arg := range argv[1:] {
		if strings.HasPrefix(arg, "-") {
			continue
		}
		for pkg, label := range agentPackages {
			if strings.Contains(arg, pkg) {
				return label
			}
		}
		if label, ok := knownAgent(baseName(arg)); ok {
			return label
		}
		return ""
	}
	return ""
}

func baseName(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[i+1:]
	}
	return path
}
