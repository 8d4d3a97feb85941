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

// BenchmarkRendezvousOverhead compares, in one run, a bridge_send answered by
// an instantly replying worker with a turn driven straight through herdr:
// agent.prompt, then the agent's status back to idle (a turn that prints
// its answer instead of calling bridge_reply, which would find no message).
// Both include herdr's 300 ms submit delay; the difference is the
// Delegation, the injector, the worker's bridge_reply and the rendezvous.
//
// gap is the pause between turns: back to back, the injector also waits for
// the member's idle status from the previous turn to be mirrored.
func BenchmarkRendezvousOverhead(b *testing.B) {
	for _, gap := range []time.Duration{200 * time.Millisecond, time.Second} {
		b.Run("gap="+gap.String(), func(b *testing.B) { benchmarkRendezvous(b, gap) })
	}
}

func benchmarkRendezvous(b *testing.B, gap time.Duration) {
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

	// rawTurn prompts the agent through herdr and waits for its turn to end.
	rawTurn := func() time.Duration {
		// Forget the status changes of earlier turns, or they would end
		// this one early.
		for drained := false; !drained; {
			select {
			case <-stream.Events():
			default:
				drained = true
			}
		}
		start := time.Now()
		if _, err := hc.AgentPrompt(ctx, herdr.AgentPromptParams{Target: m.Status.PaneID, Text: "silent: raw"}); err != nil {
			b.Fatal(err)
		}
		working := false
		for ev := range stream.Events() {
			switch {
			case ev.Kind != herdr.EventPaneAgentStatusChanged:
			case ev.Data.AgentStatus == herdr.AgentStatusWorking:
				working = true
			case working && ev.Data.AgentStatus == herdr.AgentStatusIdle:
				return time.Since(start)
			}
		}
		b.Fatalf("the stream ended: %v", stream.Err())
		return 0
	}
	sendTurn := func() time.Duration {
		start := time.Now()
		r, err := mcpclient.Call(ctx, s, "bridge_send", map[string]any{"sessionId": name, "content": "reply: rendezvous", "timeoutMs": 30000})
		if err != nil || r.Str("outcome") != "reply" {
			out, _ := w.kubectl("get", "member,delegations", "-n", ns, "-o", "yaml")
			b.Fatalf("bridge_send: %v %v\n%s", err, r.Fields, out)
		}
		return time.Since(start)
	}
	settle := func() { time.Sleep(gap) }
	for range stream.Events() {
		break // the resync
	}

	var raw, send time.Duration
	b.ResetTimer()
	for range b.N {
		raw += rawTurn()
		settle()
		send += sendTurn()
		settle()
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(raw.Milliseconds())/n, "herdr-ms/turn")
	b.ReportMetric(float64(send.Milliseconds())/n, "bridge_send-ms/turn")
	b.ReportMetric(float64(send)/float64(raw), "bridge_send/herdr")
}
