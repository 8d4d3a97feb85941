package agents

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"time"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/textcut"
)

// probeTimeout bounds one `<cli> --version`.
const probeTimeout = 10 * time.Second

// maxVersionBytes bounds the version line a probe keeps.
const maxVersionBytes = 200

// CLI is what a probe found of an agent's command on this machine.
type CLI struct {
	// Command is the command looked for: the agent kind, which is what
	// herdr's agent.start types, or a plain command's program.
	Command string
	// Path is where PATH finds it; empty when it is not found.
	Path string
	// Version is the first line `--version` printed, for agents.
	Version string
	// Error says why it was not found, or why its version is unknown.
	Error string
}

// Found reports whether the command is on PATH.
func (c CLI) Found() bool { return c.Path != "" }

// Executable is the command herdr's agent.start runs for an agent kind.
func Executable(kind fleetv1alpha1.AgentKind) string { return string(kind) }

// ProbeAgent looks for an agent kind's CLI on PATH and asks it for its
// version, in an environment of its own: a fresh HOME (and config
// directories in it), so that a probe never reads or writes a person's or a
// member's agent configuration, and no update check.
func ProbeAgent(ctx context.Context, kind fleetv1alpha1.AgentKind) CLI {
	c := ProbeCommand(Executable(kind))
	if !c.Found() {
		return c
	}
	home, err := os.MkdirTemp("", "fleetd-probe-")
	if err != nil {
		c.Error = "making a home for the probe: " + err.Error()
		return c
	}
	defer os.RemoveAll(home)
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Path, "--version")
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LANG=C.UTF-8",
		"CLAUDE_CONFIG_DIR=" + home + "/claude", "CODEX_HOME=" + home + "/codex",
		"DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
	}
	cmd.Dir = home
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		c.Error = strings.TrimSpace(textcut.Head(firstLine(stderr.Bytes(), err.Error()), maxVersionBytes))
		return c
	}
	c.Version = textcut.Head(firstLine(stdout.Bytes(), ""), maxVersionBytes)
	return c
}

// ProbeCommand looks for a plain command's program on PATH.
func ProbeCommand(program string) CLI {
	c := CLI{Command: program}
	path, err := exec.LookPath(program)
	if err != nil {
		c.Error = err.Error()
		return c
	}
	c.Path = path
	return c
}

// firstLine is the first non-empty line of out, or fallback.
func firstLine(out []byte, fallback string) string {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			return l
		}
	}
	return fallback
}
