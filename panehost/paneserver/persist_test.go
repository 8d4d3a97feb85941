package paneserver_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/fleetd/fleetd/panehost/paneserver"
)

// TestSavedSessionNeverChoosesTheUser: the saved session decides which
// user a restored pane's shell runs as only through its workspace's label.
// A file that names root, a user of the system's or one outside the
// workspaces' range is refused, and so is a file that is not the server's
// own with mode 0600, or a link to one; a good file's numbers are not
// taken either.
func TestSavedSessionNeverChoosesTheUser(t *testing.T) {
	if !paneserver.CanSwitchUsers() {
		t.Skip("needs root, or CAP_SETUID and CAP_SETGID")
	}
	dir := shortTempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	users := &paneserver.UserOptions{HomeRoot: filepath.Join(dir, "users")}
	// The user the label derives: what a fresh server gives it.
	fresh, err := paneserver.New(paneserver.Options{SocketPath: filepath.Join(dir, "fresh.sock"), Shell: "/bin/sh", Cwd: dir, Users: users})
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := fresh.WorkspaceUser("w")
	_ = fresh.Close()
	if err != nil {
		t.Fatal(err)
	}

	saved := func(uid uint32) []byte {
		raw, err := json.Marshal(map[string]any{
			"last_workspace": 1,
			"users":          map[string]uint32{"w": uid},
			"workspaces": []map[string]any{{
				"id": "w1", "label": "w", "cwd": dir, "last_tab": 1, "last_pane": 1,
				"tabs": []map[string]any{{"id": "w1:t1", "label": "1", "panes": []map[string]any{{"id": "w1:p1", "cwd": dir}}}},
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	cases := map[string]struct {
		uid     uint32
		prepare func(t *testing.T, path string)
		refused bool
	}{
		"a user of the range, not the label's": {uid: want + 1},
		"root":                                 {uid: 0, refused: true},
		"a user of the system's":               {uid: 1000, refused: true},
		"below the range":                      {uid: paneserver.DefaultFirstUID - 1, refused: true},
		"far above the range":                  {uid: 4_000_000_000, refused: true},
		"readable by others": {uid: want, refused: true, prepare: func(t *testing.T, path string) {
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		"writable by its group": {uid: want, refused: true, prepare: func(t *testing.T, path string) {
			if err := os.Chmod(path, 0o620); err != nil {
				t.Fatal(err)
			}
		}},
		"another user's": {uid: want, refused: true, prepare: func(t *testing.T, path string) {
			if err := os.Chown(path, int(want), int(want)); err != nil {
				t.Fatal(err)
			}
		}},
		"a link to the server's own file": {uid: want, refused: true, prepare: func(t *testing.T, path string) {
			real := path + ".real"
			if err := os.Rename(path, real); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(real, path); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := shortTempDir(t)
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "session.json")
			if err := os.WriteFile(path, saved(tc.uid), 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.prepare != nil {
				tc.prepare(t, path)
			}
			srv, err := paneserver.New(paneserver.Options{SocketPath: filepath.Join(dir, "herdr.sock"), Shell: "/bin/sh", Cwd: dir, Users: users, SessionFile: path})
			if err != nil {
				if !tc.refused {
					t.Fatalf("New() = %v, want the session restored", err)
				}
				t.Logf("refused: %v", err)
				return
			}
			defer srv.Close()
			got, _, err := srv.WorkspaceUser("w")
			switch {
			case err != nil:
				t.Fatal(err)
			case tc.refused:
				t.Errorf("the saved session was restored, workspace w running as user %d; want it refused", got)
			case got != want:
				t.Errorf("workspace w restored as user %d, want %d, the user its label derives", got, want)
			}
		})
	}
}
