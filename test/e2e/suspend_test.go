package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/mcpclient"
	"github.com/fleetd/fleetd/internal/testutil"
	"github.com/fleetd/fleetd/test/framework/localcluster"
	"github.com/fleetd/fleetd/test/framework/stubmodel"
)

// Suspend and resume, in cluster mode: a suspended member has no Pod and
// keeps its workspace claim. The local cluster has no storage provisioner,
// so each member's claim is bound to a hostPath volume the test makes in a
// directory of its own (the nodes share this machine's filesystem); the
// test reads the agent's files there too.

// suspendStorageClass names the volumes these tests make by hand.
const suspendStorageClass = "fleetd-e2e-manual"

// workspaceVolume makes a volume for member's workspace claim, bound to
// it, in a directory the test removes, and returns that directory.
func workspaceVolume(t *testing.T, member string) string {
	t.Helper()
	dir := t.TempDir()
	// The agent runs as a user of its own; a hostPath volume gets no
	// fsGroup.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	pv := localcluster.HostPathVolume(ns+"-"+member+"-workspace", ns, member+"-workspace", dir, suspendStorageClass)
	if err := w.client.Create(context.Background(), pv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.client.Delete(context.Background(), pv) })
	return dir
}

// suspendablePod is a member's spec.pod (YAML flow style) with a workspace
// claim on the volume workspaceVolume makes.
const suspendablePod = `{workspace: {volumeClaim: {size: 1Gi, storageClassName: ` + suspendStorageClass + `}}}`

// suspendableMember applies a scripted member that is suspended after
// idle (YAML, such as "{suspendAfter: 3s}"; "" for none), with a workspace
// claim, and waits until it is Ready. It returns the received log.
func suspendableMember(t *testing.T, name, idle string) string {
	t.Helper()
	return suspendableTeamMember(t, name, idle, "")
}

// suspendableTeamMember is suspendableMember in team ("" for none).
func suspendableTeamMember(t *testing.T, name, idle, team string) string {
	t.Helper()
	localCluster(t)
	workspaceVolume(t, name)
	log := w.receivedLog(name)
	spec := fmt.Sprintf("  command: [scripted-agent, --received-log, %s]\n  pod: %s\n", log, suspendablePod)
	if idle != "" {
		spec += "  idle: " + idle + "\n"
	}
	if team != "" {
		spec += "  team: " + team + "\n"
	}
	apply(t, fmt.Sprintf("apiVersion: fleet.fleetd.dev/v1alpha1\nkind: Member\nmetadata: {name: %s, namespace: %s}\nspec:\n%s", name, ns, spec))
	t.Cleanup(func() { _, _ = w.kubectl("delete", "member", "-n", ns, name, "--wait=false") })
	waitReady(t, name)
	return log
}

// waitSuspended waits for the member to show phase Suspended, with the
// Suspended condition's reason, no Pod of its own left and its claim kept;
// kubectl get members shows it.
func waitSuspended(t *testing.T, name, reason string) *fleetv1alpha1.Member {
	t.Helper()
	var m *fleetv1alpha1.Member
	testutil.Eventually(t, name+" to be suspended ("+reason+")", func() (bool, string) {
		var err error
		if m, err = getMember(name); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionSuspended)
		var pods corev1.PodList
		if err := w.client.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{fleetv1alpha1.LabelMemberUID: string(m.UID)}); err != nil {
			return false, err.Error()
		}
		return m.Status.Phase == fleetv1alpha1.MemberSuspended && m.Status.SuspendedAt != nil && c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason && len(pods.Items) == 0,
			fmt.Sprintf("phase %s, Suspended %+v, %d pods", m.Status.Phase, c, len(pods.Items))
	}, testutil.Within(3*time.Minute))
	var pvc corev1.PersistentVolumeClaim
	if err := w.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name + "-workspace"}, &pvc); err != nil || pvc.Status.Phase != corev1.ClaimBound {
		t.Errorf("the suspended member's workspace claim: %v, phase %s", err, pvc.Status.Phase)
	}
	out, err := w.kubectl("get", "members", "-n", ns, name)
	if err != nil || !strings.Contains(out, "Suspended") {
		t.Errorf("kubectl get members does not show it suspended: %v\n%s", err, out)
	}
	return m
}

// waitResumed waits for the member to be Ready again after a resume, with
// the Suspended condition's reason.
func waitResumed(t *testing.T, name, reason string) *fleetv1alpha1.Member {
	t.Helper()
	var m *fleetv1alpha1.Member
	testutil.Eventually(t, name+" to be resumed ("+reason+")", func() (bool, string) {
		var err error
		if m, err = getMember(name); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionSuspended)
		return m.Status.Phase == fleetv1alpha1.MemberReady && c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason,
			fmt.Sprintf("phase %s, Suspended %+v", m.Status.Phase, c)
	}, testutil.Within(3*time.Minute))
	return m
}

// TestSuspendAfterIdle: a member idle past suspendAfter is suspended (no
// Pod, its claim kept, phase Suspended in kubectl get members); a held
// bridge_send resumes it, is told so in its progress, gets the reply, and
// the message is typed once.
func TestSuspendAfterIdle(t *testing.T) {
	dumpOnFailure(t)
	log := suspendableMember(t, "e2e-idle", "{suspendAfter: 3s}")
	s := session(t, w.token)
	wantOutcome(t, call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-idle", "content": "reply: before"}), "reply")
	waitSuspended(t, "e2e-idle", fleetv1alpha1.ReasonIdle)

	var mu sync.Mutex
	var progress []string
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e-progress", Version: "v1"}, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		progress = append(progress, req.Params.Message)
	}})
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: w.gatewayURL, HTTPClient: mcpclient.BearerClient(w.token)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	params := &mcp.CallToolParams{Name: "bridge_send", Arguments: map[string]any{"sessionId": "e2e-idle", "content": "reply: after"}}
	params.SetProgressToken("resume")
	res, err := cs.CallTool(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	r, err := mcpclient.Decode("bridge_send", res)
	if err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, r, "reply")
	if r.Str("text") != "after" {
		t.Errorf("reply %q, want %q", r.Str("text"), "after")
	}
	mu.Lock()
	if !slices.ContainsFunc(progress, func(p string) bool { return strings.Contains(p, "resuming") }) {
		t.Errorf("progress while resuming said %q, want it to say the member is being resumed", progress)
	}
	mu.Unlock()
	waitResumed(t, "e2e-idle", fleetv1alpha1.ReasonResumed)
	if got, want := received(t, log), []string{"reply: before", "reply: after"}; !slices.Equal(got, want) {
		t.Errorf("received %q, want %q: each once, in order, across the suspension", got, want)
	}
}

// TestSuspendResumedByDelegation: a Delegation made with kubectl resumes a
// suspended member, and is typed once.
func TestSuspendResumedByDelegation(t *testing.T) {
	dumpOnFailure(t)
	log := suspendableMember(t, "e2e-idle-kc", "{suspendAfter: 2s}")
	waitSuspended(t, "e2e-idle-kc", fleetv1alpha1.ReasonIdle)
	apply(t, fmt.Sprintf("apiVersion: fleet.fleetd.dev/v1alpha1\nkind: Delegation\nmetadata: {name: e2e-wake, namespace: %s}\nspec: {to: e2e-idle-kc, content: \"reply: woken by kubectl\"}\n", ns))
	waitDelegationPhase(t, "e2e-wake", fleetv1alpha1.DelegationReplied)
	waitResumed(t, "e2e-idle-kc", fleetv1alpha1.ReasonResumed)
	if got, want := received(t, log), []string{"reply: woken by kubectl"}; !slices.Equal(got, want) {
		t.Errorf("received %q, want %q", got, want)
	}
}

// TestSuspendResumedByTeamMessage: a team_message to a suspended member
// resumes it, and is typed once.
func TestSuspendResumedByTeamMessage(t *testing.T) {
	dumpOnFailure(t)
	log := suspendableTeamMember(t, "e2e-idle-team", "{suspendAfter: 2s}", "sleepers")
	waitSuspended(t, "e2e-idle-team", fleetv1alpha1.ReasonIdle)
	s := session(t, w.token)
	r := call(t, s, "team_message", map[string]any{"team": "sleepers", "recipient": "e2e-idle-team", "content": "reply: woken by the team"})
	if r.IsError {
		t.Fatalf("team_message: %v %s", r.Fields, r.Text)
	}
	ids, _ := r.Fields["dispatchIds"].([]any)
	testutil.Eventually(t, "the reply to the team message", func() (bool, string) {
		p := call(t, s, "bridge_poll", nil)
		return len(ids) == 1 && pollHas(p, fmt.Sprint(ids[0]), "reply", "woken by the team"), fmt.Sprint(p.Fields)
	}, testutil.Within(3*time.Minute))
	waitResumed(t, "e2e-idle-team", fleetv1alpha1.ReasonResumed)
	if got, want := received(t, log), []string{"reply: woken by the team"}; !slices.Equal(got, want) {
		t.Errorf("received %q, want %q", got, want)
	}
}

// TestSuspendRequested: spec.suspend true suspends a member at once; a
// message sent meanwhile waits in its queue (it does not resume it); false
// resumes it and the message is typed once.
func TestSuspendRequested(t *testing.T) {
	dumpOnFailure(t)
	log := suspendableMember(t, "e2e-switch", "")
	patch := func(v bool) {
		t.Helper()
		if out, err := w.kubectl("patch", "member", "-n", ns, "e2e-switch", "--type=merge", "-p", fmt.Sprintf(`{"spec":{"suspend":%v}}`, v)); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	patch(true)
	waitSuspended(t, "e2e-switch", fleetv1alpha1.ReasonSuspendRequested)
	s := session(t, w.token)
	r := call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-switch", "content": "reply: waited", "wait": false})
	wantOutcome(t, r, "dispatched")
	id := r.Str("dispatchId")
	waitDelegationPhase(t, id, fleetv1alpha1.DelegationQueued)
	if m, _ := getMember("e2e-switch"); m.Status.Phase != fleetv1alpha1.MemberSuspended {
		t.Errorf("a message resumed a member suspended on request: phase %s", m.Status.Phase)
	}
	patch(false)
	waitDelegationPhase(t, id, fleetv1alpha1.DelegationReplied)
	waitResumed(t, "e2e-switch", fleetv1alpha1.ReasonResumed)
	if got, want := received(t, log), []string{"reply: waited"}; !slices.Equal(got, want) {
		t.Errorf("received %q, want %q", got, want)
	}
}

// TestSuspendMessagesMidSuspendAndResume sends messages while the member
// is being suspended and while it is being resumed, over several cycles:
// each is typed once, in order, none lost. A message that comes while the
// member is being suspended may find its Pod still there (the suspension
// is taken back) or gone (a new Pod starts); either way it is answered.
func TestSuspendMessagesMidSuspendAndResume(t *testing.T) {
	dumpOnFailure(t)
	const name = "e2e-cycles"
	log := suspendableMember(t, name, "{suspendAfter: 1s}")
	s := session(t, w.token)
	var want, ids []string
	send := func(content string) {
		t.Helper()
		r := call(t, s, "bridge_send", map[string]any{"sessionId": name, "content": content, "wait": false})
		wantOutcome(t, r, "dispatched")
		want, ids = append(want, content), append(ids, r.Str("dispatchId"))
	}
	replied := func() {
		t.Helper()
		for _, id := range ids {
			waitDelegationPhase(t, id, fleetv1alpha1.DelegationReplied)
		}
	}
	for cycle := range 3 {
		// Mid-suspend: as soon as the member is written suspended, before
		// its Pod is gone.
		testutil.Eventually(t, "the suspension to begin", func() (bool, string) {
			m, err := getMember(name)
			if err != nil {
				return false, err.Error()
			}
			return m.Status.SuspendedAt != nil, string(m.Status.Phase)
		}, testutil.Within(3*time.Minute), testutil.Every(20*time.Millisecond))
		send(fmt.Sprintf("reply: mid-suspend %d", cycle))
		replied()
		// Mid-resume: once the member is suspended and its Pod gone, one
		// message resumes it and another comes while its new Pod starts.
		waitSuspended(t, name, fleetv1alpha1.ReasonIdle)
		send(fmt.Sprintf("reply: resume %d", cycle))
		testutil.Eventually(t, "the resume to begin", func() (bool, string) {
			m, err := getMember(name)
			if err != nil {
				return false, err.Error()
			}
			return m.Status.SuspendedAt == nil && m.Status.Phase != fleetv1alpha1.MemberReady, string(m.Status.Phase)
		}, testutil.Within(3*time.Minute), testutil.Every(20*time.Millisecond))
		send(fmt.Sprintf("reply: mid-resume %d", cycle))
		replied()
	}
	if got := received(t, log); !slices.Equal(got, want) {
		t.Errorf("received %q, want %q: each once, in order", got, want)
	}
}

// TestSuspendedSessionNotResumable: a member whose saved session is gone
// from its workspace (here: Claude Code's transcript deleted while it was
// suspended) starts a fresh session, says so in its Suspended condition
// and an Event, and the message that resumed it is still answered.
func TestSuspendedSessionNotResumable(t *testing.T) {
	requireRealAgents(t)
	localCluster(t)
	dumpOnFailure(t)
	const name = "cc-lost"
	_, url := startModel(t)
	agentProfile(t, name+"-e2e", fleetv1alpha1.AgentClaude, url, "")
	dir := workspaceVolume(t, name)
	apply(t, fmt.Sprintf("apiVersion: fleet.fleetd.dev/v1alpha1\nkind: Member\nmetadata: {name: %s, namespace: %s}\nspec:\n  profile: %s-e2e\n  pod: %s\n  idle: {suspendAfter: 3s}\n", name, ns, name, suspendablePod))
	t.Cleanup(func() { _, _ = w.kubectl("delete", "member", "-n", ns, name, "--wait=false") })
	waitReady(t, name)
	s := session(t, w.token)
	wantOutcome(t, call(t, s, "bridge_send", map[string]any{"sessionId": name, "content": "reply: first"}), "reply")
	m := waitSuspended(t, name, fleetv1alpha1.ReasonIdle)
	saved := m.Status.AgentSessionID
	if saved == "" {
		t.Fatal("no agent session id kept through the suspension")
	}
	transcripts, _ := filepath.Glob(filepath.Join(dir, ".fleetd", "agent", "claude", "projects", "*", saved+".jsonl"))
	if len(transcripts) == 0 {
		t.Fatalf("no transcript of session %s on the workspace volume", saved)
	}
	for _, f := range transcripts {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	r := call(t, s, "bridge_send", map[string]any{"sessionId": name, "content": "reply: second"})
	wantOutcome(t, r, "reply")
	waitResumed(t, name, fleetv1alpha1.ReasonSessionNotResumed)
	events, err := w.kubectl("get", "events", "-n", ns, "--field-selector", "involvedObject.name="+name, "-o", "custom-columns=REASON:.reason,MESSAGE:.message")
	if err != nil || !strings.Contains(events, fleetv1alpha1.ReasonSessionNotResumed) || !strings.Contains(events, saved) {
		t.Errorf("no %s event naming session %s: %v\n%s", fleetv1alpha1.ReasonSessionNotResumed, saved, err, events)
	}
}

// TestSuspendResumeClaudeCode and TestSuspendResumeCodex: the real CLI,
// suspended and resumed, has its earlier conversation: the stand-in model
// sees the earlier turn in the request of the turn after the resume.
func TestSuspendResumeClaudeCode(t *testing.T) { testSuspendResume(t, claudeCode, "cc-sleeper") }

func TestSuspendResumeCodex(t *testing.T) { testSuspendResume(t, codexCLI, "cx-sleeper") }

func testSuspendResume(t *testing.T, a realAgent, name string) {
	requireRealAgents(t)
	localCluster(t)
	dumpOnFailure(t)
	model, url := startModel(t)
	agentProfile(t, name+"-e2e", a.kind, url, "")
	workspaceVolume(t, name)
	apply(t, fmt.Sprintf("apiVersion: fleet.fleetd.dev/v1alpha1\nkind: Member\nmetadata: {name: %s, namespace: %s}\nspec:\n  profile: %s-e2e\n  pod: %s\n  idle: {suspendAfter: 3s}\n", name, ns, name, suspendablePod))
	t.Cleanup(func() { _, _ = w.kubectl("delete", "member", "-n", ns, name, "--wait=false") })
	waitReady(t, name)
	s := session(t, w.token)
	wantOutcome(t, call(t, s, "bridge_send", map[string]any{"sessionId": name, "content": "reply: remember the word heron"}), "reply")
	before := waitSuspended(t, name, fleetv1alpha1.ReasonIdle)
	r := call(t, s, "bridge_send", map[string]any{"sessionId": name, "content": "reply: which word?"})
	wantOutcome(t, r, "reply")
	after := waitResumed(t, name, fleetv1alpha1.ReasonResumed)
	if after.Status.AgentSessionID != before.Status.AgentSessionID {
		t.Errorf("the agent's session after the resume is %q, want the saved %q", after.Status.AgentSessionID, before.Status.AgentSessionID)
	}
	var seen bool
	for _, req := range model.Requests() {
		if req.Kind == stubmodel.KindTurn && req.Prompt == "reply: which word?" && slices.Contains(req.Earlier, "reply: remember the word heron") {
			seen = true
		}
	}
	if !seen {
		t.Errorf("no request of the turn after the resume carried the earlier turn: the agent did not resume its conversation")
	}
	if _, err := getMember(name); apierrors.IsNotFound(err) {
		t.Fatal("the member is gone")
	}
}
