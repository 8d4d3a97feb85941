package rotation

import "github.com/prometheus/client_golang/prometheus"

// Metrics count what a replica writes to the rotation.
type Metrics struct {
	changes *prometheus.CounterVec
}

// NewMetrics registers the rotation's metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetd_gateway_rotation_changes_total",
			Help: "Changes this replica wrote to the gateway's rotation: in (its own Pod, once its gateway serves) or out (another replica's Pod, its Lease unrenewed and its gateway not answering).",
		}, []string{"change"}),
	}
	if err := reg.Register(m.changes); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Metrics) count(change string) {
	if m != nil {
		m.changes.WithLabelValues(change).Inc()
	}
}

// MetricDescs describes the rotation's metrics, for tools that check
// what fleetd serves.
func MetricDescs() []*prometheus.Desc {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		panic(err)
	}
	ch := make(chan *prometheus.Desc, 1)
	m.changes.Describe(ch)
	return []*prometheus.Desc{<-ch}
}
