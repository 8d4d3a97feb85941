package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the gateway's Prometheus metrics, on a registry of its own so
// that a second Gateway in one process (tests, a restart) never collides.
type metrics struct {
	registry     *prometheus.Registry
	toolCalls    *prometheus.CounterVec
	holdDuration *prometheus.HistogramVec
	openHolds    *prometheus.GaugeVec
	authFailures *prometheus.CounterVec
	throttled    *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fleetd", Subsystem: "gateway", Name: "tool_calls_total",
			Help: "MCP tool calls by tool and outcome (a bridge_send outcome, an error code, or ok).",
		}, []string{"tool", "outcome"}),
		holdDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "fleetd", Subsystem: "gateway", Name: "hold_duration_seconds",
			Help: "How long held calls (bridge_send, bridge_ask) waited on their Delegation.",
			// Holds last from milliseconds (an instant reply) to the one-hour cap.
			Buckets: []float64{0.01, 0.1, 0.5, 1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600},
		}, []string{"tool"}),
		openHolds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "fleetd", Subsystem: "gateway", Name: "open_holds",
			Help: "Calls currently held open waiting on a Delegation.",
		}, []string{"tool"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fleetd", Subsystem: "gateway", Name: "auth_failures_total",
			Help: "Requests refused before any tool ran, by reason.",
		}, []string{"reason"}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fleetd", Subsystem: "gateway", Name: "throttled_total",
			Help: "Calls, streams and authentications refused for a per-caller bound, by bound.",
		}, []string{"bound"}),
	}
	m.registry.MustRegister(m.own()...)
	m.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// own are the gateway's fleetd_gateway_* metrics.
func (m *metrics) own() []prometheus.Collector {
	return []prometheus.Collector{m.toolCalls, m.holdDuration, m.openHolds, m.authFailures, m.throttled}
}

// MetricDescs describes the gateway's own metrics, as its /metrics serves
// them: what dashboards and alerts may name.
func MetricDescs() []*prometheus.Desc {
	ch := make(chan *prometheus.Desc, 16)
	go func() {
		defer close(ch)
		for _, c := range newMetrics().own() {
			c.Describe(ch)
		}
	}()
	var out []*prometheus.Desc
	for d := range ch {
		out = append(out, d)
	}
	return out
}
