package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fleetd/fleetd/agents"
	"github.com/fleetd/fleetd/internal/mcpclient"
)

// primaryStopTimeout bounds the hook's talk with the gateway: a gateway
// that does not answer lets the turn end.
const primaryStopTimeout = 15 * time.Second

// primaryStopName is the hook's argument: `fleetd hook primary-stop`.
const primaryStopName = "primary-stop"

// primaryStop is `fleetd hook primary-stop`, the Stop hook of a primary
// that runs outside any pane (Claude Code or Codex on a laptop). When the
// turn stops with outcomes of its messages waiting in bridge_poll, it
// prints the Stop hook's block decision with them as the reason, which
// keeps the agent going with them, and acknowledges them; otherwise it
// prints nothing and the turn ends. It hands over a bounded number, and
// where the session's transcript shows which messages it sent, only
// theirs (agents.PrimaryStop). The gateway is FLEETD_MCP_URL (or
// --gateway) and the primary's token FLEETD_TOKEN (or --token-file). It
// never fails the agent: an error goes to stderr, and the turn ends.
func primaryStop(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	d, err := runPrimaryStop(args, stdin)
	if err != nil {
		fmt.Fprintln(stderr, "fleetd hook primary-stop:", err)
	}
	if d.Block() {
		if err := json.NewEncoder(stdout).Encode(d); err != nil {
			fmt.Fprintln(stderr, "fleetd hook primary-stop:", err)
		}
	}
	return 0
}

func runPrimaryStop(args []string, stdin io.Reader) (agents.StopDecision, error) {
	fs := flag.NewFlagSet("fleetd hook "+primaryStopName, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	url := fs.String("gateway", os.Getenv(agents.EnvMCPURL), "The gateway's MCP endpoint (default $"+agents.EnvMCPURL+").")
	tokenFile := fs.String("token-file", "", "A file holding the primary's bearer token (default: $"+agents.EnvToken+").")
	if err := fs.Parse(args); err != nil {
		return agents.StopDecision{}, fmt.Errorf("%w; usage: fleetd hook %s [--gateway URL] [--token-file FILE]", err, primaryStopName)
	}
	token := os.Getenv(agents.EnvToken)
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return agents.StopDecision{}, fmt.Errorf("reading the token: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if *url == "" || token == "" {
		return agents.StopDecision{}, fmt.Errorf("set %s (or --gateway) and %s (or --token-file) to the gateway and the primary's token", agents.EnvMCPURL, agents.EnvToken)
	}
	raw, err := io.ReadAll(io.LimitReader(stdin, maxHookInput))
	if err != nil {
		return agents.StopDecision{}, fmt.Errorf("reading the hook's input: %w", err)
	}
	var in struct {
		// StopHookActive: the turn already goes on because a Stop hook
		// kept it going.
		StopHookActive bool   `json:"stop_hook_active"`
		SessionID      string `json:"session_id"`
		TranscriptPath string `json:"transcript_path"`
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &in); err != nil {
			return agents.StopDecision{}, fmt.Errorf("decoding the hook's input: %w", err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), primaryStopTimeout)
	defer cancel()
	s, err := mcpclient.Connect(ctx, *url, token)
	if err != nil {
		return agents.StopDecision{}, err
	}
	defer s.Close()
	poll, err := mcpclient.Call(ctx, s, "bridge_poll", nil)
	if err != nil {
		return agents.StopDecision{}, err
	}
	if poll.IsError {
		return agents.StopDecision{}, fmt.Errorf("bridge_poll: %s", poll.Text)
	}
	var waiting struct {
		Outcomes  []agents.PrimaryOutcome  `json:"outcomes"`
		Questions []agents.PrimaryQuestion `json:"questions"`
	}
	b, _ := json.Marshal(poll.Fields)
	if err := json.Unmarshal(b, &waiting); err != nil {
		return agents.StopDecision{}, fmt.Errorf("decoding bridge_poll: %w", err)
	}
	// A transcript the hook cannot read only means it cannot tell this
	// session's messages from others'.
	sends, _ := agents.ReadSessionSends(in.SessionID, in.TranscriptPath)
	d, ack := agents.PrimaryStop(in.StopHookActive, waiting.Outcomes, waiting.Questions, sends)
	if len(ack) == 0 {
		return d, nil
	}
	// Acknowledged before the agent reads them: a reply is shown once; a
	// failed acknowledgement shows nothing now and everything next stop.
	res, err := mcpclient.Call(ctx, s, "bridge_ack", map[string]any{"ids": ack})
	switch {
	case err != nil:
		return agents.StopDecision{}, err
	case res.IsError:
		return agents.StopDecision{}, errors.New("bridge_ack: " + res.Text)
	}
	return d, nil
}
