package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/devenv"
	"github.com/fleetd/fleetd/internal/mcpclient"
	"github.com/fleetd/fleetd/internal/testenv"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/panehost/paneserver"
	"github.com/fleetd/fleetd/test/framework/stubmodel"
)

// TestClaudeCodePrimaryStopHook runs the real Claude Code as a primary
// outside any pane fleetd knows, with `fleetd hook primary-stop` as its Stop
// hook: it dispatches with wait:false and ends its turn with nothing
// waiting; the worker replies later; when its next turn stops, the hook
// keeps it going with the reply, which its next model request holds, and
// acknowledges it.
func TestClaudeCodePrimaryStopHook(t *testing.T) { testPrimaryStopHook(t, claudeCode, "e2e-cc-lead") }

// TestCodexPrimaryStopHook is the same with Codex as the primary: its Stop
// hook takes the same block decision.
func TestCodexPrimaryStopHook(t *testing.T) { testPrimaryStopHook(t, codexCLI, "e2e-cx-lead") }

func testPrimaryStopHook(t *testing.T, a realAgent, worker string) {
	requireRealAgents(t)
	l, ok := w.mode.(*local)
	if !ok {
		t.Skip("the primary runs on this machine, in the local mode only")
	}
	dumpOnFailure(t)
	model, modelURL := startModel(t)
	// A primary of its own, new for each run: the outcomes it collects
	// are this run's.
	name := fmt.Sprintf("laptop-%s-%d", a.kind, time.Now().UnixNano())
	token := staticPrimary(t, name)
	member(t, worker)
	s := session(t, w.token)
	laptop := session(t, token)

	// The worker shows a dialog, so what the primary sends waits in its
	// queue until the primary's turn has ended.
	wantOutcome(t, call(t, s, "bridge_send", map[string]any{"sessionId": worker, "content": "dialog: hold on", "wait": false}), "dispatched")
	testutil.Eventually(t, "the worker blocked", func() (bool, string) {
		m, err := getMember(worker)
		return err == nil && m.Status.AgentStatus == fleetv1alpha1.AgentBlocked, fmt.Sprint(m.Status.AgentStatus)
	})

	p := startPrimary(t, l, a, modelURL, token)
	first := "send: " + worker + ": reply: done by the worker\nsilent: dispatched it"
	p.prompt(t, first)
	testutil.Eventually(t, "the dispatch", func() (bool, string) {
		ids := sentBy(t, name)
		return len(ids) == 1, fmt.Sprint(ids)
	})
	id := sentBy(t, name)[0]
	p.waitStops(t, 1)
	if !slices.ContainsFunc(model.Requests(), func(r stubmodel.Request) bool { return r.Prompt == first && r.Step == 1 }) {
		t.Fatalf("the turn stopped before it ended as told: %s", p.screen(t))
	}
	if d := delegation(t, id); d.Status.Phase != fleetv1alpha1.DelegationQueued && d.Status.Phase != fleetv1alpha1.DelegationPending && d.Status.Phase != "" {
		t.Fatalf("the primary's message is %s before the worker could take it", d.Status.Phase)
	}

	// The worker takes the message and replies; nobody waits for it.
	m, _ := getMember(worker)
	if err := w.paneKeys(m, "y"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the reply waiting for the primary", func() (bool, string) {
		poll := call(t, laptop, "bridge_poll", nil)
		return pollHas(poll, id, "reply", "done by the worker"), fmt.Sprint(poll.Fields)
	})
	for _, r := range model.Requests() {
		if len(r.HookFeedback) > 0 {
			t.Fatalf("the hook kept a turn going before anything waited: %q", r.HookFeedback)
		}
	}

	// The primary's next turn stops: the hook keeps it going with the reply.
	second := "silent: anything new?"
	p.prompt(t, second)
	testutil.Eventually(t, "the reply in the primary's next model request", func() (bool, string) {
		for _, r := range model.Requests() {
			if r.Kind == stubmodel.KindTurn && slices.ContainsFunc(r.HookFeedback, func(f string) bool {
				return strings.Contains(f, "done by the worker") && strings.Contains(f, id)
			}) {
				return true, ""
			}
		}
		return false, p.screen(t)
	})
	if d := delegation(t, id); d.Status.AcknowledgedAt == nil {
		t.Errorf("the reply the hook handed over is not acknowledged: %+v", d.Status)
	}
	if poll := call(t, laptop, "bridge_poll", nil); pollHas(poll, id, "", "") {
		t.Errorf("bridge_poll shows the reply again: %v", poll.Fields)
	}
	// With nothing more waiting, the continued turn ends: its second stop
	// lets it, and the reply was handed over once.
	p.waitStops(t, 3)
	p.waitPrompt(t)
	turns := 0
	for _, r := range model.Requests() {
		if r.Kind == stubmodel.KindTurn && r.Prompt == second && len(r.HookFeedback) > 0 {
			turns++
		}
	}
	if turns != 1 {
		t.Errorf("%d model requests carried the hook's feedback, want 1: the turn went on after the reply", turns)
	}
}

// staticPrimary adds a static token for a primary of its own, so the
// outcomes it collects are its own and no other test's.
func staticPrimary(t *testing.T, name string) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	token := hex.EncodeToString(b)
	patch, _ := json.Marshal(map[string]any{"data": map[string][]byte{name: []byte(token)}})
	secret := &corev1.Secret{}
	secret.Name, secret.Namespace = devenv.StaticTokenSecret, ns
	if err := w.client.Patch(context.Background(), secret, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		patch, _ := json.Marshal(map[string]any{"data": map[string]any{name: nil}})
		_ = w.client.Patch(context.Background(), secret, client.RawPatch(types.MergePatchType, patch))
	})
	// The gateway sees the token once its cache of the Secret does.
	testutil.Eventually(t, "the new primary's token", func() error {
		s, err := mcpclient.Connect(context.Background(), w.gatewayURL, token)
		if err == nil {
			s.Close()
		}
		return err
	})
	return token
}

// sentBy lists the Delegations a static primary sent.
func sentBy(t *testing.T, name string) []string {
	t.Helper()
	var list fleetv1alpha1.DelegationList
	if err := w.client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range list.Items {
		if d.Spec.From.Kind == fleetv1alpha1.PrincipalStatic && d.Spec.From.Name == name {
			ids = append(ids, d.Name)
		}
	}
	return ids
}

// primary is an agent CLI running in a terminal of its own, which fleetd
// knows nothing of: a primary, as on a person's laptop.
type primary struct {
	a      realAgent
	panes  *herdr.Client
	paneID string
	// stops is a file the Stop hook's command line appends a line to each
	// time the hook is done.
	stops string
}

// startPrimary starts a's CLI as a primary with token: the gateway mounted
// as a person mounts it, fleetd's tools allowed, and the Stop hook the
// README gives, `fleetd hook primary-stop`, with FLEETD_MCP_URL and
// FLEETD_TOKEN in its environment.
func startPrimary(t *testing.T, l *local, a realAgent, modelURL, token string) *primary {
	t.Helper()
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	// The README's Stop hook, and a line in a file when it is done: the
	// test's way to know that a turn's stop was decided.
	stops := filepath.Join(dir, "stops")
	stopHook := filepath.Join(l.bin, "fleetd") + " hook primary-stop; echo stopped >> " + stops
	spec := agents.Spec{
		Kind: a.kind, Dir: filepath.Join(dir, "agent"), WorkingDir: work, MCPURL: w.gatewayURL,
		Env:         map[string]string{"ANTHROPIC_API_KEY": "sk-e2e-0123456789abcdefghijklmnop"},
		HookCommand: []string{"true"},
	}
	env := map[string]string{
		"HOME": dir, agents.EnvMCPURL: w.gatewayURL, agents.EnvToken: token,
		"ANTHROPIC_BASE_URL": modelURL, "ANTHROPIC_API_KEY": spec.Env["ANTHROPIC_API_KEY"],
	}
	if a.kind == fleetv1alpha1.AgentCodex {
		spec.Env = map[string]string{agents.CodexBaseURLEnv: modelURL + "/v1", agents.CodexAPIKeyEnv: "sk-e2e-codex"}
		env = map[string]string{"HOME": dir, agents.EnvMCPURL: w.gatewayURL, agents.EnvToken: token, agents.CodexAPIKeyEnv: "sk-e2e-codex"}
	}
	cfg, err := agents.Configure(spec)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range cfg.DefaultEnv {
		env[k] = v
	}
	for k, v := range cfg.Env {
		if k != agents.EnvAgentDir {
			env[k] = v
		}
	}
	// fleetd's member hooks give way to the primary's one Stop hook, as
	// the README gives it.
	readmeHook := "fleetd hook primary-stop"
	for i, f := range cfg.Files {
		switch {
		case strings.HasSuffix(f.Path, "claude-settings.json"):
			settings := readmeBlock(t, "json", readmeHook)
			cfg.Files[i].Content = []byte(strings.ReplaceAll(settings, readmeHook, stopHook))
		case strings.HasSuffix(f.Path, "config.toml"):
			var c, hooks map[string]any
			if _, err := toml.Decode(string(f.Content), &c); err != nil {
				t.Fatal(err)
			}
			if _, err := toml.Decode(strings.ReplaceAll(readmeBlock(t, "toml", readmeHook), readmeHook, stopHook), &hooks); err != nil {
				t.Fatal(err)
			}
			key, hash, err := agents.CodexHookTrust(f.Path, "Stop", stopHook)
			if err != nil {
				t.Fatal(err)
			}
			// A person trusts the hook once; the test has Codex know it.
			c["hooks"] = hooks["hooks"]
			c["hooks"].(map[string]any)["state"] = map[string]any{key: map[string]any{"trusted_hash": hash}}
			var buf bytes.Buffer
			if err := toml.NewEncoder(&buf).Encode(c); err != nil {
				t.Fatal(err)
			}
			cfg.Files[i].Content = buf.Bytes()
		}
	}
	if err := agents.Install(cfg.Files, work); err != nil {
		t.Fatal(err)
	}
	// The primary's own terminal: a pane server of the test's, beside
	// fleetd's, as a person's terminal on the same machine would be.
	socket := filepath.Join(dir, "terminal.sock")
	srv, err := paneserver.New(paneserver.Options{SocketPath: socket, Shell: "/bin/sh", Columns: 160, Rows: 50})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { _ = srv.Close() })
	env["PATH"] = l.bin + string(os.PathListSeparator) + os.Getenv("PATH")
	panes := herdr.NewClient(socket)
	ctx := context.Background()
	ws, err := panes.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Cwd: work, Env: env, Label: "primary-" + string(a.kind)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = panes.WorkspaceClose(context.Background(), ws.Workspace.WorkspaceID) })
	p := &primary{a: a, panes: panes, paneID: ws.RootPane.PaneID, stops: stops}
	if err := panes.PaneSendInput(ctx, herdr.PaneSendInputParams{PaneID: p.paneID, Text: agents.ShellJoin(append([]string{"exec", agents.Executable(a.kind)}, cfg.Args...)), Keys: []string{"enter"}}); err != nil {
		t.Fatal(err)
	}
	p.waitPrompt(t)
	return p
}

// readmeBlock is the README's fenced block of lang that holds text.
func readmeBlock(t *testing.T, lang, text string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(b), "```"+lang+"\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if strings.Contains(block, text) {
			return block
		}
	}
	t.Fatalf("the README has no %s block with %q", lang, text)
	return ""
}

// screen is what the primary's pane shows.
func (p *primary) screen(t *testing.T) string {
	t.Helper()
	r, err := p.panes.PaneRead(context.Background(), herdr.ReadParams{PaneID: p.paneID, Source: herdr.ReadSourceVisible})
	if err != nil {
		return err.Error()
	}
	return herdr.ReadableText(r.Text)
}

// waitPrompt waits until the primary takes a prompt: its empty prompt line
// shows, and no turn is in progress.
func (p *primary) waitPrompt(t *testing.T) {
	t.Helper()
	testutil.Eventually(t, "the primary's prompt", func() (bool, string) {
		s := p.screen(t)
		lines := strings.Split(s, "\n")
		idle := slices.ContainsFunc(lines, func(l string) bool {
			return strings.TrimSpace(l) == p.a.prompt || strings.HasPrefix(strings.TrimSpace(l), p.a.prompt+" ")
		})
		return idle && !strings.Contains(s, "esc to interrupt"), s
	})
}

// waitStops waits until the primary's Stop hook is done n times.
func (p *primary) waitStops(t *testing.T, n int) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("stop %d decided", n), func() (bool, string) {
		b, _ := os.ReadFile(p.stops)
		return bytes.Count(b, []byte("\n")) >= n, p.screen(t)
	})
}

// prompt types text into the primary and submits it, Enter a moment after
// the text, as herdr's agent.prompt does.
func (p *primary) prompt(t *testing.T, text string) {
	t.Helper()
	ctx := context.Background()
	if err := p.panes.PaneSendInput(ctx, herdr.PaneSendInputParams{PaneID: p.paneID, Text: text}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := p.panes.PaneSendKeys(ctx, p.paneID, "enter"); err != nil {
		t.Fatal(err)
	}
}
