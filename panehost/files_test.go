package panehost

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
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

// TestFileReadThroughThePaneHost: fleetd.file.read answers what
// memberfs.ReadFileWithin does, its refusals arriving as the same errors on
// the controllers' side; a link is not followed, even one that stays
// within.
func TestFileReadThroughThePaneHost(t *testing.T) {
	h := startPaneHost(t)
	root, _ := workspace(t)
	remote := Remote{Client: h.client(t, h.ca, memberUID)}
	ctx := context.Background()
	if got, err := remote.ReadFile(ctx, root, "shot.png", 64); err != nil || string(got) != "picture" {
		t.Errorf("ReadFile(shot.png) = %q, %v", got, err)
	}
	for path, want := range map[string]error{"../secret.png": ErrOutside, "escape.png": ErrNotRegular, "inside.png": ErrNotRegular, "big.png": ErrTooLarge, "sub": ErrNotRegular, "nothing.png": fs.ErrNotExist} {
		if _, err := remote.ReadFile(ctx, root, path, 64); !errors.Is(err, want) {
			t.Errorf("ReadFile(%s) = %v, want %v", path, err, want)
		}
	}
	if got, err := (Local{}).ReadFile(ctx, root, "sub/other.png", 64); err != nil || string(got) != "another" {
		t.Errorf("Local.ReadFile(sub/other.png) = %q, %v", got, err)
	}
	if _, err := (Local{}).ReadFile(ctx, root, "inside.png", 64); !errors.Is(err, ErrNotRegular) {
		t.Errorf("Local.ReadFile(inside.png), a link = %v, want %v", err, ErrNotRegular)
	}
}

// TestMemberFilesNeverHangThePaneHost: what a member leaves where the pane
// host reads (a FIFO as an image or as its hook record, a sparse file of
// 256 MiB as its hook record) is refused at once, without a reader left
// blocked on the FIFO and without the pane host reading the sparse file.
func TestMemberFilesNeverHangThePaneHost(t *testing.T) {
	h := startPaneHost(t)
	root, _ := workspace(t)
	image := filepath.Join(root, "fifo.png")
	record := filepath.Join(h.agent, "hook-status.json")
	if err := os.MkdirAll(h.agent, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, fifo := range []string{image, record} {
		if err := unix.Mkfifo(fifo, 0o644); err != nil {
			t.Fatal(err)
		}
		// Should a reader block, it is let go before the pane host closes.
		t.Cleanup(func() {
			if fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
				_ = unix.Close(fd)
			}
		})
	}
	remote := Remote{Client: h.client(t, h.ca, memberUID)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const n = 20
	errs := make(chan error, n)
	for range n {
		go func() { _, err := remote.ReadFile(ctx, root, "fifo.png", 64); errs <- err }()
	}
	for range n {
		if err := <-errs; !errors.Is(err, ErrNotRegular) {
			t.Errorf("sending a FIFO as an image = %v, want %v", err, ErrNotRegular)
		}
	}
	if _, err := (Local{}).ReadFile(ctx, root, "fifo.png", 64); !errors.Is(err, ErrNotRegular) {
		t.Errorf("Local: sending a FIFO as an image = %v, want %v", err, ErrNotRegular)
	}
	o, err := remote.Observe(ctx, fleetv1alpha1.AgentClaude, h.agent, fleetv1alpha1.TranscriptCursor{})
	if err != nil || o.Hooks != nil || o.Error == "" {
		t.Errorf("observing a FIFO as the hook record = %+v, %v; want the record refused", o, err)
	}
	for _, fifo := range []string{image, record} {
		// With no reader, opening a FIFO to write without blocking fails.
		fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK, 0)
		if err == nil {
			_ = unix.Close(fd)
		}
		if err != unix.ENXIO {
			t.Errorf("opening %s to write = %v, want ENXIO: a reader still holds it", filepath.Base(fifo), err)
		}
	}

	if err := os.Remove(record); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(record)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(256 << 20); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	o, err = (Local{}).Observe(ctx, fleetv1alpha1.AgentClaude, h.agent, fleetv1alpha1.TranscriptCursor{})
	runtime.ReadMemStats(&after)
	if err != nil || o.Hooks != nil || !strings.Contains(o.Error, ErrTooLarge.Error()) {
		t.Errorf("observing a sparse 256 MiB hook record = %+v, %v; want it refused as too large", o, err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Errorf("observing a sparse 256 MiB hook record allocated %d MiB", grew>>20)
	}
	if o, err := remote.Observe(ctx, fleetv1alpha1.AgentClaude, h.agent, fleetv1alpha1.TranscriptCursor{}); err != nil || !strings.Contains(o.Error, ErrTooLarge.Error()) {
		t.Errorf("through the pane host: %+v, %v; want it refused as too large", o, err)
	}
}
