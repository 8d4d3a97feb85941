package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/fleetd/fleetd/herdr"
)

// herdrCall is `scripted-agent herdr METHOD PARAMS`: one call to the pane
// server at HERDR_SOCKET_PATH as this process's user, printing "ok" or
// herdr's error code. Tests use it to play an agent turned against the
// other members on its pane server.
func herdrCall(args []string, out io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintln(out, "usage: scripted-agent herdr METHOD PARAMS-JSON")
		return 2
	}
	socket := os.Getenv(envHerdrSocket)
	if socket == "" {
		fmt.Fprintln(out, "no "+envHerdrSocket)
		return 2
	}
	var raw json.RawMessage
	err := herdr.NewClient(socket).Call(context.Background(), args[0], json.RawMessage(args[1]), "", &raw)
	var herr *herdr.Error
	switch {
	case errors.As(err, &herr):
		fmt.Fprintln(out, herr.Code)
	case err == nil, strings.Contains(err.Error(), "result type"):
		// Any result is a call that went through.
		fmt.Fprintln(out, "ok")
	default:
		fmt.Fprintln(out, "error: "+err.Error())
		return 1
	}
	return 0
}
