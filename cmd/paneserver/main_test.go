package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
)

// runMainEnv makes the test binary run main instead of the tests, so the
// tests can run the command as a process of its own.
const runMainEnv = "PANESERVER_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// TestSignalEndsPanes runs the command, starts a pane with a background
// job, and stops the command with SIGTERM: the job dies and the socket goes.
func TestSignalEndsPanes(t *testing.T) {
	cases := map[string]struct {
		args []string
		env  bool
	}{
		"socket flag":             {args: []string{"--socket"}},
		"HERDR_SOCKET_PATH alone": {env: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "ps")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			socket := filepath.Join(dir, "herdr.sock")

			args := []string{"--shell", "/bin/sh"}
			env := append(os.Environ(), runMainEnv+"=1", herdr.SocketPathEnv+"=")
			if tc.env {
				env = append(env, herdr.SocketPathEnv+"="+socket)
			} else {
				args = append(args, "--socket", socket)
			}
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = env
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

			client := herdr.NewClient(socket)
			testutil.Eventually(t, "the server answers", func() error {
				_, err := client.Ping(t.Context())
				return err
			})
			created, err := client.WorkspaceCreate(t.Context(), herdr.WorkspaceCreateParams{Cwd: dir})
			if err != nil {
				t.Fatal(err)
			}
			pane := created.RootPane.PaneID
			pid := backgroundJob(t, client, pane)

			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("paneserver exited with %v after SIGTERM", err)
			}
			if _, err := os.Stat(socket); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("socket still there after SIGTERM: %v", err)
			}
			testutil.Eventually(t, fmt.Sprintf("job %d is gone", pid), func() error {
				stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
				if errors.Is(err, os.ErrNotExist) || (err == nil && strings.Contains(string(stat), ") Z ")) {
					return nil
				}
				return fmt.Errorf("job still runs: %s %v", stat, err)
			})
		})
	}
}

// backgroundJob starts a long sleep in the background of pane and returns its pid.
func backgroundJob(t *testing.T, client *herdr.Client, pane string) int {
	t.Helper()
	testutil.Eventually(t, "the shell prompts", func() error {
		read, err := client.PaneRead(t.Context(), herdr.ReadParams{PaneID: pane, Source: herdr.ReadSourceVisible})
		if err == nil && strings.TrimSpace(read.Text) == "" {
			err = errors.New("empty screen")
		}
		return err
	})
	err := client.PaneSendInput(t.Context(), herdr.PaneSendInputParams{PaneID: pane, Text: `sleep 600 & echo "job=[$!]"`, Keys: []string{"enter"}})
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^job=\[(\d+)\]$`)
	var pid int
	testutil.Eventually(t, "the job's pid shows", func() error {
		read, err := client.PaneRead(t.Context(), herdr.ReadParams{PaneID: pane, Source: herdr.ReadSourceRecentUnwrapped})
		if err != nil {
			return err
		}
		m := line.FindStringSubmatch(read.Text)
		if m == nil {
			return fmt.Errorf("pane shows %q", read.Text)
		}
		pid, err = strconv.Atoi(m[1])
		return err
	})
	return pid
}

// TestOrphansAreReaped runs the pane server as PID 1 of a PID namespace of
// its own, as in a container, and as a child subreaper; a pane leaves
// orphans behind (each forked by a subshell that exits at once), which
// come to the server's init. Killed, they must not stay as zombies.
func TestOrphansAreReaped(t *testing.T) {
	const orphans = 20
	cases := map[string]struct {
		args []string
		attr *syscall.SysProcAttr
	}{
		"PID 1 of its namespace": {attr: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}},
		"child subreaper":        {args: []string{"--subreaper"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			socket := filepath.Join(dir, "herdr.sock")
			cmd := exec.Command(os.Args[0], append([]string{"--shell", "/bin/sh", "--socket", socket}, tc.args...)...)
			cmd.Env = append(os.Environ(), runMainEnv+"=1", herdr.SocketPathEnv+"=")
			cmd.Stderr = os.Stderr
			cmd.SysProcAttr = tc.attr
			if err := cmd.Start(); err != nil {
				if errors.Is(err, syscall.EPERM) {
					t.Skipf("making a PID namespace needs CAP_SYS_ADMIN: %v", err)
				}
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			init := cmd.Process.Pid

			client := herdr.NewClient(socket)
			testutil.Eventually(t, "the server answers", func() error {
				_, err := client.Ping(t.Context())
				return err
			})
			created, err := client.WorkspaceCreate(t.Context(), herdr.WorkspaceCreateParams{Cwd: dir})
			if err != nil {
				t.Fatal(err)
			}
			pane := created.RootPane.PaneID
			// No job of the shell's own is left running: in a PID namespace
			// of its own under the machine's /proc the server could not
			// find its process group to end it.
			testutil.Eventually(t, "the shell prompts", func() error {
				read, err := client.PaneRead(t.Context(), herdr.ReadParams{PaneID: pane, Source: herdr.ReadSourceVisible})
				if err == nil && strings.TrimSpace(read.Text) == "" {
					err = errors.New("empty screen")
				}
				return err
			})
			orphan := fmt.Sprintf("for i in $(seq %d); do (sleep 600 &); done", orphans)
			if err := client.PaneSendInput(t.Context(), herdr.PaneSendInputParams{PaneID: pane, Text: orphan, Keys: []string{"enter"}}); err != nil {
				t.Fatal(err)
			}
			var adopted []int
			testutil.Eventually(t, "the orphans come to the server's init", func() error {
				adopted = childrenOf(init, "sleep")
				if len(adopted) < orphans {
					return fmt.Errorf("%d of %d orphans are the init's", len(adopted), orphans)
				}
				return nil
			})
			for _, pid := range adopted {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			testutil.Eventually(t, "no orphan stays a zombie", func() error {
				if left := childrenOf(init, "sleep"); len(left) > 0 {
					return fmt.Errorf("%d killed orphans are still the init's: %v", len(left), left)
				}
				return nil
			})

			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("paneserver exited with %v after SIGTERM", err)
			}
		})
	}
}

// childrenOf lists the processes named comm whose parent is pid, zombies
// included.
func childrenOf(pid int, comm string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var children []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			continue
		}
		s := string(raw)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		// After the name: state ppid ...
		fields := strings.Fields(s[end+1:])
		if len(fields) < 2 || fields[1] != strconv.Itoa(pid) || s[open+1:end] != comm {
			continue
		}
		children = append(children, child)
	}
	return children
}
