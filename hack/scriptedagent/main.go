// Command scripted-agent stands in for Claude Code in fleetd's tests and
// demos. It runs in a herdr pane, reads prompts from its terminal, reports
// its state to herdr the way hook-based agents do, and acts on a small
// directive language in each prompt by calling fleetd's MCP gateway with its
// member token.
//
// # Directives
//
// One directive per line, written `keyword: argument`; the keyword is
// case-insensitive and the argument is trimmed. Lines that are not
// directives are plain text. Directives run in order:
//
//	reply: TEXT     call bridge_reply {content: TEXT}
//	ask: QUESTION   call bridge_ask {content: QUESTION} and wait for the
//	                answer; if no reply: or ask: follows in the prompt, reply
//	                with the answer itself
//	silent: TEXT    print TEXT and never reply, so the turn just ends
//	sleep: SECONDS  work for SECONDS (a decimal number, such as 0.5)
//	dialog: TEXT    show TEXT as a dialog, report blocked, wait for one key,
//	                then report working again and go on
//	crash[: CODE]   exit at once with status CODE (1-255, default 1)
//	exit[: CODE]    exit at once with status CODE (0-255, default 0)
//
// {answer} in an argument after an ask: is replaced by the latest answer.
// A prompt with no directive at all is answered with a reply of "echo: "
// followed by the prompt. A prompt with a malformed directive runs nothing
// and prints why. A question that gets no answer skips the rest of its
// prompt. A tool result with isError is printed; the agent goes on.
//
// Example prompt, which asks the primary a question and replies with the
// answer in a sentence:
//
//	ask: Which branch should I use?
//	sleep: 1
//	reply: working on {answer}
//
// # Terminal
//
// On a terminal the agent switches to raw mode and enables bracketed paste,
// as interactive agents do: Enter (CR or LF) submits a prompt, and line
// breaks inside a paste belong to the prompt, which is how herdr's
// agent.prompt delivers multi-line text. Ctrl-C during a turn ends the turn
// (as an agent CLI's interrupt key does); at the prompt it exits with status
// 130. Ctrl-D on an empty line exits with status 0. On other input (a pipe, a
// file) every line is a prompt and the end of the input ends the agent.
//
// # Status
//
// With HERDR_SOCKET_PATH and HERDR_PANE_ID set, the agent calls
// pane.report_agent {source "scripted-agent", agent "scripted"} with an
// increasing seq and one random agent_session_id per process: idle once the
// prompt is shown, working when a prompt is read, blocked while a dialog is
// open, idle when the turn ends.
//
// # Environment and flags
//
//	FLEETD_MCP_URL, --mcp-url                    gateway endpoint (streamable HTTP)
//	FLEETD_TOKEN                                 bearer token for the gateway
//	FLEETD_AGENT_RECEIVED_LOG, --received-log    file that records every prompt
//	HERDR_SOCKET_PATH, HERDR_PANE_ID             set by herdr in its panes
//	--prompt                                     the prompt string
//
// `scripted-agent herdr METHOD PARAMS-JSON` makes one call to the pane
// server as the agent's user instead, printing ok or herdr's error code:
// tests play an agent turned against its neighbours with it.
// `scripted-agent call TOOL ARGS-JSON` calls one gateway tool and prints its
// result (token from FLEETD_TOKEN or the file FLEETD_TOKEN_FILE names): a
// Pod plays a primary with it.
//
// Flags win over the environment. The received log gets one JSON object a
// line per submitted prompt, {"seq":N,"time":"RFC 3339","text":"..."}, seq
// counting the prompts of this process from 1, so a test can count exactly
// what the agent received.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"
)

// version is reported to the gateway as the client version.
var version = "dev"

// Environment variables the agent reads.
const (
	envMCPURL      = "FLEETD_MCP_URL"
	envToken       = "FLEETD_TOKEN"
	envReceivedLog = "FLEETD_AGENT_RECEIVED_LOG"
	envHerdrSocket = "HERDR_SOCKET_PATH"
	envHerdrPane   = "HERDR_PANE_ID"
)

// Terminal control sequences for bracketed paste (mode 2004).
const (
	enableBracketedPaste  = "\x1b[?2004h"
	disableBracketedPaste = "\x1b[?2004l"
)

// defaultPrompt is shown whenever the agent waits for input.
const defaultPrompt = "scripted-agent> "

// usageText is the --help text; it repeats the package documentation.
const usageText = `Usage: scripted-agent [flags]

A scripted stand-in for a coding agent. Reads prompts from the terminal,
reports its state to herdr (pane.report_agent) and acts on directives, one
per line, "keyword: argument" (keyword case-insensitive). Other lines are
plain text. Directives run in order:

  reply: TEXT     call bridge_reply {content: TEXT}
  ask: QUESTION   call bridge_ask {content: QUESTION} and wait for the answer;
                  if no reply: or ask: follows in the prompt, reply with the
                  answer itself
  silent: TEXT    print TEXT and never reply, so the turn just ends
  sleep: SECONDS  work for SECONDS (a decimal number, such as 0.5)
  dialog: TEXT    show TEXT as a dialog, report blocked, wait for one key
  crash[: CODE]   exit at once with status CODE (1-255, default 1)
  exit[: CODE]    exit at once with status CODE (0-255, default 0)

{answer} in an argument after an ask: is replaced by the latest answer.
A prompt with no directive gets the reply "echo: <prompt>". A malformed
directive makes the whole prompt run nothing. Tool errors are printed.

On a terminal: raw mode with bracketed paste; Enter submits, line breaks in
a paste belong to the prompt; Ctrl-C ends a turn, or at the prompt exits
130; Ctrl-D on an empty line exits 0. Otherwise every input line is a prompt.

Environment:
  FLEETD_MCP_URL             gateway endpoint (or --mcp-url)
  FLEETD_TOKEN               bearer token for the gateway
  FLEETD_AGENT_RECEIVED_LOG  received log (or --received-log): one line per
                             prompt, {"seq":N,"time":"...","text":"..."}
  HERDR_SOCKET_PATH          herdr socket; no status reports when unset
  HERDR_PANE_ID              the pane to report for

Flags:
`

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "herdr":
			os.Exit(herdrCall(os.Args[2:], os.Stdout))
		case "call":
			os.Exit(callOneTool(os.Args[2:], os.Stdout))
		}
	}
	os.Exit(runMain(os.Args[1:], os.Stdin, os.Stdout))
}

// runMain runs the agent and returns its exit status.
func runMain(args []string, stdin *os.File, stdout io.Writer) int {
	flags := flag.NewFlagSet("scripted-agent", flag.ContinueOnError)
	flags.SetOutput(stdout)
	mcpURL := flags.String("mcp-url", os.Getenv(envMCPURL), "fleetd gateway MCP endpoint")
	receivedPath := flags.String("received-log", os.Getenv(envReceivedLog), "file that records every received prompt")
	prompt := flags.String("prompt", defaultPrompt, "prompt shown while waiting for input")
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), usageText)
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}

	a := &agent{out: stdout, status: silentReporter{}, prompt: *prompt}
	if fd := int(stdin.Fd()); term.IsTerminal(fd) {
		saved, err := term.MakeRaw(fd)
		if err != nil {
			fmt.Fprintf(stdout, "scripted-agent: raw mode: %v\n", err)
			return 1
		}
		defer func() { _ = term.Restore(fd, saved) }()
		// Raw mode also stops the terminal from turning "\n" into "\r\n".
		a.out = crlfWriter{w: stdout}
		a.echo = true
		fmt.Fprint(stdout, enableBracketedPaste)
		defer fmt.Fprint(stdout, disableBracketedPaste)
	}

	if socket := os.Getenv(envHerdrSocket); socket != "" {
		pane := os.Getenv(envHerdrPane)
		if pane == "" {
			a.printf("scripted-agent: %s is set but %s is not; not reporting status\n", envHerdrSocket, envHerdrPane)
		} else {
			a.status = newHerdrReporter(socket, pane, newSessionID())
		}
	}
	if *mcpURL != "" {
		token := os.Getenv(envToken)
		if token == "" {
			a.printf("scripted-agent: %s is unset; the gateway will refuse the calls\n", envToken)
		}
		a.gateway = newGateway(*mcpURL, token, version)
	}
	if *receivedPath != "" {
		a.received = &receivedLog{path: *receivedPath}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	err := a.run(ctx, stdin)

	var exit *exitError
	switch {
	case errors.As(err, &exit):
		// crash and exit are abrupt on purpose: no goodbye to the gateway.
		return exit.code
	case errors.Is(err, errInterrupted), errors.Is(err, context.Canceled):
		a.print("\n")
		return 130
	}
	if a.gateway != nil {
		_ = a.gateway.close()
	}
	if err != nil {
		a.printf("scripted-agent: %v\n", err)
		return 1
	}
	return 0
}

// crlfWriter writes "\r\n" for every "\n", which a terminal in raw mode no
// longer does by itself.
type crlfWriter struct {
	w io.Writer
}

// Write writes p with its line feeds expanded.
func (c crlfWriter) Write(p []byte) (int, error) {
	if _, err := c.w.Write(bytes.ReplaceAll(p, []byte("\n"), []byte("\r\n"))); err != nil {
		return 0, err
	}
	return len(p), nil
}
