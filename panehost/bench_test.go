package panehost

import (
	"testing"

	"github.com/fleetd/fleetd/herdr"
)

// BenchmarkPaneHostCall: a ping from fleetd's controllers through the
// relay to the pane server, over the one shared connection against the
// baseline in the same run, a pane host that does not multiplex (a TLS
// connection per call, as before). dials/op is what the pane host accepted
// per call.
func BenchmarkPaneHostCall(b *testing.B) {
	h := startPaneHost(b)
	older := h.startOlderRelay(b)
	cfg := h.controllerConfig(b)
	for _, bc := range []struct{ name, addr string }{
		{"shared connection", h.addr},
		{"connection per call (baseline)", older},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := herdr.NewTLSClient(bc.addr, cfg)
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
