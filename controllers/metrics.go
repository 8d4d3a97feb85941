package controllers

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/herdr"
)

// Metrics are the controllers' Prometheus metrics. Labels are bounded: a
// Delegation's phase and outcome, a Member's runtime, a herdr method, and a
// namespace (made by an administrator); never a Member or a Delegation,
// which members spawn and send as they please.
//
// A nil *Metrics records nothing.
type Metrics struct {
	reg prometheus.Registerer

	stateMu sync.Mutex
	state   *stateCollector

	phaseSeconds   *prometheus.HistogramVec
	settleSeconds  *prometheus.HistogramVec
	outcomes       *prometheus.CounterVec
	restarts       *prometheus.CounterVec
	paneHostErrors *prometheus.CounterVec
}

// delegationBuckets span a message's life, from a second to the longest
// deadline (a day). Status timestamps have one-second resolution, so no
// bucket is finer than that.
var delegationBuckets = []float64{1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400}

// Phases a Delegation's time is split into, as the phase label of
// fleetd_delegation_phase_duration_seconds.
const (
	// metricPhaseQueued: from creation until it was typed into the pane.
	metricPhaseQueued = "queued"
	// metricPhaseDelivered: from typed until the member was seen picking it
	// up.
	metricPhaseDelivered = "delivered"
	// metricPhaseWorking: from the pickup until it settled (asking
	// included).
	metricPhaseWorking = "working"
)

// NewMetrics makes the controllers' metrics and registers them with reg
// (controller-runtime's metrics.Registry in fleetd, served at
// --metrics-bind-address). SetupWithManager adds the Member and Delegation
// gauges to the same registry.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		reg: reg,
		phaseSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "fleetd", Subsystem: "delegation", Name: "phase_duration_seconds",
			Help: "Time Delegations spent in a phase before they left it: queued (created until typed into the member's pane), " +
				"delivered (typed until the member picked it up), working (picked up until settled). From the Delegations' status timestamps (one-second resolution), once per Delegation.",
			Buckets: delegationBuckets,
		}, []string{"phase"}),
		settleSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "fleetd", Subsystem: "delegation", Name: "duration_seconds",
			Help:    "Time from a Delegation's creation until it settled, by outcome.",
			Buckets: delegationBuckets,
		}, []string{"outcome"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fleetd", Subsystem: "delegation", Name: "outcomes_total",
			Help: "Delegations settled, by namespace and outcome (reply, turn_done, timeout, delivery_failed, worker_gone, cancelled).",
		}, []string{"namespace", "outcome"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fleetd", Subsystem: "member", Name: "restarts_total",
			Help: "Members' panes (Shared) or Pods (Pod) recreated after they were lost, by namespace and runtime.",
		}, []string{"namespace", "runtime"}),
		paneHostErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "fleetd", Name: "pane_host_errors_total",
			Help: "Calls to a pane host (herdr, or a member Pod's pane host) that failed for the host's sake, by runtime, herdr method and kind: " +
				"unavailable (not reached), timeout, protocol (an answer that breaks the protocol), server (the host's own fault). Refusals about a pane (pane_not_found, agent_blocked, ...) are answers, not counted.",
		}, []string{"runtime", "method", "kind"}),
	}
	for _, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.phaseSeconds, m.settleSeconds, m.outcomes, m.restarts, m.paneHostErrors}
}

// MetricDescs describes every metric fleetd's controllers serve, the
// Member and Delegation gauges included: what dashboards and alerts may
// name.
func MetricDescs() []*prometheus.Desc {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		panic(err)
	}
	ch := make(chan *prometheus.Desc, 16)
	go func() {
		defer close(ch)
		for _, c := range append(m.collectors(), &stateCollector{}) {
			c.Describe(ch)
		}
	}()
	var out []*prometheus.Desc
	for d := range ch {
		out = append(out, d)
	}
	return out
}

// PaneHostErrors is a herdr.Client's OnError that counts the failures of
// the pane hosts of runtime.
func (m *Metrics) PaneHostErrors(runtime fleetv1alpha1.Runtime) func(method string, err error) {
	return func(method string, err error) {
		if m == nil {
			return
		}
		if kind, ok := paneHostErrorKind(err); ok {
			m.paneHostErrors.WithLabelValues(string(runtime), method, kind).Inc()
		}
	}
}

// paneHostErrorKind says whether err is the pane host's failure and which
// kind; a caller that gave up, and herdr's refusals about a pane or an
// agent, are not.
func paneHostErrorKind(err error) (string, bool) {
	var herr *herdr.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "", false
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, herdr.ErrTimeout):
		return "timeout", true
	case errors.Is(err, herdr.ErrUnavailable):
		return "unavailable", true
	case errors.Is(err, herdr.ErrProtocol):
		return "protocol", true
	case errors.As(err, &herr):
		if herr.Code == herdr.CodeInternalError || herr.Code == herdr.CodeServerUnavailable {
			return "server", true
		}
		return "", false
	}
	// Anything else failed before herdr could answer (a TLS handshake, a
	// peer that is not the server): the host was not reached.
	return "unavailable", true
}

// restarted counts the recreations a Member's status write recorded.
func (m *Metrics) restarted(before, after *fleetv1alpha1.Member) {
	if m == nil || after.Status.Restarts <= before.Status.Restarts {
		return
	}
	runtime := cmp.Or(after.Status.Runtime, fleetv1alpha1.RuntimeShared)
	m.restarts.WithLabelValues(after.Namespace, string(runtime)).Add(float64(after.Status.Restarts - before.Status.Restarts))
}

// delegationSteps are the steps of a Delegation's life that are recorded
// once each.
type delegationSteps uint8

const (
	stepLeftQueue delegationSteps = 1 << iota
	stepPickedUp
	stepSettled
)

// delegationSpan is one observation due for a Delegation: the step it
// records, when that step happened, and what to observe.
type delegationSpan struct {
	step delegationSteps
	at   time.Time
	// phase and seconds go to fleetd_delegation_phase_duration_seconds
	// (phase empty: none); settled adds the outcome.
	phase   string
	seconds float64
	settled bool
}

// delegationSpans says which steps of its life d's status shows, with the
// time each took. Typing is proven by a pickup (deliveredAt); a Delegation
// that settled without one left the queue when it was typed
// (deliveringAt): until it settles, a refusal may put it back.
func delegationSpans(d *fleetv1alpha1.Delegation) []delegationSpan {
	s := &d.Status
	queuedAt := d.CreationTimestamp.Time
	if s.QueuedAt != nil {
		queuedAt = s.QueuedAt.Time
	}
	settled := delegation.Settled(s.Phase) && s.SettledAt != nil
	var typedAt *time.Time
	switch {
	case s.DeliveredAt != nil:
		typedAt = &s.DeliveredAt.Time
	case settled && s.DeliveringAt != nil:
		typedAt = &s.DeliveringAt.Time
	}
	var spans []delegationSpan
	if typedAt != nil {
		spans = append(spans, delegationSpan{step: stepLeftQueue, at: *typedAt, phase: metricPhaseQueued, seconds: seconds(queuedAt, *typedAt)})
		if s.PickedUpAt != nil {
			spans = append(spans, delegationSpan{step: stepPickedUp, at: s.PickedUpAt.Time, phase: metricPhaseDelivered, seconds: seconds(*typedAt, s.PickedUpAt.Time)})
		}
	}
	if settled {
		span := delegationSpan{step: stepSettled, at: s.SettledAt.Time, settled: true}
		if s.PickedUpAt != nil {
			span.phase, span.seconds = metricPhaseWorking, seconds(s.PickedUpAt.Time, s.SettledAt.Time)
		}
		spans = append(spans, span)
	}
	return spans
}

// seconds is the time from a to b; never negative, though two writers'
// clocks may disagree.
func seconds(a, b time.Time) float64 { return max(0, b.Sub(a).Seconds()) }

// delegationRecorder records each step of each Delegation once: the
// injector shows it every Delegation of a member's queue on every look, and
// it remembers what it recorded for the Delegations still there. Steps
// that happened before it first looked were recorded by the process before
// (a restart, another leader), or by nobody, and are never recorded: a
// restart does not count the retained Delegations again.
type delegationRecorder struct {
	metrics *Metrics

	mu    sync.Mutex
	since time.Time
	seen  map[types.NamespacedName]map[types.UID]delegationSteps
}

// observe records what is new in the queue of member, ds as listed now.
func (r *delegationRecorder) observe(member types.NamespacedName, ds []fleetv1alpha1.Delegation, now time.Time) {
	if r.metrics == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[types.NamespacedName]map[types.UID]delegationSteps{}
		// Status timestamps are whole seconds: a step in this second
		// counts.
		r.since = now.Truncate(time.Second)
	}
	before := r.seen[member]
	seen := make(map[types.UID]delegationSteps, len(ds))
	for i := range ds {
		d := &ds[i]
		done := before[d.UID]
		for _, span := range delegationSpans(d) {
			if done&span.step != 0 {
				continue
			}
			done |= span.step
			if span.at.Before(r.since) {
				continue
			}
			r.metrics.record(d, span)
		}
		seen[d.UID] = done
	}
	if len(seen) == 0 {
		delete(r.seen, member)
		return
	}
	r.seen[member] = seen
}

func (m *Metrics) record(d *fleetv1alpha1.Delegation, span delegationSpan) {
	if span.phase != "" {
		m.phaseSeconds.WithLabelValues(span.phase).Observe(span.seconds)
	}
	if span.settled {
		outcome := string(delegation.Outcome(d))
		m.outcomes.WithLabelValues(d.Namespace, outcome).Inc()
		queuedAt := d.CreationTimestamp.Time
		if d.Status.QueuedAt != nil {
			queuedAt = d.Status.QueuedAt.Time
		}
		m.settleSeconds.WithLabelValues(outcome).Observe(seconds(queuedAt, span.at))
	}
}
