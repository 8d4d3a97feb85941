package panehost

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetd/fleetd/agents"
	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
	"github.com/fleetd/fleetd/panehost/paneserver"
)

const memberUID = "0f4d3c1e-6b7a-4e0b-9d62-3a9b0c1d2e3f"

// paneHost is a pane server and the relay that serves it over TLS with a
// member's credentials, as a member's pod runs them.
type paneHost struct {
	ca    *CA
	srv   *paneserver.Server
	addr  string
	root  string
	agent string
	// accepted counts the TCP connections the relay took.
	accepted *atomic.Int64
	// tls is the relay's TLS configuration.
	tls *tls.Config
}

func startPaneHost(t testing.TB) *paneHost {
	t.Helper()
	now := time.Now()
	ca, _, err := NewCA(now)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPEM, keyPEM, err := ca.IssueServer(memberUID, now)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{CertKey: certPEM, KeyKey: keyPEM, CAKey: ca.CertPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := ServerConfig(filepath.Join(dir, CertKey), filepath.Join(dir, KeyKey), filepath.Join(dir, CAKey))
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "agents")
	// Socket paths must be short.
	sockDir, err := os.MkdirTemp("", "ph")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	srv, err := paneserver.New(paneserver.Options{
		SocketPath:  filepath.Join(sockDir, "herdr.sock"),
		Shell:       "/bin/sh",
		Cwd:         dir,
		SocketGroup: true,
		Extensions:  Extensions(root, nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
		if err := <-served; err != nil {
			t.Error(err)
		}
	})
	relay := &Relay{Socket: srv.SocketPath(), TLS: cfg}
	if err := relay.WaitForSocket(t.Context()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingListener{Listener: ln, accepted: new(atomic.Int64)}
	relayed := make(chan error, 1)
	go func() { relayed <- relay.Serve(counted) }()
	t.Cleanup(func() {
		_ = ln.Close()
		if err := <-relayed; err != nil {
			t.Error(err)
		}
	})
	return &paneHost{ca: ca, srv: srv, addr: ln.Addr().String(), root: root, agent: filepath.Join(root, "ns", "w1"), accepted: counted.accepted, tls: cfg}
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// client is the controllers' client of the pane host.
func (h *paneHost) client(t *testing.T, ca *CA, uid string) *herdr.Client {
	t.Helper()
	cert, err := ca.IssueController(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return herdr.NewTLSClient(h.addr, ClientConfig(h.ca.Pool(), func() (*tls.Certificate, error) { return &cert, nil }, uid))
}

// TestPaneHostOverTLS: the controllers reach a member's pane host over
// TLS with fleetd's client certificate and the member's expected name, and
// nobody else gets in: no certificate, another CA's, or a client that
// expects another member.
func TestPaneHostOverTLS(t *testing.T) {
	h := startPaneHost(t)
	ctx := context.Background()
	if _, err := h.client(t, h.ca, memberUID).Ping(ctx); err != nil {
		t.Fatalf("fleetd's controllers: ping = %v", err)
	}
	ws, err := h.client(t, h.ca, memberUID).WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Label: "w1"})
	if err != nil || ws.RootPane.PaneID == "" {
		t.Fatalf("workspace.create over TLS = %+v, %v", ws, err)
	}

	other, _, err := NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	foreign := h.client(t, other, memberUID)
	if _, err := foreign.Ping(ctx); err == nil {
		t.Error("a client certificate of another CA was admitted")
	}
	if _, err := h.client(t, h.ca, "another-member-uid").Ping(ctx); err == nil {
		t.Error("the controllers accepted a pane host serving another member's name")
	}
	anonymous := herdr.NewTLSClient(h.addr, &tls.Config{RootCAs: h.ca.Pool(), ServerName: ServerName(memberUID), MinVersion: tls.VersionTLS13})
	if _, err := anonymous.Ping(ctx); err == nil {
		t.Error("a client without a certificate was admitted")
	}
	// A certificate from the right CA that is not the controllers' is not
	// enough either: a member's own serving certificate, say.
	certPEM, keyPEM, err := h.ca.IssueServer("x", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	imposter := herdr.NewTLSClient(h.addr, ClientConfig(h.ca.Pool(), func() (*tls.Certificate, error) { return &pair, nil }, memberUID))
	if _, err := imposter.Ping(ctx); err == nil {
		t.Error("a certificate that is not the controllers' was admitted")
	}
}

// TestAgentInstallAndObserve: the controllers seed a known agent's
// configuration in the pane host and read its hook record back; nothing
// outside the agent directories is written or read.
func TestAgentInstallAndObserve(t *testing.T) {
	h := startPaneHost(t)
	ctx := context.Background()
	remote := Remote{Client: h.client(t, h.ca, memberUID)}
	work := filepath.Join(h.agent, "work")
	files := []agents.File{
		{Path: filepath.Join(h.agent, "claude", "settings.json"), Content: []byte(`{"a":1}`)},
		{Path: filepath.Join(h.agent, "claude", ".claude.json"), Content: []byte(`{"hasCompletedOnboarding":true}`), Merge: true},
	}
	if err := remote.Install(ctx, h.agent, work, files); err != nil {
		t.Fatalf("install = %v", err)
	}
	if got, err := os.ReadFile(files[0].Path); err != nil || string(got) != `{"a":1}` {
		t.Errorf("settings.json = %q, %v", got, err)
	}
	if fi, err := os.Stat(work); err != nil || !fi.IsDir() {
		t.Errorf("working dir: %v", err)
	}

	o, err := remote.Observe(ctx, fleetv1alpha1.AgentClaude, h.agent, fleetv1alpha1.TranscriptCursor{})
	if err != nil || o.Hooks != nil {
		t.Fatalf("observe before any hook = %+v, %v", o, err)
	}
	if err := agents.WriteHookStatus(h.agent, agents.HookStatus{Agent: fleetv1alpha1.AgentClaude, SessionID: "s-1", Event: "Stop", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	o, err = remote.Observe(ctx, fleetv1alpha1.AgentClaude, h.agent, fleetv1alpha1.TranscriptCursor{})
	if err != nil || o.Hooks == nil || o.Hooks.SessionID != "s-1" {
		t.Fatalf("observe = %+v, %v", o, err)
	}

	// The pane host counts the transcript's tokens from the cursor it is
	// given, and says where the next count starts.
	transcript := filepath.Join(h.agent, "claude", "projects", "p", "s-1.jsonl")
	if err := os.MkdirAll(filepath.Dir(transcript), 0o700); err != nil {
		t.Fatal(err)
	}
	call := `{"type":"assistant","message":{"id":"m1","model":"m","usage":{"input_tokens":12,"output_tokens":34,"cache_read_input_tokens":56,"cache_creation_input_tokens":78}}}` + "\n"
	if err := os.WriteFile(transcript, []byte(call), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := agents.WriteHookStatus(h.agent, agents.HookStatus{Agent: fleetv1alpha1.AgentClaude, SessionID: "s-1", Event: "Stop", Seq: 2, TranscriptPath: transcript}); err != nil {
		t.Fatal(err)
	}
	o, err = remote.Observe(ctx, fleetv1alpha1.AgentClaude, h.agent, fleetv1alpha1.TranscriptCursor{})
	want := fleetv1alpha1.TokenUsage{InputTokens: 12, OutputTokens: 34, CachedTokens: 56, CacheCreationTokens: 78, Calls: 1}
	if err != nil || o.Tokens == nil || o.Tokens.Added != want || o.Tokens.Cursor.Offset != int64(len(call)) {
		t.Fatalf("observe with a transcript = %+v, %v; want %+v added", o.Tokens, err, want)
	}
	o, err = remote.Observe(ctx, fleetv1alpha1.AgentClaude, h.agent, o.Tokens.Cursor)
	if err != nil || o.Tokens == nil || o.Tokens.Added != (fleetv1alpha1.TokenUsage{}) {
		t.Fatalf("observe again from the cursor = %+v, %v; want nothing added", o.Tokens, err)
	}

	for name, dir := range map[string]string{
		"outside the root":  filepath.Dir(h.root),
		"escaping with ..":  filepath.Join(h.root, "..", "elsewhere"),
		"a relative path":   "agents/ns/w1",
		"the host's /etc":   "/etc",
		"a sibling by name": h.root + "-other",
	} {
		t.Run(name, func(t *testing.T) {
			err := remote.Install(ctx, dir, "", []agents.File{{Path: filepath.Join(dir, "x"), Content: []byte("x")}})
			var herr *herdr.Error
			if !errors.As(err, &herr) || herr.Code != herdr.CodeInvalidParams {
				t.Errorf("install into %s = %v, want invalid_params", dir, err)
			}
		})
	}
	err = remote.Install(ctx, h.agent, "", []agents.File{{Path: filepath.Join(h.agent, "..", "..", "..", "x"), Content: []byte("x")}})
	if err == nil || !strings.Contains(err.Error(), "not within") {
		t.Errorf("a file escaping the agent directory = %v", err)
	}
}

// TestForwarderAddsThePodsCurrentToken: the agent's requests reach the
// gateway with the pod's token, never with what the agent sent, and a
// rotated token file is picked up.
func TestForwarderAddsThePodsCurrentToken(t *testing.T) {
	seen := make(chan string, 4)
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Authorization") + " " + r.URL.Path
	}))
	defer gateway.Close()
	tokenPath := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenPath, []byte("first-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewForwarder(gateway.URL, tokenPath)
	if err != nil {
		t.Fatal(err)
	}
	local := httptest.NewServer(f)
	defer local.Close()

	send := func() string {
		req, _ := http.NewRequest(http.MethodPost, local.URL+"/mcp", strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer stolen-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return <-seen
	}
	if got := send(); got != "Bearer first-token /mcp" {
		t.Fatalf("gateway saw %q", got)
	}
	if err := os.WriteFile(tokenPath, []byte("rotated-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The forwarder looks again at most every tokenRecheck; make this one
	// due without waiting.
	f.token.mu.Lock()
	f.token.read = time.Time{}
	f.token.mu.Unlock()
	if got := send(); got != "Bearer rotated-token /mcp" {
		t.Fatalf("after the rotation the gateway saw %q", got)
	}
}

// TestForwarderOutlastsAGatewayGoneAMoment: a request the gateway could
// not take (no replica listening, as while the Service's endpoints catch
// up with a crash) is sent again, whole, once one listens.
func TestForwarderOutlastsAGatewayGoneAMoment(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	local := forwarderTo(t, "http://"+addr)

	var requests atomic.Int32
	go func() {
		time.Sleep(300 * time.Millisecond)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			requests.Add(1)
			_, _ = io.Copy(w, r.Body)
		})}
		t.Cleanup(func() { srv.Close() })
		_ = srv.Serve(ln)
	}()
	resp, err := http.Post(local.URL+"/mcp", "application/json", strings.NewReader(`{"reply":"once"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(got) != `{"reply":"once"}` || requests.Load() != 1 {
		t.Errorf("status %d, body %q, %d requests at the gateway; want 200, the body whole, once", resp.StatusCode, got, requests.Load())
	}
}

// TestForwarderNeverSendsTwice: a request that reached the gateway, whose
// connection then broke before an answer, is not sent again (a message
// must not be sent twice); the agent gets the error.
func TestForwarderNeverSendsTwice(t *testing.T) {
	var requests atomic.Int32
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		_, _ = io.ReadAll(r.Body)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer gateway.Close()
	local := forwarderTo(t, gateway.URL)
	resp, err := http.Post(local.URL+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bridge_send","arguments":{"to":"w1","content":"once"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || requests.Load() != 1 {
		t.Errorf("status %d with %d requests at the gateway; want 502 after one", resp.StatusCode, requests.Load())
	}
}

// TestForwarderSendsAReplyAgain: a bridge_reply whose answer was lost (the
// replica that took it died) is sent again, since the gateway takes the
// same reply twice as once; the agent gets the second answer.
func TestForwarderSendsAReplyAgain(t *testing.T) {
	const call = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"bridge_reply","arguments":{"content":"done"}}}`
	var requests atomic.Int32
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if string(body) != call {
			t.Errorf("the gateway got %q, want the call whole", body)
		}
		if requests.Add(1) == 1 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":7,"result":{}}`)
	}))
	defer gateway.Close()
	local := forwarderTo(t, gateway.URL)
	resp, err := http.Post(local.URL+"/mcp", "application/json", strings.NewReader(call))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || requests.Load() != 2 {
		t.Errorf("status %d with %d requests at the gateway; want 200 after two", resp.StatusCode, requests.Load())
	}
}

// forwarderTo serves a Forwarder to gateway, with the token "tok", until
// the test ends.
func forwarderTo(t *testing.T, gateway string) *httptest.Server {
	t.Helper()
	tokenPath := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenPath, []byte("tok"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewForwarder(gateway, tokenPath)
	if err != nil {
		t.Fatal(err)
	}
	local := httptest.NewServer(f)
	t.Cleanup(local.Close)
	return local
}

// TestRepeatable: what the forwarder sends again when its answer was lost,
// and what it never does.
func TestRepeatable(t *testing.T) {
	call := func(method, tool string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":{"name":"` + tool + `","arguments":{}}}`
	}
	cases := []struct {
		method, body string
		want         bool
	}{
		{http.MethodPost, call("tools/call", "bridge_reply"), true},
		{http.MethodPost, call("initialize", ""), true},
		{http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, true},
		{http.MethodPost, call("tools/list", ""), true},
		{http.MethodGet, "", true},
		{http.MethodDelete, "", true},
		{http.MethodPost, call("tools/call", "bridge_send"), false},
		{http.MethodPost, call("tools/call", "team_message"), false},
		{http.MethodPost, call("tools/call", "bridge_ask"), false},
		{http.MethodPost, `[` + call("tools/call", "bridge_reply") + `]`, false},
		{http.MethodPost, `not json`, false},
	}
	for _, tc := range cases {
		if got := repeatable(tc.method, []byte(tc.body)); got != tc.want {
			t.Errorf("repeatable(%s %s) = %v, want %v", tc.method, tc.body, got, tc.want)
		}
	}
}
