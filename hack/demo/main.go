// Command demo walks every flow of fleetd against a running `fleetd dev`:
// it applies two scripted-agent Members, then acts as a primary over MCP and
// prints each step as a person wants to read it.
//
//	make dev    # in one terminal
//	make demo   # in another
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/mcpclient"
	"github.com/fleetd/fleetd/internal/scheme"
)

func main() {
	state := flag.String("state-dir", ".dev", "The state directory of `fleetd dev`.")
	url := flag.String("gateway", "http://127.0.0.1:8080/mcp", "The gateway's MCP URL.")
	ns := flag.String("namespace", "default", "Namespace of the dev primary.")
	flag.Parse()
	if err := demo(*state, *url, *ns); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func demo(state, url, ns string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kubeconfig := filepath.Join(state, "controlplane", "kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("no dev environment at %s (is `make dev` running?): %w", state, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(filepath.Join(state, "primary-token"))
	if err != nil {
		return fmt.Errorf("reading the primary token: %w", err)
	}
	token := strings.TrimSpace(string(raw))

	step("Apply two members running the scripted agent")
	for _, name := range []string{"alice", "bob"} {
		m := &fleetv1alpha1.Member{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		_, err := ctrlCreateOrGet(ctx, c, m, func() { m.Spec.Profile = "scripted"; m.Spec.Team = "demo" })
		if err != nil {
			return err
		}
	}
	for _, name := range []string{"alice", "bob"} {
		m, err := waitReady(ctx, c, ns, name)
		if err != nil {
			return err
		}
		say("%s is Ready in pane %s (agent %s)", name, m.Status.PaneID, m.Status.AgentStatus)
	}

	s, err := mcpclient.Connect(ctx, url, token)
	if err != nil {
		return err
	}
	defer s.Close()
	who, err := mcpclient.Call(ctx, s, "bridge_whoami", nil)
	if err != nil {
		return err
	}
	say("connected to %s as %s %s", url, who.Str("kind"), who.Str("name"))

	step("1. Delegation: bridge_send blocks until the worker replies")
	r, err := send(ctx, s, map[string]any{"sessionId": "alice", "content": "reply: the tests pass on main"})
	if err != nil {
		return err
	}
	show(r)

	step("2. Clarification: the worker asks back, the primary answers with turnId")
	r, err = send(ctx, s, map[string]any{"sessionId": "bob", "content": "ask: Which branch should I rebase onto?"})
	if err != nil {
		return err
	}
	show(r)
	if r.Str("outcome") != "question" {
		return errors.New("expected a question")
	}
	say("answering %q with turnId %s", "main", r.Str("turnId"))
	r, err = send(ctx, s, map[string]any{"turnId": r.Str("turnId"), "content": "main"})
	if err != nil {
		return err
	}
	show(r)

	step("3. Detached: wait:false returns at once; the outcome waits in bridge_poll until bridge_ack")
	r, err = send(ctx, s, map[string]any{"sessionId": "alice", "content": "reply: report written to docs/report.md", "wait": false})
	if err != nil {
		return err
	}
	show(r)
	id := r.Str("dispatchId")
	if err := pollFor(ctx, s, id, "reply"); err != nil {
		return err
	}
	if _, err := mcpclient.Call(ctx, s, "bridge_ack", map[string]any{"dispatchId": id}); err != nil {
		return err
	}
	say("acknowledged %s", id)

	step("4. Uncooperative worker: it ends its turn without replying; the terminal tail comes back")
	r, err = send(ctx, s, map[string]any{"sessionId": "bob", "content": "silent: I refactored the parser but forgot to call bridge_reply"})
	if err != nil {
		return err
	}
	show(r)

	step("5. Deadline: a slow worker times out; its late reply is kept for bridge_poll")
	r, err = send(ctx, s, map[string]any{"sessionId": "alice", "content": "sleep: 4\nreply: finally done", "timeoutMs": 1500})
	if err != nil {
		return err
	}
	show(r)
	say("waiting for the worker to finish anyway...")
	if err := pollFor(ctx, s, r.Str("dispatchId"), "reply", "finally done"); err != nil {
		return err
	}

	step("6. Peek and withdraw: bridge_read shows a busy worker's terminal; bridge_cancel interrupts its turn")
	r, err = send(ctx, s, map[string]any{"sessionId": "bob", "content": "sleep: 60\nreply: this reply never comes", "wait": false})
	if err != nil {
		return err
	}
	show(r)
	if err := waitWorking(ctx, s, "bob"); err != nil {
		return err
	}
	say("bridge_read sessionId=\"bob\" source=\"recent\" lines=\"4\"")
	read, err := mcpclient.Call(ctx, s, "bridge_read", map[string]any{"sessionId": "bob", "source": "recent", "lines": 4})
	if err != nil {
		return err
	}
	if read.IsError {
		show(read)
		return errors.New("bridge_read failed")
	}
	for _, line := range strings.Split(strings.TrimRight(read.Str("text"), "\n"), "\n") {
		say("   | %s", line)
	}
	say("bridge_cancel dispatchId=%q", r.Str("dispatchId"))
	cancelled, err := mcpclient.Call(ctx, s, "bridge_cancel", map[string]any{"dispatchId": r.Str("dispatchId")})
	if err != nil {
		return err
	}
	show(cancelled)
	if cancelled.Str("outcome") != "cancelled" {
		return errors.New("expected the message cancelled")
	}

	step("Everything is a Delegation: kubectl get delegations")
	var list fleetv1alpha1.DelegationList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, d := range list.Items {
		say("%-28s %-6s -> %-6s %-9s %s", d.Name, d.Spec.From.Name, d.Spec.To, d.Status.Phase, d.Status.Outcome)
	}
	fmt.Println("\nEvery flow worked. Try it yourself: KUBECONFIG=" + kubeconfig + " bin/controlplane/kubectl get fleet")
	return nil
}

func ctrlCreateOrGet(ctx context.Context, c client.Client, m *fleetv1alpha1.Member, fill func()) (bool, error) {
	if err := c.Get(ctx, client.ObjectKeyFromObject(m), m); err == nil {
		return false, nil
	}
	fill()
	if err := c.Create(ctx, m); err != nil {
		return false, fmt.Errorf("creating member %s: %w", m.Name, err)
	}
	return true, nil
}

func waitReady(ctx context.Context, c client.Client, ns, name string) (*fleetv1alpha1.Member, error) {
	for {
		m := &fleetv1alpha1.Member{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, m); err == nil &&
			meta.IsStatusConditionTrue(m.Status.Conditions, fleetv1alpha1.ConditionReady) {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("member %s not Ready: %w", name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func send(ctx context.Context, s *mcp.ClientSession, args map[string]any) (mcpclient.Result, error) {
	say("bridge_send %s", compact(args))
	start := time.Now()
	r, err := mcpclient.Call(ctx, s, "bridge_send", args)
	if err == nil {
		say("returned after %s", time.Since(start).Round(10*time.Millisecond))
	}
	return r, err
}

// pollFor polls until the outcome of id shows, with text containing
// wantText when given.
func pollFor(ctx context.Context, s *mcp.ClientSession, id, outcome string, wantText ...string) error {
	for {
		r, err := mcpclient.Call(ctx, s, "bridge_poll", nil)
		if err != nil {
			return err
		}
		list, _ := r.Fields["outcomes"].([]any)
		for _, o := range list {
			m, _ := o.(map[string]any)
			text, _ := m["text"].(string)
			if m["dispatchId"] == id && m["outcome"] == outcome && (len(wantText) == 0 || strings.Contains(text, wantText[0])) {
				say("bridge_poll: %s → %s %q", id, outcome, text)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no outcome for %s in bridge_poll: %w", id, ctx.Err())
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// waitWorking waits until a member's agent is working.
func waitWorking(ctx context.Context, s *mcp.ClientSession, name string) error {
	for {
		st, err := mcpclient.Call(ctx, s, "bridge_status", map[string]any{"sessionId": name})
		if err != nil {
			return err
		}
		if ms, _ := st.Fields["members"].([]any); len(ms) == 1 {
			if m, _ := ms[0].(map[string]any); m["agentStatus"] == "working" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not start working: %w", name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func show(r mcpclient.Result) {
	if r.IsError {
		say("error %s: %v", r.ErrorCode(), r.Fields["error"])
		return
	}
	out := "outcome: " + r.Str("outcome")
	if t := r.Str("text"); t != "" {
		out += fmt.Sprintf("\n      text: %q", strings.TrimSpace(lastLines(t, 4)))
	}
	if t := r.Str("turnId"); t != "" {
		out += "\n      turnId: " + t
	}
	if t := r.Str("dispatchId"); t != "" {
		out += "\n      dispatchId: " + t
	}
	say("%s", out)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func compact(args map[string]any) string {
	var parts []string
	for _, k := range []string{"sessionId", "content", "turnId", "wait", "timeoutMs"} {
		if v, ok := args[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%q", k, fmt.Sprint(v)))
		}
	}
	return strings.Join(parts, " ")
}

func step(title string) { fmt.Printf("\n== %s\n", title) }

func say(format string, args ...any) { fmt.Printf("   "+format+"\n", args...) }
