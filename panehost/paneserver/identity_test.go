package paneserver_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

// outsideTmp is a directory for a server whose panes get a /tmp of their
// own: nothing a pane needs may lie in the machine's /tmp.
func outsideTmp(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "hd")
	if err != nil {
		t.Skipf("no directory outside /tmp: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	// The workspaces' users reach their homes through it.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// usersHarness is a harness whose workspaces run as users of their own,
// with everything the panes need in dir.
func usersHarness(t *testing.T, dir string) *harness {
	t.Helper()
	if !paneserver.CanSwitchUsers() {
		t.Skip("needs root, or CAP_SETUID and CAP_SETGID")
	}
	return newHarness(t, func(o *paneserver.Options) {
		o.SocketPath = filepath.Join(dir, "herdr.sock")
		o.Cwd = dir
		o.BinPath = filepath.Join(dir, "herdr")
		o.Users = &paneserver.UserOptions{HomeRoot: filepath.Join(dir, "users")}
	})
}

// TestMemberUserHasAName runs what a person and an agent's tools ask of
// their user in a member's pane (whoami, id -un, Python's getpass, git
// commit): each knows the member's name, with no entry in the machine's
// passwd file. The pane's /tmp is the member's own.
func TestMemberUserHasAName(t *testing.T) {
	dir := outsideTmp(t)
	h := usersHarness(t, dir)
	if !paneserver.CanMakeNamespaces() {
		t.Skip("needs CAP_SYS_ADMIN for mount namespaces")
	}
	python, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		t.Skip("no python3 for every user")
	}
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	const label = "fleetd:team/reviewer:0b1c"
	ws := h.workspace(herdr.WorkspaceCreateParams{Label: label, Env: map[string]string{
		"GIT_AUTHOR_NAME": "Rita Reviewer", "GIT_AUTHOR_EMAIL": "rita@example.com",
		"GIT_COMMITTER_NAME": "Rita Reviewer", "GIT_COMMITTER_EMAIL": "rita@example.com",
	}})
	pane := ws.RootPane.PaneID
	uid, _, err := h.srv.WorkspaceUser(label)
	if err != nil {
		t.Fatal(err)
	}

	h.run(pane, fmt.Sprintf(`echo "who=$(whoami) id=$(id -un) group=$(id -gn) py=$(%s -c 'import getpass; print(getpass.getuser())') user=$USER logname=$LOGNAME tmp=$TMPDIR"`, python))
	h.waitLine(pane, "who=reviewer id=reviewer group=reviewer py=reviewer user=reviewer logname=reviewer tmp=/tmp")

	h.run(pane, fmt.Sprintf(`cd && %[1]s init -q repo && cd repo && echo x > f && %[1]s add f && %[1]s commit -qm first && %[1]s log -1 --format='author=%%an <%%ae>'`, git))
	h.waitLine(pane, "author=Rita Reviewer <rita@example.com>")

	// Its /tmp is its own directory, not the machine's.
	h.run(pane, "touch /tmp/fleetd-mark && echo marked")
	h.waitLine(pane, "marked")
	own := filepath.Join(dir, "users", ".tmp", strconv.FormatUint(uint64(uid), 10))
	if _, err := os.Stat(filepath.Join(own, "fleetd-mark")); err != nil {
		t.Errorf("the member's own /tmp: %v", err)
	}
	if _, err := os.Stat("/tmp/fleetd-mark"); !errors.Is(err, fs.ErrNotExist) {
		_ = os.Remove("/tmp/fleetd-mark")
		t.Errorf("the member wrote in the machine's /tmp (%v)", err)
	}
	// The machine's passwd file does not know the user.
	if raw, err := os.ReadFile("/etc/passwd"); err != nil || containsLine(string(raw), "reviewer:") {
		t.Errorf("the machine's /etc/passwd names the member's user (%v)", err)
	}
}

func containsLine(text, prefix string) bool {
	return slices.ContainsFunc(strings.Split(text, "\n"), func(l string) bool { return strings.HasPrefix(l, prefix) })
}

// TestRemoveWorkspaceUser: once its workspace is closed, what a member's
// user had is gone (its home, its temporary directory, its passwd files, a
// process that left its pane's session), and a link it left in its home
// took nothing of anyone else's with it.
func TestRemoveWorkspaceUser(t *testing.T) {
	dir := outsideTmp(t)
	h := usersHarness(t, dir)
	const label = "fleetd:team/leaver:9f9f"
	ws := h.workspace(herdr.WorkspaceCreateParams{Label: label})
	pane := ws.RootPane.PaneID
	uid, _, err := h.srv.WorkspaceUser(label)
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(dir, "precious")
	if err := os.WriteFile(outside, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A process that leaves the pane's session, as one escaping it would.
	h.run(pane, fmt.Sprintf("ln -s %s ~/link && mkdir ~/sub && ln -s %s ~/sub/up && echo x > $TMPDIR/scratch && echo started", outside, dir))
	h.waitLine(pane, "started")
	h.run(pane, `setsid sh -c 'echo $$ > ~/escaped.tmp && mv ~/escaped.tmp ~/escaped && exec sleep 600' </dev/null >/dev/null 2>&1 &`)
	id := strconv.FormatUint(uint64(uid), 10)
	var escaped int
	testutil.Eventually(t, "the escaped process to run", func() error {
		raw, err := os.ReadFile(filepath.Join(dir, "users", id, "escaped"))
		if err != nil {
			return err
		}
		escaped, err = strconv.Atoi(strings.TrimSpace(string(raw)))
		return err
	})

	if err := h.srv.RemoveWorkspaceUser(label); err == nil {
		t.Fatal("removed the user of an open workspace")
	}
	if err := h.client.WorkspaceClose(t.Context(), ws.Workspace.WorkspaceID); err != nil {
		t.Fatal(err)
	}
	// Closing the user's last pane already ends its processes (the
	// sweeper, TestMemberProcessesEndWithItsLastPane's concern); removing the
	// user must leave none either way.
	if err := h.srv.RemoveWorkspaceUser(label); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{filepath.Join(dir, "users", id), filepath.Join(dir, "users", ".tmp", id), filepath.Join(dir, "users", ".etc", id)} {
		if _, err := os.Lstat(gone); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there (%v)", gone, err)
		}
	}
	if alive(escaped) {
		t.Errorf("process %d of user %d still runs", escaped, uid)
	}
	if raw, err := os.ReadFile(outside); err != nil || string(raw) != "keep" {
		t.Errorf("the file a link in the home named: %q, %v", raw, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "herdr.sock")); err != nil {
		t.Errorf("the directory a link in the home named: %v", err)
	}
}

// alive reports whether process pid runs (a zombie has ended).
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i > 0 && !strings.HasPrefix(string(stat[i+1:]), " Z")
}
