package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// memberUID is a user as the pane server gives one to a member.
const memberUID = 20000

// asMember runs a shell command as a member's user, with no groups.
func asMember(script string) error {
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: memberUID, Gid: memberUID, Groups: []uint32{}}}
	return cmd.Run()
}

// TestGuardDirShutsMembersOut: a directory shared with members as an
// emptyDir comes 2777, where a member's user renames the server's files
// and puts its own in their place; guarded, it may only pass through to
// the socket and to a directory of its own.
func TestGuardDirShutsMembersOut(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching to a member's user needs root")
	}
	parent := t.TempDir()
	// The member's user passes through the test's directories.
	for _, dir := range []string{filepath.Dir(parent), parent} {
		if err := os.Chmod(dir, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	shared := filepath.Join(parent, "fleetd")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o2777); err != nil {
		t.Fatal(err)
	}
	session := filepath.Join(shared, "herdr-session.json")
	own := filepath.Join(shared, "member")
	if err := os.WriteFile(session, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(own, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(own, memberUID, memberUID); err != nil {
		t.Fatal(err)
	}
	// The attack works on the volume as it comes.
	if err := asMember("mv " + session + " " + session + ".old && mv " + session + ".old " + session); err != nil {
		t.Fatalf("a member could not rename the session file in a 2777 directory: %v", err)
	}

	const fleetdGroup = 65532
	if err := guardDir(shared, fleetdGroup); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(shared)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if got := fi.Mode() & (os.ModePerm | os.ModeSetgid | os.ModeSticky); got != 0o771 || st.Uid != 0 || st.Gid != fleetdGroup {
		t.Errorf("guarded directory is %v %d:%d, want -rwxrwx--x 0:%d", got, st.Uid, st.Gid, fleetdGroup)
	}
	refused := map[string]string{
		"rename the server's file": "mv " + session + " " + shared + "/taken",
		"create a file":            "touch " + shared + "/herdr.sock",
		"remove the server's file": "rm -f " + session,
		"list the directory":       "ls " + shared,
	}
	for what, script := range refused {
		if err := asMember(script); err == nil {
			t.Errorf("a member could %s in the guarded directory", what)
		}
	}
	if err := asMember("touch " + own + "/mine"); err != nil {
		t.Errorf("a member could not write in its own directory within the guarded one: %v", err)
	}
	if _, err := os.Stat(session); err != nil {
		t.Errorf("the session file: %v", err)
	}
}

// TestGuardDirRefusesALink: a link in the directory's place is not
// followed.
func TestGuardDirRefusesALink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	if err := os.Mkdir(target, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(target, 0o777); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "fleetd")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := guardDir(link, os.Getegid()); err == nil {
		t.Fatal("guardDir followed a link")
	}
	if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o777 {
		t.Errorf("the link's target changed: %v %v", fi.Mode(), err)
	}
}
