package memberfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tree lays out a member's directory: files, a directory, links that stay
// within and that lead out, a FIFO, a socket, a sparse file of a terabyte,
// and a file outside.
func tree(t *testing.T) (root, outside string) {
	t.Helper()
	dir := t.TempDir()
	// Other users read here too.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root = filepath.Join(dir, "work")
	outside = filepath.Join(dir, "secret")
	for path, content := range map[string]string{
		filepath.Join(root, "small"):        "hello",
		filepath.Join(root, "sub", "other"): "another",
		filepath.Join(root, "big"):          strings.Repeat("x", 100),
		outside:                             "not yours",
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"inside": "sub/other", "escape": "../secret", "absolute": outside, "up": "..", "linkdir": "sub",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	huge, err := os.Create(filepath.Join(root, "huge"))
	if err != nil {
		t.Fatal(err)
	}
	if err := huge.Truncate(1 << 40); err != nil {
		t.Fatal(err)
	}
	_ = huge.Close()
	return root, outside
}

func TestReadFileWithin(t *testing.T) {
	root, outside := tree(t)
	cases := map[string]struct {
		path    string
		want    string
		wantErr error
	}{
		"relative":                       {path: "small", want: "hello"},
		"absolute within":                {path: filepath.Join(root, "sub", "other"), want: "another"},
		"up by name":                     {path: "../secret", wantErr: ErrOutside},
		"absolute outside":               {path: outside, wantErr: ErrOutside},
		"a link that stays within":       {path: "inside", wantErr: ErrLink},
		"a link that leads out":          {path: "escape", wantErr: ErrLink},
		"an absolute link":               {path: "absolute", wantErr: ErrLink},
		"through a linked parent":        {path: "up/secret", wantErr: ErrLink},
		"through a linked directory":     {path: "linkdir/other", wantErr: ErrLink},
		"too large":                      {path: "big", wantErr: ErrTooLarge},
		"a sparse terabyte":              {path: "huge", wantErr: ErrTooLarge},
		"a directory":                    {path: "sub", wantErr: ErrNotRegular},
		"the root itself":                {path: ".", wantErr: ErrNotRegular},
		"a FIFO":                         {path: "fifo", wantErr: ErrNotRegular},
		"through a file as if a dir":     {path: "small/x", wantErr: ErrNotRegular},
		"missing":                        {path: "nothing", wantErr: fs.ErrNotExist},
		"missing beneath a missing dir":  {path: "no/such", wantErr: fs.ErrNotExist},
		"absolute within, cleaned first": {path: filepath.Join(root, "sub", "..", "small"), want: "hello"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ReadFileWithin(root, tc.path, 64)
			if !errors.Is(err, tc.wantErr) || string(got) != tc.want {
				t.Errorf("ReadFileWithin(%q) = %q, %v; want %q, %v", tc.path, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestReadFile(t *testing.T) {
	root, _ := tree(t)
	if got, err := ReadFile(filepath.Join(root, "small"), 64); err != nil || string(got) != "hello" {
		t.Errorf("ReadFile(small) = %q, %v", got, err)
	}
	for name, want := range map[string]error{"inside": ErrLink, "fifo": ErrNotRegular, "huge": ErrTooLarge, "big": ErrTooLarge, "nothing": fs.ErrNotExist} {
		if _, err := ReadFile(filepath.Join(root, name), 64); !errors.Is(err, want) {
			t.Errorf("ReadFile(%s) = %v, want %v", name, err, want)
		}
	}
}

func TestReadTailWithin(t *testing.T) {
	root, _ := tree(t)
	if err := os.WriteFile(filepath.Join(root, "log"), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	for n, want := range map[int64]string{4: "6789", 10: "0123456789", 64: "0123456789"} {
		if got, err := ReadTailWithin(root, "log", n); err != nil || string(got) != want {
			t.Errorf("ReadTailWithin(log, %d) = %q, %v; want %q", n, got, err, want)
		}
	}
	if got, err := ReadTailWithin(root, "huge", 16); err != nil || len(got) != 16 {
		t.Errorf("the tail of a sparse terabyte = %d bytes, %v; want 16", len(got), err)
	}
	for name, want := range map[string]error{"inside": ErrLink, "fifo": ErrNotRegular, "../secret": ErrOutside} {
		if _, err := ReadTailWithin(root, name, 16); !errors.Is(err, want) {
			t.Errorf("ReadTailWithin(%s) = %v, want %v", name, err, want)
		}
	}
}

func TestReadRangeWithin(t *testing.T) {
	root, _ := tree(t)
	if err := os.WriteFile(filepath.Join(root, "log"), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		offset, n int64
		want      string
	}{
		"from the start":   {0, 4, "0123"},
		"from the middle":  {6, 64, "6789"},
		"at the end":       {10, 64, ""},
		"past the end":     {99, 64, ""},
		"a bounded middle": {2, 3, "234"},
	}
	for name, tc := range cases {
		got, size, err := ReadRangeWithin(root, "log", tc.offset, tc.n)
		if err != nil || string(got) != tc.want || size != 10 {
			t.Errorf("%s: ReadRangeWithin(log, %d, %d) = %q, %d, %v; want %q, 10", name, tc.offset, tc.n, got, size, err, tc.want)
		}
	}
	if got, size, err := ReadRangeWithin(root, "huge", 1<<39, 16); err != nil || len(got) != 16 || size != 1<<40 {
		t.Errorf("16 bytes in the middle of a sparse terabyte = %d bytes of %d, %v; want 16 of %d", len(got), size, err, int64(1<<40))
	}
	for name, want := range map[string]error{"inside": ErrLink, "fifo": ErrNotRegular, "../secret": ErrOutside} {
		if _, _, err := ReadRangeWithin(root, name, 0, 16); !errors.Is(err, want) {
			t.Errorf("ReadRangeWithin(%s) = %v, want %v", name, err, want)
		}
	}
	if _, _, err := ReadRangeWithin(root, "log", -1, 16); err == nil {
		t.Error("a negative offset was read")
	}
}

// TestFIFOsNeverBlock: many reads of a FIFO at once all end, and none of
// them is left holding it open (a writer finds no reader).
func TestFIFOsNeverBlock(t *testing.T) {
	root, _ := tree(t)
	fifo := filepath.Join(root, "fifo")
	const n = 20
	errs := make(chan error, n)
	for range n {
		go func() { _, err := ReadFileWithin(root, "fifo", 64); errs <- err }()
	}
	deadline := time.After(30 * time.Second)
	for range n {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrNotRegular) {
				t.Errorf("reading a FIFO = %v, want %v", err, ErrNotRegular)
			}
		case <-deadline:
			unblock(fifo)
			t.Fatal("reads of a FIFO are still blocked after 30s")
		}
	}
	// With no reader, opening a FIFO to write without blocking fails.
	fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK, 0)
	if err == nil {
		_ = unix.Close(fd)
		t.Fatal("a reader still holds the FIFO open")
	}
	if err != unix.ENXIO {
		t.Fatalf("opening the FIFO to write = %v, want ENXIO (no reader)", err)
	}
}

// unblock opens fifo for writing, releasing readers blocked in open.
func unblock(fifo string) {
	if fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
		_ = unix.Close(fd)
	}
}

// TestReadsInFlightPerUser: of many reads of one user's files at once, at
// most MaxInFlight are under way; the rest are refused, not queued, and
// another user's reads are not held up by them.
func TestReadsInFlightPerUser(t *testing.T) {
	root, _ := tree(t)
	release := make(chan struct{})
	var mu sync.Mutex
	under := 0
	entered := make(chan struct{}, 100)
	whileReading = func() {
		if fsUID() != Self() {
			return
		}
		mu.Lock()
		under++
		mu.Unlock()
		entered <- struct{}{}
		<-release
		mu.Lock()
		under--
		mu.Unlock()
	}
	t.Cleanup(func() { whileReading = func() {} })

	const n = 100
	errs := make(chan error, n)
	for range n {
		go func() { _, err := ReadFileWithin(root, "small", 64); errs <- err }()
	}
	busy := 0
	for range n - MaxInFlight {
		if err := <-errs; !errors.Is(err, ErrBusy) {
			t.Fatalf("a read beyond the bound = %v, want %v", err, ErrBusy)
		}
		busy++
	}
	for range MaxInFlight {
		<-entered
	}
	mu.Lock()
	if under != MaxInFlight {
		t.Errorf("%d reads under way at once, want %d", under, MaxInFlight)
	}
	mu.Unlock()

	if os.Geteuid() == 0 && runtime.GOOS == "linux" {
		// Another user's read goes ahead.
		err := As(65534, func() error {
			_, err := ReadFileWithin(root, "small", 64)
			return err
		})
		if err != nil {
			t.Errorf("another user's read while this one's are all taken = %v", err)
		}
	}
	close(release)
	for range MaxInFlight {
		if err := <-errs; err != nil {
			t.Errorf("a read within the bound = %v", err)
		}
	}
	if _, err := ReadFileWithin(root, "small", 64); err != nil {
		t.Errorf("a read once the others ended = %v", err)
	}
}

func TestReadPrivateFile(t *testing.T) {
	root, _ := tree(t)
	path := filepath.Join(root, "state")
	if err := os.WriteFile(path, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadPrivateFile(path, 64); err != nil || string(got) != "mine" {
		t.Fatalf("ReadPrivateFile(0600, own) = %q, %v", got, err)
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o660} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadPrivateFile(path, 64); !errors.Is(err, ErrNotPrivate) {
			t.Errorf("ReadPrivateFile(mode %#o) = %v, want %v", mode, err, ErrNotPrivate)
		}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(path, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadPrivateFile(path, 64); !errors.Is(err, ErrNotPrivate) {
			t.Errorf("ReadPrivateFile(another user's) = %v, want %v", err, ErrNotPrivate)
		}
	}
	if _, err := ReadPrivateFile(filepath.Join(root, "inside"), 64); !errors.Is(err, ErrLink) {
		t.Errorf("ReadPrivateFile(a link) = %v, want %v", err, ErrLink)
	}
}

// TestAsDropsSupplementaryGroups: reading as a member, a file of a group
// the process has (root's, mode 0640) is not readable: the member is not
// in that group.
func TestAsDropsSupplementaryGroups(t *testing.T) {
	if os.Geteuid() != 0 || runtime.GOOS != "linux" {
		t.Skip("needs root on Linux")
	}
	groups, err := os.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) == 0 {
		// Give the whole process a group, as a pane server may have.
		if err := syscall.Setgroups([]int{4243}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Setgroups(nil) })
		groups = []int{4243}
	}
	root, _ := tree(t)
	path := filepath.Join(root, "group-only")
	if err := os.WriteFile(path, []byte("root's group"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, 0, groups[0]); err != nil {
		t.Fatal(err)
	}
	err = As(65534, func() error {
		_, err := ReadFile(path, 64)
		return err
	})
	if !errors.Is(err, fs.ErrPermission) {
		t.Errorf("reading a 0640 file of group %d as a member = %v, want %v", groups[0], err, fs.ErrPermission)
	}
}

// TestRemoveTreeFollowsNoLink removes a member's tree with links that lead
// out of it, to a file and to a directory: what they name survives.
func TestRemoveTreeFollowsNoLink(t *testing.T) {
	root, outside := tree(t)
	outsideDir := filepath.Join(filepath.Dir(root), "elsewhere")
	if err := os.MkdirAll(filepath.Join(outsideDir, "keep"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outsideDir, filepath.Join(root, "sub", "dirlink")); err != nil {
		t.Fatal(err)
	}
	if err := RemoveTree(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(root); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the tree is still there: %v", err)
	}
	for _, kept := range []string{outside, filepath.Join(outsideDir, "keep")} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("%s, named by a link in the tree: %v", kept, err)
		}
	}
	if err := RemoveTree(root); err != nil {
		t.Errorf("removing it again: %v, want nothing to do", err)
	}
}

// TestRemoveTreeNeedsAPrivateParent refuses a tree whose parent others may
// write (the member could swap the tree for a link), or that is a link.
func TestRemoveTreeNeedsAPrivateParent(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	if err := os.MkdirAll(filepath.Join(open, "tree"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := RemoveTree(filepath.Join(open, "tree")); !errors.Is(err, ErrNotPrivate) {
		t.Errorf("a tree in a directory anyone writes: %v, want %v", err, ErrNotPrivate)
	}
	if _, err := os.Stat(filepath.Join(open, "tree")); err != nil {
		t.Errorf("the refused tree: %v", err)
	}
	if err := RemoveTree("relative/tree"); err == nil {
		t.Error("a relative path was removed")
	}
}
