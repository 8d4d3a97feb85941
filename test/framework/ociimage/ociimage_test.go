package ociimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

var epoch = time.Unix(1700000000, 0).UTC()

func tarEntries(t *testing.T, data []byte) []string {
	t.Helper()
	var out []string
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(epoch) || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: time %v, owner names %q %q: want the epoch and none", h.Name, h.ModTime, h.Uname, h.Gname)
		}
		out = append(out, h.Name)
	}
}

func TestWriteLayerTarIsReproducible(t *testing.T) {
	files := []File{
		{Path: "/usr/local/bin/scripted-agent", Data: []byte("b"), Mode: 0o755},
		{Path: "/fleetd", Data: []byte("a"), Mode: 0o755},
		{Path: "/home/agent", Mode: fs.ModeDir | 0o755, UID: 65532, GID: 65532},
	}
	var a, b bytes.Buffer
	if err := WriteLayerTar(&a, files, epoch); err != nil {
		t.Fatal(err)
	}
	reversed := []File{files[2], files[1], files[0]}
	if err := WriteLayerTar(&b, reversed, epoch); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("the same files in another order gave another tar")
	}
	want := []string{"fleetd", "home/", "home/agent/", "usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/scripted-agent"}
	if diff := cmp.Diff(want, tarEntries(t, a.Bytes())); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
}

func writeTar(t *testing.T, path string, entries []tar.Header, content map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		c := content[h.Name]
		h.Size = int64(len(c))
		h.ModTime = time.Now()
		h.Uname = "root"
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDiffRootfs(t *testing.T) {
	dir := t.TempDir()
	base, full, diff := filepath.Join(dir, "base.tar"), filepath.Join(dir, "full.tar"), filepath.Join(dir, "diff.tar")
	writeTar(t, base, []tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./dev/null", Typeflag: tar.TypeChar, Mode: 0o666},
		{Name: "./etc/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "./etc/hostname", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "./var/cache/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./var/cache/old", Typeflag: tar.TypeReg, Mode: 0o644},
	}, map[string]string{"./etc/passwd": "root", "./etc/hostname": "h", "./var/cache/old": "x"})
	writeTar(t, full, []tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./etc/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "./etc/hostname", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "./usr/bin/node", Typeflag: tar.TypeReg, Mode: 0o755},
		{Name: "./usr/bin/nodejs", Typeflag: tar.TypeLink, Linkname: "./usr/bin/node"},
	}, map[string]string{"./etc/passwd": "root\nagent", "./etc/hostname": "h", "./usr/bin/node": "elf"})
	if err := DiffRootfs(base, full, diff, epoch); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(diff)
	if err != nil {
		t.Fatal(err)
	}
	// The changed passwd, the new files, and a whiteout for the removed
	// directory alone; not the unchanged hostname, nor device nodes.
	want := []string{"etc/passwd", "usr/bin/node", "usr/bin/nodejs", "var/.wh.cache"}
	if diff := cmp.Diff(want, tarEntries(t, data)); diff != "" {
		t.Errorf("diff layer (-want +got):\n%s", diff)
	}
}

func TestBuildDigestIsReproducible(t *testing.T) {
	digest := func() v1.Hash {
		l, err := LayerFromFiles(t.TempDir(), "l", []File{{Path: "/pause", Data: []byte("binary"), Mode: 0o755}}, epoch)
		if err != nil {
			t.Fatal(err)
		}
		img, err := Build(Spec{Ref: PauseRef, Layers: []v1.Layer{l}, Config: v1.Config{Entrypoint: []string{"/pause"}}}, "amd64", epoch)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if a, b := digest(), digest(); a != b {
		t.Errorf("two builds of the same image: %s and %s", a, b)
	}
}

// TestPauseImageIsReproducible builds the pause image twice, from a fresh
// go build each time into another directory, and wants one digest: a
// layer built from binaries depends on nothing but the tree.
func TestPauseImageIsReproducible(t *testing.T) {
	root, err := filepath.Abs(repoRoot())
	if err != nil {
		t.Fatal(err)
	}
	build := func() v1.Hash {
		b, err := NewBuilder(root, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		d, err := b.Pause(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if a, b := build(), build(); a != b {
		t.Errorf("two builds of the pause image: %s and %s", a, b)
	}
}
