package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// statusLog is a statusReporter that records what it was told.
type statusLog struct {
	mu     sync.Mutex
	states []string
}

// Report records state, and the message when there is one.
func (s *statusLog) Report(_ context.Context, state, message string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if message != "" {
		state += ": " + message
	}
	s.states = append(s.states, state)
	return nil
}

// paste wraps text in bracketed-paste markers, as herdr types a prompt.
func paste(text string) string { return "\x1b[200~" + text + "\x1b[201~" }

// readReceived returns the texts of the received log at path, checking
// that seq counts from 1 and every entry has a time.
func readReceived(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var texts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e receivedEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("received log line %q: %v", sc.Text(), err)
		}
		if want := len(texts) + 1; e.Seq != want {
			t.Errorf("received log line %q has seq %d, want %d", sc.Text(), e.Seq, want)
		}
		if e.Time.IsZero() {
			t.Errorf("received log line %q has no time", sc.Text())
		}
		texts = append(texts, e.Text)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return texts
}

func TestAgentTurns(t *testing.T) {
	cases := map[string]struct {
		input string
		// refuse is bridge_reply content the gateway refuses.
		refuse    string
		noGateway bool

		wantCalls    []toolCall
		wantStates   []string
		wantReceived []string
		wantOut      []string
		// wantExit is the exit status a directive ends the agent with; nil
		// when the agent ends because its input ends.
		wantExit *int
	}{
		"reply calls bridge_reply": {
			input:        "reply: all done\n",
			wantCalls:    []toolCall{{Tool: toolReply, Content: "all done"}},
			wantStates:   []string{stateIdle, stateWorking, stateIdle},
			wantReceived: []string{"reply: all done"},
			wantOut:      []string{"-> bridge_reply: all done", "sent"},
		},
		"ask waits for the answer and replies with it": {
			input: "ask: which branch?\n",
			wantCalls: []toolCall{
				{Tool: toolAsk, Content: "which branch?"},
				{Tool: toolReply, Content: "main"},
			},
			wantStates:   []string{stateIdle, stateWorking, stateIdle},
			wantReceived: []string{"ask: which branch?"},
			wantOut:      []string{"answer: main"},
		},
		"answer fills a later reply": {
			input: paste("ask: which branch?\nreply: working on {answer}") + "\r",
			wantCalls: []toolCall{
				{Tool: toolAsk, Content: "which branch?"},
				{Tool: toolReply, Content: "working on main"},
			},
			wantStates:   []string{stateIdle, stateWorking, stateIdle},
			wantReceived: []string{"ask: which branch?\nreply: working on {answer}"},
		},
		"plain prompt is echoed": {
			input:        paste("hello agent\nhow are you?") + "\r",
			wantCalls:    []toolCall{{Tool: toolReply, Content: "echo: hello agent\nhow are you?"}},
			wantStates:   []string{stateIdle, stateWorking, stateIdle},
			wantReceived: []string{"hello agent\nhow are you?"},
		},
		"silent never calls the gateway": {
			input:        "silent: thinking quietly\n",
			wantStates:   []string{stateIdle, stateWorking, stateIdle},
			wantReceived: []string{"silent: thinking quietly"},
			wantOut:      []string{"\nthinking quietly\n"},
		},
		"sleep alone never replies": {
			input:        "sleep: 0.01\n",
			wantStates:   []string{stateIdle, stateWorking, stateIdle},
			wantReceived: []string{"sleep: 0.01"},
			wantOut:      []string{"-> sleep 10ms"},
		},
		"refused reply is printed and the turn goes on": {
			input:  paste("reply: refuse me\nreply: after") + "\r",
			refuse: "refuse me",
			wantCalls: []toolCall{
				{Tool: toolReply, Content: "refuse me"},
				{Tool: toolReply, Content: "after"},
			},
			wantStates:   []string{stateIdle, stateWorking, stateIdle},
			wantReceived: []string{"reply: refuse me\nreply: after"},
			wantOut:      []string{"bridge_reply refused: no_delegation: no delegation in flight"},
		},
		"each prompt is one turn and blank lines are no prompt": {
			input: "reply: one\n\n  \nreply: two\n",
			wantCalls: []toolCall{
				{Tool: toolReply, Content: "one"},
				{Tool: toolReply, Content: "two"},
			},
			wantStates:   []string{stateIdle, stateWorking, stateIdle, stateWorking, stateIdle},
			wantReceived: []string{"reply: one", "reply: two"},
		},
		"dialog blocks until a key and the key is no prompt": {
			input:        "dialog: Allow?\ny\n",
			wantStates:   []string{stateIdle, stateWorking, stateBlocked + ": Allow?", stateWorking, stateIdle},
			wantReceived: []string{"dialog: Allow?"},
			wantOut:      []string{"| Allow?", "press any key", `key "y" pressed`},
		},
		"malformed directive runs nothing": {
			input:        paste("reply: first\nsleep: later") + "\r",
			wantStates:   []string{stateIdle, stateWorking, stateIdle},
			wantReceived: []string{"reply: first\nsleep: later"},
			wantOut:      []string{`line 2: sleep: want a number of seconds such as 1.5, got "later"`},
		},
		"crash exits at once": {
			input:        paste("crash: 3\nreply: never") + "\rreply: not read\n",
			wantStates:   []string{stateIdle, stateWorking},
			wantReceived: []string{"crash: 3\nreply: never"},
			wantExit:     ptr(3),
		},
		"exit ends the agent cleanly": {
			input:        "exit\n",
			wantStates:   []string{stateIdle, stateWorking},
			wantReceived: []string{"exit"},
			wantExit:     ptr(0),
		},
		"without a gateway replies are printed only": {
			input:        "reply: nobody hears\n",
			noGateway:    true,
			wantStates:   []string{stateIdle, stateWorking, stateIdle},
			wantReceived: []string{"reply: nobody hears"},
			wantOut:      []string{"not sent: no gateway configured"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			fake := newFakeGateway(t, "main", tc.refuse)
			var out bytes.Buffer
			status := &statusLog{}
			receivedPath := filepath.Join(t.TempDir(), "received.jsonl")
			a := &agent{
				out:      &out,
				status:   status,
				received: &receivedLog{path: receivedPath},
				prompt:   "> ",
			}
			if !tc.noGateway {
				a.gateway = newGateway(fake.url, testToken, "test")
				t.Cleanup(func() { _ = a.gateway.close() })
			}

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := a.run(ctx, strings.NewReader(tc.input))

			var exit *exitError
			switch {
			case tc.wantExit == nil && err != nil:
				t.Fatalf("run: %v\noutput:\n%s", err, out.String())
			case tc.wantExit != nil && !errors.As(err, &exit):
				t.Fatalf("run = %v, want exit status %d\noutput:\n%s", err, *tc.wantExit, out.String())
			case tc.wantExit != nil && exit.code != *tc.wantExit:
				t.Errorf("run exits with status %d, want %d", exit.code, *tc.wantExit)
			}
			if diff := cmp.Diff(tc.wantCalls, fake.recorded()); diff != "" {
				t.Errorf("gateway calls (-want +got):\n%s\noutput:\n%s", diff, out.String())
			}
			if diff := cmp.Diff(tc.wantStates, status.states); diff != "" {
				t.Errorf("reported states (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantReceived, readReceived(t, receivedPath)); diff != "" {
				t.Errorf("received log (-want +got):\n%s", diff)
			}
			for _, want := range tc.wantOut {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output does not contain %q:\n%s", want, out.String())
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestGatewayRefusesUnknownToken(t *testing.T) {
	fake := newFakeGateway(t, "main", "")
	g := newGateway(fake.url, "not-a-member-token", "test")
	g.backoff = time.Millisecond
	t.Cleanup(func() { _ = g.close() })
	var out bytes.Buffer
	a := &agent{out: &out, status: &statusLog{}, gateway: g, prompt: "> "}

	if err := a.run(context.Background(), strings.NewReader("reply: hello\nsilent: still alive\n")); err != nil {
		t.Fatalf("run: %v", err)
	}
	if got := fake.recorded(); len(got) != 0 {
		t.Errorf("gateway served %v with an unknown token", got)
	}
	if fake.unauthorized.Load() == 0 {
		t.Errorf("gateway saw no request with the unknown token")
	}
	for _, want := range []string{"! calling bridge_reply", "still alive"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output does not contain %q:\n%s", want, out.String())
		}
	}
}

func TestGatewayReconnects(t *testing.T) {
	fake := newFakeGateway(t, "main", "")
	g := newGateway(fake.url, testToken, "test")
	g.backoff = time.Millisecond
	t.Cleanup(func() { _ = g.close() })
	var out bytes.Buffer
	a := &agent{out: &out, status: &statusLog{}, gateway: g, prompt: "> "}
	ctx := context.Background()

	if err := a.run(ctx, strings.NewReader("reply: before\n")); err != nil {
		t.Fatalf("first run: %v", err)
	}
	// The gateway forgets the client, as a restarted gateway does.
	fake.failNext.Store(1)
	if err := a.run(ctx, strings.NewReader("reply: after\n")); err != nil {
		t.Fatalf("second run: %v", err)
	}

	want := []toolCall{{Tool: toolReply, Content: "before"}, {Tool: toolReply, Content: "after"}}
	if diff := cmp.Diff(want, fake.recorded()); diff != "" {
		t.Errorf("gateway calls (-want +got):\n%s\noutput:\n%s", diff, out.String())
	}
	if got := fake.connects.Load(); got != 2 {
		t.Errorf("gateway saw %d connections, want 2: one at the first call, one after the failure", got)
	}
}

func TestHerdrReporter(t *testing.T) {
	server := newFakeHerdr(t)
	r := newHerdrReporter(server.socketPath, "w1:p1", "session-1")
	start := time.UnixMilli(1_800_000_000_000)
	r.now = func() time.Time { return start }
	ctx := context.Background()
	for _, s := range []struct{ state, message string }{
		{stateIdle, ""},
		{stateWorking, ""},
		{stateBlocked, "Allow?"},
		{stateIdle, ""},
	} {
		if err := r.Report(ctx, s.state, s.message); err != nil {
			t.Fatalf("Report(%s): %v", s.state, err)
		}
	}

	report := func(state string, seq uint64, message *string) agentReport {
		return agentReport{
			PaneID: "w1:p1", Source: "scripted-agent", Agent: "scripted", State: state,
			Message: message, Seq: ptr(seq), AgentSessionID: ptr("session-1"),
		}
	}
	// Reports within one millisecond still get increasing seqs.
	base := uint64(start.UnixMilli())
	want := []agentReport{
		report(stateIdle, base, nil),
		report(stateWorking, base+1, nil),
		report(stateBlocked, base+2, ptr("Allow?")),
		report(stateIdle, base+3, nil),
	}
	if diff := cmp.Diff(want, server.recorded()); diff != "" {
		t.Errorf("reports (-want +got):\n%s", diff)
	}

	// The next agent in the pane starts later, so its reports are newer.
	restarted := newHerdrReporter(server.socketPath, "w1:p1", "session-2")
	restarted.now = func() time.Time { return start.Add(time.Second) }
	if err := restarted.Report(ctx, stateIdle, ""); err != nil {
		t.Fatalf("Report after restart: %v", err)
	}
	reports := server.recorded()
	if got, last := *reports[len(reports)-1].Seq, *reports[len(reports)-2].Seq; got <= last {
		t.Errorf("seq after restart = %d, want above %d", got, last)
	}
}

func TestHerdrReporterRefused(t *testing.T) {
	dir, err := os.MkdirTemp("", "herdr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	r := newHerdrReporter(filepath.Join(dir, "absent.sock"), "w1:p1", "session-1")
	if err := r.Report(context.Background(), stateIdle, ""); err == nil {
		t.Errorf("Report to a socket nobody listens on succeeded")
	}
}
