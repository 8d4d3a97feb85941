package agents

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/fleetd/fleetd/internal/memberfs"
)

// Install writes an agent's files and creates its working directory. A
// merged file keeps what the agent wrote into it since.
func Install(files []File, workingDir string) error {
	if err := os.MkdirAll(workingDir, 0o700); err != nil {
		return err
	}
	for _, f := range files {
		if err := os.MkdirAll(filepath.Dir(f.Path), 0o700); err != nil {
			return err
		}
		content := f.Content
		if f.Merge {
			merged, err := mergeJSONFile(f.Path, f.Content)
			if err != nil {
				return err
			}
			content = merged
		}
		if err := writeFileAtomic(f.Path, content); err != nil {
			return err
		}
	}
	return nil
}

// maxStateFile bounds an agent's own JSON state file that fleetd merges
// keys into: the agent (a member) writes it, and may write anything.
const maxStateFile = 16 << 20

// mergeJSONFile sets the keys of overlay, a JSON object, in the JSON object
// at path, recursively; the file's other keys stay. A missing or broken
// file, or something in its place that is not a file (which the write
// replaces), starts from nothing.
func mergeJSONFile(path string, overlay []byte) ([]byte, error) {
	var over map[string]any
	if err := json.Unmarshal(overlay, &over); err != nil {
		return nil, fmt.Errorf("merging into %s: %w", path, err)
	}
	base := map[string]any{}
	raw, err := memberfs.ReadFile(path, maxStateFile)
	switch {
	case err == nil:
		// An agent that left a broken file starts over from fleetd's keys.
		_ = json.Unmarshal(raw, &base)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, memberfs.ErrLink), errors.Is(err, memberfs.ErrNotRegular):
	default:
		return nil, err
	}
	return json.MarshalIndent(mergeObjects(base, over), "", "  ")
}

func mergeObjects(base, over map[string]any) map[string]any {
	if base == nil {
		base = map[string]any{}
	}
	for k, v := range over {
		if vo, ok := v.(map[string]any); ok {
			if bo, ok := base[k].(map[string]any); ok {
				base[k] = mergeObjects(bo, vo)
				continue
			}
		}
		base[k] = v
	}
	return base
}

// writeFileAtomic writes a private file by renaming a temporary one, so an
// agent reading it never sees half of it.
func writeFileAtomic(path string, content []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(content); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
