package paneserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

// holdConns opens n connections to socket at once and sends nothing on
// them, as a member hoarding the server's files would; it prints how many
// the server refused (an error line, server_unavailable) and how many it
// held until it gave up on their silence.
func holdConns(socket string, n int) int {
	conns := make([]net.Conn, 0, n)
	for range n {
		conn, err := net.Dial("unix", socket)
		if err != nil {
			fmt.Printf("dial: %v", err)
			return 0
		}
		conns = append(conns, conn)
	}
	refused, held := 0, 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, conn := range conns {
		wg.Go(func() {
			defer conn.Close()
			_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
			line, _ := bufio.NewReader(conn).ReadBytes('\n')
			var resp struct {
				Error *herdr.Error `json:"error"`
			}
			mu.Lock()
			defer mu.Unlock()
			if json.Unmarshal(line, &resp) == nil && resp.Error != nil && resp.Error.Code == herdr.CodeServerUnavailable {
				refused++
			} else {
				held++
			}
		})
	}
	wg.Wait()
	fmt.Printf("refused=%d held=%d", refused, held)
	return 0
}

// TestConnectionsPerUser: a member's user opening many connections at
// once to the shared server is refused, with an error line, past
// MaxConnsPerUser; the server's own identity is not bounded.
func TestConnectionsPerUser(t *testing.T) {
	const limit, conns = 4, 40
	if !paneserver.CanSwitchUsers() {
		t.Skip("needs root, or CAP_SETUID and CAP_SETGID")
	}
	dir := shortTempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "herdr.sock")
	srv, err := paneserver.New(paneserver.Options{
		SocketPath: socket, Shell: "/bin/sh", Cwd: dir, MaxConnsPerUser: limit,
		Users: &paneserver.UserOptions{HomeRoot: filepath.Join(dir, "users")},
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	defer srv.Close()
	if _, err := herdr.NewClient(socket).WorkspaceCreate(context.Background(), herdr.WorkspaceCreateParams{Label: "fleetd:ns/a:1"}); err != nil {
		t.Fatal(err)
	}
	uid, _, _ := srv.WorkspaceUser("fleetd:ns/a:1")

	call, _ := json.Marshal(clientCall{Socket: socket, Conns: conns})
	cmd := exec.Command(clientBinary(t, dir))
	cmd.Env = []string{asClientEnv + "=" + string(call)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("holding connections as user %d: %v", uid, err)
	}
	if want := fmt.Sprintf("refused=%d held=%d", conns-limit, limit); string(out) != want {
		t.Fatalf("user %d's %d connections: %s, want %s", uid, conns, out, want)
	}

	// fleetd's own connections are not bounded: as many at once as it
	// likes all get their answers.
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			if _, err := herdr.NewClient(socket).Ping(context.Background()); err != nil {
				t.Errorf("ping as the server's own user: %v", err)
			}
		})
	}
	wg.Wait()
}

// TestOutputFloodHeldBack: a program flooding its pane is held back to the
// pane's output rate (the server reads no faster, so the program's writes
// block), and it is not killed: it stops when asked and the pane carries
// on.
func TestOutputFloodHeldBack(t *testing.T) {
	const rate, burst = 32 << 10, 32 << 10
	h := newHarness(t, func(o *paneserver.Options) { o.OutputRate, o.OutputBurst = rate, burst })
	pane := h.pane()
	start := time.Now()
	h.run(pane, "seq 1 5000000")
	// The highest number on the screen says how much output the server
	// took in; it may be no more than the burst and the rate since the
	// flood began allow.
	var last int
	testutil.Eventually(t, "the flood under way", func() error {
		read, err := h.direct.PaneRead(context.Background(), herdr.ReadParams{PaneID: pane, Source: herdr.ReadSourceVisible})
		if err != nil {
			return err
		}
		elapsed := time.Since(start)
		for _, f := range strings.Fields(read.Text) {
			// The typed command holds 5000000 too.
			if n, err := strconv.Atoi(f); err == nil && n > last && n < 5000000 {
				last = n
			}
		}
		// 4 KiB for the prompt and the typed command.
		if allowed := burst + 4<<10 + int(elapsed.Seconds()*rate); seqBytes(last) > allowed {
			t.Fatalf("the server took in %d bytes of output in %v, more than the %d its rate allows", seqBytes(last), elapsed, allowed)
		}
		return errIf(last < 20000, "at %d", last)
	})
	if err := h.direct.PaneSendKeys(context.Background(), pane, "ctrl+c"); err != nil {
		t.Fatal(err)
	}
	h.run(pane, "echo after-the-$((6*7))-flood")
	// The line may be typed while the flood's tail still drains: the
	// terminal echoes it after the ^C, and the shell's prompt then comes
	// before the output, on the output's line. The output is the line that
	// ends with it and is not the typed command.
	testutil.Eventually(t, "the pane to carry on after the flood", func() error {
		read, err := h.direct.PaneRead(context.Background(), herdr.ReadParams{PaneID: pane, Source: herdr.ReadSourceRecentUnwrapped, Lines: ptr(1000)})
		if err != nil {
			return err
		}
		for line := range strings.SplitSeq(read.Text, "\n") {
			if strings.HasSuffix(line, "after-the-42-flood") && !strings.Contains(line, "$((") {
				return nil
			}
		}
		lines := strings.Split(strings.TrimSpace(read.Text), "\n")
		return fmt.Errorf("pane ends:\n%s", strings.Join(lines[max(0, len(lines)-5):], "\n"))
	})
}

// seqBytes is how many bytes seq 1 n writes.
func seqBytes(n int) int {
	total := 0
	for digits, lo := 1, 1; lo <= n; digits, lo = digits+1, lo*10 {
		hi := min(n, lo*10-1)
		total += (hi - lo + 1) * (digits + 1)
	}
	return total
}

func errIf(cond bool, format string, args ...any) error {
	if cond {
		return fmt.Errorf(format, args...)
	}
	return nil
}

// holdWatches opens n subscriptions to pane.output_matched of pane at
// once, each on a connection of its own, and keeps every one open until
// all have been answered; it prints how many the server refused
// (server_unavailable) and how many it started.
func holdWatches(socket, pane string, n int) int {
	line := fmt.Sprintf(`{"id":"w","method":"events.subscribe","params":{"subscriptions":[{"type":"pane.output_matched","pane_id":%q,"source":"recent","match":{"type":"substring","value":"never-printed"}}]}}`+"\n", pane)
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, conn := range conns {
			conn.Close()
		}
	}()
	for range n {
		conn, err := net.Dial("unix", socket)
		if err != nil {
			fmt.Printf("dial: %v", err)
			return 0
		}
		conns = append(conns, conn)
	}
	refused, started, other := 0, 0, ""
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, conn := range conns {
		wg.Go(func() {
			_ = conn.SetDeadline(time.Now().Add(time.Minute))
			if _, err := conn.Write([]byte(line)); err != nil {
				mu.Lock()
				other = err.Error()
				mu.Unlock()
				return
			}
			answer, _ := bufio.NewReader(conn).ReadBytes('\n')
			var resp struct {
				Result *struct {
					Type string `json:"type"`
				} `json:"result"`
				Error *herdr.Error `json:"error"`
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case json.Unmarshal(answer, &resp) != nil:
				other = string(answer)
			case resp.Error != nil && resp.Error.Code == herdr.CodeServerUnavailable:
				refused++
			case resp.Result != nil && resp.Result.Type == herdr.ResultSubscriptionStarted:
				started++
			default:
				other = string(answer)
			}
		})
	}
	wg.Wait()
	if other != "" {
		fmt.Printf("unexpected answer: %s", other)
		return 0
	}
	fmt.Printf("refused=%d started=%d", refused, started)
	return 0
}

// TestOutputWatchesPerUser: a member's user subscribing to its own
// pane's output many times at once is refused past
// MaxOutputWatchesPerUser, however the subscriptions are spread over
// connections, and may watch again once they end.
func TestOutputWatchesPerUser(t *testing.T) {
	const limit, watches = 3, 12
	if !paneserver.CanSwitchUsers() {
		t.Skip("needs root, or CAP_SETUID and CAP_SETGID")
	}
	dir := shortTempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "herdr.sock")
	srv, err := paneserver.New(paneserver.Options{
		SocketPath: socket, Shell: "/bin/sh", Cwd: dir, MaxOutputWatchesPerUser: limit,
		Users: &paneserver.UserOptions{HomeRoot: filepath.Join(dir, "users")},
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	defer srv.Close()
	created, err := herdr.NewClient(socket).WorkspaceCreate(context.Background(), herdr.WorkspaceCreateParams{Label: "fleetd:ns/a:1"})
	if err != nil {
		t.Fatal(err)
	}
	pane := created.RootPane.PaneID
	uid, _, _ := srv.WorkspaceUser("fleetd:ns/a:1")

	call, _ := json.Marshal(clientCall{Socket: socket, Watches: watches, Pane: pane})
	cmd := exec.Command(clientBinary(t, dir))
	cmd.Env = []string{asClientEnv + "=" + string(call)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("watching pane %s as user %d: %v", pane, uid, err)
	}
	if want := fmt.Sprintf("refused=%d started=%d", watches-limit, limit); string(out) != want {
		t.Fatalf("user %d's %d watches of its own pane: %s, want %s", uid, watches, out, want)
	}

	// The watches end with the user's connections: once the server has
	// seen them go, it may watch as much again.
	call, _ = json.Marshal(clientCall{Socket: socket, Watches: limit, Pane: pane})
	testutil.Eventually(t, "watching again after the connections closed", func() error {
		cmd := exec.Command(clientBinary(t, dir))
		cmd.Env = []string{asClientEnv + "=" + string(call)}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
		out, err := cmd.Output()
		if err != nil {
			return err
		}
		return errIf(string(out) != fmt.Sprintf("refused=0 started=%d", limit), "user %d: %s", uid, out)
	})
}
