package paneserver

import (
	"bufio"
	"bytes"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fleetd/fleetd/internal/memberfs"
)

// A workspace's user is a user a person and a program can name: the
// server gives it a name, and each of its panes a view of the machine in
// which getpwuid(3) finds it. Where the server may make mount namespaces
// (CAP_SYS_ADMIN, as root), every pane's shell starts in a mount
// namespace of its own in which
//
//   - /etc/passwd and /etc/group are the machine's with the workspace's
//     user and group added, so whoami, id -un, Python's getpass, git and
//     ssh know the user; statically linked programs that read the files
//     themselves too. The machine's own files are never touched;
//   - /tmp is the user's own directory, so no member reaches for a name in
//     /tmp (a socket directory, a lock) that another member made first;
//     except where a path the pane needs (its working directory, its home,
//     the server's socket or binaries) lies in /tmp, which then stays the
//     machine's.
//
// The namespace, and its mounts, end with the last process in it: nothing
// is left mounted on the machine. Every pane's environment names the user
// (USER, LOGNAME) and its own temporary directory (TMPDIR), namespace or
// not. RemoveWorkspaceUser removes what the user had on the machine.

// Where a workspace user's files lie under UserOptions.HomeRoot: its home
// is <uid>; these directories, the server's own, hold the rest.
const (
	// tmpRoot holds each user's temporary directory, <uid>, its own.
	tmpRoot = ".tmp"
	// etcRoot holds each user's passwd and group files, <uid>/, the
	// server's, readable by the user's group alone.
	etcRoot = ".etc"
)

// maxUserName is the longest user name: utmp's, and useradd's.
const maxUserName = 32

// maxSystemUsers bounds what is read of the machine's passwd and group
// files.
const maxSystemUsers = 4 << 20

// userName is the name of the workspace labelled label: the Member's
// name for a fleetd workspace (fleetd:<namespace>/<member>:<uid>), else
// the label itself, made a valid user name (lower case letters, digits,
// '.', '_' and '-', starting with a letter or '_', at most 32 characters).
// A name the machine already has is prefixed fleetd-; a workspace with no
// label is fleetd-<uid>.
func userName(label string, uid uint32, taken func(string) bool) string {
	base := label
	if rest, ok := strings.CutPrefix(label, "fleetd:"); ok {
		if nsName, _, ok := strings.Cut(rest, ":"); ok {
			if _, name, ok := strings.Cut(nsName, "/"); ok {
				base = name
			}
		}
	}
	var b strings.Builder
	for _, r := range strings.ToLower(base) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	name := strings.Trim(b.String(), "-.")
	if name == "" {
		return "fleetd-" + strconv.FormatUint(uint64(uid), 10)
	}
	if c := name[0]; c < 'a' && c != '_' || c > 'z' || taken(name) {
		name = "fleetd-" + name
	}
	if len(name) > maxUserName {
		h := fnv.New32a()
		_, _ = h.Write([]byte(label))
		name = fmt.Sprintf("%s-%08x", strings.TrimRight(name[:maxUserName-9], "-."), h.Sum32())
	}
	return name
}

// systemNames lists the user and group names in the machine's passwd and
// group files.
func systemNames() map[string]bool {
	names := map[string]bool{}
	for _, path := range []string{"/etc/passwd", "/etc/group"} {
		raw, err := memberfs.ReadFile(path, maxSystemUsers)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(raw))
		for sc.Scan() {
			if name, _, ok := strings.Cut(sc.Text(), ":"); ok && name != "" {
				names[name] = true
			}
		}
	}
	return names
}

// writeUserFiles writes u's passwd and group files: the machine's with
// u's entry added, in a directory of the server's that only u's group may
// enter. Each is replaced whole, so a pane already running keeps the one
// it has.
func writeUserFiles(u workspaceUser, shell string) error {
	if err := os.MkdirAll(filepath.Dir(u.etc), 0o711); err != nil {
		return err
	}
	if err := os.Mkdir(u.etc, 0o750); err != nil && !os.IsExist(err) {
		return err
	}
	if err := os.Lchown(u.etc, 0, int(u.uid)); err != nil {
		return err
	}
	if err := os.Chmod(u.etc, 0o750); err != nil {
		return err
	}
	passwd := fmt.Sprintf("%s:x:%d:%d:%s:%s:%s\n", u.name, u.uid, u.uid, u.name, u.home, shell)
	group := fmt.Sprintf("%s:x:%d:\n", u.name, u.uid)
	for file, entry := range map[string]string{"passwd": passwd, "group": group} {
		system, err := memberfs.ReadFile("/etc/"+file, maxSystemUsers)
		if err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("reading the machine's %s: %w", file, err)
		}
		if len(system) > 0 && system[len(system)-1] != '\n' {
			system = append(system, '\n')
		}
		if err := replaceFile(filepath.Join(u.etc, file), append(system, entry...)); err != nil {
			return err
		}
	}
	return nil
}

// replaceFile writes content to a new file and renames it over path.
func replaceFile(path string, content []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := io.Copy(f, bytes.NewReader(content)); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// makeOwnDir makes dir a directory of uid's own, mode 0700, in a parent
// of the server's (mode 0711, created when missing).
func makeOwnDir(dir string, uid uint32) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	// Whatever was there is the user's: a directory made in an earlier
	// run may be owned by nobody else.
	if err := os.Lchown(dir, int(uid), int(uid)); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// underTmp reports whether any of paths is /tmp or lies in it.
func underTmp(paths ...string) bool {
	for _, p := range paths {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return true
		}
		for _, q := range []string{abs, resolved(abs)} {
			if q == "/tmp" || strings.HasPrefix(q, "/tmp/") {
				return true
			}
		}
	}
	return false
}

func resolved(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}
