package paneserver

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// fsUIDHelperEnv makes this test binary a helper that takes a user's file
// system identity on its main thread, as a privileged process does to touch
// a member's files, and then waits.
const fsUIDHelperEnv = "PANESERVER_TEST_FSUID_HELPER"

func init() {
	// Package initialisation runs on the main thread: what it sets there,
	// /proc shows for the whole process.
	v := os.Getenv(fsUIDHelperEnv)
	if v == "" {
		return
	}
	uid, err := strconv.Atoi(v)
	if err != nil {
		os.Exit(2)
	}
	_, _ = unix.SetfsuidRetUid(uid)
	_, _ = os.Stdout.WriteString("ready\n")
	// Until the test closes stdin, or kills it.
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	os.Exit(0)
}

// TestKillUserSparesAProcessActingOnTheUsersFiles: sweeping a member's
// user leaves a privileged process alone whose main thread took that user's
// file system identity to touch the member's files. The pane server does
// just that (memberfs.As on a thread that may be the main one), and
// sweeping by the file system id had it kill itself.
func TestKillUserSparesAProcessActingOnTheUsersFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to take another user's file system identity")
	}
	const uid = DefaultFirstUID + 2*labelUIDs - 7
	helper := exec.Command("/proc/self/exe")
	helper.Env = append(os.Environ(), fsUIDHelperEnv+"="+strconv.Itoa(uid))
	stdin, err := helper.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = helper.Process.Kill()
		_ = helper.Wait()
	})
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the helper said %q, %v", line, err)
	}
	pid := helper.Process.Pid
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	want := []byte("Uid:\t0\t0\t0\t" + strconv.Itoa(uid) + "\n")
	if !bytes.Contains(status, want) {
		t.Fatalf("the helper's status has no %q: the test proves nothing\n%s", want, status)
	}

	if left := killUser(uid); left != 0 {
		t.Errorf("killUser left %d processes of a user that runs none", left)
	}
	// killUser returns once its sweep finds the user's processes dead:
	// a killed helper would be a zombie by now, until waited for.
	if st, ok := readProcStat(pid); !ok || st.state == 'Z' {
		t.Fatalf("killUser(%d) killed a root process that only acted on the user's files", uid)
	}
}
