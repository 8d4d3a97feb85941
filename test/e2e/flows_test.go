package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/mcpclient"
	"github.com/fleetd/fleetd/internal/testenv"
	"github.com/fleetd/fleetd/internal/testutil"
)

// member applies a scripted-agent Member and waits until it is Ready. It
// returns the file where the agent logs every prompt it receives, as a path
// where the agent runs.
func member(t *testing.T, name string) string {
	t.Helper()
	log := w.receivedLog(name)
	manifest := fmt.Sprintf(`apiVersion: fleet.fleetd.dev/v1alpha1
kind: Member
metadata: {name: %s, namespace: %s}
spec:
  command: [scripted-agent, --received-log, %s]
`, name, ns, log)
	apply(t, manifest)
	waitReady(t, name)
	t.Cleanup(func() { _, _ = w.kubectl("delete", "member", "-n", ns, name, "--wait=false") })
	return log
}

func apply(t *testing.T, manifest string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "m.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := w.kubectl("apply", "-f", f); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

func getMember(name string) (*fleetv1alpha1.Member, error) {
	m := &fleetv1alpha1.Member{}
	return m, w.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, m)
}

func waitReady(t *testing.T, name string) *fleetv1alpha1.Member {
	t.Helper()
	var m *fleetv1alpha1.Member
	testutil.Eventually(t, name+" Ready", func() (bool, string) {
		var err error
		if m, err = getMember(name); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(m.Status.Conditions, fleetv1alpha1.ConditionReady), string(m.Status.Phase)
	})
	return m
}

// memberToken is the bearer token member name's agent calls the gateway
// with, where it runs.
func memberToken(t *testing.T, name string) string {
	t.Helper()
	token, err := w.memberToken(name)
	if err != nil {
		t.Fatalf("member %s's token: %v", name, err)
	}
	return token
}

// secretToken is the token fleetd wrote in a shared-runtime member's token
// Secret.
func secretToken(name string) (string, error) {
	s := &corev1.Secret{}
	if err := w.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name + "-fleetd-token"}, s); err != nil {
		return "", err
	}
	return string(s.Data[fleetv1alpha1.TokenSecretKey]), nil
}

// received is the prompts the agent logged in log, in order.
func received(t *testing.T, log string) []string {
	t.Helper()
	b, err := w.readPaneFile(log)
	return parseReceived(t, b, err)
}

// parseReceived is the prompts in b, a received log as read (err its
// read's error).
func parseReceived(t *testing.T, b []byte, err error) []string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	out, err := testutil.ParseReceived(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func wantOutcome(t *testing.T, r mcpclient.Result, outcome string) {
	t.Helper()
	if r.IsError || r.Str("outcome") != outcome {
		t.Fatalf("want outcome %q, got isError=%v %v %s", outcome, r.IsError, r.Fields, r.Text)
	}
}

func TestReply(t *testing.T) {
	dumpOnFailure(t)
	member(t, "e2e-reply")
	s := session(t, w.token)
	r := call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-reply", "content": "reply: hello from the worker"})
	wantOutcome(t, r, "reply")
	if r.Str("text") != "hello from the worker" {
		t.Errorf("reply text %q", r.Str("text"))
	}
	// The Delegation is there for kubectl to see, settled and Ready.
	testutil.Eventually(t, "the delegation Ready", func() (bool, string) {
		d := &fleetv1alpha1.Delegation{}
		if err := w.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: r.Str("dispatchId")}, d); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(d.Status.Conditions, fleetv1alpha1.ConditionReady) &&
			meta.IsStatusConditionTrue(d.Status.Conditions, fleetv1alpha1.ConditionSettled), fmt.Sprint(d.Status.Conditions)
	})
	out, _ := w.kubectl("get", "delegations", "-n", ns)
	if !strings.Contains(out, "Replied") || !strings.Contains(out, "e2e-reply") {
		t.Errorf("kubectl get delegations:\n%s", out)
	}
}

func TestQuestionAndAnswer(t *testing.T) {
	dumpOnFailure(t)
	member(t, "e2e-ask")
	s := session(t, w.token)
	r := call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-ask", "content": "ask: which colour?"})
	wantOutcome(t, r, "question")
	if r.Str("text") != "which colour?" || r.Str("turnId") == "" {
		t.Fatalf("question: %v", r.Fields)
	}
	r = call(t, s, "bridge_send", map[string]any{"turnId": r.Str("turnId"), "content": "blue"})
	wantOutcome(t, r, "reply")
	if r.Str("text") != "blue" {
		t.Errorf("the worker replied %q, want the answer", r.Str("text"))
	}
}

func TestDetachedPollAndAck(t *testing.T) {
	dumpOnFailure(t)
	member(t, "e2e-detached")
	s := session(t, w.token)
	r := call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-detached", "content": "reply: done later", "wait": false})
	wantOutcome(t, r, "dispatched")
	id := r.Str("dispatchId")
	if id == "" {
		t.Fatalf("no dispatchId: %v", r.Fields)
	}
	testutil.Eventually(t, "the outcome in bridge_poll", func() (bool, string) {
		p := call(t, s, "bridge_poll", nil)
		return pollHas(p, id, "reply", "done later"), fmt.Sprint(p.Fields)
	})
	a := call(t, s, "bridge_ack", map[string]any{"dispatchId": id})
	if a.IsError {
		t.Fatalf("ack: %v", a.Fields)
	}
	if p := call(t, s, "bridge_poll", nil); pollHas(p, id, "", "") {
		t.Errorf("still polled after ack: %v", p.Fields)
	}
}

func pollHas(p mcpclient.Result, id, outcome, text string) bool {
	list, _ := p.Fields["outcomes"].([]any)
	for _, o := range list {
		m, _ := o.(map[string]any)
		if m["dispatchId"] != id {
			continue
		}
		if outcome == "" {
			return true
		}
		return m["outcome"] == outcome && strings.Contains(fmt.Sprint(m["text"]), text)
	}
	return false
}

func TestTurnDone(t *testing.T) {
	dumpOnFailure(t)
	member(t, "e2e-silent")
	s := session(t, w.token)
	r := call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-silent", "content": "silent: the tail says hi"})
	wantOutcome(t, r, "turn_done")
	if !strings.Contains(r.Str("text"), "the tail says hi") {
		t.Errorf("turn_done text lacks the tail: %q", r.Str("text"))
	}
}

func TestTimeoutThenLateReplyIsPolled(t *testing.T) {
	dumpOnFailure(t)
	member(t, "e2e-slow")
	s := session(t, w.token)
	r := call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-slow", "content": "sleep: 4\nreply: late but here", "timeoutMs": 1500})
	timeoutThenPolled(t, s, r, "late but here")
}

// timeoutThenPolled checks that r timed out and that the reply text comes
// to bridge_poll later, and returns the message's dispatchId.
func timeoutThenPolled(t *testing.T, s *mcp.ClientSession, r mcpclient.Result, text string) string {
	t.Helper()
	wantOutcome(t, r, "timeout")
	id := r.Str("dispatchId")
	if id == "" {
		t.Fatalf("a timeout without its dispatchId: %v", r.Fields)
	}
	testutil.Eventually(t, "the late reply in bridge_poll", func() (bool, string) {
		p := call(t, s, "bridge_poll", nil)
		return pollHas(p, id, "reply", text), fmt.Sprint(p.Fields)
	})
	return id
}

// TestQueuedPastItsDeadlineIsDeliveredLater follows the contract: a message
// still queued behind a busy worker when its deadline passes stays queued;
// it is delivered once the worker is free, and its reply reaches the sender
// through bridge_poll.
func TestQueuedPastItsDeadlineIsDeliveredLater(t *testing.T) {
	dumpOnFailure(t)
	member(t, "e2e-busy")
	s := session(t, w.token)
	busy := call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-busy", "content": "sleep: 5\nreply: busy done", "wait": false})
	if busy.IsError {
		t.Fatalf("dispatch: %v", busy.Fields)
	}
	testutil.Eventually(t, "the worker busy", func() (bool, string) {
		m, err := getMember("e2e-busy")
		if err != nil {
			return false, err.Error()
		}
		return m.Status.AgentStatus == fleetv1alpha1.AgentWorking, string(m.Status.AgentStatus)
	})
	r := call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-busy", "content": "reply: done after all", "timeoutMs": 1500})
	d := delegation(t, timeoutThenPolled(t, s, r, "done after all"))
	if deadline := d.CreationTimestamp.Add(time.Duration(d.Spec.TimeoutSeconds) * time.Second); d.Status.DeliveringAt == nil || !d.Status.DeliveringAt.After(deadline) {
		t.Errorf("typed at %v, deadline %v: want it typed after its deadline, behind the busy one", d.Status.DeliveringAt, deadline)
	}
}

func TestWorkerGone(t *testing.T) {
	dumpOnFailure(t)
	member(t, "e2e-gone")
	s := session(t, w.token)
	done := make(chan mcpclient.Result, 1)
	go func() {
		r, _ := mcpclient.Call(context.Background(), s, "bridge_send", map[string]any{"sessionId": "e2e-gone", "content": "sleep: 60"})
		done <- r
	}()
	testutil.Eventually(t, "the member working", func() (bool, string) {
		m, err := getMember("e2e-gone")
		if err != nil {
			return false, err.Error()
		}
		return m.Status.AgentStatus == fleetv1alpha1.AgentWorking, string(m.Status.AgentStatus)
	})
	if out, err := w.kubectl("delete", "member", "-n", ns, "e2e-gone"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	select {
	case r := <-done:
		if !r.IsError || r.ErrorCode() != "worker_gone" {
			t.Errorf("want error worker_gone, got %v", r.Fields)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("bridge_send still held after the member was deleted")
	}
}

func TestAuthentication(t *testing.T) {
	dumpOnFailure(t)
	for name, token := range map[string]string{"no token": "", "unknown token": "not-a-token"} {
		req, _ := http.NewRequest(http.MethodPost, w.gatewayURL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", name, resp.StatusCode)
		}
	}
}

func TestSubscriptionBoundary(t *testing.T) {
	dumpOnFailure(t)
	member(t, "e2e-sub")
	s := session(t, memberToken(t, "e2e-sub"))
	r := call(t, s, "bridge_spawn", map[string]any{"profile": "claude-api"})
	if !r.IsError || r.ErrorCode() != "subscription_boundary" {
		t.Errorf("a subscription member spawning an API-billed worker: %v", r.Fields)
	}
	req, _ := http.NewRequest(http.MethodPost, strings.TrimSuffix(w.gatewayURL, "/mcp")+"/members", strings.NewReader(`{"profile":"claude-api"}`))
	req.Header.Set("Authorization", "Bearer "+memberToken(t, "e2e-sub"))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("REST spawn across the boundary: status %d, want 403", resp.StatusCode)
	}
}

func TestServiceAccountTokenBoundToAPod(t *testing.T) {
	dumpOnFailure(t)
	ctx := context.Background()
	kc := kubernetes.NewForConfigOrDie(w.cfg)
	// A namespace of its own each run: a cluster keeps what runs before
	// left, and this one must start with no RoleBinding.
	agents, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "agents-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podNS := agents.Name
	t.Cleanup(func() { _ = kc.CoreV1().Namespaces().Delete(ctx, podNS, metav1.DeleteOptions{}) })
	if _, err := kc.CoreV1().ServiceAccounts(podNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "primary"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := kc.CoreV1().Pods(podNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "primary"},
		Spec: corev1.PodSpec{ServiceAccountName: "primary", AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "agent", Image: "example.invalid/agent"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mint := func(audience string) string {
		tr, err := kc.CoreV1().ServiceAccounts(podNS).CreateToken(ctx, "primary", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences:         []string{audience},
			ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}

	if got := initializeStatus(t, mint("not-fleetd")); got != http.StatusUnauthorized {
		t.Errorf("a token for another audience: status %d, want 401", got)
	}
	token := mint(fleetv1alpha1.GatewayAudience)
	if got := initializeStatus(t, token); got != http.StatusForbidden {
		t.Errorf("a primary without RBAC: status %d, want 403", got)
	}
	if out, err := w.kubectl("apply", "-f", filepath.Join(testenv.RepoRoot(), "config", "rbac", "delegator_role.yaml")); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if _, err := kc.RbacV1().RoleBindings(podNS).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "primary-delegates"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "fleetd-delegator"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "primary", Namespace: podNS}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var who mcpclient.Result
	testutil.Eventually(t, "the primary allowed after the RoleBinding", func() (bool, string) {
		s, err := mcpclient.Connect(ctx, w.gatewayURL, token)
		if err != nil {
			return false, err.Error()
		}
		defer s.Close()
		who, err = mcpclient.Call(ctx, s, "bridge_whoami", nil)
		return err == nil && !who.IsError, fmt.Sprint(err, who.Fields)
	})
	if who.Str("kind") != "ServiceAccount" || who.Str("name") != "system:serviceaccount:"+podNS+":primary" || who.Str("namespace") != podNS {
		t.Errorf("whoami: %v", who.Fields)
	}
}

func TestFleetdKilledMidBurstLosesNothing(t *testing.T) {
	dumpOnFailure(t)
	log := member(t, "e2e-burst")
	s := session(t, w.token)
	const n = 20
	ids := make([]string, n)
	for i := range n {
		r := call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-burst", "content": fmt.Sprintf("silent: burst %02d", i), "wait": false})
		wantOutcome(t, r, "dispatched")
		ids[i] = r.Str("dispatchId")
	}
	testutil.Eventually(t, "some deliveries", func() (bool, string) {
		got := len(received(t, log))
		return got >= 3, fmt.Sprintf("%d received", got)
	})
	if err := w.killFleetd(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "every delegation settled", func() (bool, string) {
		var list fleetv1alpha1.DelegationList
		if err := w.client.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{fleetv1alpha1.LabelMember: "e2e-burst"}); err != nil {
			return false, err.Error()
		}
		settled := 0
		var phases []string
		for _, d := range list.Items {
			switch d.Status.Phase {
			case fleetv1alpha1.DelegationTurnDone, fleetv1alpha1.DelegationFailed:
				settled++
			default:
				phases = append(phases, fmt.Sprintf("%s %s (typed at seq %d)", d.Spec.Content, d.Status.Phase, d.Status.DeliveringSeq))
			}
		}
		m, _ := getMember("e2e-burst")
		return settled == n, fmt.Sprintf("%d of %d settled; member %s seq %d workingSeq %d; unsettled: %s",
			settled, n, m.Status.AgentStatus, m.Status.StateChangeSeq, m.Status.WorkingSeq, strings.Join(phases, ", "))
	})
	counts := map[string]int{}
	for _, p := range received(t, log) {
		counts[p]++
	}
	typed := 0
	for i := range n {
		c := counts[fmt.Sprintf("silent: burst %02d", i)]
		if c > 1 {
			t.Errorf("burst %02d typed %d times", i, c)
		}
		typed += c
	}
	t.Logf("%d of %d delivered once, the rest settled failed (delivery unconfirmed)", typed, n)
	if typed < n-1 {
		t.Errorf("only %d of %d delivered: at most the one in flight at the kill may be lost to an unconfirmed delivery", typed, n)
	}
}

func TestPaneServerRestartHealsMembers(t *testing.T) {
	dumpOnFailure(t)
	member(t, "e2e-heal")
	s := session(t, w.token)
	// A message answered before the restart: herdr's new terminal must not
	// wait for a pickup of it (its status seq starts again from zero).
	wantOutcome(t, call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-heal", "content": "reply: before"}), "reply")
	if err := w.restartPaneServer(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the member healed", func() (bool, string) {
		m, err := getMember("e2e-heal")
		if err != nil {
			return false, err.Error()
		}
		return m.Status.Restarts >= 1 && meta.IsStatusConditionTrue(m.Status.Conditions, fleetv1alpha1.ConditionReady), fmt.Sprintf("%s restarts=%d", m.Status.Phase, m.Status.Restarts)
	})
	wantOutcome(t, call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-heal", "content": "reply: back", "timeoutMs": 60000}), "reply")
}
