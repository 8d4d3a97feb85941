package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/internal/mcpclient"
)

var benchRuns int

// BenchmarkRendezvousOverhead compares, in one run and on one member, the
// same work delivered two ways: typed straight through herdr (as fleetd
// types into a plain command) and sent with bridge_send. Both turns are timed to the same event, the
// agent's status back to idle after working, as herdr reports it; the
// bridge_send turn's own return (its outcome) is reported too. work=silent
// ends without a reply, so bridge_send returns turn_done: its ratio is what
// settling a turn on observation costs over herdr's own prompt → idle.
// work=reply calls bridge_reply (which, typed straight through herdr, finds
// no message and fails, as quickly).
func BenchmarkRendezvousOverhead(b *testing.B) {
	for _, work := range []string{"silent", "reply"} {
		b.Run("work="+work, func(b *testing.B) { benchmarkRendezvous(b, work) })
	}
}

func benchmarkRendezvous(b *testing.B, work string) {
	l, ok := w.mode.(*local)
	if !ok {
		b.Skip("needs the local pane server's socket")
	}
	ctx := context.Background()
	// The benchmark function runs once per b.N the framework tries: each
	// run gets its own member, left for the suite's teardown.
	benchRuns++
	name := fmt.Sprintf("bench-rdv-%d", benchRuns)
	manifest := fmt.Sprintf("apiVersion: fleet.fleetd.dev/v1alpha1\nkind: Member\nmetadata: {name: %s, namespace: %s}\nspec:\n  command: [scripted-agent]\n", name, ns)
	f := filepath.Join(b.TempDir(), "m.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o600); err != nil {
		b.Fatal(err)
	}
	if out, err := w.kubectl("apply", "-f", f); err != nil {
		b.Fatalf("%v\n%s", err, out)
	}
	m := &fleetv1alpha1.Member{}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := w.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, m); err == nil &&
			meta.IsStatusConditionTrue(m.Status.Conditions, fleetv1alpha1.ConditionReady) {
			break
		}
		if time.Now().After(deadline) {
			out, _ := w.kubectl("get", "members", "-n", ns, "-o", "yaml")
			b.Fatalf("member not Ready:\n%s\n%s", out, w.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}

	s, err := mcpclient.Connect(ctx, w.gatewayURL, w.token)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	hc := herdr.NewClient(l.socket)
	stream := hc.Subscribe(ctx, []herdr.Subscription{herdr.PaneAgentStatusChanged(m.Status.PaneID)})
	defer stream.Close()

	// quiet drains the previous turn's status changes: it returns once
	// none came for a while, so they cannot end the next turn early.
	quiet := func() {
		for {
			select {
			case <-stream.Events():
			case <-time.After(300 * time.Millisecond):
				return
			}
		}
	}
	// idleAfterWork waits for the agent's status to go working, then idle.
	idleAfterWork := func() {
		working := false
		timeout := time.After(30 * time.Second)
		for {
			select {
			case ev, ok := <-stream.Events():
				switch {
				case !ok:
					b.Fatalf("the stream ended: %v", stream.Err())
				case ev.Kind != herdr.EventPaneAgentStatusChanged:
				case ev.Data.AgentStatus == herdr.AgentStatusWorking:
					working = true
				case working && ev.Data.AgentStatus == herdr.AgentStatusIdle:
					return
				}
			case <-timeout:
				b.Fatal("the agent did not end its turn")
			}
		}
	}
	content, want := "silent: the work", "turn_done"
	if work == "reply" {
		content, want = "reply: the work", "reply"
	}
	rawTurn := func() time.Duration {
		quiet()
		start := time.Now()
		// The scripted agent is a plain command, which herdr's agent.prompt
		// refuses: type it as fleetd does, text and Enter in one call.
		if err := hc.PaneSendInput(ctx, herdr.PaneSendInputParams{PaneID: m.Status.PaneID, Text: content, Keys: []string{"enter"}}); err != nil {
			b.Fatal(err)
		}
		idleAfterWork()
		return time.Since(start)
	}
	sendTurn := func() (toOutcome, toIdle time.Duration) {
		quiet()
		start := time.Now()
		outcome := make(chan time.Duration, 1)
		go func() {
			r, err := mcpclient.Call(ctx, s, "bridge_send", map[string]any{"sessionId": name, "content": content, "timeoutMs": 30000})
			if err != nil || r.Str("outcome") != want {
				out, _ := w.kubectl("get", "member,delegations", "-n", ns, "-o", "yaml")
				b.Errorf("bridge_send: %v %v\n%s", err, r.Fields, out)
			}
			outcome <- time.Since(start)
		}()
		idleAfterWork()
		toIdle = time.Since(start)
		return <-outcome, toIdle
	}
	for range stream.Events() {
		break // the resync
	}

	var raw, send, sendIdle time.Duration
	b.ResetTimer()
	for range b.N {
		raw += rawTurn()
		o, i := sendTurn()
		send, sendIdle = send+o, sendIdle+i
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(raw.Milliseconds())/n, "herdr-ms/turn")
	b.ReportMetric(float64(send.Milliseconds())/n, "bridge_send-ms/turn")
	b.ReportMetric(float64(sendIdle.Milliseconds())/n, "bridge_send-idle-ms/turn")
	b.ReportMetric(float64(send)/float64(raw), "bridge_send/herdr")
}
