package paneserver_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

// reportStep is one report or release in a sequence, and what the pane
// shows afterwards.
type reportStep struct {
	source, agent string
	state         herdr.AgentState
	seq           *uint64
	session       string
	release       bool
	clear         bool

	wantAgent   string
	wantStatus  herdr.AgentStatus
	wantSession string // source of the kept session, "" for none
}

// TestReportAuthority encodes herdr's rules for pane.report_agent: every
// report is answered ok, and what takes effect is decided per source by
// seq, by who owns the pane's conversation, and by release.
func TestReportAuthority(t *testing.T) {
	seq := func(n uint64) *uint64 { return &n }
	cases := map[string][]reportStep{
		"the latest custom source wins": {
			{source: "a", agent: "worker", state: herdr.AgentStateWorking, wantAgent: "worker", wantStatus: herdr.AgentStatusWorking},
			{source: "b", agent: "worker", state: herdr.AgentStateIdle, wantAgent: "worker", wantStatus: herdr.AgentStatusIdle},
		},
		"a sequenced source ignores its reports without seq": {
			{source: "a", agent: "worker", state: herdr.AgentStateWorking, seq: seq(5), wantAgent: "worker", wantStatus: herdr.AgentStatusWorking},
			{source: "a", agent: "worker", state: herdr.AgentStateIdle, wantAgent: "worker", wantStatus: herdr.AgentStatusWorking},
			{source: "a", agent: "worker", state: herdr.AgentStateIdle, seq: seq(5), wantAgent: "worker", wantStatus: herdr.AgentStatusWorking},
			{source: "a", agent: "worker", state: herdr.AgentStateIdle, seq: seq(6), wantAgent: "worker", wantStatus: herdr.AgentStatusIdle},
			// Seqs are per source.
			{source: "b", agent: "worker", state: herdr.AgentStateBlocked, seq: seq(1), wantAgent: "worker", wantStatus: herdr.AgentStatusBlocked},
		},
		"custom sources never keep a session id": {
			{source: "fleetd", agent: "claude", state: herdr.AgentStateIdle, session: "s-1", wantAgent: "claude", wantStatus: herdr.AgentStatusIdle},
		},
		"herdr's own claude integration names the session and owns the pane": {
			// Its state is ignored: herdr reads Claude's status from the screen.
			{source: "herdr:claude", agent: "claude", state: herdr.AgentStateWorking, session: "s-1", wantStatus: herdr.AgentStatusUnknown, wantSession: "herdr:claude"},
			// Another source's reports are dropped, and still answered ok.
			{source: "fleetd", agent: "claude", state: herdr.AgentStateWorking, wantStatus: herdr.AgentStatusUnknown, wantSession: "herdr:claude"},
			// With no report in authority there is nothing to clear.
			{source: "fleetd", clear: true, wantStatus: herdr.AgentStatusUnknown, wantSession: "herdr:claude"},
			{source: "fleetd", agent: "claude", state: herdr.AgentStateIdle, seq: seq(9), wantStatus: herdr.AgentStatusUnknown, wantSession: "herdr:claude"},
		},
		"clearing a report forgets it": {
			{source: "fleetd", agent: "claude", state: herdr.AgentStateWorking, seq: seq(1), wantAgent: "claude", wantStatus: herdr.AgentStatusWorking},
			// Without a seq, a sequenced source's clear is ignored like its reports.
			{source: "fleetd", clear: true, wantAgent: "claude", wantStatus: herdr.AgentStatusWorking},
			{source: "fleetd", clear: true, seq: seq(2), wantStatus: herdr.AgentStatusUnknown},
		},
		"a release by its source gives the pane up": {
			{source: "fleetd", agent: "claude", state: herdr.AgentStateWorking, seq: seq(1), wantAgent: "claude", wantStatus: herdr.AgentStatusWorking},
			{source: "other", agent: "claude", release: true, wantAgent: "claude", wantStatus: herdr.AgentStatusWorking},
			{source: "fleetd", agent: "claude", release: true, seq: seq(2), wantStatus: herdr.AgentStatusUnknown},
		},
		"a release by herdr's own integration does nothing": {
			{source: "herdr:codex", agent: "codex", release: true, wantStatus: herdr.AgentStatusUnknown},
		},
		"aliases report as their kind": {
			{source: "q", agent: "Qwen Code", state: herdr.AgentStateIdle, wantAgent: "qwen", wantStatus: herdr.AgentStatusIdle},
		},
	}
	h := newHarness(t)
	for name, steps := range cases {
		t.Run(name, func(t *testing.T) {
			pane := h.pane()
			for i, st := range steps {
				var err error
				switch {
				case st.release:
					err = h.client.PaneReleaseAgent(t.Context(), herdr.PaneReleaseAgentParams{PaneID: pane, Source: st.source, Agent: st.agent, Seq: st.seq})
				case st.clear:
					err = h.client.PaneClearAgentAuthority(t.Context(), herdr.PaneClearAgentAuthorityParams{PaneID: pane, Seq: st.seq})
				default:
					p := herdr.PaneReportAgentParams{PaneID: pane, Source: st.source, Agent: st.agent, State: st.state, Seq: st.seq}
					if st.session != "" {
						p.AgentSessionID = &st.session
					}
					err = h.client.PaneReportAgent(t.Context(), p)
				}
				if err != nil {
					t.Fatalf("step %d: %v, want ok whatever the report changes", i, err)
				}
				snap, err := h.client.SessionSnapshot(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				var got *herdr.PaneInfo
				for j := range snap.Panes {
					if snap.Panes[j].PaneID == pane {
						got = &snap.Panes[j]
					}
				}
				session := ""
				if got.AgentSession != nil {
					session = got.AgentSession.Source
				}
				if deref(got.Agent) != st.wantAgent || got.AgentStatus != st.wantStatus || session != st.wantSession {
					t.Errorf("step %d: pane shows agent %q %s session %q; want %q %s session %q",
						i, deref(got.Agent), got.AgentStatus, session, st.wantAgent, st.wantStatus, st.wantSession)
				}
			}
		})
	}
}

// TestReportOutlivesNothingButItsAgent checks what ends a report: a report
// that names the agent running in the pane lapses when that agent exits;
// a report under a label herdr does not know survives the exit.
func TestReportOutlivesNothingButItsAgent(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		label     string
		wantAgent string
	}{{"claude", ""}, {"fleet-worker", "fleet-worker"}} {
		t.Run(tc.label, func(t *testing.T) {
			pane := h.pane()
			h.run(pane, h.opts.AgentCommands["claude"])
			h.awaitAgent(pane, "claude")
			if err := h.client.PaneReportAgent(t.Context(), herdr.PaneReportAgentParams{PaneID: pane, Source: "fleetd", Agent: tc.label, State: herdr.AgentStateWorking}); err != nil {
				t.Fatal(err)
			}
			if err := h.client.PaneSendKeys(t.Context(), pane, "ctrl+d"); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, "the pane shows what outlives the agent", func() error {
				info, err := h.paneInfo(pane)
				if err != nil {
					return err
				}
				if deref(info.Agent) != tc.wantAgent {
					return fmt.Errorf("pane shows agent %q (%s), want %q", deref(info.Agent), info.AgentStatus, tc.wantAgent)
				}
				return nil
			}, testutil.Within(waitFor))
		})
	}
}

// TestAgentPromptRefusesWhatHerdrDoesNotKnow: herdr types prompts only into
// an agent of a known kind that is the pane's foreground process.
func TestAgentPromptRefusesWhatHerdrDoesNotKnow(t *testing.T) {
	h := newHarness(t)
	custom := h.pane()
	if err := h.client.PaneReportAgent(t.Context(), herdr.PaneReportAgentParams{PaneID: custom, Source: "scripted-agent", Agent: "scripted", State: herdr.AgentStateIdle}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.AgentPrompt(t.Context(), herdr.AgentPromptParams{Target: custom, Text: "hi"}); !errors.Is(err, herdr.ErrAgentNotReady) {
		t.Errorf("AgentPrompt() to an agent of an unknown kind = %v, want ErrAgentNotReady", err)
	}

	// A report says claude, but the shell, not claude, runs in the pane.
	shell := h.pane()
	if err := h.client.PaneReportAgent(t.Context(), herdr.PaneReportAgentParams{PaneID: shell, Source: "fleetd", Agent: "claude", State: herdr.AgentStateIdle}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.AgentPrompt(t.Context(), herdr.AgentPromptParams{Target: shell, Text: "hi"}); !errors.Is(err, herdr.ErrAgentNotReady) {
		t.Errorf("AgentPrompt() to a pane whose foreground is not the agent = %v, want ErrAgentNotReady", err)
	}

	// An idle agent that shows no change after a prompt has stalled.
	started := h.pane()
	if _, err := h.client.AgentStart(t.Context(), herdr.AgentStartParams{Name: "quiet", Kind: "claude", PaneID: started}); err != nil {
		t.Fatal(err)
	}
	h.waitReady("quiet")
	_, err := h.client.AgentPrompt(t.Context(), herdr.AgentPromptParams{Target: "quiet", Text: "anyone?", Wait: &herdr.AgentPromptWait{Until: []herdr.AgentStatus{herdr.AgentStatusWorking}}})
	if !errors.Is(err, herdr.ErrAgentPromptStalled) {
		t.Errorf("AgentPrompt() with wait to an agent that never reacts = %v, want ErrAgentPromptStalled", err)
	}
}

// TestAgentStartReadiness encodes herdr's launch rules: ready no sooner than
// the settle delay, only as the started kind and idle; a report alone does
// not make it ready early; a dialog before readiness parks the launch with
// no deadline.
func TestAgentStartReadiness(t *testing.T) {
	const settle = 1500 * time.Millisecond
	h := newHarness(t, func(o *paneserver.Options) { o.AgentSettle = settle })

	t.Run("a report does not make it ready before the settle delay", func(t *testing.T) {
		pane := h.pane()
		start := time.Now()
		if _, err := h.client.AgentStart(t.Context(), herdr.AgentStartParams{Name: "early", Kind: "claude", PaneID: pane}); err != nil {
			t.Fatal(err)
		}
		if err := h.client.PaneReportAgent(t.Context(), herdr.PaneReportAgentParams{PaneID: pane, Source: "fleetd", Agent: "claude", State: herdr.AgentStateIdle}); err != nil {
			t.Fatal(err)
		}
		h.waitReady("early")
		if took := time.Since(start); took < settle {
			t.Errorf("ready after %s, before the settle delay of %s", took, settle)
		}
	})

	t.Run("blocked at start waits past its deadline", func(t *testing.T) {
		pane := h.pane()
		timeout := uint64(3100)
		start := time.Now()
		if _, err := h.client.AgentStart(t.Context(), herdr.AgentStartParams{Name: "dialog", Kind: "claude", PaneID: pane, TimeoutMS: &timeout}); err != nil {
			t.Fatal(err)
		}
		h.awaitAgent(pane, "claude")
		if err := h.client.PaneReportAgent(t.Context(), herdr.PaneReportAgentParams{PaneID: pane, Source: "fleetd", Agent: "claude", State: herdr.AgentStateBlocked}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the start timeout passes", func() error {
			if time.Since(start) < time.Duration(timeout)*time.Millisecond+500*time.Millisecond {
				return errors.New("not yet")
			}
			return nil
		}, testutil.Within(waitFor))
		agent, err := h.client.AgentGet(t.Context(), "dialog")
		if err != nil {
			t.Fatalf("AgentGet() after the deadline = %v; a blocked launch keeps its name", err)
		}
		if !agent.LaunchPending || agent.InteractiveReady || agent.AgentStatus != herdr.AgentStatusBlocked {
			t.Errorf("agent = %+v, want a pending, blocked launch", agent)
		}
		if err := h.client.PaneReportAgent(t.Context(), herdr.PaneReportAgentParams{PaneID: pane, Source: "fleetd", Agent: "claude", State: herdr.AgentStateIdle}); err != nil {
			t.Fatal(err)
		}
		h.waitReady("dialog")
	})

	t.Run("a launch that never shows its agent loses its name", func(t *testing.T) {
		h2 := newHarness(t, func(o *paneserver.Options) { o.AgentCommands["claude"] = "sleep 600; :" })
		pane := h2.pane()
		timeout := uint64(3100)
		if _, err := h2.client.AgentStart(t.Context(), herdr.AgentStartParams{Name: "never", Kind: "claude", PaneID: pane, TimeoutMS: &timeout}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the name is dropped at the deadline", func() error {
			if _, err := h2.client.AgentGet(t.Context(), "never"); !errors.Is(err, herdr.ErrAgentNotFound) {
				return fmt.Errorf("AgentGet() = %v", err)
			}
			return nil
		}, testutil.Within(waitFor))
	})
}

// TestRestartRestoresLayout checks herdr's restart: the layout returns with
// the same ids and fresh shells showing their old output; an agent that
// herdr's own integration reported is resumed under its name and ready at
// once; other agents are gone, so their names are free again.
func TestRestartRestoresLayout(t *testing.T) {
	h := newHarness(t, func(o *paneserver.Options) {
		o.SessionFile = filepath.Join(o.Cwd, "session.json")
		o.SaveDelay = 50 * time.Millisecond
		// A claude that takes --resume: cat, which herdr knows as claude by
		// the hint in its environment.
		o.AgentCommands["claude"] = writeScript(t, o.Cwd, "resumable-claude", "export HERDR_AGENT=claude\nexec cat")
	})
	official := h.workspace(herdr.WorkspaceCreateParams{Label: "kept"})
	custom := h.workspace(herdr.WorkspaceCreateParams{Label: "mine"})
	for name, ws := range map[string]*herdr.WorkspaceCreated{"resumed": official, "forgotten": custom} {
		if _, err := h.client.AgentStart(t.Context(), herdr.AgentStartParams{Name: name, Kind: "claude", PaneID: ws.RootPane.PaneID}); err != nil {
			t.Fatal(err)
		}
		h.waitReady(name)
	}
	h.run(custom.RootPane.PaneID, "before the restart")
	h.waitSubmitted(custom.RootPane.PaneID, "before the restart")
	if err := h.client.PaneReportAgent(t.Context(), herdr.PaneReportAgentParams{
		PaneID: official.RootPane.PaneID, Source: "herdr:claude", Agent: "claude", State: herdr.AgentStateIdle, AgentSessionID: ptr("conversation-7"),
	}); err != nil {
		t.Fatal(err)
	}

	h.restart()

	snap, err := h.client.SessionSnapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var ids, labels []string
	for _, ws := range snap.Workspaces {
		ids, labels = append(ids, ws.WorkspaceID), append(labels, ws.Label)
	}
	for _, p := range snap.Panes {
		ids = append(ids, p.PaneID)
		if p.TerminalID == official.RootPane.TerminalID || p.TerminalID == custom.RootPane.TerminalID {
			t.Errorf("pane %s kept terminal %s across the restart, want a new terminal", p.PaneID, p.TerminalID)
		}
	}
	want := []string{official.Workspace.WorkspaceID, custom.Workspace.WorkspaceID, official.RootPane.PaneID, custom.RootPane.PaneID}
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Errorf("restored ids mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"kept", "mine"}, labels); diff != "" {
		t.Errorf("restored labels mismatch (-want +got):\n%s", diff)
	}
	h.waitLine(custom.RootPane.PaneID, "before the restart")

	resumed, err := h.client.AgentGet(t.Context(), "resumed")
	if err != nil || !resumed.InteractiveReady || resumed.PaneID != official.RootPane.PaneID {
		t.Fatalf("AgentGet(resumed) = %+v, %v; want it resumed, named and ready", resumed, err)
	}
	h.waitLineMatching(official.RootPane.PaneID, regexp.MustCompile(regexp.QuoteMeta(h.opts.AgentCommands["claude"]+" --resume conversation-7")+"$"))
	if _, err := h.client.AgentGet(t.Context(), "forgotten"); !errors.Is(err, herdr.ErrAgentNotFound) {
		t.Errorf("AgentGet(forgotten) = %v, want ErrAgentNotFound: only officially reported agents are resumed", err)
	}
	if _, err := h.client.AgentStart(t.Context(), herdr.AgentStartParams{Name: "resumed", Kind: "claude", PaneID: custom.RootPane.PaneID}); !errors.Is(err, herdr.ErrAgentNameTaken) {
		t.Errorf("AgentStart() with the resumed agent's name = %v, want ErrAgentNameTaken", err)
	}
}

// awaitAgent waits until the pane's foreground process is identified as
// label.
func (h *harness) awaitAgent(pane, label string) {
	h.t.Helper()
	testutil.Eventually(h.t, "pane "+pane+" runs "+label, func() error {
		info, err := h.paneInfo(pane)
		if err != nil {
			return err
		}
		if deref(info.Agent) != label {
			return fmt.Errorf("pane shows agent %q", deref(info.Agent))
		}
		return nil
	}, testutil.Within(waitFor))
}

func (h *harness) paneInfo(pane string) (*herdr.PaneInfo, error) {
	snap, err := h.client.SessionSnapshot(h.t.Context())
	if err != nil {
		return nil, err
	}
	for i := range snap.Panes {
		if snap.Panes[i].PaneID == pane {
			return &snap.Panes[i], nil
		}
	}
	return nil, fmt.Errorf("no pane %s", pane)
}

// writeScript writes an executable shell script.
func writeScript(t testing.TB, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReportFromTheFutureIsRefused reproduces an attack: a report with a
// seq ten minutes ahead made herdr drop the victim's own reports as stale
// for ten minutes. fleetd's reporters number reports by the time in
// microseconds, so a seq from the future is refused, and later honest
// reports still count.
func TestReportFromTheFutureIsRefused(t *testing.T) {
	h := newHarness(t)
	ws := h.workspace(herdr.WorkspaceCreateParams{})
	pane := ws.RootPane.PaneID
	ctx := context.Background()
	ahead := uint64(time.Now().Add(10 * time.Minute).UnixMicro())
	err := h.client.PaneReportAgent(ctx, herdr.PaneReportAgentParams{PaneID: pane, Source: "fleetd", Agent: "worker", State: herdr.AgentStateWorking, Seq: &ahead})
	var herr *herdr.Error
	if !errors.As(err, &herr) || herr.Code != herdr.CodeInvalidParams || !strings.Contains(herr.Message, "future") {
		t.Fatalf("a report 10 minutes ahead = %v, want invalid_params about the future", err)
	}
	now := uint64(time.Now().UnixMicro())
	if err := h.client.PaneReportAgent(ctx, herdr.PaneReportAgentParams{PaneID: pane, Source: "fleetd", Agent: "worker", State: herdr.AgentStateIdle, Seq: &now}); err != nil {
		t.Fatal(err)
	}
	a, err := h.client.AgentGet(ctx, pane)
	if err != nil || a.AgentStatus != herdr.AgentStatusIdle {
		t.Fatalf("after an honest report: %+v, %v; want idle", a, err)
	}
}
