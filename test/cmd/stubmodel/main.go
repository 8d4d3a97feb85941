// Command stubmodel serves the scripted stand-in for a model's HTTP API
// (test/framework/stubmodel), so the real agent CLIs run with no network: point
// ANTHROPIC_BASE_URL at it (Claude Code), or OPENAI_BASE_URL at it with /v1
// (Codex).
//
//	stubmodel --listen 127.0.0.1:18080 --log requests.jsonl
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/fleetd/fleetd/test/framework/stubmodel"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18080", "Address to serve the model API on.")
	logPath := flag.String("log", "", "File to append every request to, as JSON lines.")
	flag.Parse()
	s, err := stubmodel.New(*logPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stubmodel:", err)
		os.Exit(1)
	}
	slog.Info("Serving the scripted model API", "addr", *listen)
	if err := http.ListenAndServe(*listen, s); err != nil {
		fmt.Fprintln(os.Stderr, "stubmodel:", err)
		os.Exit(1)
	}
}
