package herdr_test

import (
	"bufio"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/fleetd/fleetd/herdr"
)

// serveAsEnv makes the test binary a server that answers every request
// with pong on the socket it names, run as another user.
const serveAsEnv = "HERDR_TEST_SERVE_AS"

func TestMain(m *testing.M) {
	if path := os.Getenv(serveAsEnv); path != "" {
		ln, err := net.Listen("unix", path)
		if err != nil {
			os.Exit(2)
		}
		os.Stdout.WriteString("ready\n")
		for {
			conn, err := ln.Accept()
			if err != nil {
				os.Exit(0)
			}
			_, _ = bufio.NewReader(conn).ReadString('\n')
			_, _ = conn.Write([]byte(`{"id":"1","result":{"type":"pong","version":"0.8.2","protocol":20}}` + "\n"))
			_ = conn.Close()
		}
	}
	os.Exit(m.Run())
}

// TestClientRefusesAServerOfAnotherUser: a server a member runs in the
// socket's directory, under the socket's name, is refused by its peer
// credentials before a request is written to it.
func TestClientRefusesAServerOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 || runtime.GOOS != "linux" {
		t.Skip("needs root on Linux")
	}
	dir, err := os.MkdirTemp("", "hp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "server")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "herdr.sock")
	cmd := exec.Command(bin)
	cmd.Env = []string{serveAsEnv + "=" + sock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the member's server did not start: %q, %v", line, err)
	}
	_, err = herdr.NewClient(sock).Ping(t.Context())
	if !errors.Is(err, herdr.ErrUntrustedServer) {
		t.Errorf("ping of a server run by user 65534 = %v, want %v", err, herdr.ErrUntrustedServer)
	}
}
