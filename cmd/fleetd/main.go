// Command fleetd runs fleetd: the Member and Delegation controllers and the
// MCP gateway, together by default (one daemon, two faces) or either alone
// so the gateway can scale out. `fleetd dev` brings up a whole local
// environment.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "dev":
			os.Exit(dev(os.Args[2:]))
		case "hook":
			os.Exit(hook(os.Args[2:]))
		}
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fleetd:", err)
		os.Exit(1)
	}
}
