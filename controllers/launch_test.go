package controllers

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/testutil"
)

func TestPlanLaunch(t *testing.T) {
	const url, token = "http://gw:8080/mcp", "secret-token"
	home := agentHome{Dir: "/state/agents/ns/w1-1234abcd", HookCommand: []string{"/bin/fleetd", "hook"}}
	claudeArgs := func(extra ...string) []string {
		return append([]string{
			"--settings", home.Dir + "/claude-settings.json", "--permission-mode", "dontAsk",
			"--mcp-config", `{"mcpServers":{"fleetd":{"headers":{"Authorization":"Bearer ${FLEETD_TOKEN}"},"type":"http","url":"http://gw:8080/mcp"}}}`,
		}, extra...)
	}
	cases := map[string]struct {
		worker       Worker
		env          map[string]string
		wantBoundary bool
		wantKind     string
		wantArgs     []string
		wantCommand  string
	}{
		"plain command is exec'd and quoted": {
			worker:      Worker{Command: []string{"scripted-agent", "--prompt", "it's > "}, Billing: fleetv1alpha1.BillingSubscription},
			wantCommand: `exec scripted-agent --prompt 'it'\''s > '`,
		},
		"claude gets model and an MCP config naming the token variable": {
			worker:   Worker{Agent: fleetv1alpha1.AgentClaude, Model: "sonnet", Args: []string{"--verbose"}, Billing: fleetv1alpha1.BillingSubscription},
			wantKind: "claude",
			wantArgs: append([]string{"--model", "sonnet"}, claudeArgs("--verbose")...),
		},
		"codex is configured in its own CODEX_HOME, not on its command line": {
			worker:   Worker{Agent: fleetv1alpha1.AgentCodex, Effort: "high", Args: []string{"--search"}, Billing: fleetv1alpha1.BillingSubscription},
			wantKind: "codex",
			wantArgs: []string{"--search"},
		},
		"codex billed by api with its endpoint": {
			worker:   Worker{Agent: fleetv1alpha1.AgentCodex, Billing: fleetv1alpha1.BillingAPI},
			env:      map[string]string{"OPENAI_BASE_URL": "http://llm:4000/v1", "OPENAI_API_KEY": "sk"},
			wantKind: "codex",
		},
		"codex billed by api with only an Anthropic endpoint": {
			worker:       Worker{Agent: fleetv1alpha1.AgentCodex, Billing: fleetv1alpha1.BillingAPI},
			env:          map[string]string{"ANTHROPIC_BASE_URL": "http://llm:4000"},
			wantBoundary: true,
		},
		"codex on a subscription with an OpenAI key": {
			worker:       Worker{Agent: fleetv1alpha1.AgentCodex, Billing: fleetv1alpha1.BillingSubscription},
			env:          map[string]string{"OPENAI_API_KEY": "sk"},
			wantBoundary: true,
		},
		"api billing with its endpoint": {
			worker:   Worker{Agent: fleetv1alpha1.AgentClaude, Billing: fleetv1alpha1.BillingAPI},
			env:      map[string]string{"ANTHROPIC_BASE_URL": "http://llm:4000"},
			wantKind: "claude",
			wantArgs: claudeArgs(),
		},
		"api billing without an endpoint": {
			worker:       Worker{Agent: fleetv1alpha1.AgentClaude, Billing: fleetv1alpha1.BillingAPI},
			env:          map[string]string{"ANTHROPIC_BASE_URL": ""},
			wantBoundary: true,
		},
		"subscription worker with an endpoint": {
			worker:       Worker{Agent: fleetv1alpha1.AgentClaude, Billing: fleetv1alpha1.BillingSubscription},
			env:          map[string]string{"ANTHROPIC_API_KEY": "sk-x"},
			wantBoundary: true,
		},
		"endpoint smuggled on the command line": {
			worker:       Worker{Command: []string{"env", "ANTHROPIC_BASE_URL=http://x", "claude"}, Billing: fleetv1alpha1.BillingSubscription},
			wantBoundary: true,
		},
		"endpoint smuggled in args even for api billing": {
			worker:       Worker{Agent: fleetv1alpha1.AgentClaude, Args: []string{"ANTHROPIC_AUTH_TOKEN=x"}, Billing: fleetv1alpha1.BillingAPI},
			env:          map[string]string{"ANTHROPIC_BASE_URL": "http://llm:4000"},
			wantBoundary: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			l, err := planLaunch(tc.worker, tc.env, url, token, "w1", home)
			var boundary *boundaryError
			if tc.wantBoundary {
				if !errors.As(err, &boundary) {
					t.Fatalf("want a boundary error, got %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantArgs, l.AgentArgs); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
			if l.AgentKind != tc.wantKind || l.CommandLine != tc.wantCommand {
				t.Errorf("kind=%q command=%q, want %q and %q", l.AgentKind, l.CommandLine, tc.wantKind, tc.wantCommand)
			}
			if l.Env[agents.EnvToken] != token || l.Env[agents.EnvMCPURL] != url || l.Env[agents.EnvMember] != "w1" {
				t.Errorf("fleetd's variables missing: %v", l.Env)
			}
			if strings.Contains(strings.Join(l.AgentArgs, " ")+l.CommandLine, token) {
				t.Errorf("the token is on the command line")
			}
			if tc.worker.Billing != fleetv1alpha1.BillingAPI {
				for _, name := range credentialEnv {
					if v, ok := l.Env[name]; !ok || v != "" {
						t.Errorf("a subscription worker's %s is %q, %v; want it set empty over herdr's environment", name, v, ok)
					}
				}
			}
			if tc.wantKind != "" && l.WorkingDir != home.Dir+"/work" {
				t.Errorf("working dir %q, want one of the member's own", l.WorkingDir)
			}
		})
	}
}

func TestResolveWorker(t *testing.T) {
	m := &fleetv1alpha1.Member{Spec: fleetv1alpha1.MemberSpec{Profile: "p", Args: []string{"--member-arg"}}}
	p := &fleetv1alpha1.Profile{Spec: fleetv1alpha1.ProfileSpec{
		WorkerSpec: fleetv1alpha1.WorkerSpec{Agent: "claude", Args: []string{"--profile-arg"}, Env: []fleetv1alpha1.EnvVar{{Name: "A", Value: ptr.To("1")}}},
		Model:      "opus",
	}}
	got := resolveWorker(m, p)
	want := Worker{Agent: "claude", Args: []string{"--profile-arg", "--member-arg"}, Env: p.Spec.Env, Model: "opus", Billing: fleetv1alpha1.BillingSubscription}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("resolveWorker (-want +got):\n%s", diff)
	}
}

// TestResolveWorkerGitIdentity: a Profile's git identity becomes the
// author and committer variables, and a variable the Profile's env sets
// wins (it comes later).
func TestResolveWorkerGitIdentity(t *testing.T) {
	m := &fleetv1alpha1.Member{Spec: fleetv1alpha1.MemberSpec{Profile: "p"}}
	p := &fleetv1alpha1.Profile{Spec: fleetv1alpha1.ProfileSpec{
		WorkerSpec: fleetv1alpha1.WorkerSpec{Agent: "claude", Env: []fleetv1alpha1.EnvVar{{Name: "GIT_COMMITTER_EMAIL", Value: ptr.To("ci@example.com")}}},
		Git:        &fleetv1alpha1.GitIdentity{Name: "Rita Reviewer", Email: "rita@example.com"},
	}}
	env := map[string]string{}
	for _, e := range resolveWorker(m, p).Env {
		env[e.Name] = *e.Value
	}
	want := map[string]string{
		"GIT_AUTHOR_NAME": "Rita Reviewer", "GIT_AUTHOR_EMAIL": "rita@example.com",
		"GIT_COMMITTER_NAME": "Rita Reviewer", "GIT_COMMITTER_EMAIL": "ci@example.com",
	}
	if diff := cmp.Diff(want, env); diff != "" {
		t.Errorf("the worker's env (-want +got):\n%s", diff)
	}
}

func TestAgentName(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	long := strings.Repeat("a", 22) + "-b" + strings.Repeat("c", 8)
	names := map[string]string{
		"default/w1":            agentName("default", "w1"),
		"team-a/w1":             agentName("team-a", "w1"),
		"default/w2":            agentName("default", "w2"),
		"default/" + long:       agentName("default", long),
		"default/" + long + "d": agentName("default", long[:31]+"d"),
	}
	seen := map[string]string{}
	for member, name := range names {
		if !valid.MatchString(name) {
			t.Errorf("%s: herdr name %q is not a valid herdr agent name", member, name)
		}
		if other, dup := seen[name]; dup {
			t.Errorf("%s and %s share the herdr name %q", member, other, name)
		}
		seen[name] = member
	}
	if got := agentName("default", "w1"); got != names["default/w1"] || !strings.HasPrefix(got, "w1-") {
		t.Errorf("agentName(default, w1) = %q, want it stable and starting with the Member's name", got)
	}
	if got := names["default/"+long]; !strings.HasPrefix(got, strings.Repeat("a", 22)+"-") {
		t.Errorf("a long name is cut at a separator: %q", got)
	}
}

// TestPaneEnvironment checks what a pane gets: its spec's env and
// fleetd's variables on top of herdr's own environment, which panes inherit
// as herdr's do. herdr's environment may hold an API key and endpoint; a
// worker billed by subscription must never see them, so fleetd empties
// them in its pane.
func TestPaneEnvironment(t *testing.T) {
	ns := env.Namespace(t)
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-of-herdr-itself")
	t.Setenv("ANTHROPIC_BASE_URL", "http://gateway.of.herdr")
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	// sh prints its environment, then becomes the scripted agent.
	create(t, testutil.MakeMember("envcheck", ns).Command("/bin/sh", "-c", "env | sort; exec "+scriptedAgent).Env("TEAM_COLOR", "blue").Obj())
	m := waitReady(t, ns, "envcheck")
	read, err := h.client().PaneRead(context.Background(), herdr.ReadParams{PaneID: m.Status.PaneID, Source: herdr.ReadSourceRecentUnwrapped})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(read.Text, "\n")
	for i, l := range lines {
		// The command may be typed before the shell's first prompt: the
		// terminal echoes it, and the prompt then leads env's first line.
		lines[i] = strings.TrimPrefix(strings.TrimPrefix(l, "# "), "$ ")
	}
	for _, want := range []string{"TEAM_COLOR=blue", "FLEETD_MEMBER=envcheck", "FLEETD_MCP_URL=http://127.0.0.1:1/mcp", "ANTHROPIC_API_KEY=", "ANTHROPIC_BASE_URL="} {
		if !slices.Contains(lines, want) {
			t.Errorf("pane environment has no line %s:\n%s", want, read.Text)
		}
	}
	if strings.Contains(read.Text, "of-herdr") {
		t.Errorf("herdr's API key or endpoint reached a worker billed by subscription:\n%s", read.Text)
	}
}

// TestPodMemberAgentSendsNoToken: a pod member has no token, and its
// agents mount the gateway through the Pod's forwarder with no credential
// of their own (Codex would not start a server whose token variable is
// empty).
func TestPodMemberAgentSendsNoToken(t *testing.T) {
	home := agentHome{Dir: podAgentDir, HookCommand: podHookCommand}
	for _, kind := range []fleetv1alpha1.AgentKind{fleetv1alpha1.AgentClaude, fleetv1alpha1.AgentCodex} {
		l, err := planLaunch(Worker{Agent: kind}, nil, "http://127.0.0.1:7444/mcp", "", "w1", home)
		if err != nil {
			t.Fatal(err)
		}
		everything := strings.Join(l.AgentArgs, " ")
		for _, f := range l.Files {
			everything += string(f.Content)
		}
		if strings.Contains(everything, agents.EnvToken) {
			t.Errorf("%s: the agent is told to send %s: %s", kind, agents.EnvToken, everything)
		}
		if v, ok := l.Env[agents.EnvToken]; !ok || v != "" {
			t.Errorf("%s: %s = %q, %v; want it set empty over the pane host's environment", kind, agents.EnvToken, v, ok)
		}
	}
}
