package panehost

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// workspace lays out a member's working directory: a file in it, a link
// that stays in it, links that lead out, a directory, and a file outside.
func workspace(t *testing.T) (root, outside string) {
	t.Helper()
	dir := t.TempDir()
	root = filepath.Join(dir, "work")
	outside = filepath.Join(dir, "secret.png")
	for path, content := range map[string]string{
		filepath.Join(root, "shot.png"):         "picture",
		filepath.Join(root, "sub", "other.png"): "another",
		filepath.Join(root, "big.png"):          strings.Repeat("x", 100),
		outside:                                 "not yours",
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"inside.png": "sub/other.png", "escape.png": "../secret.png", "absolute.png": outside, "up": "..",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return root, outside
}

func TestReadWithin(t *testing.T) {
	root, outside := workspace(t)
	cases := map[string]struct {
		path    string
		want    string
		wantErr error
	}{
		"relative":                        {path: "shot.png", want: "picture"},
		"absolute within":                 {path: filepath.Join(root, "sub", "other.png"), want: "another"},
		"a link that stays within":        {path: "inside.png", want: "another"},
		"up by name":                      {path: "../secret.png", wantErr: ErrOutside},
		"absolute outside":                {path: outside, wantErr: ErrOutside},
		"a link that leads out":           {path: "escape.png", wantErr: ErrOutside},
		"an absolute link that leads out": {path: "absolute.png", wantErr: ErrOutside},
		"through a linked parent":         {path: "up/secret.png", wantErr: ErrOutside},
		"too large":                       {path: "big.png", wantErr: ErrTooLarge},
		"a directory":                     {path: "sub", wantErr: ErrNotRegular},
		"missing":                         {path: "nothing.png", wantErr: fs.ErrNotExist},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ReadWithin(root, tc.path, 64)
			if !errors.Is(err, tc.wantErr) || string(got) != tc.want {
				t.Errorf("ReadWithin(%q) = %q, %v; want %q, %v", tc.path, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestFileReadThroughThePaneHost: fleetd.file.read answers what ReadWithin
// does, its refusals arriving as the same errors on the controllers' side.
func TestFileReadThroughThePaneHost(t *testing.T) {
	h := startPaneHost(t)
	root, _ := workspace(t)
	remote := Remote{Client: h.client(t, h.ca, memberUID)}
	ctx := context.Background()
	if got, err := remote.ReadFile(ctx, root, "shot.png", 64); err != nil || string(got) != "picture" {
		t.Errorf("ReadFile(shot.png) = %q, %v", got, err)
	}
	for path, want := range map[string]error{"escape.png": ErrOutside, "big.png": ErrTooLarge, "sub": ErrNotRegular, "nothing.png": fs.ErrNotExist} {
		if _, err := remote.ReadFile(ctx, root, path, 64); !errors.Is(err, want) {
			t.Errorf("ReadFile(%s) = %v, want %v", path, err, want)
		}
	}
	if got, err := (Local{}).ReadFile(ctx, root, "inside.png", 64); err != nil || string(got) != "another" {
		t.Errorf("Local.ReadFile(inside.png) = %q, %v", got, err)
	}
}
