package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fleetd/fleetd/internal/testenv"
)

// readmeApply matches the README's `kubectl apply -f|-k PATH` commands.
var readmeApply = regexp.MustCompile(`(?m)^kubectl apply (-[fk]) (\S+)`)

// TestREADMEApplyCommands runs every `kubectl apply` of the README the way
// a new user types it (a client dry run against the suite's API server;
// what a kustomization renders), so a manifest that moved or a folder that
// needs -k fails here first.
func TestREADMEApplyCommands(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds := readmeApply.FindAllStringSubmatch(string(b), -1)
	if len(cmds) < 3 {
		t.Fatalf("found %d kubectl apply commands in the README, want the walkthrough's and the deploy's", len(cmds))
	}
	for _, c := range cmds {
		flag, path := c[1], c[2]
		if path == "-" {
			continue // a heredoc, shown with its own output
		}
		t.Run(strings.TrimPrefix(c[0], "kubectl apply "), func(t *testing.T) {
			args := []string{"apply", "--dry-run=client", flag, filepath.Join(testenv.RepoRoot(), path)}
			if flag == "-k" {
				// What apply -k reads, without comparing it with what this
				// API server already has (fleetd's CRDs, its policies).
				args = []string{"kustomize", filepath.Join(testenv.RepoRoot(), path)}
			}
			out, err := w.kubectl(args...)
			if err != nil {
				t.Errorf("%s: %v\n%s", c[0], err, out)
			}
		})
	}
}
