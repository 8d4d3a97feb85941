package paneserver_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

// fastReconnect makes a client's streams reconnect quickly.
func fastReconnect(c *herdr.Client) *herdr.Client {
	c.ReconnectMin, c.ReconnectMax = 5*time.Millisecond, 50*time.Millisecond
	return c
}

func TestSubscribeLifecycle(t *testing.T) {
	h := newHarness(t)
	stream := h.client.Subscribe(t.Context(), []herdr.Subscription{
		herdr.Lifecycle(herdr.SubscribeWorkspaceCreated),
		herdr.Lifecycle(herdr.SubscribeTabCreated),
		herdr.Lifecycle(herdr.SubscribePaneCreated),
		herdr.Lifecycle(herdr.SubscribePaneClosed),
		herdr.Lifecycle(herdr.SubscribeTabClosed),
		herdr.Lifecycle(herdr.SubscribeWorkspaceClosed),
	})
	defer stream.Close()
	resync := nextEvent(t, stream)
	if resync.Kind != herdr.EventResync || resync.Snapshot == nil || len(resync.Snapshot.Panes) != 0 {
		t.Fatalf("first event = %+v, want a resync of an empty session", resync)
	}

	ws := h.workspace(herdr.WorkspaceCreateParams{})
	tab, err := h.client.TabCreate(t.Context(), herdr.TabCreateParams{})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.client.PaneClose(t.Context(), tab.RootPane.PaneID); err != nil {
		t.Fatal(err)
	}
	if err := h.client.PaneClose(t.Context(), ws.RootPane.PaneID); err != nil {
		t.Fatal(err)
	}

	// herdr sends each subscription's events in order, but interleaves
	// subscriptions by their place in the list, not by when events happened.
	got := map[string][]string{}
	for n := 0; n < 9; n++ {
		ev := nextEvent(t, stream)
		id := ev.Data.PaneID
		switch {
		case ev.Data.Workspace != nil:
			id = ev.Data.Workspace.WorkspaceID
		case ev.Data.Tab != nil:
			id = ev.Data.Tab.TabID
		case ev.Data.Pane != nil:
			id = ev.Data.Pane.PaneID
		case ev.Data.TabID != "":
			id = ev.Data.TabID
		case ev.Data.WorkspaceID != "" && ev.Kind == herdr.EventWorkspaceClosed:
			id = ev.Data.WorkspaceID
		}
		got[string(ev.Kind)] = append(got[string(ev.Kind)], id)
	}
	want := map[string][]string{
		"workspace_created": {"w1"}, "tab_created": {"w1:t1", "w1:t2"}, "pane_created": {"w1:p1", "w1:p2"},
		"pane_closed": {"w1:p2", "w1:p1"}, "tab_closed": {"w1:t2"}, "workspace_closed": {"w1"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events mismatch (-want +got):\n%s", diff)
	}
}

// TestSubscribeReplaysRetainedEvents checks herdr 0.8.2's replay: a new
// lifecycle subscription first gets the retained events of its kind, oldest
// first, while a filtered one starts from now.
func TestSubscribeReplaysRetainedEvents(t *testing.T) {
	h := newHarness(t, func(o *paneserver.Options) { o.EventInterval = time.Millisecond })
	first, second := h.pane(), h.pane()
	report(t, h, first, herdr.AgentStateWorking, nil)
	if err := h.client.PaneClose(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	stream := h.client.Subscribe(t.Context(), []herdr.Subscription{
		herdr.Lifecycle(herdr.SubscribePaneCreated),
		herdr.PaneAgentStatusChanged(second),
	})
	defer stream.Close()
	var created []string
	for len(created) < 2 {
		ev := nextEvent(t, stream)
		switch ev.Kind {
		case herdr.EventResync:
		case herdr.EventPaneCreated:
			created = append(created, ev.Data.Pane.PaneID)
		default:
			t.Fatalf("event %+v before the replay ended; a filtered subscription must not replay", ev)
		}
	}
	if diff := cmp.Diff([]string{first, second}, created); diff != "" {
		t.Errorf("replayed pane_created mismatch (-want +got):\n%s", diff)
	}
	report(t, h, second, herdr.AgentStateBlocked, nil)
	if ev := nextEvent(t, stream); ev.Kind != herdr.EventPaneAgentStatusChanged || ev.Data.AgentStatus != herdr.AgentStatusBlocked {
		t.Errorf("after the replay got %+v, want the new status of %s", ev, second)
	}
}

func TestSubscribeAgentStatus(t *testing.T) {
	h := newHarness(t)
	watched, other := h.pane(), h.pane()
	blocked := herdr.AgentStatusBlocked
	stream := h.client.Subscribe(t.Context(), []herdr.Subscription{herdr.PaneAgentStatusChanged(watched)})
	defer stream.Close()
	onlyBlocked := h.client.Subscribe(t.Context(), []herdr.Subscription{{Type: herdr.SubscribePaneAgentStatusChanged, PaneID: watched, AgentStatus: &blocked}})
	defer onlyBlocked.Close()
	nextEvent(t, stream)
	nextEvent(t, onlyBlocked)

	for _, state := range []herdr.AgentState{herdr.AgentStateWorking, herdr.AgentStateBlocked, herdr.AgentStateIdle} {
		report(t, h, other, state, nil)
		report(t, h, watched, state, nil)
	}
	var got []herdr.AgentStatus
	for range 3 {
		ev := nextEvent(t, stream)
		if ev.Kind != herdr.EventPaneAgentStatusChanged || ev.Data.PaneID != watched || ev.Data.WorkspaceID == "" || *ev.Data.Agent != "claude" {
			t.Fatalf("event = %+v, want a status change of %s", ev, watched)
		}
		got = append(got, ev.Data.AgentStatus)
	}
	if diff := cmp.Diff([]herdr.AgentStatus{"working", "blocked", "idle"}, got); diff != "" {
		t.Errorf("status events mismatch (-want +got):\n%s", diff)
	}
	if ev := nextEvent(t, onlyBlocked); ev.Data.AgentStatus != herdr.AgentStatusBlocked {
		t.Errorf("filtered stream got %+v, want only blocked", ev)
	}

	// A subscription narrowed to the current status starts with it.
	report(t, h, watched, herdr.AgentStateBlocked, nil)
	late := h.client.Subscribe(t.Context(), []herdr.Subscription{{Type: herdr.SubscribePaneAgentStatusChanged, PaneID: watched, AgentStatus: &blocked}})
	defer late.Close()
	nextEvent(t, late)
	if ev := nextEvent(t, late); ev.Data.AgentStatus != herdr.AgentStatusBlocked {
		t.Errorf("late filtered stream got %+v, want the current blocked status", ev)
	}
}

func TestSubscribeOutputMatched(t *testing.T) {
	h := newHarness(t)
	pane := h.pane()
	stream := h.client.Subscribe(t.Context(), []herdr.Subscription{
		herdr.PaneOutputMatched(pane, herdr.ReadSourceRecent, herdr.OutputMatch{Type: herdr.OutputMatchRegex, Value: `^build (ok|failed)$`}),
	})
	defer stream.Close()
	nextEvent(t, stream)
	h.run(pane, `echo "build $(echo ok)"`)
	h.waitLine(pane, "build ok")
	ev := nextEvent(t, stream)
	if ev.Kind != herdr.EventPaneOutputMatched || *ev.Data.MatchedLine != "build ok" || ev.Data.Read == nil || ev.Data.Read.PaneID != pane {
		t.Errorf("event = %+v, want the matched line", ev)
	}
}

func TestSubscribeRejected(t *testing.T) {
	h := newHarness(t)
	cases := map[string]struct {
		subs   []herdr.Subscription
		client *herdr.Client
		want   error
	}{
		"unknown pane": {
			subs: []herdr.Subscription{herdr.PaneAgentStatusChanged("w9:p9")},
			want: herdr.ErrPaneNotFound,
		},
		"bad regex": {
			subs: []herdr.Subscription{herdr.PaneOutputMatched(h.pane(), herdr.ReadSourceRecent, herdr.OutputMatch{Type: herdr.OutputMatchRegex, Value: "("})},
			want: &herdr.Error{Code: herdr.CodeInvalidRegex},
		},
		"unknown type": {
			subs: []herdr.Subscription{{Type: "pane.sneezed"}},
			// Straight to the server: the relay would flag the bad type.
			client: h.direct,
			want:   herdr.ErrInvalidRequest,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			client := tc.client
			if client == nil {
				client = h.client
			}
			stream := client.Subscribe(t.Context(), tc.subs)
			defer stream.Close()
			for ev := range stream.Events() {
				t.Errorf("rejected stream delivered %+v", ev)
			}
			if err := stream.Err(); !errors.Is(err, tc.want) {
				t.Errorf("Err() = %v, want %v", err, tc.want)
			}
		})
	}
}

// agentView is what a pane's agent looks like: its label and status.
type agentView struct {
	Agent  string
	Status herdr.AgentStatus
}

// statusView is what a consumer of a Stream knows of a pane's agent.
type statusView struct {
	mu      sync.Mutex
	view    agentView
	resyncs int
}

func (v *statusView) apply(paneID string, ev herdr.Event) {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch ev.Kind {
	case herdr.EventResync:
		v.resyncs++
		for _, p := range ev.Snapshot.Panes {
			if p.PaneID == paneID {
				v.view = agentView{Agent: deref(p.Agent), Status: p.AgentStatus}
			}
		}
	case herdr.EventPaneAgentStatusChanged:
		v.view = agentView{Agent: deref(ev.Data.Agent), Status: ev.Data.AgentStatus}
	}
}

func (v *statusView) get() (agentView, int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.view, v.resyncs
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestStreamLosesNoStatusAcrossCuts cuts the subscriber's connection again
// and again while a reporter changes the pane's status. Whatever the cuts
// swallowed, the resync that follows each reconnect restores it: the
// consumer ends with the status herdr holds.
func TestStreamLosesNoStatusAcrossCuts(t *testing.T) {
	h := newHarness(t)
	pane := h.pane()
	client := fastReconnect(herdr.NewClient(h.relay.path))
	stream := client.Subscribe(t.Context(), []herdr.Subscription{herdr.PaneAgentStatusChanged(pane)})
	defer stream.Close()

	var view statusView
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for ev := range stream.Events() {
			view.apply(pane, ev)
		}
	}()

	states := []herdr.AgentState{herdr.AgentStateWorking, herdr.AgentStateBlocked, herdr.AgentStateIdle, herdr.AgentStateUnknown}
	for i := range 200 {
		report(t, h, pane, states[i%len(states)], nil)
		if i%7 == 0 {
			h.relay.cut()
		}
		if i%50 == 0 {
			// Let the stream reconnect, so that cuts land on live connections.
			testutil.Eventually(t, "the stream reconnects", func() error {
				if _, resyncs := view.get(); resyncs <= i/50 {
					return fmt.Errorf("%d resyncs", resyncs)
				}
				return nil
			}, testutil.Within(waitFor))
		}
	}
	// The last change lands right after a cut, from an agent label never
	// used before: only a resync can carry it, and no stale event fakes it.
	h.relay.cut()
	err := h.direct.PaneReportAgent(t.Context(), herdr.PaneReportAgentParams{PaneID: pane, Source: "test", Agent: "finisher", State: herdr.AgentStateBlocked})
	if err != nil {
		t.Fatal(err)
	}

	truth, err := h.direct.AgentGet(t.Context(), pane)
	if err != nil {
		t.Fatal(err)
	}
	want := agentView{Agent: deref(truth.Agent), Status: truth.AgentStatus}
	if want != (agentView{Agent: "finisher", Status: herdr.AgentStatusBlocked}) {
		t.Fatalf("herdr holds %+v, not the last report", want)
	}
	testutil.Eventually(t, "the consumer sees herdr's state", func() error {
		if got, _ := view.get(); got != want {
			return fmt.Errorf("consumer sees %+v, herdr holds %+v", got, want)
		}
		return nil
	}, testutil.Within(waitFor))
	if _, resyncs := view.get(); resyncs < 2 {
		t.Errorf("stream resynced %d times: the cuts did not reach it", resyncs)
	}
	stream.Close()
	<-consumed
}

// TestStreamSurvivesServerRestart restarts herdr under a lifecycle
// subscription: the stream reconnects and resyncs against the new server.
func TestStreamSurvivesServerRestart(t *testing.T) {
	h := newHarness(t)
	h.pane()
	client := fastReconnect(herdr.NewClient(h.relay.path))
	stream := client.Subscribe(t.Context(), []herdr.Subscription{herdr.Lifecycle(herdr.SubscribeWorkspaceCreated)})
	defer stream.Close()
	if ev := nextEvent(t, stream); ev.Kind != herdr.EventResync || len(ev.Snapshot.Workspaces) != 1 {
		t.Fatalf("first event = %+v, want a resync with one workspace", ev)
	}

	h.restart()
	awaitEvent(t, stream, "a resync of the restarted, empty herdr", func(ev herdr.Event) bool {
		return ev.Kind == herdr.EventResync && len(ev.Snapshot.Workspaces) == 0
	})
	created := h.workspace(herdr.WorkspaceCreateParams{Label: "after-restart"})
	ev := awaitEvent(t, stream, "the new workspace", func(ev herdr.Event) bool {
		return ev.Kind == herdr.EventWorkspaceCreated
	})
	if ev.Data.Workspace.WorkspaceID != created.Workspace.WorkspaceID || ev.Data.Workspace.Label != "after-restart" {
		t.Errorf("event = %+v, want workspace %s", ev.Data.Workspace, created.Workspace.WorkspaceID)
	}
}

func TestSubscribePaneUpdates(t *testing.T) {
	h := newHarness(t)
	pane := h.pane()
	stream := h.client.Subscribe(t.Context(), []herdr.Subscription{
		herdr.Lifecycle(herdr.SubscribePaneUpdated),
		herdr.Lifecycle(herdr.SubscribePaneAgentDetected),
	})
	defer stream.Close()
	nextEvent(t, stream)

	report(t, h, pane, herdr.AgentStateWorking, nil)
	updated := nextEvent(t, stream)
	if updated.Kind != herdr.EventPaneUpdated || updated.Data.Pane.PaneID != pane || updated.Data.Pane.AgentStatus != herdr.AgentStatusWorking {
		t.Errorf("event = %+v, want pane_updated of %s, working", updated, pane)
	}
	detected := nextEvent(t, stream)
	want := herdr.Event{Kind: herdr.EventPaneAgentDetected, Data: herdr.EventData{
		Type: herdr.EventPaneAgentDetected, PaneID: pane, WorkspaceID: "w1", Agent: ptr("claude"),
	}}
	if diff := cmp.Diff(want, detected); diff != "" {
		t.Errorf("event mismatch (-want +got):\n%s", diff)
	}
}

// TestStreamRecoversFromBrokenFrames feeds the stream lines that are not
// herdr events: it must not panic, and it resyncs rather than skip them,
// since a broken line may have been an event.
func TestStreamRecoversFromBrokenFrames(t *testing.T) {
	h := newHarness(t)
	pane := h.pane()
	client := fastReconnect(herdr.NewClient(h.relay.path))
	stream := client.Subscribe(t.Context(), []herdr.Subscription{herdr.PaneAgentStatusChanged(pane)})
	defer stream.Close()
	nextEvent(t, stream)

	for _, garbage := range []string{
		"{\"event\":\n",
		"\x00\xff\xfe\n",
		`{"event":"pane.agent_status_changed","data":[]}` + "\n",
		`{"data":{}}` + "\n",
	} {
		// The connection a resync replaced closes on its own time.
		testutil.Eventually(t, "one connection is left", func() error {
			if n := h.relay.clientCount(); n != 1 {
				return fmt.Errorf("%d connections", n)
			}
			return nil
		}, testutil.Within(waitFor))
		if n := h.relay.inject(garbage); n != 1 {
			t.Fatalf("injected into %d connections, want the stream's one", n)
		}
		if ev := nextEvent(t, stream); ev.Kind != herdr.EventResync {
			t.Fatalf("after %q the stream delivered %+v, want a resync", garbage, ev)
		}
	}
	report(t, h, pane, herdr.AgentStateWorking, nil)
	if ev := nextEvent(t, stream); ev.Data.AgentStatus != herdr.AgentStatusWorking {
		t.Errorf("after recovering the stream delivered %+v, want working", ev)
	}
}
