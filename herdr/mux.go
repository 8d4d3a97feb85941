package herdr

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// A pane host serves the protocol over TLS in one of two ways, chosen by
// ALPN at the handshake. A client that offers h2 sends each exchange (one
// request line, the response lines after it) as an HTTP/2 stream of its
// own: a POST to MuxPath whose body is the request line and whose response
// body is what herdr writes back, for as long as herdr writes. Every call,
// held calls and event streams included, then shares one connection per
// pane host. A client that offers nothing gets the protocol itself, one
// exchange per connection, as on herdr's socket.
const (
	// MuxProtocol is the ALPN name of the multiplexed transport.
	MuxProtocol = "h2"
	// MuxPath is where an exchange is posted.
	MuxPath = "/herdr"
)

// Transport bounds, on both sides of a multiplexed connection.
const (
	// muxMaxStreams bounds the exchanges one connection carries at once:
	// a member's event stream and held calls, with room to spare. A
	// client past it opens a second connection.
	muxMaxStreams = 1000
	// muxPingAfter is how long a connection may be silent before the
	// client pings it, and muxPingTimeout how long the ping may take: a
	// pane host whose node is gone fails every exchange on it within
	// their sum, instead of holding them until TCP gives up.
	muxPingAfter   = 30 * time.Second
	muxPingTimeout = 15 * time.Second
	// muxIdleTimeout closes a connection that carries nothing: a member's
	// event stream keeps its own open for as long as the member runs.
	muxIdleTimeout = 5 * time.Minute
	// maxRequestLine bounds the request line a pane host accepts, as
	// herdr-compatible servers bound it on their socket.
	maxRequestLine = 1 << 20
	// handshakeTimeout bounds a TLS handshake: nothing that has not
	// completed one may hold a connection open.
	handshakeTimeout = 10 * time.Second
)

// exchange is one request's open response: what herdr writes back, read
// until the caller closes it.
type exchange interface {
	io.Reader
	// Abort unblocks a pending Read, from any goroutine; the exchange is
	// then over.
	Abort()
	Close() error
}

// connExchange is an exchange on a connection of its own.
type connExchange struct{ net.Conn }

// Abort sets a deadline in the past rather than closing: herdr reads a
// byte or a half-close from the client as a disconnect.
func (e connExchange) Abort() { _ = e.SetDeadline(expired) }

// streamExchange is an exchange on a stream of a shared connection.
// Closing it before the end resets the stream alone.
type streamExchange struct {
	body   io.ReadCloser
	cancel context.CancelFunc
}

func (e *streamExchange) Read(p []byte) (int, error) { return e.body.Read(p) }
func (e *streamExchange) Abort()                     { e.cancel() }
func (e *streamExchange) Close() error {
	e.cancel()
	return e.body.Close()
}

// errNoMux says the pane host negotiated no multiplexing: it is an older
// one, and serves one exchange per connection.
var errNoMux = errors.New("pane host does not multiplex")

// mux is a client's multiplexed transport to one pane host.
type mux struct {
	h2  *http.Transport
	url string
	// single is set once the pane host declined h2: every later exchange
	// dials a connection of its own, as before multiplexing.
	single atomic.Bool
}

func newMux(addr string, cfg *tls.Config) *mux {
	m := &mux{url: "https://" + addr + MuxPath}
	offer := cfg.Clone()
	offer.NextProtos = []string{MuxProtocol}
	// HTTP/2 only: a pane host that does not negotiate it is served one
	// exchange per connection, never HTTP/1.
	var h2only http.Protocols
	h2only.SetHTTP2(true)
	m.h2 = &http.Transport{
		Protocols: &h2only,
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			d := tls.Dialer{Config: offer}
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			if conn.(*tls.Conn).ConnectionState().NegotiatedProtocol != MuxProtocol {
				_ = conn.Close()
				m.single.Store(true)
				return nil, errNoMux
			}
			return conn, nil
		},
		HTTP2:           &http.HTTP2Config{SendPingTimeout: muxPingAfter, PingTimeout: muxPingTimeout},
		IdleConnTimeout: muxIdleTimeout,
	}
	return m
}

// open starts an exchange on a stream: it returns once the pane host has
// taken the request and answered with its headers.
func (m *mux) open(ctx context.Context, req []byte) (exchange, error) {
	sctx, cancel := context.WithCancel(ctx)
	hreq, err := http.NewRequestWithContext(sctx, http.MethodPost, m.url, bytes.NewReader(req))
	if err != nil {
		cancel()
		return nil, err
	}
	resp, err := m.h2.RoundTrip(hreq)
	if err != nil {
		cancel()
		if m.single.Load() {
			return nil, errNoMux
		}
		if ctxErr := context.Cause(ctx); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, m.url, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		_ = resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("%w: pane host answered %s: %s", ErrUnavailable, resp.Status, bytes.TrimSpace(msg))
	}
	return &streamExchange{body: resp.Body, cancel: cancel}, nil
}

// TLSServer serves the protocol over TLS to whom Config admits, both ways
// a client may ask for it: multiplexed over HTTP/2 streams, or one
// exchange per connection.
type TLSServer struct {
	// Config decides whom the server lets in; MuxProtocol is added to the
	// protocols it offers.
	Config *tls.Config
	// Open connects one exchange to the herdr server behind.
	Open func(ctx context.Context) (net.Conn, error)
	// Single serves a connection that asked for no multiplexing: the
	// protocol's own exchange, on the connection itself.
	Single func(conn net.Conn)
	// Log is where refused handshakes and failed exchanges go; nil logs
	// nothing.
	Log *slog.Logger

	mu     sync.Mutex
	closed bool
	// conns are the TCP connections being served, each with what to do
	// when it ends.
	conns map[net.Conn]func()
	// ends are the multiplexed connections' ends, by the TLS connection
	// the HTTP/2 server holds.
	ends map[net.Conn]func()
}

// Serve serves the connections ln accepts until ln is closed; those being
// served then go on until either side ends them.
func (s *TLSServer) Serve(ln net.Listener) error {
	cfg := s.Config.Clone()
	cfg.NextProtos = append([]string{MuxProtocol}, cfg.NextProtos...)
	// The HTTP/2 server takes the connections that negotiated it, after
	// the handshake here: net/http would serve the others HTTP/1.
	multiplexed := newConnQueue(ln.Addr())
	defer multiplexed.Close()
	var h2only http.Protocols
	h2only.SetHTTP2(true)
	h2 := &http.Server{
		Handler:     http.HandlerFunc(s.exchange),
		Protocols:   &h2only,
		HTTP2:       &http.HTTP2Config{MaxConcurrentStreams: muxMaxStreams, MaxReadFrameSize: 1 << 20},
		IdleTimeout: muxIdleTimeout,
		ErrorLog:    slog.NewLogLogger(s.logHandler(), slog.LevelInfo),
		ConnState: func(c net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				s.ended(c)
			}
		},
	}
	go func() { _ = h2.Serve(multiplexed) }()
	for {
		raw, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		go s.serve(raw, cfg, multiplexed)
	}
}

// serve authenticates one connection and serves it the way it asked for.
func (s *TLSServer) serve(raw net.Conn, cfg *tls.Config, multiplexed *connQueue) {
	conn := tls.Server(raw, cfg)
	var expire *time.Timer
	done := func() {
		if expire != nil {
			expire.Stop()
		}
		_ = conn.Close()
		s.untrack(raw)
	}
	if !s.track(raw, done) {
		_ = raw.Close()
		return
	}
	_ = conn.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := conn.Handshake(); err != nil {
		s.log("Refused a connection", "remote", raw.RemoteAddr().String(), "err", err)
		done()
		return
	}
	_ = conn.SetDeadline(time.Time{})
	// The peer's certificate vouched for it at the handshake; a connection
	// that outlives the certificate ends with it, and the peer must show a
	// current one to go on.
	if peer := conn.ConnectionState().PeerCertificates; len(peer) > 0 {
		expire = time.AfterFunc(time.Until(peer[0].NotAfter), func() { _ = conn.Close() })
	}
	if conn.ConnectionState().NegotiatedProtocol != MuxProtocol {
		s.Single(conn)
		done()
		return
	}
	s.mu.Lock()
	s.ends[conn] = done
	s.mu.Unlock()
	if !multiplexed.push(conn) {
		s.ended(conn)
	}
}

// Close ends every connection the server serves; Serve's listener is its
// caller's to close.
func (s *TLSServer) Close() {
	s.mu.Lock()
	s.closed = true
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

func (s *TLSServer) track(c net.Conn, done func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.conns == nil {
		s.conns, s.ends = map[net.Conn]func(){}, map[net.Conn]func(){}
	}
	s.conns[c] = done
	return true
}

func (s *TLSServer) untrack(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

// ended runs the end of a multiplexed connection the HTTP/2 server is done
// with.
func (s *TLSServer) ended(c net.Conn) {
	s.mu.Lock()
	done := s.ends[c]
	delete(s.ends, c)
	s.mu.Unlock()
	if done != nil {
		done()
	}
}

func (s *TLSServer) logHandler() slog.Handler {
	if s.Log == nil {
		return slog.DiscardHandler
	}
	return s.Log.Handler()
}

// connQueue is a listener of connections handed to it.
type connQueue struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// push hands c to Accept; false once the queue is closed.
func (q *connQueue) push(c net.Conn) bool {
	select {
	case q.conns <- c:
		return true
	case <-q.done:
		return false
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.conns:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }

// exchange carries one stream to the herdr server: the request line in,
// every byte herdr writes back out as it comes, until herdr ends the
// exchange or the client resets the stream.
func (s *TLSServer) exchange(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != MuxPath {
		http.Error(w, "this pane host serves the herdr protocol at "+MuxPath, http.StatusNotFound)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "post the request line", http.StatusMethodNotAllowed)
		return
	}
	req, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestLine))
	if err != nil {
		http.Error(w, fmt.Sprintf("reading the request line: %v", err), http.StatusRequestEntityTooLarge)
		return
	}
	up, err := s.Open(r.Context())
	if err != nil {
		s.log("Reaching the pane server", "err", err)
		http.Error(w, "the pane server is not reachable", http.StatusBadGateway)
		return
	}
	defer up.Close()
	stop := context.AfterFunc(r.Context(), func() { _ = up.SetDeadline(expired) })
	defer stop()
	if _, err := up.Write(req); err != nil {
		http.Error(w, "the pane server took no request", http.StatusBadGateway)
		return
	}
	rc := http.NewResponseController(w)
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil || rc.Flush() != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (s *TLSServer) log(msg string, args ...any) {
	if s.Log != nil {
		s.Log.Info(msg, args...)
	}
}
