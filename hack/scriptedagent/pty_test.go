package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/google/go-cmp/cmp"

	"github.com/fleetd/fleetd/internal/testutil"
)

// buildAgent builds the scripted-agent binary into a temporary directory.
func buildAgent(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build the agent: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "scripted-agent")
	cmd := exec.Command(goTool, "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// screen collects what the agent writes to its terminal.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// pane is the agent running in a terminal, as in a herdr pane.
type pane struct {
	t        *testing.T
	tty      *os.File
	screen   *screen
	herdr    *fakeHerdr
	received string
	exited   chan struct{}
	exitErr  error
}

// startPane runs bin in a new pseudo-terminal with herdr's environment and
// the given extra variables, and waits for the agent to report idle.
func startPane(t *testing.T, bin string, env ...string) *pane {
	t.Helper()
	p := &pane{
		t:        t,
		screen:   &screen{},
		herdr:    newFakeHerdr(t),
		received: filepath.Join(t.TempDir(), "received.jsonl"),
		exited:   make(chan struct{}),
	}
	cmd := exec.Command(bin)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLEETD_") && !strings.HasPrefix(kv, "HERDR_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env,
		"HERDR_SOCKET_PATH="+p.herdr.socketPath,
		"HERDR_PANE_ID=w1:p1",
		"FLEETD_AGENT_RECEIVED_LOG="+p.received,
	)
	cmd.Env = append(cmd.Env, env...)
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		t.Fatalf("starting the agent in a terminal: %v", err)
	}
	p.tty = tty
	// Reading stops with an error once the agent exits and the terminal
	// closes; until then it keeps the agent from blocking on output.
	go func() { _, _ = p.screen.copyFrom(tty) }()
	go func() {
		p.exitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
		_ = tty.Close()
	})
	p.waitStates(stateIdle)
	return p
}

// copyFrom copies r into the screen until r fails.
func (s *screen) copyFrom(r *os.File) (int64, error) {
	var n int64
	buf := make([]byte, 4096)
	for {
		m, err := r.Read(buf)
		if m > 0 {
			_, _ = s.Write(buf[:m])
			n += int64(m)
		}
		if err != nil {
			return n, err
		}
	}
}

// typeText writes to the terminal as a keyboard or herdr would.
func (p *pane) typeText(s string) {
	p.t.Helper()
	if _, err := p.tty.Write([]byte(s)); err != nil {
		p.t.Fatalf("typing %q: %v", s, err)
	}
}

// waitStates waits until the reported states are exactly want.
func (p *pane) waitStates(want ...string) {
	p.t.Helper()
	testutil.Eventually(p.t, "states "+strings.Join(want, ","), func() (bool, string) {
		states := p.herdr.states()
		return slices.Equal(states, want), "reported " + strings.Join(states, ",") + "; screen:\n" + p.screen.String()
	}, testutil.Within(20*time.Second))
}

// waitScreen waits until the screen shows text.
func (p *pane) waitScreen(text string) {
	p.t.Helper()
	testutil.Eventually(p.t, "screen to show "+text, func() (bool, string) {
		screen := p.screen.String()
		return strings.Contains(screen, text), "screen:\n" + screen
	}, testutil.Within(20*time.Second))
}

// waitExit waits for the agent to exit and returns its exit status.
func (p *pane) waitExit() int {
	p.t.Helper()
	testutil.Eventually(p.t, "the agent to exit", func() (bool, string) {
		select {
		case <-p.exited:
			return true, ""
		default:
			return false, "screen:\n" + p.screen.String()
		}
	}, testutil.Within(20*time.Second))
	var exit *exec.ExitError
	if errors.As(p.exitErr, &exit) {
		return exit.ExitCode()
	}
	if p.exitErr != nil {
		p.t.Fatalf("waiting for the agent: %v", p.exitErr)
	}
	return 0
}

func TestAgentInTerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildAgent(t)

	t.Run("pasted prompt is one turn", func(t *testing.T) {
		gateway := newFakeGateway(t, "main", "")
		p := startPane(t, bin, "FLEETD_MCP_URL="+gateway.url, "FLEETD_TOKEN="+testToken)
		p.waitScreen(enableBracketedPaste)
		p.waitScreen(defaultPrompt)

		// herdr pastes the prompt, then presses Enter separately.
		p.typeText(paste("first line\nsecond line"))
		p.typeText("\r")
		p.waitStates(stateIdle, stateWorking, stateIdle)

		wantCalls := []toolCall{{Tool: toolReply, Content: "echo: first line\nsecond line"}}
		if diff := cmp.Diff(wantCalls, gateway.recorded()); diff != "" {
			t.Errorf("gateway calls (-want +got):\n%s\nscreen:\n%s", diff, p.screen.String())
		}
		if diff := cmp.Diff([]string{"first line\nsecond line"}, readReceived(t, p.received)); diff != "" {
			t.Errorf("received log (-want +got):\n%s", diff)
		}
		reports := p.herdr.recorded()
		for i, r := range reports {
			if r.PaneID != "w1:p1" || r.Source != "scripted-agent" || r.Agent != "scripted" {
				t.Errorf("report %d = %+v, want pane w1:p1, source scripted-agent, agent scripted", i, r)
			}
			if r.Seq == nil || i > 0 && reports[i-1].Seq != nil && *r.Seq <= *reports[i-1].Seq {
				t.Errorf("report %d has seq %v, want one above the report before", i, r.Seq)
			}
			if r.AgentSessionID == nil || *r.AgentSessionID == "" || *r.AgentSessionID != *reports[0].AgentSessionID {
				t.Errorf("report %d has agent session id %v, want the same non-empty id in every report", i, r.AgentSessionID)
			}
		}

		p.typeText("\x04")
		if code := p.waitExit(); code != 0 {
			t.Errorf("Ctrl-D: agent exited with status %d, want 0", code)
		}
		p.waitScreen(disableBracketedPaste)
	})

	t.Run("dialog blocks until a key", func(t *testing.T) {
		p := startPane(t, bin)
		p.typeText("dialog: Allow edits?\r")
		p.waitStates(stateIdle, stateWorking, stateBlocked)
		p.waitScreen("press any key")
		// Nothing moves while the dialog waits for its key.
		if diff := cmp.Diff([]string{stateIdle, stateWorking, stateBlocked}, p.herdr.states()); diff != "" {
			t.Errorf("states before the key (-want +got):\n%s", diff)
		}

		p.typeText("y")
		p.waitStates(stateIdle, stateWorking, stateBlocked, stateWorking, stateIdle)
		if diff := cmp.Diff([]string{"dialog: Allow edits?"}, readReceived(t, p.received)); diff != "" {
			t.Errorf("received log (-want +got):\n%s", diff)
		}

		p.typeText("\x03")
		if code := p.waitExit(); code != 130 {
			t.Errorf("Ctrl-C: agent exited with status %d, want 130", code)
		}
	})

	t.Run("Ctrl-C ends a turn, not the agent", func(t *testing.T) {
		p := startPane(t, bin)
		p.typeText("sleep: 30\r")
		p.waitStates(stateIdle, stateWorking)
		p.typeText("\x03")
		p.waitStates(stateIdle, stateWorking, stateIdle)
		p.waitScreen("the turn was interrupted")
		p.typeText("silent: still here\r")
		p.waitStates(stateIdle, stateWorking, stateIdle, stateWorking, stateIdle)
		if diff := cmp.Diff([]string{"sleep: 30", "silent: still here"}, readReceived(t, p.received)); diff != "" {
			t.Errorf("received log (-want +got):\n%s", diff)
		}
	})

	t.Run("crash exits non-zero", func(t *testing.T) {
		p := startPane(t, bin)
		p.typeText("crash: 3\r")
		if code := p.waitExit(); code != 3 {
			t.Errorf("agent exited with status %d, want 3", code)
		}
		if diff := cmp.Diff([]string{stateIdle, stateWorking}, p.herdr.states()); diff != "" {
			t.Errorf("states (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"crash: 3"}, readReceived(t, p.received)); diff != "" {
			t.Errorf("received log (-want +got):\n%s", diff)
		}
	})
}
