package agents

import (
	"fmt"
)

// codex configures Codex: its model, reasoning effort and the gateway as a
// streamable-HTTP MCP server whose bearer token Codex reads from the
// environment.
func codex(s Spec) Config {
	var args []string
	if s.Model != "" {
		args = append(args, "--model", s.Model)
	}
	if s.Effort != "" {
		args = append(args, "-c", fmt.Sprintf("model_reasoning_effort=%q", string(s.Effort)))
	}
	args = append(args,
		"-c", fmt.Sprintf("mcp_servers.fleetd.url=%q", s.MCPURL),
		"-c", `mcp_servers.fleetd.bearer_token_env_var="`+EnvToken+`"`,
	)
	return Config{Args: append(args, s.Args...)}
}
