package paneserver_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

func TestPing(t *testing.T) {
	cases := map[string]struct {
		protocol int
		wantErr  error
	}{
		"herdr 0.8 protocol":           {protocol: 20},
		"herdr 0.9 protocol":           {protocol: 22},
		"older than fleetd works with": {protocol: 19, wantErr: herdr.ErrUnsupportedProtocol},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, func(o *paneserver.Options) { o.Protocol = tc.protocol })
			pong, err := h.client.Ping(t.Context())
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Ping() error = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil && pong.Protocol != tc.protocol {
				t.Errorf("Ping() protocol = %d, want %d", pong.Protocol, tc.protocol)
			}
		})
	}
}

func TestPingUnreachable(t *testing.T) {
	client := herdr.NewClient(filepath.Join(shortTempDir(t), "nobody.sock"))
	if _, err := client.Ping(t.Context()); !errors.Is(err, herdr.ErrUnavailable) {
		t.Errorf("Ping() of a missing socket = %v, want ErrUnavailable", err)
	}
}

func TestSocketIsPrivate(t *testing.T) {
	h := newHarness(t)
	info, err := os.Stat(h.opts.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Mode().Perm(); got != 0o600 {
		t.Errorf("socket mode = %o, want 600", got)
	}
	if _, err := h.client.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := paneserver.New(h.opts); err == nil {
		t.Error("a second server on a live socket started")
	}
}

func TestWorkspaceCreate(t *testing.T) {
	h := newHarness(t)
	cwd := filepath.Join(h.dir, "work")
	if err := os.Mkdir(cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	created := h.workspace(herdr.WorkspaceCreateParams{Cwd: cwd, Label: "member-a", Focus: true})

	want := &herdr.WorkspaceCreated{
		Workspace: herdr.WorkspaceInfo{
			WorkspaceID: "w1", Number: 1, Label: "member-a", Focused: true, PaneCount: 1, TabCount: 1,
			ActiveTabID: "w1:t1", AgentStatus: herdr.AgentStatusUnknown,
		},
		Tab: herdr.TabInfo{
			TabID: "w1:t1", WorkspaceID: "w1", Number: 1, Label: "1", Focused: true, PaneCount: 1,
			AgentStatus: herdr.AgentStatusUnknown,
		},
		RootPane: herdr.PaneInfo{
			PaneID: "w1:p1", WorkspaceID: "w1", TabID: "w1:t1", Focused: true,
			AgentStatus: herdr.AgentStatusUnknown, Cwd: &cwd,
		},
	}
	ignore := cmp.FilterPath(func(p cmp.Path) bool {
		name := p.Last().String()
		return name == ".TerminalID" || name == ".Revision"
	}, cmp.Ignore())
	if diff := cmp.Diff(want, created, ignore); diff != "" {
		t.Errorf("WorkspaceCreate() mismatch (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(created.RootPane.TerminalID, "term_") {
		t.Errorf("terminal id %q is not herdr's term_ form", created.RootPane.TerminalID)
	}

	h.run(created.RootPane.PaneID, `echo "cwd=[$(pwd)]"`)
	h.waitLine(created.RootPane.PaneID, "cwd=["+cwd+"]")

	second := h.workspace(herdr.WorkspaceCreateParams{})
	if second.Workspace.WorkspaceID != "w2" || second.RootPane.PaneID != "w2:p1" || second.Workspace.Focused {
		t.Errorf("second workspace = %+v, want unfocused w2 with pane w2:p1", second.Workspace)
	}
}

// TestPaneEnvironment checks what a pane's processes see: the caller's env,
// herdr's variables winning over it, and nothing else of the server's.
// TestPaneEnvironment checks herdr's rules for a pane's environment: the
// server's own environment is inherited, TERM and COLORTERM are set, the
// caller's env overrides both, CODEX_THREAD_ID is removed, and herdr's own
// variables win over everything.
func TestPaneEnvironment(t *testing.T) {
	t.Setenv("FLEETD_INHERIT_PROBE", "inherited")
	t.Setenv("FLEETD_OVERRIDE_PROBE", "server")
	t.Setenv("CODEX_THREAD_ID", "thread-of-the-server")
	h := newHarness(t)
	created := h.workspace(herdr.WorkspaceCreateParams{Env: map[string]string{
		"FLEET_MEMBER":          "alice",
		"FLEETD_OVERRIDE_PROBE": "caller",
		"HERDR_PANE_ID":         "spoofed",
		"PATH":                  "/custom/bin:/usr/bin:/bin",
	}})
	pane := created.RootPane.PaneID
	h.run(pane, `echo "inherit=[${FLEETD_INHERIT_PROBE-unset}] override=[$FLEETD_OVERRIDE_PROBE] thread=[${CODEX_THREAD_ID-unset}] member=[$FLEET_MEMBER] pane=[$HERDR_PANE_ID] ws=[$HERDR_WORKSPACE_ID] tab=[$HERDR_TAB_ID] env=[$HERDR_ENV] path=[$PATH]"`)
	h.waitLine(pane, "inherit=[inherited] override=[caller] thread=[unset] member=[alice] pane=[w1:p1] ws=[w1] tab=[w1:t1] env=[1] path=[/custom/bin:/usr/bin:/bin]")

	h.run(pane, `echo "sock=[$HERDR_SOCKET_PATH] bin=[${HERDR_BIN_PATH:+set}] term=[$TERM] color=[$COLORTERM]"`)
	h.waitLine(pane, "sock=["+h.opts.SocketPath+"] bin=[set] term=[xterm-256color] color=[truecolor]")
}

func (h *harness) waitLineMatching(paneID string, re *regexp.Regexp) string {
	h.t.Helper()
	var found string
	testutil.Eventually(h.t, fmt.Sprintf("pane %s shows a line matching %s", paneID, re), func() error {
		read, err := h.client.PaneRead(h.t.Context(), herdr.ReadParams{PaneID: paneID, Source: herdr.ReadSourceRecentUnwrapped, Lines: ptr(1000)})
		if err != nil {
			return err
		}
		for line := range strings.SplitSeq(read.Text, "\n") {
			if re.MatchString(line) {
				found = line
				return nil
			}
		}
		return fmt.Errorf("pane shows:\n%s", read.Text)
	}, testutil.Within(waitFor))
	return found
}

func TestWorkspaceCreateErrors(t *testing.T) {
	h := newHarness(t)
	cases := map[string]struct {
		params herdr.WorkspaceCreateParams
		want   error
	}{
		"env key with =":     {params: herdr.WorkspaceCreateParams{Env: map[string]string{"A=B": "c"}}, want: herdr.ErrInvalidEnv},
		"empty env key":      {params: herdr.WorkspaceCreateParams{Env: map[string]string{"": "c"}}, want: herdr.ErrInvalidEnv},
		"NUL in env value":   {params: herdr.WorkspaceCreateParams{Env: map[string]string{"A": "b\x00"}}, want: herdr.ErrInvalidEnv},
		"cwd does not exist": {params: herdr.WorkspaceCreateParams{Cwd: filepath.Join(h.dir, "missing")}, want: &herdr.Error{Code: herdr.CodeWorkspaceCreateFailed}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := h.client.WorkspaceCreate(t.Context(), tc.params); !errors.Is(err, tc.want) {
				t.Errorf("WorkspaceCreate() = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestTabCreate(t *testing.T) {
	h := newHarness(t)
	if _, err := h.client.TabCreate(t.Context(), herdr.TabCreateParams{}); !errors.Is(err, herdr.ErrWorkspaceNotFound) {
		t.Errorf("TabCreate() without any workspace = %v, want ErrWorkspaceNotFound", err)
	}
	ws := h.workspace(herdr.WorkspaceCreateParams{})
	created, err := h.client.TabCreate(t.Context(), herdr.TabCreateParams{
		WorkspaceID: ws.Workspace.WorkspaceID, Label: "logs", Focus: true, Env: map[string]string{"TAB_VAR": "x"},
	})
	if err != nil {
		t.Fatalf("TabCreate() = %v", err)
	}
	if err := h.awaitPrompt(created.RootPane.PaneID); err != nil {
		t.Fatal(err)
	}
	wantTab := herdr.TabInfo{TabID: "w1:t2", WorkspaceID: "w1", Number: 2, Label: "logs", Focused: true, PaneCount: 1, AgentStatus: herdr.AgentStatusUnknown}
	if diff := cmp.Diff(wantTab, created.Tab); diff != "" {
		t.Errorf("TabCreate() tab mismatch (-want +got):\n%s", diff)
	}
	if created.RootPane.PaneID != "w1:p2" || created.RootPane.TabID != "w1:t2" {
		t.Errorf("TabCreate() root pane = %+v, want w1:p2 in w1:t2", created.RootPane)
	}
	h.run(created.RootPane.PaneID, `echo "tab=[$TAB_VAR $HERDR_TAB_ID]"`)
	h.waitLine(created.RootPane.PaneID, "tab=[x w1:t2]")

	if _, err := h.client.TabCreate(t.Context(), herdr.TabCreateParams{WorkspaceID: "w42"}); !errors.Is(err, herdr.ErrWorkspaceNotFound) {
		t.Errorf("TabCreate() in an unknown workspace = %v, want ErrWorkspaceNotFound", err)
	}
	if _, err := h.client.TabCreate(t.Context(), herdr.TabCreateParams{Env: map[string]string{"A=B": ""}}); !errors.Is(err, herdr.ErrInvalidEnv) {
		t.Errorf("TabCreate() with a bad env = %v, want ErrInvalidEnv", err)
	}
}

func TestSessionSnapshot(t *testing.T) {
	h := newHarness(t)
	empty, err := h.client.SessionSnapshot(t.Context())
	if err != nil {
		t.Fatalf("SessionSnapshot() = %v", err)
	}
	if len(empty.Workspaces)+len(empty.Panes)+len(empty.Agents) != 0 || empty.FocusedPaneID != nil {
		t.Errorf("SessionSnapshot() of a new server = %+v, want nothing", empty)
	}

	ws := h.workspace(herdr.WorkspaceCreateParams{})
	tab, err := h.client.TabCreate(t.Context(), herdr.TabCreateParams{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := h.client.SessionSnapshot(t.Context())
	if err != nil {
		t.Fatalf("SessionSnapshot() = %v", err)
	}
	type shape struct {
		Version, FocusedPane         string
		Protocol                     int
		Workspaces, Tabs, Panes, Lay []string
	}
	got := shape{Version: snap.Version, Protocol: snap.Protocol, FocusedPane: *snap.FocusedPaneID}
	for _, w := range snap.Workspaces {
		got.Workspaces = append(got.Workspaces, w.WorkspaceID)
	}
	for _, t := range snap.Tabs {
		got.Tabs = append(got.Tabs, t.TabID)
	}
	for _, p := range snap.Panes {
		got.Panes = append(got.Panes, p.PaneID)
	}
	for _, l := range snap.Layouts {
		got.Lay = append(got.Lay, l.TabID+"="+l.Panes[0].PaneID)
	}
	want := shape{
		Version: "0.8.2", Protocol: 20, FocusedPane: ws.RootPane.PaneID,
		Workspaces: []string{"w1"}, Tabs: []string{"w1:t1", "w1:t2"}, Panes: []string{"w1:p1", tab.RootPane.PaneID},
		Lay: []string{"w1:t1=w1:p1", "w1:t2=w1:p2"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("SessionSnapshot() mismatch (-want +got):\n%s", diff)
	}
}

func TestWorkspaceClose(t *testing.T) {
	h := newHarness(t)
	ws := h.workspace(herdr.WorkspaceCreateParams{})
	pane := ws.RootPane.PaneID
	h.run(pane, `sleep 600 & echo "bg=[$!]"`)
	pid := h.waitLinePID(pane, "bg")

	if err := h.client.WorkspaceClose(t.Context(), ws.Workspace.WorkspaceID); err != nil {
		t.Fatalf("WorkspaceClose() = %v", err)
	}
	waitGone(t, pid)
	if _, err := h.client.PaneRead(t.Context(), herdr.ReadParams{PaneID: pane, Source: herdr.ReadSourceVisible}); !errors.Is(err, herdr.ErrPaneNotFound) {
		t.Errorf("PaneRead() of a closed workspace's pane = %v, want ErrPaneNotFound", err)
	}
	if err := h.client.WorkspaceClose(t.Context(), ws.Workspace.WorkspaceID); !errors.Is(err, herdr.ErrWorkspaceNotFound) {
		t.Errorf("WorkspaceClose() twice = %v, want ErrWorkspaceNotFound", err)
	}
}

// TestPaneCloseKillsProcessGroups checks that closing a pane ends every
// process of it: the shell, a background job and a foreground job, which a
// job-control shell each puts in a process group of its own.
func TestPaneCloseKillsProcessGroups(t *testing.T) {
	h := newHarness(t)
	pane := h.pane()
	h.run(pane, `sleep 600 & echo "bg=[$!]"`)
	bg := h.waitLinePID(pane, "bg")
	h.run(pane, `sh -c 'echo "fg=[$$]"; exec sleep 601'`)
	fg := h.waitLinePID(pane, "fg")

	if err := h.client.PaneClose(t.Context(), pane); err != nil {
		t.Fatalf("PaneClose() = %v", err)
	}
	waitGone(t, bg)
	waitGone(t, fg)
	if err := h.client.PaneClose(t.Context(), pane); !errors.Is(err, herdr.ErrPaneNotFound) {
		t.Errorf("PaneClose() twice = %v, want ErrPaneNotFound", err)
	}
}

// waitLinePID waits for a line "<label>=[<pid>]" and returns the pid.
func (h *harness) waitLinePID(paneID, label string) int {
	h.t.Helper()
	line := h.waitLineMatching(paneID, regexp.MustCompile(`^`+label+`=\[\d+\]$`))
	pid, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(line, label+"=["), "]"))
	if err != nil {
		h.t.Fatal(err)
	}
	return pid
}

// waitGone waits until pid is no longer running. A zombie counts as gone:
// once its parent died it waits only for init to reap it.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("process %d is gone", pid), func() error {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(fields) > 0 && fields[0] == "Z" {
			return nil
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return fmt.Errorf("process %d still runs: %s", pid, stat)
	}, testutil.Within(waitFor))
}

func TestPaneReadSources(t *testing.T) {
	h := newHarness(t)
	pane := h.pane()
	long := strings.Repeat("x", 150)
	h.run(pane, `for i in 1 2 3; do echo "line $i"; done; printf '\033[1;31mred\033[0m\n'; echo `+long)
	h.waitLine(pane, long)

	cases := map[string]struct {
		source herdr.ReadSource
		lines  *int
		check  func(text string) error
	}{
		"visible shows the screen": {
			source: herdr.ReadSourceVisible,
			check:  hasLines("line 1", "line 2", "line 3", "red", long[:120], long[120:]),
		},
		"recent is wrapped at the width": {
			source: herdr.ReadSourceRecent,
			check:  hasLines("red", long[:120], long[120:]),
		},
		"recent unwrapped keeps long lines": {
			source: herdr.ReadSourceRecentUnwrapped,
			check:  hasLines("line 3", "red", long),
		},
		"detection reads the screen": {
			source: herdr.ReadSourceDetection,
			check:  hasLines("line 2"),
		},
		"lines keeps the last ones": {
			source: herdr.ReadSourceRecentUnwrapped,
			lines:  ptr(2),
			check: func(text string) error {
				if got := strings.Count(text, "\n") + 1; got != 2 {
					return fmt.Errorf("got %d lines: %q", got, text)
				}
				return hasLines(long)(text)
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			read, err := h.client.PaneRead(t.Context(), herdr.ReadParams{PaneID: pane, Source: tc.source, Lines: tc.lines})
			if err != nil {
				t.Fatalf("PaneRead() = %v", err)
			}
			// herdr's pane.read always says revision 0.
			if read.Source != tc.source || read.Format != herdr.ReadFormatText || read.PaneID != pane || read.Revision != 0 {
				t.Errorf("PaneRead() = %+v, want a text read of %s with revision 0", read, tc.source)
			}
			if strings.Contains(read.Text, "\x1b") {
				t.Errorf("PaneRead() text has escape sequences: %q", read.Text)
			}
			if err := tc.check(read.Text); err != nil {
				t.Error(err)
			}
		})
	}

	if _, err := h.client.PaneRead(t.Context(), herdr.ReadParams{PaneID: "w9:p9", Source: herdr.ReadSourceVisible}); !errors.Is(err, herdr.ErrPaneNotFound) {
		t.Errorf("PaneRead() of an unknown pane = %v, want ErrPaneNotFound", err)
	}
	// Straight to the server: the relay would flag the bad enum.
	if _, err := h.direct.PaneRead(t.Context(), herdr.ReadParams{PaneID: pane, Source: "everything"}); !errors.Is(err, herdr.ErrInvalidRequest) {
		t.Errorf("PaneRead() of an unknown source = %v, want ErrInvalidRequest", err)
	}
}

func hasLines(want ...string) func(string) error {
	return func(text string) error {
		lines := strings.Split(text, "\n")
		for _, w := range want {
			if !slices.Contains(lines, w) {
				return fmt.Errorf("no line %q in:\n%s", w, text)
			}
		}
		return nil
	}
}

// TestVisibleScreenFollowsEscapes proves the visible screen comes from a
// terminal emulator: what a program draws with cursor movement and a clear
// screen is what the read returns.
func TestVisibleScreenFollowsEscapes(t *testing.T) {
	h := newHarness(t)
	pane := h.pane()
	h.run(pane, `echo before; printf '\033[2J\033[5;1Hxxxxx\033[5;3HY\033[2;4HZ\033[7;1H'`)
	want := []string{"", "   Z", "", "", "xxYxx", ""}
	testutil.Eventually(t, "the drawing is on screen", func() error {
		read, err := h.client.PaneRead(t.Context(), herdr.ReadParams{PaneID: pane, Source: herdr.ReadSourceVisible})
		if err != nil {
			return err
		}
		rows := strings.Split(read.Text, "\n")
		if len(rows) < len(want) {
			return fmt.Errorf("screen is %q", read.Text)
		}
		if diff := cmp.Diff(want, rows[:len(want)]); diff != "" {
			return fmt.Errorf("screen mismatch (-want +got):\n%s", diff)
		}
		return nil
	}, testutil.Within(waitFor))
}

func TestPaneSendKeys(t *testing.T) {
	h := newHarness(t)
	pane := h.pane()
	h.run(pane, `sh -c 'echo "sleeping=[$$]"; exec sleep 600'`)
	pid := h.waitLinePID(pane, "sleeping")
	if err := h.client.PaneSendKeys(t.Context(), pane, "ctrl+c"); err != nil {
		t.Fatalf("PaneSendKeys(ctrl+c) = %v", err)
	}
	waitGone(t, pid)

	if err := h.client.PaneSendInput(t.Context(), herdr.PaneSendInputParams{PaneID: pane, Text: "echo typed"}); err != nil {
		t.Fatal(err)
	}
	if err := h.client.PaneSendKeys(t.Context(), pane, "space", "x", "enter"); err != nil {
		t.Fatalf("PaneSendKeys() = %v", err)
	}
	h.waitLine(pane, "typed x")

	cases := map[string]struct {
		send func() error
		want error
	}{
		"unknown key": {
			send: func() error { return h.client.PaneSendKeys(t.Context(), pane, "hyper+q") },
			want: herdr.ErrInvalidKey,
		},
		"unknown pane": {
			send: func() error { return h.client.PaneSendKeys(t.Context(), "w9:p9", "enter") },
			want: herdr.ErrPaneNotFound,
		},
		"input to an unknown pane": {
			send: func() error {
				return h.client.PaneSendInput(t.Context(), herdr.PaneSendInputParams{PaneID: "w9:p9", Text: "ls"})
			},
			want: herdr.ErrPaneNotFound,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if err := tc.send(); !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// TestMalformedRequests sends what no client should: each gets herdr's
// invalid_request with an empty id, and the server keeps serving.
func TestMalformedRequests(t *testing.T) {
	h := newHarness(t)
	invalid := func(lines []string) error {
		if len(lines) != 1 {
			return fmt.Errorf("got %d lines %q, want one", len(lines), lines)
		}
		var resp struct {
			ID    *string      `json:"id"`
			Error *herdr.Error `json:"error"`
		}
		if err := json.Unmarshal([]byte(lines[0]), &resp); err != nil {
			return err
		}
		if resp.ID == nil || *resp.ID != "" || resp.Error == nil || resp.Error.Code != herdr.CodeInvalidRequest {
			return fmt.Errorf("got %s, want invalid_request with an empty id", lines[0])
		}
		return nil
	}
	cases := map[string]struct {
		line  string
		check func([]string) error
	}{
		"not json":          {line: "hello herdr\n", check: invalid},
		"truncated json":    {line: `{"id":"1","method":` + "\n", check: invalid},
		"unknown method":    {line: `{"id":"1","method":"pane.teleport","params":{}}` + "\n", check: invalid},
		"bad enum":          {line: `{"id":"1","method":"pane.read","params":{"pane_id":"w1:p1","source":"everything"}}` + "\n", check: invalid},
		"missing params":    {line: `{"id":"1","method":"pane.close"}` + "\n", check: invalid},
		"numeric id":        {line: `{"id":1,"method":"ping","params":{}}` + "\n", check: invalid},
		"over 1 MiB":        {line: `{"id":"1","method":"ping","params":{"pad":"` + strings.Repeat("x", 1<<20) + `"}}` + "\n", check: invalid},
		"binary":            {line: "\x00\xff\xfe\n", check: invalid},
		"no newline at EOF": {line: `{"id":"9","method":"ping","params":{}}`, check: answered("9")},
		"empty line": {line: "\n", check: func(lines []string) error {
			if len(lines) != 0 {
				return fmt.Errorf("got %q, want the connection closed unanswered", lines)
			}
			return nil
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if err := tc.check(h.rawCall(tc.line)); err != nil {
				t.Error(err)
			}
		})
	}
	if _, err := h.client.Ping(t.Context()); err != nil {
		t.Errorf("Ping() after malformed requests = %v", err)
	}
}

func answered(id string) func([]string) error {
	return func(lines []string) error {
		if len(lines) != 1 || !strings.HasPrefix(lines[0], `{"id":"`+id+`","result"`) {
			return fmt.Errorf("got %q, want one result for id %s", lines, id)
		}
		return nil
	}
}

// TestSilentClientTimesOut checks that a connection that never sends its
// request line is dropped after herdr's 5 s.
func TestSilentClientTimesOut(t *testing.T) {
	h := newHarness(t)
	conn, err := net.Dial("unix", h.opts.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(`{"id":"1",`)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(waitFor))
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Read() = %d, %v; want the server to close the connection", n, err)
	}
	if _, err := h.client.Ping(t.Context()); err != nil {
		t.Errorf("Ping() = %v", err)
	}
}

// TestShellExit checks that a shell that exits on its own takes its pane,
// and then its workspace, with it.
func TestShellExit(t *testing.T) {
	h := newHarness(t)
	stream := h.client.Subscribe(t.Context(), []herdr.Subscription{
		herdr.Lifecycle(herdr.SubscribePaneExited),
		herdr.Lifecycle(herdr.SubscribeWorkspaceClosed),
	})
	defer stream.Close()
	if ev := nextEvent(t, stream); ev.Kind != herdr.EventResync {
		t.Fatalf("first event = %s, want resync", ev.Kind)
	}
	pane := h.pane()
	h.run(pane, "exit 3")

	exited := nextEvent(t, stream)
	want := herdr.Event{Kind: herdr.EventPaneExited, Data: herdr.EventData{Type: herdr.EventPaneExited, PaneID: pane, WorkspaceID: "w1"}}
	if diff := cmp.Diff(want, exited); diff != "" {
		t.Errorf("event mismatch (-want +got):\n%s", diff)
	}
	closed := nextEvent(t, stream)
	if closed.Kind != herdr.EventWorkspaceClosed || closed.Data.WorkspaceID != "w1" {
		t.Errorf("event after the last pane exited = %+v, want workspace_closed w1", closed)
	}
	snap, err := h.client.SessionSnapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Panes) != 0 {
		t.Errorf("snapshot still has panes %+v", snap.Panes)
	}
}
