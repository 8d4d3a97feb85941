package panehost

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/fleetd/fleetd/herdr"
)

// BenchmarkPaneHostCall: a ping from fleetd's controllers through the
// relay to the pane server, over the one shared connection against the
// baseline in the same run, a pane host that does not multiplex (a TLS
// connection per call, as before). dials/op is what the pane host accepted
// per call.
func BenchmarkPaneHostCall(b *testing.B) {
	h := startPaneHost(b)
	older, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = older.Close() })
	relay := &Relay{Socket: h.srv.SocketPath(), TLS: h.tls}
	single := &countingListener{Listener: tls.NewListener(older, h.tls), accepted: h.accepted}
	go func() {
		for {
			conn, err := single.Accept()
			if err != nil {
				return
			}
			go relay.carry(conn)
		}
	}()
	cert, err := h.ca.IssueController(time.Now())
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct{ name, addr string }{
		{"shared connection", h.addr},
		{"connection per call (baseline)", older.Addr().String()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := herdr.NewTLSClient(bc.addr, ClientConfig(h.ca.Pool(), func() (*tls.Certificate, error) { return &cert, nil }, memberUID))
			if _, err := c.Ping(b.Context()); err != nil {
				b.Fatal(err)
			}
			h.accepted.Store(0)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Ping(b.Context()); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(h.accepted.Load())/float64(b.N), "dials/op")
		})
	}
}
