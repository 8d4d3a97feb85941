package gateway

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway/toolerr"
	"github.com/fleetd/fleetd/internal/testutil"
)

// markClosed plays the controller marking a Delegation closed
// (delegation.MarkClosed), with the labels and annotations alone.
func markClosed(t testing.TB, ns, name string) {
	t.Helper()
	markClosedAs(t, ns, name, false)
}

// markClosedAs is markClosed of one that is superseded, or not.
func markClosedAs(t testing.TB, ns, name string, superseded bool) {
	t.Helper()
	testutil.Eventually(t, "", func() error {
		var d fleetv1alpha1.Delegation
		if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &d); err != nil {
			return err
		}
		marked := d.DeepCopy()
		if !delegation.MarkClosed(marked, superseded) {
			return fmt.Errorf("delegation %s is not closed: %+v", name, d.Status)
		}
		return env.Client.Patch(context.Background(), marked, client.MergeFrom(&d))
	})
}

// setClosedLabel sets or removes the closed label alone, as anyone with
// the right to patch Delegations could.
func setClosedLabel(t testing.TB, ns, name string, on bool) {
	t.Helper()
	var d fleetv1alpha1.Delegation
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &d); err != nil {
		t.Fatal(err)
	}
	patched := d.DeepCopy()
	if on {
		patched.Labels[fleetv1alpha1.LabelClosed] = "true"
	} else {
		delete(patched.Labels, fleetv1alpha1.LabelClosed)
	}
	if err := env.Client.Patch(context.Background(), patched, client.MergeFrom(&d)); err != nil {
		t.Fatal(err)
	}
}

// acknowledged is the sender collecting a detached outcome.
func acknowledged(d *fleetv1alpha1.Delegation, now time.Time) {
	if _, err := delegation.Acknowledge(d, now); err != nil {
		panic(err)
	}
}

// cacheDropped waits until the gateway's cache no longer shows the
// Delegation.
func (h *harness) cacheDropped(t testing.TB, name string) {
	t.Helper()
	testutil.Eventually(t, "the gateway's cache to leave "+name+" out", func() error {
		var d fleetv1alpha1.Delegation
		err := h.gw.svc.cache.Get(context.Background(), types.NamespacedName{Namespace: h.ns, Name: name}, &d)
		return errIf(!apierrors.IsNotFound(err), "cached: %v", err)
	})
}

// TestClosedMessagesLeaveTheCacheAndStillCount: a message marked closed
// leaves the gateway's cache, so its memory holds what is in flight and
// owed, not the retention window; its sender still gets it by its
// dispatchId, and it still counts toward what that sender keeps, by count
// and by bytes, from the marks alone.
func TestClosedMessagesLeaveTheCacheAndStillCount(t *testing.T) {
	ns := env.Namespace(t)
	const content = "a message of forty bytes, give or take.."
	h := startGateway(t, ns, Options{MaxSenderMessages: 3, MaxSenderBytes: 10 << 10, SenderRate: -1})
	addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)

	var ids []string
	for range 3 {
		sent := wantOK(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"sessionId": "w1", "content": content, "wait": false}))
		ids = append(ids, sent.DispatchID)
	}
	for _, id := range ids {
		env.Settle(t, ns, id, typed, pickedUp, replied("done"), acknowledged)
		markClosed(t, ns, id)
	}
	for _, id := range ids {
		h.cacheDropped(t, id)
	}
	testutil.Eventually(t, "the closed view to show the three", func() error {
		kept := 0
		h.gw.svc.closedKept(ns, fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "primary"}, func(string, int64) { kept++ })
		return errIf(kept != 3, "closed view: %d", kept)
	})

	// The bound counts them.
	refused := callTool[SendOutput](t, primary, "bridge_send", map[string]any{"sessionId": "w1", "content": content, "wait": false})
	wantCode(t, refused, toolerr.SenderLimit)
	h.gw.svc.ledger.mu.Lock()
	u, err := h.gw.svc.messageUsage(context.Background(), ns, fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "primary"}, nil)
	h.gw.svc.ledger.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if u.keptMessages != 3 || u.keptBytes != 3*int64(len(content)) {
		t.Errorf("kept %d messages of %d bytes, want 3 of %d", u.keptMessages, u.keptBytes, 3*len(content))
	}

	// Its sender re-attaches to one by its dispatchId and gets its outcome.
	got := wantOK(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"dispatchId": ids[0]}))
	if got.Outcome != "reply" || got.Text != "done" {
		t.Errorf("re-attached to a closed message: %+v, want its reply", got)
	}
}

// TestAHeldCallOutlastsItsMessageLeavingTheCache: a held bridge_send whose
// message leaves the cache goes on holding, and gets the outcome: a
// message closed as it settles (the controller marks it at once) ends the
// call with its reply, and a closed label set by hand on one in flight
// (which the controller takes off) does not end the call as if the message
// were deleted.
func TestAHeldCallOutlastsItsMessageLeavingTheCache(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)

	t.Run("closed as it settles", func(t *testing.T) {
		sent := async[SendOutput](t, context.Background(), primary, "bridge_send", map[string]any{"sessionId": "w1", "content": "quick one", "timeoutMs": 120000})
		d := waitDelegation(t, ns, "w1", func(d *fleetv1alpha1.Delegation) bool { return d.Spec.Content == "quick one" })
		testutil.Eventually(t, "", func() error { return errIf(h.gw.svc.rv.held() != 1, "not held") })
		env.Settle(t, ns, d.Name, typed, pickedUp, replied("quick answer"))
		markClosed(t, ns, d.Name)
		if got := wantOK(t, receive(t, sent)); got.Outcome != "reply" || got.Text != "quick answer" {
			t.Errorf("bridge_send = %+v, want the reply", got)
		}
	})

	t.Run("a closed label on one in flight", func(t *testing.T) {
		sent := async[SendOutput](t, context.Background(), primary, "bridge_send", map[string]any{"sessionId": "w1", "content": "slow one", "timeoutMs": 120000})
		d := waitDelegation(t, ns, "w1", func(d *fleetv1alpha1.Delegation) bool { return d.Spec.Content == "slow one" })
		testutil.Eventually(t, "", func() error { return errIf(h.gw.svc.rv.held() != 1, "not held") })
		setClosedLabel(t, ns, d.Name, true)
		h.cacheDropped(t, d.Name)
		// The hold looked again when the cache dropped it; it must still
		// be holding a moment later.
		time.Sleep(200 * time.Millisecond)
		select {
		case got := <-sent:
			t.Fatalf("bridge_send ended when its message left the cache: %+v", got)
		default:
		}
		setClosedLabel(t, ns, d.Name, false)
		env.Settle(t, ns, d.Name, typed, pickedUp, replied("slow answer"))
		got := wantOK(t, receive(t, sent))
		if got.Outcome != "reply" || !strings.Contains(got.Text, "slow answer") {
			t.Errorf("bridge_send = %+v, want the reply", got)
		}
	})
}

// TestALeavingMessageCountsOnceUntilTheClosedViewShowsIt: between the
// cache dropping a closed message and the closed view showing it, the
// ledger counts it, once; the closed view showing it takes over.
func TestALeavingMessageCountsOnceUntilTheClosedViewShowsIt(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{SenderRate: -1})
	addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	sent := wantOK(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"sessionId": "w1", "content": "twelve bytes", "wait": false}))
	env.Settle(t, ns, sent.DispatchID, typed, pickedUp, replied("done"), acknowledged)
	d := env.Delegation(t, ns, sent.DispatchID)
	if !delegation.Closed(d, false) {
		t.Fatalf("not closed: %+v", d.Status)
	}
	usage := func() messageUsage { t.Helper(); return senderUsage(t, h, ns, d.Spec.From) }

	// As the cache's watch reports it leaving: its last copy, unmarked.
	h.gw.svc.leavingHandler().OnDelete(d)
	if u := usage(); u.keptMessages != 1 || u.keptBytes != 12 {
		t.Errorf("cached and leaving: kept %d messages of %d bytes, want 1 of 12", u.keptMessages, u.keptBytes)
	}
	markClosed(t, ns, d.Name)
	h.cacheDropped(t, d.Name)
	testutil.Eventually(t, "the closed view to show it", func() error {
		return errIf(!h.gw.svc.closedShows(client.ObjectKeyFromObject(d)), "not shown")
	})
	if u := usage(); u.keptMessages != 1 || u.keptBytes != 12 {
		t.Errorf("closed and leaving: kept %d messages of %d bytes, want 1 of 12", u.keptMessages, u.keptBytes)
	}
	h.gw.svc.ledger.mu.Lock()
	h.gw.svc.forgetLeft(time.Now())
	left := len(h.gw.svc.ledger.leaving)
	h.gw.svc.ledger.mu.Unlock()
	if left != 0 {
		t.Errorf("leaving after the closed view showed it: %d, want none", left)
	}
	if u := usage(); u.keptMessages != 1 || u.keptBytes != 12 {
		t.Errorf("closed: kept %d messages of %d bytes, want 1 of 12", u.keptMessages, u.keptBytes)
	}
}

// TestASupersededMessageLeavesTheCacheAndStillCounts: a message whose
// turn ended with no reply is closed once another to its member is typed;
// as the cache drops it, the ledger counts it as leaving (the cache shows
// the newer one), then from the closed view, once.
func TestASupersededMessageLeavesTheCacheAndStillCounts(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{SenderRate: -1})
	addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	send := func(content string) string {
		t.Helper()
		return wantOK(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"sessionId": "w1", "content": content, "wait": false})).DispatchID
	}
	turnDone := func(d *fleetv1alpha1.Delegation, now time.Time) { delegation.TurnDone(d, now, "tail") }
	older := send("twelve bytes")
	env.Settle(t, ns, older, typed, pickedUp, turnDone, acknowledged)
	newer := send("in flight")
	env.Settle(t, ns, newer, typed, pickedUp)
	testutil.Eventually(t, "the cache to show the newer one in flight", func() error {
		active, err := h.gw.svc.delegationsTo(context.Background(), ns, "w1", stateActive)
		return errIf(err != nil || len(active) != 1 || active[0].Name != newer, "in flight: %d %v", len(active), err)
	})
	d := env.Delegation(t, ns, older)
	if delegation.Closed(d, false) || !delegation.Closed(d, true) {
		t.Fatalf("closed only when superseded: %+v", d.Status)
	}
	usage := func() messageUsage { t.Helper(); return senderUsage(t, h, ns, d.Spec.From) }
	want := int64(len("twelve bytes") + len("in flight"))

	h.gw.svc.leavingHandler().OnDelete(d)
	h.gw.svc.ledger.mu.Lock()
	_, leaving := h.gw.svc.ledger.leaving[client.ObjectKeyFromObject(d)]
	h.gw.svc.ledger.mu.Unlock()
	if !leaving {
		t.Error("the superseded message dropped by the cache is not counted as leaving")
	}
	markClosedAs(t, ns, older, true)
	h.cacheDropped(t, older)
	testutil.Eventually(t, "the closed view to show it", func() error {
		return errIf(!h.gw.svc.closedShows(client.ObjectKeyFromObject(d)), "not shown")
	})
	if u := usage(); u.keptMessages != 2 || u.keptBytes != want {
		t.Errorf("kept %d messages of %d bytes, want 2 of %d", u.keptMessages, u.keptBytes, want)
	}
}

// senderUsage is what the ledger counts of from's messages in ns.
func senderUsage(t testing.TB, h *harness, ns string, from fleetv1alpha1.Principal) messageUsage {
	t.Helper()
	h.gw.svc.ledger.mu.Lock()
	defer h.gw.svc.ledger.mu.Unlock()
	u, err := h.gw.svc.messageUsage(context.Background(), ns, from, nil)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestClosedStoreFilesBySender: the record of closed Delegations files each
// under its namespace and sender, once, moves one whose sender label
// changed, forgets one deleted (a tombstone too), and starts afresh on a
// new listing.
func TestClosedStoreFilesBySender(t *testing.T) {
	closed := func(ns, name, sender, bytes string) *metav1.PartialObjectMetadata {
		m := &metav1.PartialObjectMetadata{}
		m.Namespace, m.Name = ns, name
		m.Labels = map[string]string{fleetv1alpha1.LabelClosed: "true", fleetv1alpha1.LabelSender: sender}
		m.Annotations = map[string]string{fleetv1alpha1.AnnotationBytes: bytes}
		return m
	}
	kept := func(s *closedStore, ns, sender string) map[string]int64 {
		got := map[string]int64{}
		s.kept(ns, sender, func(name string, bytes int64) { got[name] = bytes })
		return got
	}
	s := newClosedStore()
	if err := s.Replace([]any{closed("a", "d1", "alice", "10"), closed("a", "d2", "alice", "20"), closed("b", "d1", "alice", "5")}, "1"); err != nil {
		t.Fatal(err)
	}
	if !s.HasSynced() {
		t.Error("not synced after the first listing")
	}
	if diff := cmp.Diff(map[string]int64{"d1": 10, "d2": 20}, kept(s, "a", "alice")); diff != "" {
		t.Errorf("alice's in a (-want +got):\n%s", diff)
	}
	_ = s.Update(closed("a", "d2", "bob", "20"))
	_ = s.Add(closed("a", "d3", "alice", "not a number"))
	if diff := cmp.Diff(map[string]int64{"d1": 10, "d3": 0}, kept(s, "a", "alice")); diff != "" {
		t.Errorf("alice's in a after d2 moved and d3 came (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int64{"d2": 20}, kept(s, "a", "bob")); diff != "" {
		t.Errorf("bob's in a (-want +got):\n%s", diff)
	}
	_ = s.Delete(closed("a", "d1", "alice", "10"))
	_ = s.Delete(toolscache.DeletedFinalStateUnknown{Key: "a/d3", Obj: closed("a", "d3", "alice", "")})
	if got := kept(s, "a", "alice"); len(got) != 0 || s.shows(types.NamespacedName{Namespace: "a", Name: "d1"}) {
		t.Errorf("alice's in a after both were deleted: %v", got)
	}
	_ = s.Replace([]any{closed("c", "d9", "carol", "1")}, "2")
	if s.shows(types.NamespacedName{Namespace: "b", Name: "d1"}) || len(kept(s, "c", "carol")) != 1 || len(s.bySender) != 1 {
		t.Errorf("after a new listing: %v", s.bySender)
	}
}

// TestAReplyFindsItsTargetAmongClosedMessages: the API server's answer
// for a reply lists the member's open messages first, and its closed
// history only when none is in flight: a reply repeated after its message
// closed is still the one recorded, and a reply after the last message
// typed closed never goes to an older one that could take a late reply.
func TestAReplyFindsItsTargetAmongClosedMessages(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{SenderRate: -1})
	_, workerToken := addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	worker := h.connect(t, workerToken, nil)
	send := func(content string) string {
		t.Helper()
		return wantOK(t, callTool[SendOutput](t, primary, "bridge_send", map[string]any{"sessionId": "w1", "content": content, "wait": false})).DispatchID
	}
	closeIt := func(name string) {
		t.Helper()
		markClosed(t, ns, name)
		h.cacheDropped(t, name)
	}

	first := send("first")
	deliver(t, ns, first)
	wantOK(t, callTool[ReplyOutput](t, worker, "bridge_reply", map[string]any{"content": "done with first"}))
	env.Settle(t, ns, first, acknowledged)
	closeIt(first)
	if again := wantOK(t, callTool[ReplyOutput](t, worker, "bridge_reply", map[string]any{"content": "done with first"})); again.DispatchID != first {
		t.Errorf("the same reply again = %+v, want %s's", again, first)
	}

	second := send("second")
	env.Settle(t, ns, second, typed, pickedUp, timedOut)
	third := send("third")
	env.Settle(t, ns, third, typed, pickedUp, replied("done with third"), acknowledged)
	closeIt(third)
	wantCode(t, callTool[ReplyOutput](t, worker, "bridge_reply", map[string]any{"content": "late words"}), toolerr.NotFound)
	if d := env.Delegation(t, ns, second); d.Status.Reply != nil {
		t.Errorf("a reply after the third went to the second: %q", *d.Status.Reply)
	}
}
