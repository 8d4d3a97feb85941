package paneserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

// asClientEnv makes the test binary one call of a herdr client, run as
// another user: {"socket", "method", "params"} in, the error code (empty
// for success) out.
const asClientEnv = "PANESERVER_TEST_AS_CLIENT"

type clientCall struct {
	Socket string          `json:"socket"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	// Conns, when set, opens that many idle connections instead of a
	// call (holdConns).
	Conns int `json:"conns,omitempty"`
	// Watches, when set, opens that many subscriptions at once to the
	// output of Pane, each on a connection of its own (holdWatches).
	Watches int    `json:"watches,omitempty"`
	Pane    string `json:"pane,omitempty"`
}

func runAsClient() int {
	var c clientCall
	if err := json.Unmarshal([]byte(os.Getenv(asClientEnv)), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if c.Conns > 0 {
		return holdConns(c.Socket, c.Conns)
	}
	if c.Watches > 0 {
		return holdWatches(c.Socket, c.Pane, c.Watches)
	}
	var out json.RawMessage
	err := herdr.NewClient(c.Socket).Call(context.Background(), c.Method, c.Params, "", &out)
	var herr *herdr.Error
	switch {
	case errors.As(err, &herr):
		fmt.Print(herr.Code)
	case err != nil && strings.Contains(err.Error(), "result type"):
		// Any success: the call went through.
	case err != nil:
		fmt.Print("transport: " + err.Error())
	}
	return 0
}

// clientBinary is this test binary where any user may run it.
func clientBinary(t *testing.T, dir string) string {
	t.Helper()
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "client")
	if err := os.WriteFile(path, self, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// callAs makes one call as uid with the client binary and returns herdr's
// error code, "" when the server answered with a result.
func callAs(t *testing.T, bin string, uid uint32, socket, method string, params any) string {
	t.Helper()
	raw, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	call, _ := json.Marshal(clientCall{Socket: socket, Method: method, Params: raw})
	cmd := exec.Command(bin)
	cmd.Env = []string{asClientEnv + "=" + string(call)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("calling %s as user %d: %v", method, uid, err)
	}
	return string(out)
}

// TestMembersActOnlyOnTheirOwnPanes reproduces the attacks of one member
// on another sharing a pane server: each workspace runs as a Unix user of
// its own, and a member's user may report, read, type and close only in
// its own pane; fleetd's own identity may do everything.
func TestMembersActOnlyOnTheirOwnPanes(t *testing.T) {
	const trustedUID = 65532
	if !paneserver.CanSwitchUsers() {
		t.Skip("needs root, or CAP_SETUID and CAP_SETGID")
	}
	dir := shortTempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "herdr.sock")
	srv, err := paneserver.New(paneserver.Options{
		SocketPath: socket, Shell: "/bin/sh", Cwd: dir,
		Users: &paneserver.UserOptions{HomeRoot: filepath.Join(dir, "users"), Trusted: []uint32{trustedUID}},
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	defer srv.Close()
	if fi, err := os.Stat(socket); err != nil || fi.Mode().Perm() != 0o666 {
		t.Fatalf("socket mode %v, %v: want it open to the workspaces' users", fi.Mode(), err)
	}
	fleetd := herdr.NewClient(socket)
	ctx := context.Background()
	bin := clientBinary(t, dir)
	a, err := fleetd.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Label: "fleetd:ns/a:1"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := fleetd.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Label: "fleetd:ns/b:2"})
	if err != nil {
		t.Fatal(err)
	}
	uidA, _, _ := srv.WorkspaceUser("fleetd:ns/a:1")
	uidB, _, _ := srv.WorkspaceUser("fleetd:ns/b:2")
	if uidA == uidB || uidA < paneserver.DefaultFirstUID {
		t.Fatalf("workspace users %d and %d", uidA, uidB)
	}
	// Each workspace's shell runs as its own user.
	paneA, paneB := a.RootPane.PaneID, b.RootPane.PaneID
	if err := fleetd.PaneSendInput(ctx, herdr.PaneSendInputParams{PaneID: paneA, Text: "id -u; echo HOME=$HOME", Keys: []string{"enter"}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "pane a's shell to say who it is", func() error {
		one := 20
		read, err := fleetd.PaneRead(ctx, herdr.ReadParams{PaneID: paneA, Source: herdr.ReadSourceRecent, Lines: &one})
		if err != nil {
			return err
		}
		if !strings.Contains(read.Text, fmt.Sprint(uidA)) || !strings.Contains(read.Text, "HOME="+filepath.Join(dir, "users")) {
			return fmt.Errorf("pane a shows %q", read.Text)
		}
		return nil
	})

	denied := map[string]struct {
		method string
		params any
	}{
		"report idle in another's pane": {herdr.MethodPaneReportAgent, herdr.PaneReportAgentParams{PaneID: paneB, Source: "fleetd", Agent: "claude", State: herdr.AgentStateIdle}},
		"type raw bytes into another's": {herdr.MethodPaneSendInput, herdr.PaneSendInputParams{PaneID: paneB, Text: "\x1b[201~rm -rf ~\r"}},
		"press keys in another's":       {herdr.MethodPaneSendKeys, herdr.PaneSendKeysParams{PaneID: paneB, Keys: []string{"enter"}}},
		"read another's screen":         {herdr.MethodPaneRead, herdr.ReadParams{PaneID: paneB, Source: herdr.ReadSourceVisible}},
		"close another's pane":          {herdr.MethodPaneClose, herdr.PaneTarget{PaneID: paneB}},
		"release another's status":      {herdr.MethodPaneReleaseAgent, herdr.PaneReleaseAgentParams{PaneID: paneB, Source: "fleetd", Agent: "claude"}},
		"list every workspace":          {herdr.MethodSessionSnapshot, herdr.EmptyParams{}},
		"open a workspace":              {herdr.MethodWorkspaceCreate, herdr.WorkspaceCreateParams{}},
		"follow everyone's lifecycle":   {herdr.MethodEventsSubscribe, herdr.EventsSubscribeParams{Subscriptions: []herdr.Subscription{herdr.Lifecycle(herdr.SubscribePaneClosed)}}},
		"follow another's status":       {herdr.MethodEventsSubscribe, herdr.EventsSubscribeParams{Subscriptions: []herdr.Subscription{herdr.PaneAgentStatusChanged(paneB)}}},
		"start an agent in another's":   {herdr.MethodAgentStart, herdr.AgentStartParams{Name: "x", Kind: "claude", PaneID: paneB}},
	}
	for name, c := range denied {
		t.Run(name, func(t *testing.T) {
			if code := callAs(t, bin, uidA, socket, c.method, c.params); code != herdr.CodePermissionDenied {
				t.Errorf("member a's %s = %q, want %s", c.method, code, herdr.CodePermissionDenied)
			}
		})
	}
	if code := callAs(t, bin, 4242, socket, herdr.MethodPaneReportAgent, herdr.PaneReportAgentParams{PaneID: paneA, Source: "x", Agent: "x", State: herdr.AgentStateIdle}); code != herdr.CodePermissionDenied {
		t.Errorf("a stranger's report = %q, want %s", code, herdr.CodePermissionDenied)
	}
	// In its own pane a member's hooks report, read and type as before.
	for _, c := range []struct {
		method string
		params any
	}{
		{herdr.MethodPaneReportAgent, herdr.PaneReportAgentParams{PaneID: paneA, Source: "fleetd", Agent: "claude", State: herdr.AgentStateIdle}},
		{herdr.MethodPaneRead, herdr.ReadParams{PaneID: paneA, Source: herdr.ReadSourceVisible}},
		{herdr.MethodPaneSendKeys, herdr.PaneSendKeysParams{PaneID: paneA, Keys: []string{"enter"}}},
		{herdr.MethodPing, herdr.EmptyParams{}},
	} {
		if code := callAs(t, bin, uidA, socket, c.method, c.params); code != "" {
			t.Errorf("member a's own %s = %q, want it done", c.method, code)
		}
	}
	if _, err := fleetd.PaneRead(ctx, herdr.ReadParams{PaneID: paneB, Source: herdr.ReadSourceVisible}); err != nil {
		t.Errorf("fleetd's own read of pane b: %v", err)
	}
	// fleetd running as a user of its own, named trusted, does everything.
	if code := callAs(t, bin, trustedUID, socket, herdr.MethodSessionSnapshot, herdr.EmptyParams{}); code != "" {
		t.Errorf("the trusted user's snapshot = %q, want it done", code)
	}

	// b's pane survived all of it.
	if _, err := fleetd.PaneRead(ctx, herdr.ReadParams{PaneID: paneB, Source: herdr.ReadSourceVisible}); err != nil {
		t.Errorf("pane b after the attacks: %v", err)
	}
}
