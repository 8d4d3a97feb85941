package paneserver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

// waitReady polls agent.get the way herdr's CLI does until the agent can
// take a prompt.
func (h *harness) waitReady(target string) *herdr.AgentInfo {
	h.t.Helper()
	var agent *herdr.AgentInfo
	testutil.Eventually(h.t, "agent "+target+" is ready", func() error {
		var err error
		if agent, err = h.client.AgentGet(h.t.Context(), target); err != nil {
			return err
		}
		if !agent.InteractiveReady || agent.LaunchPending || agent.AgentStatus != herdr.AgentStatusIdle {
			return fmt.Errorf("agent is %+v", agent)
		}
		return nil
	}, testutil.Within(waitFor))
	return agent
}

func TestAgentStart(t *testing.T) {
	h := newHarness(t)
	pane := h.pane()
	started, err := h.client.AgentStart(t.Context(), herdr.AgentStartParams{Name: "a1", Kind: "claude", PaneID: pane, Args: []string{"-v"}})
	if err != nil {
		t.Fatalf("AgentStart() = %v", err)
	}
	if diff := cmp.Diff([]string{h.opts.AgentCommands["claude"], "-v"}, started.Argv); diff != "" {
		t.Errorf("AgentStart() argv mismatch (-want +got):\n%s", diff)
	}
	if !started.Agent.LaunchPending || *started.Agent.Name != "a1" || *started.Agent.Agent != "claude" || started.Agent.PaneID != pane {
		t.Errorf("AgentStart() agent = %+v, want a pending claude named a1 in %s", started.Agent, pane)
	}

	ready := h.waitReady("a1")
	if ready.PaneID != pane || ready.StateChangeSeq == 0 {
		t.Errorf("ready agent = %+v, want pane %s with a state change", ready, pane)
	}
	byPane, err := h.client.AgentGet(t.Context(), pane)
	if err != nil || *byPane.Name != "a1" {
		t.Errorf("AgentGet(pane id) = %+v, %v; want agent a1", byPane, err)
	}
	list, err := h.client.AgentList(t.Context())
	if err != nil || len(list) != 1 || list[0].PaneID != pane {
		t.Errorf("AgentList() = %+v, %v; want the one agent", list, err)
	}

	h.run(pane, "hello agent")
	testutil.Eventually(t, "the agent echoes", func() error {
		read, err := h.client.AgentRead(t.Context(), herdr.ReadParams{Target: "a1", Source: herdr.ReadSourceRecentUnwrapped})
		if err != nil {
			return err
		}
		if strings.Count(read.Text, "hello agent") < 2 {
			return fmt.Errorf("agent pane shows %q", read.Text)
		}
		return nil
	}, testutil.Within(waitFor))

	other := h.pane()
	cases := map[string]struct {
		params herdr.AgentStartParams
		want   error
	}{
		"pane already hosts an agent": {params: herdr.AgentStartParams{Name: "a2", Kind: "claude", PaneID: pane}, want: herdr.ErrAgentPaneBusy},
		"name taken":                  {params: herdr.AgentStartParams{Name: "a1", Kind: "claude", PaneID: other}, want: herdr.ErrAgentNameTaken},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := h.client.AgentStart(t.Context(), tc.params); !errors.Is(err, tc.want) {
				t.Errorf("AgentStart() = %v, want %v", err, tc.want)
			}
		})
	}

	// The agent quits back to its shell: herdr forgets it.
	if err := h.client.PaneSendKeys(t.Context(), pane, "ctrl+d"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the agent is released", func() error {
		_, err := h.client.AgentGet(t.Context(), "a1")
		if !errors.Is(err, herdr.ErrAgentNotFound) {
			return fmt.Errorf("AgentGet() = %v, want ErrAgentNotFound", err)
		}
		return nil
	}, testutil.Within(waitFor))
}

func TestAgentStartErrors(t *testing.T) {
	h := newHarness(t)
	pane := h.pane()
	busy := h.pane()
	h.run(busy, `sh -c 'echo "busy=[$$]"; exec sleep 600'`)
	h.waitLinePID(busy, "busy")

	cases := map[string]struct {
		params herdr.AgentStartParams
		want   error
	}{
		"name starts with a digit":  {params: herdr.AgentStartParams{Name: "1a", Kind: "claude", PaneID: pane}, want: herdr.ErrInvalidAgentName},
		"name has capitals":         {params: herdr.AgentStartParams{Name: "Agent", Kind: "claude", PaneID: pane}, want: herdr.ErrInvalidAgentName},
		"name too long":             {params: herdr.AgentStartParams{Name: "a" + strings.Repeat("b", 32), Kind: "claude", PaneID: pane}, want: herdr.ErrInvalidAgentName},
		"unknown kind":              {params: herdr.AgentStartParams{Name: "a1", Kind: "vim", PaneID: pane}, want: herdr.ErrUnsupportedAgentKind},
		"control character in arg":  {params: herdr.AgentStartParams{Name: "a1", Kind: "claude", PaneID: pane, Args: []string{"a\nb"}}, want: herdr.ErrInvalidAgentArgument},
		"timeout at the settle":     {params: herdr.AgentStartParams{Name: "a1", Kind: "claude", PaneID: pane, TimeoutMS: ptr(uint64(3000))}, want: herdr.ErrInvalidAgentTimeout},
		"timeout over five minutes": {params: herdr.AgentStartParams{Name: "a1", Kind: "claude", PaneID: pane, TimeoutMS: ptr(uint64(300001))}, want: herdr.ErrInvalidAgentTimeout},
		"unknown pane":              {params: herdr.AgentStartParams{Name: "a1", Kind: "claude", PaneID: "w9:p9"}, want: herdr.ErrAgentPaneNotFound},
		"a program is running":      {params: herdr.AgentStartParams{Name: "a1", Kind: "claude", PaneID: busy}, want: herdr.ErrAgentPaneBusy},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := h.client.AgentStart(t.Context(), tc.params); !errors.Is(err, tc.want) {
				t.Errorf("AgentStart() = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := h.client.AgentGet(t.Context(), "a1"); !errors.Is(err, herdr.ErrAgentNotFound) {
		t.Errorf("a refused start left an agent behind: AgentGet() = %v", err)
	}
	if _, err := h.client.AgentGet(t.Context(), pane); !errors.Is(err, herdr.ErrAgentNotFound) {
		t.Errorf("AgentGet() of a plain shell pane = %v, want ErrAgentNotFound", err)
	}
}

// writeAgentScript writes an executable that stands in for an agent.
func writeAgentScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestAgentPrompt(t *testing.T) {
	dir := shortTempDir(t)
	// codex stands for an agent that asks its terminal for bracketed paste.
	// HERDR_AGENT names it codex, as herdr identifies agents by it.
	pasting := writeAgentScript(t, dir, "pasting-agent", `export HERDR_AGENT=codex; printf '\033[?2004h'; exec cat -v`)
	h := newHarness(t, func(o *paneserver.Options) { o.AgentCommands["codex"] = pasting })

	plain, pasted := h.pane(), h.pane()
	for name, pane := range map[string]string{"plain": plain, "pasted": pasted} {
		kind := map[string]string{"plain": "claude", "pasted": "codex"}[name]
		if _, err := h.client.AgentStart(t.Context(), herdr.AgentStartParams{Name: name, Kind: kind, PaneID: pane, Args: []string{"-v"}}); err != nil {
			t.Fatalf("AgentStart(%s) = %v", name, err)
		}
		h.waitReady(name)
	}

	cases := map[string]struct {
		target, wantLine string
	}{
		"typed as is":                    {target: "plain", wantLine: "fix the bug"},
		"bracketed when the app asks so": {target: "pasted", wantLine: "^[[200~fix the bug^[[201~"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			agent, err := h.client.AgentPrompt(t.Context(), herdr.AgentPromptParams{Target: tc.target, Text: "fix the bug"})
			if err != nil {
				t.Fatalf("AgentPrompt() = %v", err)
			}
			if *agent.Name != tc.target {
				t.Errorf("AgentPrompt() agent = %+v", agent)
			}
			h.waitSubmitted(agent.PaneID, tc.wantLine)
		})
	}

	t.Run("refused while blocked", func(t *testing.T) {
		report(t, h, plain, herdr.AgentStateBlocked, nil)
		if _, err := h.client.AgentPrompt(t.Context(), herdr.AgentPromptParams{Target: "plain", Text: "yes"}); !errors.Is(err, herdr.ErrAgentBlocked) {
			t.Errorf("AgentPrompt() to a blocked agent = %v, want ErrAgentBlocked", err)
		}
		report(t, h, plain, herdr.AgentStateIdle, nil)
		if _, err := h.client.AgentPrompt(t.Context(), herdr.AgentPromptParams{Target: "plain", Text: "go on"}); err != nil {
			t.Errorf("AgentPrompt() once idle again = %v", err)
		}
		// herdr answers before it presses Enter: the next prompt waits
		// until this one was submitted.
		h.waitSubmitted(plain, "go on")
	})

	t.Run("wait holds until the agent reacts", func(t *testing.T) {
		before, err := h.client.AgentGet(t.Context(), "plain")
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			agent *herdr.AgentInfo
			err   error
		}
		done := make(chan result, 1)
		go func() {
			agent, err := h.client.AgentPrompt(t.Context(), herdr.AgentPromptParams{
				Target: "plain", Text: "long task",
				Wait: &herdr.AgentPromptWait{Until: []herdr.AgentStatus{herdr.AgentStatusWorking}, TimeoutMS: ptr(uint64(waitFor / time.Millisecond))},
			})
			done <- result{agent, err}
		}()
		h.waitSubmitted(plain, "long task")
		report(t, h, plain, herdr.AgentStateWorking, nil)
		got := <-done
		if got.err != nil {
			t.Fatalf("AgentPrompt() with wait = %v", got.err)
		}
		if got.agent.AgentStatus != herdr.AgentStatusWorking || got.agent.StateChangeSeq <= before.StateChangeSeq {
			t.Errorf("AgentPrompt() with wait = %+v, want working after seq %d", got.agent, before.StateChangeSeq)
		}
	})

	t.Run("wait times out", func(t *testing.T) {
		_, err := h.client.AgentPrompt(t.Context(), herdr.AgentPromptParams{
			Target: "pasted", Text: "quick",
			Wait: &herdr.AgentPromptWait{Until: []herdr.AgentStatus{herdr.AgentStatusBlocked}, TimeoutMS: ptr(uint64(200))},
		})
		if !errors.Is(err, herdr.ErrTimeout) {
			t.Errorf("AgentPrompt() = %v, want ErrTimeout", err)
		}
	})

	errCases := map[string]struct {
		params herdr.AgentPromptParams
		want   error
	}{
		"empty prompt":   {params: herdr.AgentPromptParams{Target: "plain"}, want: herdr.ErrEmptyAgentPrompt},
		"unknown agent":  {params: herdr.AgentPromptParams{Target: "nobody", Text: "hi"}, want: herdr.ErrAgentNotFound},
		"a plain shell ": {params: herdr.AgentPromptParams{Target: h.pane(), Text: "hi"}, want: herdr.ErrAgentNotFound},
	}
	for name, tc := range errCases {
		t.Run(name, func(t *testing.T) {
			if _, err := h.client.AgentPrompt(t.Context(), tc.params); !errors.Is(err, tc.want) {
				t.Errorf("AgentPrompt() = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestAgentPromptBeforeReady(t *testing.T) {
	h := newHarness(t, func(o *paneserver.Options) { o.AgentSettle = time.Hour })
	pane := h.pane()
	if _, err := h.client.AgentStart(t.Context(), herdr.AgentStartParams{Name: "slow", Kind: "claude", PaneID: pane}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.AgentPrompt(t.Context(), herdr.AgentPromptParams{Target: "slow", Text: "hi"}); !errors.Is(err, herdr.ErrAgentNotReady) {
		t.Errorf("AgentPrompt() during launch = %v, want ErrAgentNotReady", err)
	}
}

// report sends a hook report for pane as the test's reporter.
func report(t *testing.T, h *harness, pane string, state herdr.AgentState, seq *uint64) {
	t.Helper()
	err := h.direct.PaneReportAgent(t.Context(), herdr.PaneReportAgentParams{PaneID: pane, Source: "test", Agent: "claude", State: state, Seq: seq})
	if err != nil {
		t.Fatalf("PaneReportAgent(%s) = %v", state, err)
	}
}

func TestPaneReportAgent(t *testing.T) {
	h := newHarness(t)
	ws := h.workspace(herdr.WorkspaceCreateParams{})
	pane := ws.RootPane.PaneID
	reportAs := func(state herdr.AgentState, seq uint64) error {
		return h.client.PaneReportAgent(t.Context(), herdr.PaneReportAgentParams{
			PaneID: pane, Source: "fleetd", Agent: "my-agent", State: state, Seq: &seq,
			Message: ptr("because"), AgentSessionID: ptr("sess-1"),
		})
	}
	steps := []struct {
		state      herdr.AgentState
		seq        uint64
		wantStatus herdr.AgentStatus
		wantSeq    uint64
	}{
		{state: herdr.AgentStateWorking, seq: 10, wantStatus: herdr.AgentStatusWorking, wantSeq: 1},
		{state: herdr.AgentStateIdle, seq: 10, wantStatus: herdr.AgentStatusWorking, wantSeq: 1}, // stale
		{state: herdr.AgentStateIdle, seq: 9, wantStatus: herdr.AgentStatusWorking, wantSeq: 1},  // stale
		{state: herdr.AgentStateBlocked, seq: 11, wantStatus: herdr.AgentStatusBlocked, wantSeq: 2},
		{state: herdr.AgentStateBlocked, seq: 12, wantStatus: herdr.AgentStatusBlocked, wantSeq: 2}, // no change
		{state: herdr.AgentStateIdle, seq: 13, wantStatus: herdr.AgentStatusIdle, wantSeq: 3},
		{state: herdr.AgentStateUnknown, seq: 14, wantStatus: herdr.AgentStatusUnknown, wantSeq: 4},
	}
	for i, step := range steps {
		if err := reportAs(step.state, step.seq); err != nil {
			t.Fatalf("step %d: PaneReportAgent() = %v", i, err)
		}
		agent, err := h.client.AgentGet(t.Context(), pane)
		if err != nil {
			t.Fatalf("step %d: AgentGet() = %v", i, err)
		}
		if agent.AgentStatus != step.wantStatus || agent.StateChangeSeq != step.wantSeq {
			t.Errorf("step %d: agent is %s at seq %d, want %s at seq %d", i, agent.AgentStatus, agent.StateChangeSeq, step.wantStatus, step.wantSeq)
		}
	}

	if err := reportAs(herdr.AgentStateBlocked, 20); err != nil {
		t.Fatal(err)
	}
	agent, err := h.client.AgentGet(t.Context(), pane)
	if err != nil {
		t.Fatal(err)
	}
	// herdr keeps session ids from its own integrations only, says
	// interactive_ready of agent.start agents only, and skips screen
	// detection for its full-lifecycle integrations only.
	want := &herdr.AgentInfo{
		PaneID: pane, TerminalID: ws.RootPane.TerminalID, WorkspaceID: "w1", TabID: "w1:t1", Focused: true,
		AgentStatus: herdr.AgentStatusBlocked, Agent: ptr("my-agent"), StateChangeSeq: 5,
	}
	ignore := cmp.FilterPath(func(p cmp.Path) bool {
		name := p.Last().String()
		return name == ".Revision" || name == ".Cwd"
	}, cmp.Ignore())
	if diff := cmp.Diff(want, agent, ignore); diff != "" {
		t.Errorf("AgentGet() mismatch (-want +got):\n%s", diff)
	}
	snap, err := h.client.SessionSnapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if snap.Workspaces[0].AgentStatus != herdr.AgentStatusBlocked || snap.Tabs[0].AgentStatus != herdr.AgentStatusBlocked || len(snap.Agents) != 1 {
		t.Errorf("snapshot does not roll the blocked agent up: %+v %+v", snap.Workspaces, snap.Tabs)
	}

	errCases := map[string]struct {
		params herdr.PaneReportAgentParams
		want   error
	}{
		"unknown pane":      {params: herdr.PaneReportAgentParams{PaneID: "w9:p9", Source: "s", Agent: "a", State: herdr.AgentStateIdle}, want: herdr.ErrPaneNotFound},
		"empty agent":       {params: herdr.PaneReportAgentParams{PaneID: pane, Source: "s", Agent: " ", State: herdr.AgentStateIdle}, want: herdr.ErrInvalidAgent},
		"state not in enum": {params: herdr.PaneReportAgentParams{PaneID: pane, Source: "s", Agent: "a", State: "done"}, want: herdr.ErrInvalidRequest},
	}
	for name, tc := range errCases {
		t.Run(name, func(t *testing.T) {
			// Straight to the server: the relay would flag the bad enum.
			if err := h.direct.PaneReportAgent(t.Context(), tc.params); !errors.Is(err, tc.want) {
				t.Errorf("PaneReportAgent() = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestAgentWait(t *testing.T) {
	h := newHarness(t)
	pane := h.pane()
	report(t, h, pane, herdr.AgentStateWorking, nil)

	t.Run("returns at once when already there", func(t *testing.T) {
		agent, err := h.client.AgentWait(t.Context(), herdr.AgentWaitParams{Target: pane, Until: []herdr.AgentStatus{herdr.AgentStatusWorking}})
		if err != nil || agent.AgentStatus != herdr.AgentStatusWorking {
			t.Errorf("AgentWait() = %+v, %v; want working", agent, err)
		}
	})
	t.Run("holds until the status arrives", func(t *testing.T) {
		done := make(chan error, 1)
		go func() {
			agent, err := h.client.AgentWait(t.Context(), herdr.AgentWaitParams{Target: pane})
			if err == nil && agent.AgentStatus != herdr.AgentStatusBlocked {
				err = fmt.Errorf("woke with status %s", agent.AgentStatus)
			}
			done <- err
		}()
		// The wait must still hold while the agent keeps working.
		select {
		case err := <-done:
			t.Fatalf("AgentWait() returned while working: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		report(t, h, pane, herdr.AgentStateBlocked, nil)
		if err := <-done; err != nil {
			t.Errorf("AgentWait() = %v", err)
		}
	})
	t.Run("times out on the server", func(t *testing.T) {
		_, err := h.client.AgentWait(t.Context(), herdr.AgentWaitParams{Target: pane, Until: []herdr.AgentStatus{herdr.AgentStatusIdle}, TimeoutMS: ptr(uint64(100))})
		if !errors.Is(err, herdr.ErrTimeout) {
			t.Errorf("AgentWait() = %v, want ErrTimeout", err)
		}
	})
	t.Run("ends with the context", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		_, err := h.client.AgentWait(ctx, herdr.AgentWaitParams{Target: pane, Until: []herdr.AgentStatus{herdr.AgentStatusIdle}})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("AgentWait() = %v, want context.DeadlineExceeded", err)
		}
	})
	t.Run("unknown agent", func(t *testing.T) {
		if _, err := h.client.AgentWait(t.Context(), herdr.AgentWaitParams{Target: "nobody"}); !errors.Is(err, herdr.ErrAgentNotFound) {
			t.Errorf("AgentWait() = %v, want ErrAgentNotFound", err)
		}
	})
	t.Run("agent goes away", func(t *testing.T) {
		done := make(chan error, 1)
		go func() {
			_, err := h.client.AgentWait(t.Context(), herdr.AgentWaitParams{Target: pane, Until: []herdr.AgentStatus{herdr.AgentStatusIdle}})
			done <- err
		}()
		time.Sleep(50 * time.Millisecond) // let the wait begin; either order must end in an error
		if err := h.client.PaneClose(t.Context(), pane); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !errors.Is(err, herdr.ErrAgentNotRunning) && !errors.Is(err, herdr.ErrAgentNotFound) {
			t.Errorf("AgentWait() = %v, want ErrAgentNotRunning", err)
		}
	})
}

// TestHeldCallEndsOnClientByte checks herdr's rule for held-open calls: any
// byte or half-close from the client is a disconnect, answered with nothing.
func TestHeldCallEndsOnClientByte(t *testing.T) {
	h := newHarness(t)
	pane := h.pane()
	report(t, h, pane, herdr.AgentStateWorking, nil)
	request := fmt.Sprintf(`{"id":"w","method":"agent.wait","params":{"target":%q,"until":["idle"]}}`+"\n", pane)

	cases := map[string]func(*net.UnixConn) error{
		"another byte": func(c *net.UnixConn) error { _, err := c.Write([]byte("x")); return err },
		"half-close":   func(c *net.UnixConn) error { return c.CloseWrite() },
	}
	for name, disconnect := range cases {
		t.Run(name, func(t *testing.T) {
			conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: h.opts.SocketPath, Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write([]byte(request)); err != nil {
				t.Fatal(err)
			}
			if err := disconnect(conn); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(waitFor))
			got, err := io.ReadAll(conn)
			if err != nil || len(got) != 0 {
				t.Errorf("after the disconnect the server sent %q, %v; want the connection closed unanswered", got, err)
			}
		})
	}
}

// waitSubmitted waits until cat, the stand-in agent, printed line back: the
// prompt was submitted (the terminal's echo alone shows it once).
func (h *harness) waitSubmitted(paneID, line string) {
	h.t.Helper()
	testutil.Eventually(h.t, fmt.Sprintf("pane %s shows %q submitted", paneID, line), func() error {
		read, err := h.client.PaneRead(h.t.Context(), herdr.ReadParams{PaneID: paneID, Source: herdr.ReadSourceRecentUnwrapped, Lines: ptr(1000)})
		if err != nil {
			return err
		}
		n := 0
		for l := range strings.SplitSeq(read.Text, "\n") {
			if l == line {
				n++
			}
		}
		if n < 2 {
			return fmt.Errorf("pane shows:\n%s", read.Text)
		}
		return nil
	}, testutil.Within(waitFor))
}
