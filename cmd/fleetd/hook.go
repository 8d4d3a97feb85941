package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
)

// maxHookInput bounds what a hook reads on stdin.
const maxHookInput = 1 << 20

// hookTimeout bounds the report to herdr.
const hookTimeout = 2 * time.Second

// hook is `fleetd hook claude|codex`, the command an agent's hooks run. It reads
// the hook event's JSON on stdin, reports the agent's state to herdr under
// fleetd's source (pane.report_agent, or pane.release_agent when the
// session ends), and keeps the event in the member's agent directory, with
// the agent's session id. It prints nothing, and it never fails the agent:
// an error goes to stderr and it exits 0. `fleetd hook primary-stop` is a
// primary's Stop hook instead (primary_stop.go).
func hook(args []string) int {
	if len(args) > 0 && args[0] == primaryStopName {
		return primaryStop(args[1:], os.Stdin, os.Stdout, os.Stderr)
	}
	// The seq is taken first: it orders this report among the agent's
	// other hooks, which may run at the same time.
	now := time.Now()
	seq := uint64(now.UnixMicro())
	if err := runHook(args, os.Stdin, now, seq); err != nil {
		fmt.Fprintln(os.Stderr, "fleetd hook:", err)
	}
	return 0
}

func runHook(args []string, stdin io.Reader, now time.Time, seq uint64) error {
	if len(args) != 1 || !agents.Hooked(fleetv1alpha1.AgentKind(args[0])) {
		return fmt.Errorf("usage: fleetd hook claude|codex|%s (got %q)", primaryStopName, args)
	}
	kind := fleetv1alpha1.AgentKind(args[0])
	raw, err := io.ReadAll(io.LimitReader(stdin, maxHookInput))
	if err != nil {
		return fmt.Errorf("reading the hook's input: %w", err)
	}
	var in agents.HookInput
	if err := json.Unmarshal(raw, &in); err != nil {
		return fmt.Errorf("decoding the hook's input: %w", err)
	}
	res, _ := agents.Hook(kind, in)

	var errs []error
	if dir := os.Getenv(agents.EnvAgentDir); dir != "" {
		st := agents.HookStatus{Agent: kind, SessionID: in.SessionID, TranscriptPath: in.TranscriptPath,
			Event: in.Event, At: now, Message: res.Message, Seq: seq}
		if res.Action == agents.HookReport {
			st.State = res.State
		}
		if err := agents.WriteHookStatus(dir, st); err != nil {
			errs = append(errs, fmt.Errorf("recording the hook in %s: %w", dir, err))
		}
		if err := agents.AppendHookEvent(dir, st); err != nil {
			errs = append(errs, fmt.Errorf("logging the hook in %s: %w", dir, err))
		}
	}
	socket, pane := os.Getenv(herdr.SocketPathEnv), os.Getenv("HERDR_PANE_ID")
	if socket == "" || pane == "" || res.Action == agents.HookIgnore {
		return errors.Join(errs...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hookTimeout)
	defer cancel()
	c := herdr.NewClient(socket)
	switch res.Action {
	case agents.HookReport:
		p := herdr.PaneReportAgentParams{PaneID: pane, Source: agents.ReportSource, Agent: string(kind), State: res.State, Seq: &seq}
		if res.Message != "" {
			p.Message = &res.Message
		}
		err = c.PaneReportAgent(ctx, p)
	case agents.HookRelease:
		err = c.PaneReleaseAgent(ctx, herdr.PaneReleaseAgentParams{PaneID: pane, Source: agents.ReportSource, Agent: string(kind), Seq: &seq})
	}
	if err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
