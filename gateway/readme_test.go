package gateway

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/testenv"
)

func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestREADMEListsEveryCode: the README's failure catalogue names every
// error code a call can answer.
func TestREADMEListsEveryCode(t *testing.T) {
	text := readme(t)
	start := strings.Index(text, "Every error is a result")
	if start < 0 {
		t.Fatal("the README has no failure catalogue")
	}
	catalogue, _, _ := strings.Cut(text[start:], "\n\n")
	for _, code := range toolerr.Known {
		if !strings.Contains(catalogue, "`"+string(code)+"`") {
			t.Errorf("the README's failure catalogue lacks %s", code)
		}
	}
}

// TestREADMEListsEveryParameter: each tool's row in the README's tool table
// names every parameter the tool takes.
func TestREADMEListsEveryParameter(t *testing.T) {
	rows := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `((?:bridge|team|process)_[a-z]+)` \\| ([^|]*) \\|").FindAllStringSubmatch(readme(t), -1) {
		rows[m[1]] = m[2]
	}
	g := &Gateway{svc: &service{opts: Options{Features: map[ToolNamespace]bool{ToolNamespaceProcess: true}}}, toolNamespaces: map[string]ToolNamespace{}, server: mcp.NewServer(&mcp.Implementation{Name: "t"}, nil)}
	g.registerTools()
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := g.server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, tool := range tools.Tools {
		row, ok := rows[tool.Name]
		if !ok {
			continue // TestREADMEListsEveryTool says so
		}
		var schema struct {
			Properties map[string]any `json:"properties"`
		}
		b, _ := json.Marshal(tool.InputSchema)
		if err := json.Unmarshal(b, &schema); err != nil {
			t.Fatalf("%s: input schema: %v", tool.Name, err)
		}
		for name := range schema.Properties {
			checked++
			if !strings.Contains(row, "`"+name+"`") && !strings.Contains(row, "`"+name+"?`") {
				t.Errorf("the README's row of %s does not name its parameter %s: %s", tool.Name, name, row)
			}
		}
	}
	if checked < len(tools.Tools) {
		t.Errorf("checked %d parameters of %d tools: the table was not read", checked, len(tools.Tools))
	}
}
