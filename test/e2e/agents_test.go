package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/mcpclient"
	"github.com/fleetd/fleetd/internal/scheme"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/test/framework/stubmodel"
)

// requireRealAgents fails a test that needs the pinned agent CLIs when they
// are not installed, and skips it where they cannot run (a cluster whose
// image has none).
func requireRealAgents(t *testing.T) {
	t.Helper()
	err := w.realAgents()
	if errors.Is(err, errNoRealAgents) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// errNoRealAgents says the real agent CLIs cannot run in this mode.
var errNoRealAgents = errors.New("the real agent CLIs cannot run here")

// startModel serves the scripted model API where the agents reach it.
func startModel(t *testing.T) (*stubmodel.Server, string) {
	t.Helper()
	model, err := stubmodel.New(filepath.Join(t.TempDir(), "model-requests.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	ln, host, err := w.modelListener()
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: model}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return model, "http://" + host
}

// agentProfile applies a Profile that runs kind against the scripted model,
// billed through the API, with the model's key in a Secret.
func agentProfile(t *testing.T, name string, kind fleetv1alpha1.AgentKind, modelURL, permissionMode string) {
	t.Helper()
	secret := &corev1.Secret{
		// It opts in to members' environments, as the README says.
		ObjectMeta: metav1.ObjectMeta{Name: name + "-key", Namespace: ns, Labels: map[string]string{fleetv1alpha1.LabelAllowMemberEnv: "true"}},
		StringData: map[string]string{"key": "sk-e2e-0123456789abcdefghijklmnop"},
	}
	if err := w.client.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.client.Delete(context.Background(), secret) })
	mode := ""
	if permissionMode != "" {
		mode = "\n  permissionMode: " + permissionMode
	}
	// The stand-in model listens at a private address, which a member Pod
	// reaches only where its Profile opens it, as a model inside the
	// cluster or the company's network would be.
	u, err := url.Parse(modelURL)
	if err != nil {
		t.Fatal(err)
	}
	baseURL, key := "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"
	if kind == fleetv1alpha1.AgentCodex {
		baseURL, key, modelURL = agents.CodexBaseURLEnv, agents.CodexAPIKeyEnv, modelURL+"/v1"
	}
	apply(t, fmt.Sprintf(`apiVersion: fleet.fleetd.dev/v1alpha1
kind: Profile
metadata: {name: %s, namespace: %s}
spec:
  agent: %s
  billing: api%s
  env:
  - {name: %s, value: %q}
  - name: %s
    valueFrom: {secretKeyRef: {name: %s-key, key: key}}
  pod:
    egress:
      rules:
      - to: [{ipBlock: {cidr: %s/32}}]
        ports: [{port: %s}]
`, name, ns, kind, mode, baseURL, modelURL, key, name, u.Hostname(), u.Port()))
	t.Cleanup(func() { _, _ = w.kubectl("delete", "profile", "-n", ns, name, "--wait=false") })
}

// agentMember applies a Member of profile and waits until it is Ready.
func agentMember(t *testing.T, name, profile string) *fleetv1alpha1.Member {
	t.Helper()
	apply(t, fmt.Sprintf("apiVersion: fleet.fleetd.dev/v1alpha1\nkind: Member\nmetadata: {name: %s, namespace: %s}\nspec: {profile: %s}\n", name, ns, profile))
	t.Cleanup(func() { _, _ = w.kubectl("delete", "member", "-n", ns, name, "--wait=false") })
	return waitReady(t, name)
}

// statusLog records every agentStatus a namespace's Members show, and when
// the watch saw it.
type statusLog struct {
	mu   sync.Mutex
	seen map[string][]statusSeen
}

type statusSeen struct {
	at     time.Time
	status fleetv1alpha1.AgentStatus
}

func watchStatuses(t *testing.T) *statusLog {
	t.Helper()
	wc, err := client.NewWithWatch(w.cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	watch, err := wc.Watch(ctx, &fleetv1alpha1.MemberList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	l := &statusLog{seen: map[string][]statusSeen{}}
	go func() {
		defer watch.Stop()
		for ev := range watch.ResultChan() {
			m, ok := ev.Object.(*fleetv1alpha1.Member)
			if !ok {
				continue
			}
			l.mu.Lock()
			list := l.seen[m.Name]
			if len(list) == 0 || list[len(list)-1].status != m.Status.AgentStatus {
				l.seen[m.Name] = append(list, statusSeen{time.Now(), m.Status.AgentStatus})
			}
			l.mu.Unlock()
		}
	}()
	return l
}

// briefWork bounds a working state the Member may never show: fleetd
// shows working once a turn has lasted half a second (counted from when
// herdr reports it), so a turn this short is written once, when it ends.
const briefWork = 2 * time.Second

// delays measures, for every state change a member's hooks reported, how
// long the Member took to show it, and names the changes it had to show
// and never did. A working state briefer than briefWork need not show
// (and is not measured), and then neither need the change back from it.
func (l *statusLog) delays(t *testing.T, m *fleetv1alpha1.Member) (out []time.Duration, missed []string) {
	t.Helper()
	events, err := w.hookEvents(m)
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	seen := slices.Clone(l.seen[m.Name])
	l.mu.Unlock()
	// The changes the hooks reported, each until the next one (the last
	// until now, as far as anyone can tell).
	type change struct {
		status     fleetv1alpha1.AgentStatus
		start, end time.Time
	}
	var changes []change
	for _, ev := range events {
		st := fleetv1alpha1.AgentStatus(ev.State)
		if st == "" || len(changes) > 0 && changes[len(changes)-1].status == st {
			continue
		}
		if len(changes) > 0 {
			changes[len(changes)-1].end = ev.At
		}
		changes = append(changes, change{status: st, start: ev.At, end: time.Now()})
	}
	// shown is what the Member is bound to show by now: to begin with,
	// what it showed before the first hook reported.
	var shown fleetv1alpha1.AgentStatus
	for _, s := range seen {
		if len(changes) > 0 && s.at.Before(changes[0].start) {
			shown = s.status
		}
	}
	// showing is what the Member showed at t.
	showing := func(t time.Time) (st fleetv1alpha1.AgentStatus) {
		for _, s := range seen {
			if !s.at.After(t) {
				st = s.status
			}
		}
		return st
	}
	for _, c := range changes {
		if c.status == fleetv1alpha1.AgentWorking && c.end.Sub(c.start) < briefWork {
			continue
		}
		found := false
		for _, s := range seen {
			if s.status == c.status && !s.at.Before(c.start.Add(-time.Millisecond)) && s.at.Before(c.end.Add(time.Second)) {
				out = append(out, s.at.Sub(c.start))
				found = true
				break
			}
		}
		// A change the Member already showed needs no showing again: after
		// a restart herdr reports the new agent idle before its hooks say
		// so, and a brief turn between shows nothing.
		if !found && c.status != shown && showing(c.start) != c.status {
			missed = append(missed, fmt.Sprintf("%s at %s", c.status, c.start.Format(time.StampMilli)))
		}
		shown = c.status
	}
	return out, missed
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// timed calls bridge_send and logs how long its outcome took.
func timed(t *testing.T, flow string, f func() any) {
	t.Helper()
	start := time.Now()
	f()
	t.Logf("flow %q: bridge_send to outcome %s", flow, time.Since(start).Round(time.Millisecond))
}

// realAgent is one agent CLI as the end-to-end flows drive it.
type realAgent struct {
	kind fleetv1alpha1.AgentKind
	// prompt is the TUI's prompt marker, which a turn_done tail shows.
	prompt string
	// configEnv is the variable of the agent's own config directory that
	// fleetd sets in its pane; comms are the agent's process names.
	configEnv string
	comms     []string
	// dialog is what the agent's approval prompt says.
	dialog string
	// asksMode is the Profile's permissionMode in which it asks.
	asksMode string
}

var (
	claudeCode = realAgent{
		kind: fleetv1alpha1.AgentClaude, prompt: "❯", configEnv: "CLAUDE_CONFIG_DIR", comms: []string{"claude"},
		dialog: "Do you want to proceed?", asksMode: agents.ClaudeDefault,
	}
	codexCLI = realAgent{
		// npm's codex is a node script that runs the native binary.
		kind: fleetv1alpha1.AgentCodex, prompt: "›", configEnv: "CODEX_HOME", comms: []string{"codex", "node"},
		dialog: "Would you like to run the following command?", asksMode: agents.CodexOnRequest,
	}
)

// TestClaudeCode runs every flow with the real Claude Code CLI as a Member:
// started unattended by fleetd, its status from its own hooks, its tools
// called against the scripted model.
func TestClaudeCode(t *testing.T) { testRealAgent(t, claudeCode, "cc-worker") }

// TestCodex runs every flow with the real Codex CLI as a Member, the same
// way.
func TestCodex(t *testing.T) { testRealAgent(t, codexCLI, "cx-worker") }

func testRealAgent(t *testing.T, a realAgent, name string) {
	requireRealAgents(t)
	dumpOnFailure(t)
	model, url := startModel(t)
	agentProfile(t, name+"-e2e", a.kind, url, "")
	statuses := watchStatuses(t)
	m := agentMember(t, name, name+"-e2e")
	s := session(t, w.token)
	send := func(args map[string]any) mcpclient.Result {
		args["sessionId"] = name
		return call(t, s, "bridge_send", args)
	}
	replyContent, replyID := "reply: hello from "+string(a.kind), ""
	t.Run("reply", func(t *testing.T) {
		timed(t, "reply", func() any {
			r := send(map[string]any{"content": replyContent})
			wantOutcome(t, r, "reply")
			replyID = r.Str("dispatchId")
			if r.Str("text") != "hello from "+string(a.kind) {
				t.Errorf("reply %q", r.Str("text"))
			}
			return nil
		})
	})
	t.Run("tokens counted from the transcript", func(t *testing.T) {
		// Every call of the turn is the model's, which reports the same
		// usage for each: the Member's sums are exact multiples.
		testutil.Eventually(t, "the member's usage to count every model call", func() (bool, string) {
			var calls int64
			var steps []string
			for _, r := range model.Requests() {
				if r.Kind == stubmodel.KindTurn {
					calls++
					steps = append(steps, fmt.Sprintf("%q step %d: %s", r.Prompt, r.Step, r.Answer))
				}
			}
			want := fleetv1alpha1.TokenUsage{
				InputTokens: calls * stubmodel.UsageInputTokens, CachedTokens: calls * stubmodel.UsageCachedTokens,
				OutputTokens: calls * stubmodel.UsageOutputTokens, Calls: calls,
			}
			if a.kind == fleetv1alpha1.AgentClaude {
				want.CacheCreationTokens = calls * stubmodel.UsageCacheCreationTokens
			}
			now, err := getMember(name)
			if err != nil {
				return false, err.Error()
			}
			if now.Status.Usage == nil {
				return false, fmt.Sprintf("no usage yet; want %+v", want)
			}
			return calls > 0 && now.Status.Usage.TokenUsage == want, fmt.Sprintf("usage %+v, want %+v for the calls %s", now.Status.Usage.TokenUsage, want, strings.Join(steps, "; "))
		})
	})
	t.Run("tokens counted per message", func(t *testing.T) {
		if replyID == "" {
			t.Skip("the reply message was not sent")
		}
		// The turn the message started is the model calls whose prompt it
		// was: the Delegation's usage is exactly theirs.
		testutil.Eventually(t, "the message's usage to count its turn's calls", func() (bool, string) {
			var calls int64
			for _, r := range model.Requests() {
				if r.Kind == stubmodel.KindTurn && r.Prompt == replyContent {
					calls++
				}
			}
			want := fleetv1alpha1.TokenUsage{
				InputTokens: calls * stubmodel.UsageInputTokens, CachedTokens: calls * stubmodel.UsageCachedTokens,
				OutputTokens: calls * stubmodel.UsageOutputTokens, Calls: calls,
			}
			if a.kind == fleetv1alpha1.AgentClaude {
				want.CacheCreationTokens = calls * stubmodel.UsageCacheCreationTokens
			}
			var d fleetv1alpha1.Delegation
			if err := w.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: replyID}, &d); err != nil {
				return false, err.Error()
			}
			if d.Status.Usage == nil {
				return false, fmt.Sprintf("no usage on %s yet; want %+v", replyID, want)
			}
			return calls > 0 && d.Status.Usage.TokenUsage == want, fmt.Sprintf("usage %+v, want %+v", d.Status.Usage.TokenUsage, want)
		})
	})
	// Claude Code reports from its start; Codex from its first prompt.
	now, _ := getMember(name)
	if cond := condition(now, fleetv1alpha1.ConditionAgentHooks); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("AgentHooks = %+v, want fleetd's hooks reporting", cond)
	}
	if now.Status.AgentSessionID == "" {
		t.Errorf("no agent session id recorded from the hooks: %+v", now.Status)
	}
	// team_status shows the context left, from the usage the agent's
	// transcript records.
	if out, err := w.kubectl("patch", "member", "-n", ns, name, "--type=merge", "-p", `{"spec":{"team":"`+name+`-team"}}`); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	testutil.Eventually(t, "context usage in team_status", func() (bool, string) {
		st := call(t, s, "team_status", map[string]any{"team": name + "-team"})
		ms, _ := st.Fields["members"].([]any)
		if len(ms) != 1 {
			return false, fmt.Sprint(st.Fields)
		}
		pct, _ := ms[0].(map[string]any)["contextRemainingPercent"].(float64)
		return pct > 0 && pct < 100, fmt.Sprint(ms[0])
	})
	t.Run("question and answer in one turn", func(t *testing.T) {
		timed(t, "question and answer", func() any {
			r := send(map[string]any{"content": "ask: Which branch?\nreply: working on {answer}"})
			wantOutcome(t, r, "question")
			if r.Str("text") != "Which branch?" {
				t.Fatalf("question %q", r.Str("text"))
			}
			r = call(t, s, "bridge_send", map[string]any{"turnId": r.Str("turnId"), "content": "main"})
			wantOutcome(t, r, "reply")
			if r.Str("text") != "working on main" {
				t.Errorf("reply %q, want the answer in the same turn", r.Str("text"))
			}
			return nil
		})
		if turns := model.Turns()["ask: Which branch?\nreply: working on {answer}"]; turns != 1 {
			t.Errorf("the question took %d turns, want 1", turns)
		}
	})
	t.Run("turn done with the TUI's tail", func(t *testing.T) {
		timed(t, "turn_done", func() any {
			r := send(map[string]any{"content": "silent: nothing to report here"})
			wantOutcome(t, r, "turn_done")
			tail := r.Str("text")
			if !strings.Contains(tail, "nothing to report here") || !strings.Contains(tail, a.prompt) {
				t.Errorf("tail %q: want the real TUI's last lines", tail)
			}
			return nil
		})
	})
	t.Run("timeout then late reply", func(t *testing.T) {
		timed(t, "timeout then late reply", func() any {
			r := send(map[string]any{"content": "sleep: 4\nreply: late but here", "timeoutMs": 1500})
			wantOutcome(t, r, "timeout")
			id := r.Str("dispatchId")
			testutil.Eventually(t, "the late reply in bridge_poll", func() (bool, string) {
				p := call(t, s, "bridge_poll", nil)
				return pollHas(p, id, "reply", "late but here"), fmt.Sprint(p.Fields)
			})
			call(t, s, "bridge_ack", map[string]any{"dispatchId": id})
			return nil
		})
	})
	t.Run("detached with poll and ack", func(t *testing.T) {
		timed(t, "detached", func() any {
			r := send(map[string]any{"content": "reply: detached result", "wait": false})
			wantOutcome(t, r, "dispatched")
			id := r.Str("dispatchId")
			testutil.Eventually(t, "the outcome in bridge_poll", func() (bool, string) {
				p := call(t, s, "bridge_poll", nil)
				return pollHas(p, id, "reply", "detached result"), fmt.Sprint(p.Fields)
			})
			if a := call(t, s, "bridge_ack", map[string]any{"dispatchId": id}); a.IsError {
				t.Fatalf("ack: %v", a.Fields)
			}
			if p := call(t, s, "bridge_poll", nil); pollHas(p, id, "", "") {
				t.Errorf("polled after ack: %v", p.Fields)
			}
			return nil
		})
	})
	t.Run("five back to back, each typed once, one per turn", func(t *testing.T) {
		timed(t, "five back to back", func() any {
			var ids, prompts []string
			for i := range 5 {
				prompt := fmt.Sprintf("reply: back to back %d", i)
				prompts = append(prompts, prompt)
				r := send(map[string]any{"content": prompt, "wait": false})
				wantOutcome(t, r, "dispatched")
				ids = append(ids, r.Str("dispatchId"))
			}
			for i, id := range ids {
				testutil.Eventually(t, "reply "+id, func() (bool, string) {
					p := call(t, s, "bridge_poll", nil)
					return pollHas(p, id, "reply", fmt.Sprintf("back to back %d", i)), fmt.Sprint(p.Fields)
				})
			}
			call(t, s, "bridge_ack", map[string]any{"ids": ids})
			turns := model.Turns()
			for _, p := range prompts {
				if turns[p] != 1 {
					t.Errorf("%q started %d turns, want exactly 1", p, turns[p])
				}
			}
			for p := range turns {
				if strings.Count(p, "back to back") > 1 {
					t.Errorf("two messages typed into one turn: %q", p)
				}
			}
			return nil
		})
	})
	t.Run("a turn interrupted with Esc ends turn_done", func(t *testing.T) {
		// Claude Code sends no Stop hook for an interrupted turn, and
		// herdr's reports never expire: the screen shows the turn is over.
		timed(t, "interrupted", func() any {
			r := send(map[string]any{"content": "sleep: 60\nreply: never sent", "wait": false})
			id := r.Str("dispatchId")
			waitDelegationPhase(t, id, fleetv1alpha1.DelegationWorking)
			now, _ := getMember(name)
			if err := w.paneKeys(now, "esc"); err != nil {
				t.Fatal(err)
			}
			waitDelegationPhase(t, id, fleetv1alpha1.DelegationTurnDone)
			testutil.Eventually(t, "the member idle again", func() (bool, string) {
				now, err := getMember(name)
				if err != nil {
					return false, err.Error()
				}
				return now.Status.AgentStatus == fleetv1alpha1.AgentIdle, string(now.Status.AgentStatus)
			})
			call(t, s, "bridge_ack", map[string]any{"dispatchId": id})
			return nil
		})
	})
	t.Run("killed agent restarts and its message ends worker_gone", func(t *testing.T) {
		timed(t, "worker_gone", func() any {
			r := send(map[string]any{"content": "sleep: 60\nreply: never", "wait": false})
			id := r.Str("dispatchId")
			waitDelegationPhase(t, id, fleetv1alpha1.DelegationWorking)
			before, _ := getMember(name)
			killAgent(t, a, before)
			waitDelegationPhase(t, id, fleetv1alpha1.DelegationWorkerGone)
			testutil.Eventually(t, "the member restarted and Ready", func() (bool, string) {
				now, err := getMember(name)
				if err != nil {
					return false, err.Error()
				}
				return now.Status.Restarts > before.Status.Restarts && condition(now, fleetv1alpha1.ConditionReady) != nil &&
					condition(now, fleetv1alpha1.ConditionReady).Status == metav1.ConditionTrue, string(now.Status.Phase)
			})
			r = send(map[string]any{"content": "reply: back after the restart"})
			wantOutcome(t, r, "reply")
			return nil
		})
	})

	// The last flow's last change (idle, after its reply) may be reported
	// a moment before the Member can show it: judge once it has had the
	// time, or the wait runs out.
	var delays []time.Duration
	testutil.Eventually(t, "the Member to show every change its hooks reported", func() (bool, string) {
		var missed []string
		delays, missed = statuses.delays(t, m)
		return len(missed) == 0, fmt.Sprintf("the Member never showed %d of its hooks' changes: %s", len(missed), strings.Join(missed, ", "))
	})
	if len(delays) < 2 {
		t.Fatalf("measured %d hook-to-Member delays, want the status changes of every flow", len(delays))
	}
	// A figure, not a bound: a busy machine stretches it.
	p50, p99 := percentile(delays, 0.5), percentile(delays, 0.99)
	t.Logf("hook -> Member status: %d changes, p50 %s, p99 %s", len(delays), p50.Round(time.Millisecond), p99.Round(time.Millisecond))
}

// TestClaudeCodePermissionDialog runs Claude Code in the mode that asks
// before a tool runs: the dialog makes the Member blocked with the dialog's
// text, no message is typed into it, and once it goes the queue moves on.
func TestClaudeCodePermissionDialog(t *testing.T) { testPermissionDialog(t, claudeCode, "cc-asks") }

// TestCodexApprovalPrompt is the same with Codex asking for approval to
// run a command outside its sandbox.
func TestCodexApprovalPrompt(t *testing.T) { testPermissionDialog(t, codexCLI, "cx-asks") }

func testPermissionDialog(t *testing.T, a realAgent, name string) {
	requireRealAgents(t)
	dumpOnFailure(t)
	model, url := startModel(t)
	agentProfile(t, name+"-e2e", a.kind, url, a.asksMode)
	agentMember(t, name, name+"-e2e")
	s := session(t, w.token)

	r := call(t, s, "bridge_send", map[string]any{"sessionId": name, "content": "bash: curl -s http://127.0.0.1:9/permission-probe", "wait": false})
	wantOutcome(t, r, "dispatched")
	var m *fleetv1alpha1.Member
	testutil.Eventually(t, "the member blocked with the dialog's text", func() (bool, string) {
		var err error
		if m, err = getMember(name); err != nil {
			return false, err.Error()
		}
		return m.Status.AgentStatus == fleetv1alpha1.AgentBlocked && strings.Contains(m.Status.AgentMessage, a.dialog) &&
			strings.Contains(m.Status.AgentMessage, "curl -s http://127.0.0.1:9/permission-probe"), fmt.Sprintf("%s: %q", m.Status.AgentStatus, m.Status.AgentMessage)
	})
	out, _ := w.kubectl("get", "member", "-n", ns, name, "-o", "jsonpath={.status.agentMessage}")
	if !strings.Contains(out, a.dialog) {
		t.Errorf("kubectl shows no dialog: %q", out)
	}
	list := call(t, s, "bridge_list", nil)
	if !strings.Contains(fmt.Sprint(list.Fields), a.dialog) {
		t.Errorf("bridge_list shows no dialog: %v", list.Fields)
	}
	// bridge_read source detection says why: the rule that saw the dialog.
	read := call(t, s, "bridge_read", map[string]any{"sessionId": name, "source": "detection"})
	if det, _ := read.Fields["detection"].(map[string]any); det["state"] != "blocked" || det["rule"] == nil || !strings.Contains(fmt.Sprint(det["region"]), a.dialog) {
		t.Errorf("bridge_read detection of the dialog: %v", read.Fields)
	}

	// A second message waits: typing now would answer the dialog. Someone
	// dismisses the dialog: the worker is idle again, the queue moves on,
	// and the second message was typed after that, once.
	queued := call(t, s, "bridge_send", map[string]any{"sessionId": name, "content": "reply: after the dialog", "wait": false})
	queuedID := queued.Str("dispatchId")
	waitDelegationPhase(t, queuedID, fleetv1alpha1.DelegationQueued)
	// The API keeps whole seconds.
	dismissed := time.Now().Truncate(time.Second)
	if err := w.paneKeys(m, "esc"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the queued message replied", func() (bool, string) {
		p := call(t, s, "bridge_poll", nil)
		return pollHas(p, queuedID, "reply", "after the dialog"), fmt.Sprint(p.Fields)
	})
	if d := delegation(t, queuedID); d.Status.DeliveringAt == nil || d.Status.DeliveringAt.Time.Before(dismissed) {
		t.Errorf("the queued message was typed at %v, before the dialog went at %v", d.Status.DeliveringAt, dismissed)
	}
	// Claude Code sends a prompt typed after an interrupted tool call with
	// that call's interruption notice: count the turns that hold it.
	turns := 0
	for prompt, n := range model.Turns() {
		if strings.Contains(prompt, "reply: after the dialog") {
			turns += n
		}
	}
	if turns != 1 {
		t.Errorf("the queued message started %d turns, want 1: %v", turns, model.Turns())
	}
}

func condition(m *fleetv1alpha1.Member, typ string) *metav1.Condition {
	for i := range m.Status.Conditions {
		if m.Status.Conditions[i].Type == typ {
			return &m.Status.Conditions[i]
		}
	}
	return nil
}

func delegation(t *testing.T, name string) *fleetv1alpha1.Delegation {
	t.Helper()
	d := &fleetv1alpha1.Delegation{}
	if err := w.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
		t.Fatal(err)
	}
	return d
}

func waitDelegationPhase(t *testing.T, name string, phase fleetv1alpha1.DelegationPhase) {
	t.Helper()
	testutil.Eventually(t, name+" "+string(phase), func() (bool, string) {
		d := delegation(t, name)
		return d.Status.Phase == phase, string(d.Status.Phase)
	})
}

// killAgent sends SIGKILL to the agent processes of m's pane: the
// processes of the agent's names whose environment names m and its config
// directory.
func killAgent(t *testing.T, a realAgent, m *fleetv1alpha1.Member) {
	t.Helper()
	killed, err := w.killAgent(m, a.configEnv, a.comms)
	if err != nil {
		t.Fatal(err)
	}
	if killed == 0 {
		t.Fatalf("no %s process of member %s to kill", a.kind, m.Name)
	}
}

// TestCodexWithoutALoginShowsItsSignIn: a subscription Member with no
// ChatGPT login stops at Codex's sign-in screen, and says so.
func TestCodexWithoutALoginShowsItsSignIn(t *testing.T) {
	requireRealAgents(t)
	dumpOnFailure(t)
	apply(t, fmt.Sprintf("apiVersion: fleet.fleetd.dev/v1alpha1\nkind: Profile\nmetadata: {name: codex-nologin, namespace: %s}\nspec: {agent: codex, billing: subscription}\n", ns))
	t.Cleanup(func() { _, _ = w.kubectl("delete", "profile", "-n", ns, "codex-nologin", "--wait=false") })
	apply(t, fmt.Sprintf("apiVersion: fleet.fleetd.dev/v1alpha1\nkind: Member\nmetadata: {name: cx-nologin, namespace: %s}\nspec: {profile: codex-nologin}\n", ns))
	t.Cleanup(func() { _, _ = w.kubectl("delete", "member", "-n", ns, "cx-nologin", "--wait=false") })
	testutil.Eventually(t, "the member blocked on the sign-in screen", func() (bool, string) {
		m, err := getMember("cx-nologin")
		if err != nil {
			return false, err.Error()
		}
		ready := condition(m, fleetv1alpha1.ConditionReady)
		return m.Status.AgentStatus == fleetv1alpha1.AgentBlocked && strings.Contains(m.Status.AgentMessage, "Sign in with ChatGPT"),
			fmt.Sprintf("%s %q ready=%+v", m.Status.AgentStatus, m.Status.AgentMessage, ready)
	})
}
