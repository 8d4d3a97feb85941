package gateway

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	testclock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/testutil"
)

// Every bound holds however many calls arrive at once: the calls below all
// start together through the real MCP client, and what reaches the API
// server is counted there.

// concurrently runs n calls of tool with args(i) at once on one session
// each caller shares, and returns how many succeeded and the codes of the
// refusals.
func concurrently[T any](t *testing.T, h *harness, token, tool string, n int, args func(i int) any) (ok int, refused map[toolerr.Code]int) {
	t.Helper()
	cs := h.connect(t, token, nil)
	chans := make([]<-chan toolCall[T], n)
	for i := range n {
		chans[i] = async[T](t, context.Background(), cs, tool, args(i))
	}
	refused = map[toolerr.Code]int{}
	for _, ch := range chans {
		got := receive(t, ch)
		if got.err != nil {
			refused[got.err.Code]++
			continue
		}
		ok++
	}
	return ok, refused
}

// TestConcurrentSpawnsStayWithinTheBound: forty bridge_spawn calls at once
// from one member start no more members than MaxSpawns allows, and the
// rest are refused spawn_limit.
func TestConcurrentSpawnsStayWithinTheBound(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{MaxSpawns: 16})
	create(t, testutil.MakeProfile("scripted", ns).Command("scripted-agent").Default().Obj())
	_, token := addMember(t, member("spawner", ns).Obj())

	ok, refused := concurrently[SpawnOutput](t, h, token, "bridge_spawn", 40, func(int) any { return nil })

	var list fleetv1alpha1.MemberList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	spawned := 0
	for _, m := range list.Items {
		if m.Annotations[fleetv1alpha1.AnnotationSpawnedBy] == "Member:spawner" {
			spawned++
		}
	}
	if spawned > 16 || ok != spawned {
		t.Errorf("40 spawns at once: %d succeeded and %d members exist, want both at most 16", ok, spawned)
	}
	if refused[toolerr.SpawnLimit] != 40-ok {
		t.Errorf("refusals %v, want every one of the %d spawn_limit", refused, 40-ok)
	}
}

// TestConcurrentSendsStayWithinTheQueue: 300 bridge_send calls at once to
// one member queue no more than MaxQueue; the rest are refused queue_full.
func TestConcurrentSendsStayWithinTheQueue(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{MaxQueue: 100, MaxQueuePerSender: -1, SenderRate: -1})
	addMember(t, member("w1", ns).Obj())

	ok, refused := concurrently[SendOutput](t, h, staticToken, "bridge_send", 300, func(i int) any {
		return map[string]any{"sessionId": "w1", "content": fmt.Sprintf("job %d", i), "wait": false}
	})
	if n := countDelegations(t, ns, "w1"); n > 100 || n != ok {
		t.Errorf("300 sends at once: %d succeeded and %d messages to w1 exist, want both at most 100", ok, n)
	}
	if refused[toolerr.QueueFull] != 300-ok {
		t.Errorf("refusals %v, want every one of the %d queue_full", refused, 300-ok)
	}
}

// TestSenderKeepsToItsShareOfAQueue: one sender fills its share of a
// member's queue and is refused there, while another sender still reaches
// the member.
func TestSenderKeepsToItsShareOfAQueue(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{MaxQueue: 10, MaxQueuePerSender: 4, SenderRate: -1})
	addMember(t, member("w1", ns).Obj())
	_, otherToken := addMember(t, member("other", ns).Obj())

	ok, refused := concurrently[SendOutput](t, h, staticToken, "bridge_send", 10, func(i int) any {
		return map[string]any{"sessionId": "w1", "content": fmt.Sprintf("job %d", i), "wait": false}
	})
	if ok != 4 || refused[toolerr.QueueFull] != 6 {
		t.Errorf("one sender's 10 messages to a queue of 10: %d sent, refusals %v; want 4 sent (its share) and 6 queue_full", ok, refused)
	}
	other := h.connect(t, otherToken, nil)
	wantOK(t, callTool[SendOutput](t, other, "bridge_send", map[string]any{"sessionId": "w1", "content": "another sender", "wait": false}))
	primary := h.connect(t, staticToken, nil)
	got := callTool[SendOutput](t, primary, "bridge_send", map[string]any{"sessionId": "w1", "content": "one more", "wait": false})
	wantCode(t, got, toolerr.QueueFull)
	if !strings.Contains(got.err.Message, "4 of the messages waiting for member w1 are yours") {
		t.Errorf("the refusal does not say the sender's share is used: %s", got.err.Message)
	}
}

// TestCancelAndResendIsBounded: a sender that sends, cancels and sends
// again keeps at most MaxSenderMessages Delegations, and at most
// MaxSenderBytes of content, however many rounds it runs: a cancelled
// message is kept until retention deletes it, and counts until then.
func TestCancelAndResendIsBounded(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{MaxSenderMessages: 10, MaxSenderBytes: 40 << 10, SenderRate: -1})
	addMember(t, member("w1", ns).Obj())
	addMember(t, member("w2", ns).Obj())
	primary := h.connect(t, staticToken, nil)

	sent, refused := 0, 0
	for round := range 3 {
		var ids []string
		for i := range 10 {
			got := callTool[SendOutput](t, primary, "bridge_send", map[string]any{"sessionId": "w1", "content": fmt.Sprintf("round %d job %d", round, i), "wait": false})
			if got.err != nil {
				wantCode(t, got, toolerr.SenderLimit)
				refused++
				continue
			}
			sent++
			ids = append(ids, got.out.DispatchID)
		}
		for _, id := range ids {
			wantOK(t, callTool[CancelOutput](t, primary, "bridge_cancel", map[string]any{"dispatchId": id}))
		}
	}
	if n := countDelegations(t, ns, "w1"); sent != 10 || n != 10 || refused != 20 {
		t.Errorf("3 rounds of 10 sends and cancels: %d sent, %d refused, %d kept on the API server; want 10, 20, 10", sent, refused, n)
	}

	// Bytes, in a namespace of their own: each message below is 8 KiB;
	// four fit in 36 KiB, the fifth does not.
	big := strings.Repeat("x", 8<<10)
	ns2 := env.Namespace(t)
	h2 := startGateway(t, ns2, Options{MaxSenderMessages: 100, MaxSenderBytes: 36 << 10, SenderRate: -1})
	addMember(t, member("w1", ns2).Obj())
	primary2 := h2.connect(t, staticToken, nil)
	for range 4 {
		wantOK(t, callTool[SendOutput](t, primary2, "bridge_send", map[string]any{"sessionId": "w1", "content": big, "wait": false}))
	}
	got := callTool[SendOutput](t, primary2, "bridge_send", map[string]any{"sessionId": "w1", "content": big, "wait": false})
	wantCode(t, got, toolerr.SenderLimit)
	if !strings.Contains(got.err.Message, "bytes") {
		t.Errorf("the refusal does not say the bytes are used up: %s", got.err.Message)
	}
	if n := countDelegations(t, ns2, "w1"); n != 4 {
		t.Errorf("%d messages of 8 KiB kept, want 4 within 40 KiB", n)
	}
}

// TestSendersHaveARate: a principal sends at most SenderBurst messages at
// once and SenderRate a second after that; another principal has a rate
// of its own. The clock is the gateway's, stepped by the test.
func TestSendersHaveARate(t *testing.T) {
	ns := env.Namespace(t)
	clk := testclock.NewFakeClock(time.Now())
	h := startGateway(t, ns, Options{SenderRate: 1, SenderBurst: 2, Clock: clk})
	addMember(t, member("w1", ns).Obj())
	_, otherToken := addMember(t, member("other", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	send := func(cs *mcp.ClientSession, content string) toolCall[SendOutput] {
		return callTool[SendOutput](t, cs, "bridge_send", map[string]any{"sessionId": "w1", "content": content, "wait": false})
	}
	wantOK(t, send(primary, "one"))
	wantOK(t, send(primary, "two"))
	got := send(primary, "three")
	wantCode(t, got, toolerr.RateLimited)
	if !strings.Contains(got.err.Message, "Send again in 1s") {
		t.Errorf("the refusal does not say when to send again: %s", got.err.Message)
	}
	wantOK(t, send(h.connect(t, otherToken, nil), "another sender"))
	clk.Step(time.Second)
	wantOK(t, send(primary, "three, a second later"))
	if n := countDelegations(t, ns, "w1"); n != 4 {
		t.Errorf("%d messages reached the API server, want 4", n)
	}
}

// TestRefusedImagesLeaveNoSecret: a team_message with images that is
// refused (the recipient's queue is full) writes no Secret: the images are
// stored only once the message was admitted.
func TestRefusedImagesLeaveNoSecret(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{MaxQueue: 1, SenderRate: -1})
	create(t, testutil.MakeProfile("cc", ns).Agent(fleetv1alpha1.AgentClaude).Obj())
	addMember(t, testutil.MakeMember("cc", ns).Profile("cc").Team("t", fleetv1alpha1.RoleMember).Obj())
	primary := h.connect(t, staticToken, nil)
	wantOK(t, callTool[TeamMessageOutput](t, primary, "team_message", map[string]any{"team": "t", "recipient": "cc", "content": "fills the queue"}))
	image := map[string]any{"data": base64.StdEncoding.EncodeToString(pngOf(t, 2, 2))}
	for range 5 {
		got := callTool[TeamMessageOutput](t, primary, "team_message", map[string]any{"team": "t", "recipient": "cc", "content": "look", "images": []any{image}})
		wantCode(t, got, toolerr.QueueFull)
	}
	var secrets corev1.SecretList
	if err := env.Client.List(context.Background(), &secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		if s.Type == fleetv1alpha1.SecretTypeImages {
			t.Errorf("a refused message left its images' Secret %s behind", s.Name)
		}
	}
}

// TestAHeldMessageTheCacheShowsCountsOnce: a message this replica admitted
// and is still creating, which the cache already shows (its watch event
// came before the create's answer), counts once toward its sender's and
// its member's bounds, not twice: counted twice, a sender was refused its
// share of a queue under concurrent sends.
func TestAHeldMessageTheCacheShowsCountsOnce(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{MaxQueue: 10, MaxQueuePerSender: 4, MaxSenderMessages: 10, SenderRate: -1})
	addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	sent := wantOK(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"sessionId": "w1", "content": "job", "wait": false}))
	var d fleetv1alpha1.Delegation
	testutil.Eventually(t, "the gateway's cache to show the message", func() (bool, string) {
		err := h.gw.svc.cache.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: sent.DispatchID}, &d)
		return err == nil, fmt.Sprint(err)
	})
	sender := identity.Key(d.Spec.From)

	l := &h.gw.svc.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	// As admitDelegations holds it while the create is on its way.
	held := &heldMessage{namespace: ns, sender: sender, to: "w1", bytes: delegation.Bytes(&d), name: d.Name}
	l.held[held] = struct{}{}
	defer delete(l.held, held)
	u, err := h.gw.svc.messageUsage(context.Background(), ns, d.Spec.From, []outgoing{{to: "w1"}})
	if err != nil {
		t.Fatal(err)
	}
	if u.keptMessages != 1 || u.queued["w1"] != 1 || u.queuedFromSender["w1"] != 1 {
		t.Errorf("one message counts as kept %d, queued %d, queued from its sender %d; want 1 each", u.keptMessages, u.queued["w1"], u.queuedFromSender["w1"])
	}
}
