package paneserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fleetd/fleetd/herdr"
)

// Protocol limits, as herdr has them.
const (
	maxRequestLine     = 1 << 20
	requestReadTimeout = 5 * time.Second
	writeTimeout       = 5 * time.Second
	// samplePeriod is how often agent processes are sampled and output
	// subscriptions polled.
	samplePeriod = 100 * time.Millisecond
)

// Server serves the herdr protocol on a unix socket.
type Server struct {
	opts Options
	ln   *net.UnixListener
	// tlsLn serves the protocol over TLS, when Options.TLSAddress is set,
	// by tls.
	tlsLn net.Listener
	tls   *herdr.TLSServer
	sess  *session
	log   *slog.Logger

	// ctx ends when the server closes; held-open calls watch it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	// usage is what each workspace user holds open, by uid.
	usage map[uint32]*userUsage
}

// userUsage is what one workspace user holds open.
type userUsage struct {
	conns, watches int
}

// New listens on opts.SocketPath with mode 0600 (0660 with SocketGroup). A stale socket left by a
// dead server is replaced; a live one is an error. Call Serve to answer
// requests and Close to stop.
func New(opts Options) (*Server, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	mode := os.FileMode(0o600)
	if opts.SocketGroup {
		mode = 0o660
	}
	ln, err := listen(opts.SocketPath, mode)
	if err != nil {
		return nil, err
	}
	var tlsLn net.Listener
	if opts.TLSAddress != "" {
		if opts.TLSConfig == nil {
			_ = ln.Close()
			return nil, errors.New("paneserver: a TLS address needs a TLS configuration")
		}
		if tlsLn, err = net.Listen("tcp", opts.TLSAddress); err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("paneserver: listening on %s: %w", opts.TLSAddress, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		opts:   opts,
		ln:     ln,
		tlsLn:  tlsLn,
		log:    opts.Logger,
		ctx:    ctx,
		cancel: cancel,
		conns:  map[net.Conn]struct{}{},
		usage:  map[uint32]*userUsage{},
	}
	s.tls = &herdr.TLSServer{
		Config: opts.TLSConfig,
		Single: s.serveTracked,
		Open: func(context.Context) (net.Conn, error) {
			// Each stream is a connection of the server's own.
			near, far := net.Pipe()
			go s.serveTracked(far)
			return near, nil
		},
		Log: opts.Logger,
	}
	s.sess = newSession(&s.opts, newHub())
	if opts.Users != nil {
		if s.sess.users, err = newUsers(*opts.Users, s.opts.Shell); err != nil {
			_ = ln.Close()
			if tlsLn != nil {
				_ = tlsLn.Close()
			}
			return nil, err
		}
		if err := os.Chmod(opts.SocketPath, 0o666); err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("paneserver: opening the socket to the workspaces' users: %w", err)
		}
	}
	if opts.SessionFile != "" {
		if err := s.sess.restore(); err != nil {
			// Keep the saved session for a look: ending what was restored
			// must not overwrite it.
			s.opts.SessionFile = ""
			s.sess.shutdown()
			_ = ln.Close()
			if tlsLn != nil {
				_ = tlsLn.Close()
			}
			return nil, fmt.Errorf("paneserver: %w", err)
		}
	}
	s.wg.Go(s.sample)
	return s, nil
}

func listen(path string, mode os.FileMode) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("paneserver: creating socket directory: %w", err)
	}
	if _, err := os.Lstat(path); err == nil {
		if conn, err := net.Dial("unix", path); err == nil {
			_ = conn.Close()
			return nil, fmt.Errorf("paneserver: a server already listens on %s", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("paneserver: removing stale socket: %w", err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("paneserver: listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("paneserver: restricting socket: %w", err)
	}
	return ln, nil
}

// SocketPath returns where the server listens.
func (s *Server) SocketPath() string {
	return s.opts.SocketPath
}

// SwitchesUsers reports whether each workspace runs as a user of its own.
func (s *Server) SwitchesUsers() bool { return s.sess.users != nil }

// WorkspaceUser is the Unix user the workspace labelled label runs as,
// given out now if it has none yet; ok is false when the server runs
// everything as itself. Files fleetd writes for that workspace's agent are
// written as this user.
func (s *Server) WorkspaceUser(label string) (uid uint32, ok bool, err error) {
	if s.sess.users == nil {
		return 0, false, nil
	}
	s.sess.mu.Lock()
	defer s.sess.mu.Unlock()
	u, err := s.sess.users.forLabel(label)
	return u.uid, err == nil, err
}

// TLSAddress returns where the server listens for TLS, empty when it does
// not.
func (s *Server) TLSAddress() string {
	if s.tlsLn == nil {
		return ""
	}
	return s.tlsLn.Addr().String()
}

// Serve answers connections on the socket, and on the TLS address when
// there is one, until Close. It returns nil after Close.
func (s *Server) Serve() error {
	if s.tlsLn == nil {
		return s.accept(s.ln)
	}
	errs := make(chan error, 2)
	go func() { errs <- s.tls.Serve(s.tlsLn) }()
	go func() { errs <- s.accept(s.ln) }()
	err := <-errs
	if err != nil {
		// One listener failing stops the server: a half-reachable pane
		// host would fail its callers in ways that are hard to see.
		_ = s.Close()
	}
	return errors.Join(err, <-errs)
}

// accept answers the connections of one listener until it closes.
func (s *Server) accept(ln net.Listener) error {
	for {
		conn, err := ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("paneserver: accepting: %w", err)
		}
		if !s.track(conn) {
			_ = conn.Close()
			return nil
		}
		s.wg.Go(func() {
			defer s.untrack(conn)
			s.serveConn(conn)
		})
	}
}

// Close stops the server: it ends held calls and subscriptions, kills every
// pane's processes, and removes the socket.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for conn := range s.conns {
		_ = conn.Close()
	}
	s.mu.Unlock()

	s.cancel()
	err := s.ln.Close()
	if s.tlsLn != nil {
		s.tls.Close()
		if terr := s.tlsLn.Close(); terr != nil && !errors.Is(terr, net.ErrClosed) {
			err = errors.Join(err, terr)
		}
	}
	s.sess.shutdown()
	s.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("paneserver: closing listener: %w", err)
	}
	return nil
}

// serveTracked serves one connection the TLS listener took, on this
// goroutine, unless the server is closed.
func (s *Server) serveTracked(conn net.Conn) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = conn.Close()
		return
	}
	s.conns[conn] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	defer s.untrack(conn)
	s.serveConn(conn)
}

func (s *Server) track(conn net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[conn] = struct{}{}
	return true
}

func (s *Server) untrack(conn net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, conn)
}

// reserve counts n more of what a workspace user holds open (connections
// or output watches, as of picks) against max; ok is false, and nothing is
// counted, when it would pass max. The server's own identity, and the
// users it trusts, are not bounded. release gives them back.
func (s *Server) reserve(c caller, n int, max int, of func(*userUsage) *int) (release func(), ok bool) {
	if c.full || max < 0 || n == 0 || s.sess.users != nil && slices.Contains(s.sess.users.opts.Trusted, c.uid) {
		return func() {}, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.usage[c.uid]
	if u == nil {
		u = &userUsage{}
		s.usage[c.uid] = u
	}
	if *of(u)+n > max {
		return nil, false
	}
	*of(u) += n
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			*of(u) -= n
			if u.conns == 0 && u.watches == 0 {
				delete(s.usage, c.uid)
			}
		})
	}, true
}

func connsOf(u *userUsage) *int   { return &u.conns }
func watchesOf(u *userUsage) *int { return &u.watches }

func (s *Server) sample() {
	t := time.NewTicker(samplePeriod)
	defer t.Stop()
	for {
		select {
		case now := <-t.C:
			s.sampleOnce(now)
		case <-s.ctx.Done():
			return
		}
	}
}

// sampleOnce samples every pane. A bug in it must not take every pane down
// with the server: it is logged, and the next tick tries again.
func (s *Server) sampleOnce(now time.Time) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("Sampling panes panicked", "panic", r)
		}
	}()
	s.sess.sampleAgents(now)
}

// serveConn answers the one request of a connection.
func (s *Server) serveConn(conn net.Conn) {
	defer conn.Close()
	defer func() {
		// A bug in one handler must not take every pane down with the server.
		if r := recover(); r != nil {
			s.log.Error("Request handler panicked", "panic", r)
		}
	}()

	// One user's connections are bounded before anything is read from
	// them: idle ones cost the server a file and a goroutine each.
	who := callerOf(conn)
	if s.sess.users == nil {
		// Without workspace users the socket's mode decides who gets in.
		who.full = true
	}
	release, ok := s.reserve(who, 1, s.opts.MaxConnsPerUser, connsOf)
	if !ok {
		s.log.Warn("Refusing a connection: its user has as many open as it may", "uid", who.uid, "max", s.opts.MaxConnsPerUser)
		s.writeLine(conn, errorResponse{ID: "", Error: errorf(herdr.CodeServerUnavailable,
			"user %d has %d connections open, the most one user may; close some first", who.uid, s.opts.MaxConnsPerUser)})
		return
	}
	defer release()

	_ = conn.SetReadDeadline(time.Now().Add(requestReadTimeout))
	r := bufio.NewReaderSize(conn, 64<<10)
	line, err := readRequestLine(r, maxRequestLine)
	if errors.Is(err, errRequestTooLong) {
		s.writeLine(conn, errorResponse{ID: "", Error: invalidRequest("request line exceeds %d bytes", maxRequestLine)})
		return
	}
	if err != nil {
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}

	req, herr := decodeRequest(line, s.opts.Extensions)
	if herr != nil {
		s.writeLine(conn, errorResponse{ID: "", Error: herr})
		return
	}
	if herr := s.authorize(who, req.method, req.params); herr != nil {
		s.writeLine(conn, errorResponse{ID: req.id, Error: herr})
		return
	}
	if ext, ok := s.opts.Extensions[req.method]; ok {
		result, herr := ext(s.ctx, req.params.(json.RawMessage))
		if herr != nil {
			s.writeLine(conn, errorResponse{ID: req.id, Error: herr})
			return
		}
		s.writeLine(conn, successResponse{ID: req.id, Result: result})
		return
	}
	m := methods[req.method]
	if req.method == herdr.MethodEventsSubscribe {
		s.stream(heldContext(s.ctx, r), conn, req, who)
		return
	}
	ctx := s.ctx
	if m.held(req.params) {
		ctx = heldContext(s.ctx, r)
	}
	result, herr := m.serve(s, ctx, req.params)
	if ctx.Err() != nil {
		// The client went away, or the server is closing: no one to answer.
		return
	}
	if herr != nil {
		s.writeLine(conn, errorResponse{ID: req.id, Error: herr})
		return
	}
	s.writeLine(conn, successResponse{ID: req.id, Result: result})
}

// heldContext ends when the client sends anything more, half-closes or
// disconnects: herdr reads all of these as the caller going away.
func heldContext(parent context.Context, r *bufio.Reader) context.Context {
	ctx, cancel := context.WithCancel(parent)
	if r.Buffered() > 0 {
		cancel()
		return ctx
	}
	go func() {
		defer cancel()
		// Returns when the connection is closed at the latest.
		_, _ = r.ReadByte()
	}()
	return ctx
}

var errRequestTooLong = errors.New("request line too long")

// readRequestLine reads the request line. A final line without a newline
// counts: the client may have half-closed after writing it.
func readRequestLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > limit {
			return nil, errRequestTooLong
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return line, nil
		default:
			return nil, err
		}
	}
}

type successResponse struct {
	ID     string `json:"id"`
	Result any    `json:"result"`
}

type errorResponse struct {
	ID    string       `json:"id"`
	Error *herdr.Error `json:"error"`
}

// writeLine writes one JSON line. A reader that takes longer than the write
// timeout is dropped, as herdr drops it.
func (s *Server) writeLine(conn net.Conn, v any) bool {
	line, err := json.Marshal(v)
	if err != nil {
		s.log.Error("Encoding response failed", "err", err)
		return false
	}
	return s.writeRaw(conn, append(line, '\n'))
}

func (s *Server) writeRaw(conn net.Conn, line []byte) bool {
	_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := conn.Write(line); err != nil {
		return false
	}
	return true
}

// stream serves events.subscribe: one acknowledgement or error line, then
// events until the client goes away or stops reading. Like herdr, it sends
// each subscription at most one event per event interval, in the order of
// the subscriptions, so a replay or a burst drips out.
func (s *Server) stream(ctx context.Context, conn net.Conn, req request, who caller) {
	params := req.params.(herdr.EventsSubscribeParams)
	sub, herr := s.sess.subscribe(params.Subscriptions)
	if herr != nil {
		s.writeLine(conn, errorResponse{ID: req.id, Error: herr})
		return
	}
	release, ok := s.reserve(who, len(sub.outputs), s.opts.MaxOutputWatchesPerUser, watchesOf)
	if !ok {
		s.log.Warn("Refusing output subscriptions: their user watches as many as it may", "uid", who.uid, "max", s.opts.MaxOutputWatchesPerUser)
		s.writeLine(conn, errorResponse{ID: req.id, Error: errorf(herdr.CodeServerUnavailable,
			"user %d may watch at most %d panes' output at once (pane.output_matched); end some subscriptions first", who.uid, s.opts.MaxOutputWatchesPerUser)})
		return
	}
	defer release()
	if !s.writeLine(conn, successResponse{ID: req.id, Result: typed{Type: herdr.ResultSubscriptionStarted}}) {
		return
	}
	for _, line := range sub.initial {
		if !s.writeRaw(conn, line) {
			return
		}
	}
	tick := time.NewTimer(s.opts.EventInterval)
	defer tick.Stop()
	for {
		_, wake := s.sess.hub.now()
		sent := false
		for _, c := range sub.cursors {
			if line, ok := s.sess.hub.next(c); ok {
				if !s.writeRaw(conn, line) {
					return
				}
				sent = true
			}
		}
		for _, w := range sub.outputs {
			if ev, ok := w.poll(s.sess); ok {
				if !s.writeLine(conn, ev) {
					return
				}
				sent = true
			}
		}
		if !sent && len(sub.outputs) == 0 {
			// Caught up: sleep until something happens.
			select {
			case <-wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		tick.Reset(s.opts.EventInterval)
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}
