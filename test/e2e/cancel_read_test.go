package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/mcpclient"
	"github.com/fleetd/fleetd/internal/testutil"
)

func getDelegation(name string) (*fleetv1alpha1.Delegation, error) {
	d := &fleetv1alpha1.Delegation{}
	return d, w.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d)
}

func waitPhase(t *testing.T, name string, phase fleetv1alpha1.DelegationPhase) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("%s %s", name, phase), func() (bool, string) {
		d, err := getDelegation(name)
		if err != nil {
			return false, err.Error()
		}
		return d.Status.Phase == phase, string(d.Status.Phase)
	})
}

// TestCancel withdraws a queued message before it is typed, interrupts the
// member's turn on one it is working on (the held bridge_send returns
// cancelled), and still honours the annotation a kubectl user sets. The
// member takes the next message as if nothing happened.
func TestCancel(t *testing.T) {
	dumpOnFailure(t)
	log := member(t, "e2e-cancel")
	s := session(t, w.token)

	held := make(chan mcpclient.Result, 1)
	go func() {
		r, _ := mcpclient.Call(context.Background(), s, "bridge_send", map[string]any{
			"sessionId": "e2e-cancel", "content": "sleep: 60\nreply: too late", "idempotencyKey": "cancel-working"})
		held <- r
	}()
	testutil.Eventually(t, "the member working", func() (bool, string) {
		m, err := getMember("e2e-cancel")
		if err != nil {
			return false, err.Error()
		}
		return m.Status.AgentStatus == fleetv1alpha1.AgentWorking, string(m.Status.AgentStatus)
	})
	queued := call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-cancel", "content": "reply: never typed", "wait": false})
	wantOutcome(t, queued, "dispatched")
	annotated := call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-cancel", "content": "reply: withdrawn by kubectl", "wait": false})
	wantOutcome(t, annotated, "dispatched")

	// Queued: withdrawn at once, never typed.
	r := call(t, s, "bridge_cancel", map[string]any{"dispatchId": queued.Str("dispatchId")})
	wantOutcome(t, r, "cancelled")
	waitPhase(t, queued.Str("dispatchId"), fleetv1alpha1.DelegationCancelled)

	// The kubectl user's way.
	if out, err := w.kubectl("annotate", "delegation", "-n", ns, annotated.Str("dispatchId"), fleetv1alpha1.AnnotationCancel+"=true"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	waitPhase(t, annotated.Str("dispatchId"), fleetv1alpha1.DelegationCancelled)

	// In the member's hands: its turn is interrupted, the held call returns.
	working := call(t, s, "bridge_send", map[string]any{"idempotencyKey": "cancel-working", "sessionId": "e2e-cancel", "content": "sleep: 60\nreply: too late", "wait": false})
	id := working.Str("dispatchId")
	if id == "" {
		t.Fatalf("re-sending with the key gave no dispatchId: %v", working.Fields)
	}
	r = call(t, s, "bridge_cancel", map[string]any{"dispatchId": id})
	wantOutcome(t, r, "cancelled")
	select {
	case h := <-held:
		wantOutcome(t, h, "cancelled")
		if h.Str("dispatchId") != id {
			t.Errorf("the held call names %q, want %q", h.Str("dispatchId"), id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("bridge_send still held after its message was cancelled")
	}
	waitPhase(t, id, fleetv1alpha1.DelegationCancelled)

	// A settled message stays as it settled.
	r = call(t, s, "bridge_cancel", map[string]any{"dispatchId": id})
	wantOutcome(t, r, "cancelled")
	if r = call(t, s, "bridge_cancel", map[string]any{"dispatchId": "no-such-message"}); r.ErrorCode() != "not_found" {
		t.Errorf("cancel of an unknown message: %v", r.Fields)
	}

	// The member lives on and takes the next message.
	wantOutcome(t, call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-cancel", "content": "reply: still here"}), "reply")
	got := received(t, log)
	for _, p := range got {
		if strings.Contains(p, "never typed") || strings.Contains(p, "withdrawn by kubectl") {
			t.Errorf("a withdrawn message was typed: %q", p)
		}
	}
	if !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, "still here") }) {
		t.Errorf("the next message was not typed: %q", got)
	}
	if m, _ := getMember("e2e-cancel"); m.Status.Restarts != 0 {
		t.Errorf("the interrupt restarted the agent (%d restarts)", m.Status.Restarts)
	}
}

// TestRead shows a primary a member's terminal text, escapes removed, and
// refuses members and bad arguments with codes.
func TestRead(t *testing.T) {
	dumpOnFailure(t)
	member(t, "e2e-read")
	s := session(t, w.token)
	wantOutcome(t, call(t, s, "bridge_send", map[string]any{"sessionId": "e2e-read", "content": "silent: a marker on the screen"}), "turn_done")
	for _, source := range []string{"visible", "recent", "recent_unwrapped"} {
		r := call(t, s, "bridge_read", map[string]any{"sessionId": "e2e-read", "source": source, "lines": 200})
		if r.IsError {
			t.Fatalf("%s: %v %s", source, r.Fields, r.Text)
		}
		text := r.Str("text")
		if !strings.Contains(text, "a marker on the screen") {
			t.Errorf("%s: no marker in %q", source, text)
		}
		if strings.ContainsAny(text, "\x1b\a\r") {
			t.Errorf("%s: terminal controls left in %q", source, text)
		}
	}
	// A plain command has no screen rules: detection shows the status alone.
	r := call(t, s, "bridge_read", map[string]any{"sessionId": "e2e-read", "source": "detection"})
	det, _ := r.Fields["detection"].(map[string]any)
	if r.IsError || det == nil || det["agentStatus"] == "" || det["rule"] != nil || !strings.Contains(r.Str("text"), "a marker on the screen") {
		t.Errorf("detection of a plain command: %v", r.Fields)
	}
	if r := call(t, s, "bridge_read", map[string]any{"sessionId": "e2e-read", "lines": 5000}); r.ErrorCode() != "invalid_argument" {
		t.Errorf("lines 5000: %v", r.Fields)
	}
	if r := call(t, s, "bridge_read", map[string]any{"sessionId": "nobody"}); r.ErrorCode() != "not_found" {
		t.Errorf("unknown member: %v", r.Fields)
	}
	ms := session(t, memberToken(t, "e2e-read"))
	if r := call(t, ms, "bridge_read", map[string]any{"sessionId": "e2e-read"}); r.ErrorCode() != "forbidden" {
		t.Errorf("a member reading: %v", r.Fields)
	}
}
