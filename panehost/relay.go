package panehost

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/fleetd/fleetd/herdr"
)

// Relay is the pane host's side of a member Pod: it alone holds the Pod's
// TLS key, takes fleetd's controllers' connections over mutual TLS and
// carries each, byte for byte, to the pane server's socket in the agent's
// container. The pane server, and the agent it runs, run there as another
// user, with neither the key nor the Pod's token mounted: the agent owns
// its pane server, and is trusted with nothing more than it.
type Relay struct {
	// Socket is the pane server's socket.
	Socket string
	// TLS decides whom the relay lets in (ServerConfig).
	TLS *tls.Config
	// Log is where refused handshakes go; nil logs nothing.
	Log *slog.Logger
}

// WaitForSocket returns once the pane server answers on its socket, so
// that the relay (and with it the Pod's readiness) comes up after it.
func (r *Relay) WaitForSocket(ctx context.Context) error {
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", r.Socket)
		if err == nil {
			return c.Close()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the pane server at %s: %w", r.Socket, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Serve relays the connections ln accepts until ln is closed; those being
// relayed then go on until either side ends them. A connection that
// multiplexes (herdr.TLSServer) has each of its streams relayed to a socket
// connection of its own.
func (r *Relay) Serve(ln net.Listener) error {
	s := &herdr.TLSServer{
		Config: r.TLS,
		Open: func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", r.Socket)
		},
		Single: r.carry,
		Log:    r.Log,
	}
	return s.Serve(ln)
}

// carry relays one authenticated connection to the socket until either
// side ends.
func (r *Relay) carry(conn net.Conn) {
	defer conn.Close()
	upstream, err := net.Dial("unix", r.Socket)
	if err != nil {
		if r.Log != nil {
			r.Log.Error("Reaching the pane server", "err", err)
		}
		return
	}
	defer upstream.Close()
	// A herdr client sends its one request and reads to the end, never
	// half-closing: either side ending ends the exchange, the response
	// read to its end or the caller gone (the pane server then sees its
	// stream's reader go).
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(upstream, conn); done <- struct{}{} }()
	go func() { _, _ = io.Copy(conn, upstream); done <- struct{}{} }()
	<-done
}
