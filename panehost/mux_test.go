package panehost

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetd/fleetd/herdr"
)

// TestPaneHostCallsShareOneConnection: an event stream, a held call and a
// burst of concurrent calls to one pane host all ride one TLS connection;
// ending the held call ends its stream alone.
func TestPaneHostCallsShareOneConnection(t *testing.T) {
	h := startPaneHost(t)
	c := h.client(t, h.ca, memberUID)
	ctx := t.Context()
	ws, err := c.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Label: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	pane := ws.RootPane.PaneID
	if err := c.PaneReportAgent(ctx, herdr.PaneReportAgentParams{PaneID: pane, Source: "test", Agent: "claude", State: herdr.AgentStateWorking}); err != nil {
		t.Fatal(err)
	}

	stream := c.Subscribe(ctx, []herdr.Subscription{herdr.PaneAgentStatusChanged(pane)})
	defer stream.Close()
	select {
	case ev := <-stream.Events():
		if ev.Kind != herdr.EventResync {
			t.Fatalf("first event %+v, want the resync", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no resync: %v", stream.Err())
	}

	waitCtx, stopWaiting := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := c.AgentWait(waitCtx, herdr.AgentWaitParams{Target: pane, Until: []herdr.AgentStatus{herdr.AgentStatusDone}})
		waited <- err
	}()

	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Go(func() {
			if _, err := c.Ping(ctx); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("ping beside the stream and the held call: %v", err)
	}

	stopWaiting()
	select {
	case err := <-waited:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("held call ended with %v, want its context's cancellation", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancelling the held call did not end it")
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Errorf("ping after the held call ended: %v", err)
	}
	if err := stream.Err(); err != nil {
		t.Errorf("the event stream ended: %v", err)
	}
	if n := h.accepted.Load(); n != 1 {
		t.Errorf("the pane host took %d connections for 53 calls and a stream, want 1", n)
	}
}

// controllerConfig is the TLS configuration of fleetd's controllers for
// the pane host's member.
func (h *paneHost) controllerConfig(t testing.TB) *tls.Config {
	t.Helper()
	cert, err := h.ca.IssueController(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ClientConfig(h.ca.Pool(), func() (*tls.Certificate, error) { return &cert, nil }, memberUID)
}

// startOlderRelay serves the pane host as a relay from before
// multiplexing did: a connection per exchange, each counted in h.accepted.
// It returns the relay's address.
func (h *paneHost) startOlderRelay(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	older := &Relay{Socket: h.srv.SocketPath(), TLS: h.tls}
	counted := &countingListener{Listener: tls.NewListener(ln, h.tls), accepted: h.accepted}
	go func() {
		for {
			conn, err := counted.Accept()
			if err != nil {
				return
			}
			go older.carry(conn)
		}
	}()
	return ln.Addr().String()
}

// TestPaneHostServesClientsThatDoNotMultiplex: a client that offers no
// ALPN (an older fleetd) still gets the protocol itself, one exchange per
// connection.
func TestPaneHostServesClientsThatDoNotMultiplex(t *testing.T) {
	h := startPaneHost(t)
	cfg := h.controllerConfig(t)
	conn, err := tls.Dial("tcp", h.addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if p := conn.ConnectionState().NegotiatedProtocol; p != "" {
		t.Fatalf("negotiated %q with a client that offered nothing", p)
	}
	if _, err := conn.Write([]byte(`{"id":"7","method":"ping","params":{}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.Contains(line, `"id":"7"`) || !strings.Contains(line, `"pong"`) {
		t.Fatalf("ping on a connection of its own = %q, %v", line, err)
	}
}

// TestClientFallsBackToAPaneHostThatDoesNotMultiplex: against a pane host
// that declines h2 (an older relay), the client makes each call on a
// connection of its own, as before.
func TestClientFallsBackToAPaneHostThatDoesNotMultiplex(t *testing.T) {
	h := startPaneHost(t)
	addr := h.startOlderRelay(t)
	h.accepted.Store(0)
	c := herdr.NewTLSClient(addr, h.controllerConfig(t))
	for i := range 3 {
		if _, err := c.Ping(t.Context()); err != nil {
			t.Fatalf("ping %d against an older pane host: %v", i, err)
		}
	}
	// The first connection found no h2; each call then dialled its own.
	if n := h.accepted.Load(); n != 4 {
		t.Errorf("an older pane host took %d connections for 3 calls, want 4", n)
	}
}

// TestPaneHostBoundsAStream: a stream posted elsewhere, or with a request
// line past the bound, is refused with a status that says so, and the
// connection goes on serving.
func TestPaneHostBoundsAStream(t *testing.T) {
	h := startPaneHost(t)
	cfg := h.controllerConfig(t)
	cfg.NextProtos = []string{herdr.MuxProtocol}
	var h2only http.Protocols
	h2only.SetHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, Protocols: &h2only}, Timeout: 10 * time.Second}
	post := func(path string, body []byte) (int, string) {
		t.Helper()
		resp, err := hc.Post("https://"+h.addr+path, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	if code, _ := post("/elsewhere", []byte("{}\n")); code != http.StatusNotFound {
		t.Errorf("a stream to another path: %d, want 404", code)
	}
	if code, body := post(herdr.MuxPath, bytes.Repeat([]byte("x"), 2<<20)); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a 2 MiB request line: %d %q, want 413", code, body)
	}
	if code, body := post(herdr.MuxPath, []byte(`{"id":"1","method":"ping","params":{}}`+"\n")); code != http.StatusOK || !strings.Contains(body, "pong") {
		t.Errorf("a ping after the refusals: %d %q", code, body)
	}
	if n := h.accepted.Load(); n != 1 {
		t.Errorf("%d connections, want the refusals and the ping on one", n)
	}
}

// TestPaneHostEndsAConnectionWithItsCertificate: a connection lasts no
// longer than the client certificate it was opened with; past it, the
// client must present a current one, and an expired one opens nothing.
func TestPaneHostEndsAConnectionWithItsCertificate(t *testing.T) {
	h := startPaneHost(t)
	// Valid for two more seconds.
	cert, err := h.ca.IssueController(time.Now().Add(-leafValidity + 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c := herdr.NewTLSClient(h.addr, ClientConfig(h.ca.Pool(), func() (*tls.Certificate, error) { return &cert, nil }, memberUID))
	c.Timeout = 5 * time.Second
	if _, err := c.Ping(t.Context()); err != nil {
		t.Fatalf("ping with a current certificate: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := c.Ping(t.Context())
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the connection outlived its client certificate by 28 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := h.accepted.Load(); n < 2 {
		t.Errorf("%d connections: the refusal came on the old connection, not at a new handshake", n)
	}
}
