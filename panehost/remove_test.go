package panehost

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/fleetd/fleetd/agents"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

// TestMemberRemove: once a member's workspace is closed, fleetd.member.remove
// takes its agent directory and its user's home and temporary directory
// from a pane server that ran it as a user of its own; never while the
// workspace is open, and never the agents' root.
func TestMemberRemove(t *testing.T) {
	if !paneserver.CanSwitchUsers() {
		t.Skip("needs root, or CAP_SETUID and CAP_SETGID")
	}
	dir, err := os.MkdirTemp("", "ph")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "agents")
	var srv *paneserver.Server
	srv, err = paneserver.New(paneserver.Options{
		SocketPath: filepath.Join(dir, "herdr.sock"), Shell: "/bin/sh", Cwd: dir,
		Users:      &paneserver.UserOptions{HomeRoot: filepath.Join(root, ".users")},
		Extensions: Extensions(root, func() Users { return srv }),
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { _ = srv.Close() })

	ctx := context.Background()
	c := herdr.NewClient(srv.SocketPath())
	const label = "fleetd:ns/w1:5e5e"
	ws, err := c.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Label: label})
	if err != nil {
		t.Fatal(err)
	}
	remote := Remote{Client: c, User: label}
	agent := filepath.Join(root, "ns", "w1-5e5e")
	if err := remote.Install(ctx, agent, filepath.Join(agent, "work"), []agents.File{{Path: filepath.Join(agent, "claude", "settings.json"), Content: []byte("{}")}}); err != nil {
		t.Fatal(err)
	}
	uid, _, err := srv.WorkspaceUser(label)
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(root, ".users", strconv.FormatUint(uint64(uid), 10))
	if _, err := os.Stat(home); err != nil {
		t.Fatal(err)
	}

	if err := remote.Remove(ctx, agent); err == nil {
		t.Error("removed the member of an open workspace")
	}
	var herr *herdr.Error
	if err := remote.Remove(ctx, root); !errors.As(err, &herr) || herr.Code != herdr.CodeInvalidParams {
		t.Errorf("removing the agents' root = %v, want invalid_params", err)
	}
	if err := c.WorkspaceClose(ctx, ws.Workspace.WorkspaceID); err != nil {
		t.Fatal(err)
	}
	if err := remote.Remove(ctx, agent); err != nil {
		t.Fatalf("removing the member = %v", err)
	}
	for _, gone := range []string{agent, home} {
		if _, err := os.Lstat(gone); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there (%v)", gone, err)
		}
	}
	if _, err := os.Stat(root); err != nil {
		t.Errorf("the agents' root: %v", err)
	}
}
