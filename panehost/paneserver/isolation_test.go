//go:build linux

package paneserver_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

// newUsersHarness is a harness whose workspaces each run as a Unix user
// of their own, with their homes under the returned root.
func newUsersHarness(t *testing.T) (*harness, string) {
	t.Helper()
	if !paneserver.CanSwitchUsers() {
		t.Skip("needs root, or CAP_SETUID and CAP_SETGID")
	}
	var homes string
	h := newHarness(t, func(o *paneserver.Options) {
		if err := os.Chmod(o.Cwd, 0o755); err != nil {
			t.Fatal(err)
		}
		homes = filepath.Join(o.Cwd, "users")
		o.Users = &paneserver.UserOptions{HomeRoot: homes}
	})
	return h, homes
}

// member creates a workspace labelled label and returns its pane and the
// home of its user.
func (h *harness) member(homes, label string) (paneID, home string) {
	h.t.Helper()
	ws := h.workspace(herdr.WorkspaceCreateParams{Label: label})
	uid, _, err := h.srv.WorkspaceUser(label)
	if err != nil {
		h.t.Fatal(err)
	}
	return ws.RootPane.PaneID, filepath.Join(homes, strconv.FormatUint(uint64(uid), 10))
}

// lineWith polls the pane until a line starts with prefix and returns it.
func (h *harness) lineWith(paneID, prefix string) string {
	h.t.Helper()
	var found string
	testutil.Eventually(h.t, fmt.Sprintf("pane %s shows a line starting %q", paneID, prefix), func() error {
		read, err := h.client.PaneRead(h.t.Context(), herdr.ReadParams{PaneID: paneID, Source: herdr.ReadSourceRecentUnwrapped, Lines: ptr(1000)})
		if err != nil {
			return err
		}
		for line := range strings.SplitSeq(read.Text, "\n") {
			if strings.HasPrefix(line, prefix) {
				found = line
				return nil
			}
		}
		return fmt.Errorf("pane shows:\n%s", read.Text)
	}, testutil.Within(waitFor))
	return found
}

// pidIn waits for a process id a pane wrote to file and returns it.
func pidIn(t *testing.T, file string) int {
	t.Helper()
	var pid int
	testutil.Eventually(t, "a process id in "+file, func() error {
		raw, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		if pid, err = strconv.Atoi(strings.TrimSpace(string(raw))); err != nil {
			return fmt.Errorf("%s holds %q", file, raw)
		}
		return nil
	}, testutil.Within(waitFor))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// running reports whether pid is a process that has not exited (a zombie
// has).
func running(pid int) bool {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	end := strings.LastIndexByte(string(raw), ')')
	fields := strings.Fields(string(raw[end+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// TestPanesRunWithoutNewPrivileges: every pane's process tree has
// no_new_privs, so a set-user-id program runs with the member's rights,
// not its owner's.
func TestPanesRunWithoutNewPrivileges(t *testing.T) {
	t.Run("server's own user", func(t *testing.T) {
		h := newHarness(t)
		pane := h.pane()
		h.run(pane, `awk '/^NoNewPrivs:/ { print "nnp=" $2 }' /proc/self/status`)
		if got := h.lineWith(pane, "nnp="); got != "nnp=1" {
			t.Errorf("the pane's NoNewPrivs: %s, want nnp=1", got)
		}
	})
	t.Run("member's user", func(t *testing.T) {
		h, homes := newUsersHarness(t)
		pane, _ := h.member(homes, "fleetd:ns/a:1")
		uid, _, _ := h.srv.WorkspaceUser("fleetd:ns/a:1")
		// A set-user-id root copy of id(1), as mount or su would be.
		suid := filepath.Join(h.dir, "suid-id")
		copyExecutable(t, "/usr/bin/id", suid)
		if err := os.Chmod(suid, 0o4755|os.ModeSetuid); err != nil {
			t.Fatal(err)
		}
		var fs unix.Statfs_t
		if err := unix.Statfs(suid, &fs); err != nil || fs.Flags&unix.ST_NOSUID != 0 {
			t.Skipf("%s is on a nosuid mount (%v)", suid, err)
		}
		h.run(pane, `echo euid=$(`+suid+` -u)`)
		if got, want := h.lineWith(pane, "euid="), fmt.Sprintf("euid=%d", uid); got != want {
			t.Errorf("a set-user-id root program in member a's pane runs with %s, want %s", got, want)
		}
	})
}

func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Skipf("no %s: %v", from, err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestMemberProcessesEndWithItsLastPane: processes a member started in
// sessions of their own (setsid), out of its pane's reach, end when the
// member's pane is closed, whether they left its terminal or hold it
// open; another member's processes run on.
func TestMemberProcessesEndWithItsLastPane(t *testing.T) {
	h, homes := newUsersHarness(t)
	paneA, homeA := h.member(homes, "fleetd:ns/a:1")
	paneB, homeB := h.member(homes, "fleetd:ns/b:1")
	h.run(paneA, `setsid sh -c 'echo $$ > "$HOME/detached"; exec sleep 1000' </dev/null >/dev/null 2>&1 &`)
	h.run(paneA, `setsid sh -c 'echo $$ > "$HOME/holding"; exec sleep 1000' &`)
	h.run(paneB, `sleep 1000 & echo $! > "$HOME/background"`)
	escaped := []int{pidIn(t, filepath.Join(homeA, "detached")), pidIn(t, filepath.Join(homeA, "holding"))}
	background := pidIn(t, filepath.Join(homeB, "background"))
	for _, pid := range append(escaped, background) {
		if !running(pid) {
			t.Fatalf("process %d is not running", pid)
		}
	}

	if err := h.client.PaneClose(t.Context(), paneA); err != nil {
		t.Fatal(err)
	}
	for _, pid := range escaped {
		testutil.Eventually(t, fmt.Sprintf("member a's escaped process %d to end with its pane", pid), func() error {
			if running(pid) {
				return errors.New("it still runs")
			}
			return nil
		}, testutil.Within(waitFor))
	}
	if !running(background) {
		t.Errorf("member b's process %d ended with member a's pane", background)
	}
}

// TestMembersSeeOnlyTheirOwnProcesses: a member's /proc shows its own
// processes, and neither another member's nor the server's: their command
// lines, environments and status cannot be read.
func TestMembersSeeOnlyTheirOwnProcesses(t *testing.T) {
	if !hasSysAdmin() {
		t.Skip("hiding processes needs CAP_SYS_ADMIN")
	}
	h, homes := newUsersHarness(t)
	paneA, _ := h.member(homes, "fleetd:ns/a:1")
	paneB, homeB := h.member(homes, "fleetd:ns/b:1")
	h.run(paneB, `echo $$ > "$HOME/pid"`)
	shellB := pidIn(t, filepath.Join(homeB, "pid"))

	for _, pid := range []int{shellB, os.Getpid()} {
		h.run(paneA, fmt.Sprintf(`for f in cmdline environ status; do cat /proc/%d/$f >/dev/null 2>&1 && echo "leak-$f"; done; echo checked-%d`, pid, pid))
		text := h.waitLine(paneA, fmt.Sprintf("checked-%d", pid))
		for line := range strings.SplitSeq(text, "\n") {
			if strings.HasPrefix(line, "leak-") {
				t.Errorf("member a read process %d's %s", pid, strings.TrimPrefix(line, "leak-"))
			}
		}
	}
	h.run(paneA, `cat /proc/$$/cmdline >/dev/null && echo own-visible`)
	h.waitLine(paneA, "own-visible")
}

func hasSysAdmin() bool {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if hex, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			return err == nil && caps&(1<<unix.CAP_SYS_ADMIN) != 0
		}
	}
	return false
}
