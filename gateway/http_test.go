package gateway

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// TestSlowBodyWithoutATokenIsCut reproduces a slowloris an attack run kept
// open for over 50s: a request with no valid token that sends its body
// slowly. The request is refused at once; its connection ends when the
// body's deadline passes.
func TestSlowBodyWithoutATokenIsCut(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{BodyReadTimeout: 500 * time.Millisecond})
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("POST /mcp HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")); err != nil {
		t.Fatal(err)
	}
	// The client keeps the connection open and sends nothing more; within a
	// bound far above the deadline, the server must have let it go.
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(conn)
	status, err := r.ReadString('\n')
	if err != nil || !strings.Contains(status, "401") {
		t.Fatalf("first line %q, %v; want a 401", status, err)
	}
	for {
		if _, err := r.ReadByte(); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("the connection of a slow, unauthenticated body was kept open")
			}
			return
		}
	}
}

// TestHeldCallOutlivesTheBodyDeadline: a held bridge_send takes longer
// than the body's deadline, which is lifted once the body is read.
func TestHeldCallOutlivesTheBodyDeadline(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{BodyReadTimeout: 300 * time.Millisecond})
	_, workerToken := addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	worker := h.connect(t, workerToken, nil)
	sent := async[SendOutput](t, context.Background(), primary, "bridge_send", map[string]any{"content": "take your time", "timeoutMs": 60000})
	d := waitDelegation(t, ns, "w1", nil)
	time.Sleep(time.Second) // well past the body deadline
	deliver(t, ns, d.Name)
	wantOK(t, callTool[ReplyOutput](t, worker, "bridge_reply", map[string]any{"content": "done"}))
	if got := wantOK(t, receive(t, sent)); got.Outcome != "reply" || got.Text != "done" {
		t.Errorf("bridge_send = %+v, want the reply", got)
	}
}

// TestAbandonedAskIsWithdrawn: a worker's bridge_ask whose connection
// drops leaves no open question behind to hold the message (and its
// member's queue) until the deadline: the question is withdrawn and the
// message is worked on again, so the turn's own end settles it.
func TestAbandonedAskIsWithdrawn(t *testing.T) {
	ns := env.Namespace(t)
	h := startGateway(t, ns, Options{})
	_, workerToken := addMember(t, member("w1", ns).Obj())
	primary := h.connect(t, staticToken, nil)
	worker := h.connect(t, workerToken, nil)
	async[SendOutput](t, context.Background(), primary, "bridge_send", map[string]any{"content": "work", "wait": false})
	d := waitDelegation(t, ns, "w1", nil)
	deliver(t, ns, d.Name)

	ctx, cancel := context.WithCancel(context.Background())
	async[AskOutput](t, ctx, worker, "bridge_ask", map[string]any{"content": "which one?"})
	eventually(t, func() error {
		cur := getDelegation(t, ns, d.Name)
		return errIf(cur.Status.Phase != fleetv1alpha1.DelegationAsking, "phase %s", cur.Status.Phase)
	})
	cancel()
	eventually(t, func() error {
		cur := getDelegation(t, ns, d.Name)
		if cur.Status.Phase != fleetv1alpha1.DelegationWorking {
			return errIf(true, "phase %s, want Working once the asker left", cur.Status.Phase)
		}
		q := cur.Status.Questions[0]
		return errIf(q.WithdrawnAt == nil || q.Answer != nil, "question %+v, want it withdrawn", q)
	})
	// The primary's answer now comes too late, and says so.
	got := callTool[SendOutput](t, primary, "bridge_send", map[string]any{"content": "the first", "turnId": d.Name + ".q1"})
	wantCode(t, got, CodeConflict)
}
