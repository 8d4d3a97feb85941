package detect

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// builtin holds fleetd's own manifests, one per agent label.
//
//go:embed manifests/*.toml
var builtin embed.FS

// Load returns a Detector per agent label: fleetd's built-in manifests,
// each replaced by <dir>/<label>.toml when dir holds one (herdr's
// agent-detection overrides work unchanged). An empty dir loads the
// built-ins only.
func Load(dir string) (map[string]*Detector, error) {
	out := map[string]*Detector{}
	entries, err := fs.ReadDir(builtin, "manifests")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		data, err := fs.ReadFile(builtin, "manifests/"+e.Name())
		if err != nil {
			return nil, err
		}
		d, err := Parse(data)
		if err != nil {
			return nil, fmt.Errorf("built-in manifest %s: %w", e.Name(), err)
		}
		out[d.Agent()] = d
	}
	if dir == "" {
		return out, nil
	}
	overrides, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading screen manifests in %s: %w", dir, err)
	}
	for _, e := range overrides {
		label, ok := strings.CutSuffix(e.Name(), ".toml")
		if !ok || e.IsDir() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		d, err := Parse(data)
		if err != nil {
			return nil, fmt.Errorf("screen manifest %s: %w", path, err)
		}
		out[label] = d
	}
	return out, nil
}
