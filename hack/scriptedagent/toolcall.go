package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// envTokenFile names a file holding the bearer token, read at each call:
// a Pod's projected service-account token, which the kubelet rotates.
const envTokenFile = "FLEETD_TOKEN_FILE"

// callOneTool is `scripted-agent call TOOL ARGS-JSON`: one call to the
// gateway's tool at FLEETD_MCP_URL, with the token in FLEETD_TOKEN or the
// file FLEETD_TOKEN_FILE names, printing the result's structured content as
// JSON on one line, or "error CODE: MESSAGE" for a result with isError, and
// then "took DURATION", the call's own time (the session's set-up not
// counted). It plays a primary that is not an agent in a pane: a Pod that
// mounts the gateway with its service-account token.
func callOneTool(args []string, out io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintln(out, "usage: scripted-agent call TOOL ARGS-JSON")
		return 2
	}
	endpoint := os.Getenv(envMCPURL)
	if endpoint == "" {
		fmt.Fprintln(out, "no "+envMCPURL)
		return 2
	}
	token := os.Getenv(envToken)
	if file := os.Getenv(envTokenFile); file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			fmt.Fprintln(out, "error: "+err.Error())
			return 1
		}
		token = strings.TrimSpace(string(b))
	}
	var arguments map[string]any
	if err := json.Unmarshal([]byte(args[1]), &arguments); err != nil {
		fmt.Fprintf(out, "arguments are not a JSON object: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	g := newGateway(endpoint, token, version)
	defer g.close()
	if _, err := g.connect(ctx); err != nil {
		fmt.Fprintln(out, "error: "+err.Error())
		return 1
	}
	start := time.Now()
	res, err := g.callTool(ctx, args[0], arguments)
	took := time.Since(start)
	if err != nil {
		fmt.Fprintln(out, "error: "+err.Error())
		return 1
	}
	if res.IsError {
		fmt.Fprintln(out, "error "+describeToolError(res))
		fmt.Fprintln(out, "took", took)
		return 0
	}
	var fields map[string]any
	if err := decodeStructured(res, &fields); err != nil {
		fmt.Fprintln(out, "error: "+err.Error())
		return 1
	}
	line, _ := json.Marshal(fields)
	fmt.Fprintln(out, string(line))
	fmt.Fprintln(out, "took", took)
	return 0
}
