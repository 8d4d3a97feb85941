package gateway

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetd/fleetd/internal/testenv"
)

// TestToolList: the MCP surface has the documented names; switched-off
// namespaces are not listed.
func TestToolList(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	res, err := h.connect(t, staticToken, nil).ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" || tool.OutputSchema == nil {
			t.Errorf("%s lacks a description or output schema", tool.Name)
		}
	}
	want := []string{"bridge_send", "bridge_reply", "bridge_ask", "bridge_poll", "bridge_ack", "bridge_status", "bridge_spawn", "bridge_list", "bridge_stop", "bridge_profiles", "bridge_whoami", "bridge_read", "bridge_cancel", "team_status", "team_message", "team_manage"}
	if diff := cmp.Diff(want, names, cmpSorted); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
}

// TestREADMEListsEveryTool: the README's tool table has a row for every
// tool the gateway serves, process tools included, and no other.
func TestREADMEListsEveryTool(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile("(?m)^\\| `((?:bridge|team|process)_[a-z]+)` \\|").FindAllStringSubmatch(string(readme), -1)
	var documented []string
	for _, r := range rows {
		documented = append(documented, r[1])
	}
	g := &Gateway{svc: &service{opts: Options{Features: map[ToolNamespace]bool{ToolNamespaceProcess: true}}}, toolNamespaces: map[string]ToolNamespace{}, server: mcp.NewServer(&mcp.Implementation{Name: "t"}, nil)}
	g.registerTools()
	if diff := cmp.Diff(g.toolOrder, documented, cmpSorted); diff != "" {
		t.Errorf("the README's tool table (-served +documented):\n%s", diff)
	}
}
