package controllers

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
)

// stateListTimeout bounds one scrape's reads of the cache.
const stateListTimeout = 10 * time.Second

var (
	membersDesc = prometheus.NewDesc("fleetd_members",
		"Members by namespace, phase (Pending, Starting, Ready, Restarting, Failed, Terminating) and agent status (idle, working, blocked, done, unknown).",
		[]string{"namespace", "phase", "agent_status"}, nil)
	delegationsDesc = prometheus.NewDesc("fleetd_delegations",
		"Delegations kept in the API, by namespace and phase (settled ones stay until their retention ends).",
		[]string{"namespace", "phase"}, nil)
	queueDepthDesc = prometheus.NewDesc("fleetd_delegation_queue_depth",
		"Delegations waiting in their members' queues (neither typed into a pane nor settled), by namespace.",
		[]string{"namespace"}, nil)
	oldestQueuedDesc = prometheus.NewDesc("fleetd_delegation_oldest_queued_seconds",
		"Age of the oldest Delegation waiting in a member's queue, by namespace; absent where none waits.",
		[]string{"namespace"}, nil)
)

// stateCollector reports the Members and Delegations that are, counted
// from the informer cache at scrape time: nothing to keep in step, so
// nothing drifts. It reports only once its manager is elected leader, so
// that replicas on standby do not report the same fleet again, and only
// the Members of its shards, so that sharded replicas report each Member
// once.
//
// It is registered once, with the first controllers' manager, and reads
// from the latest one's cache: a replica's controllers start again, with
// a new cache, when the shards it owns change.
type stateCollector struct {
	mu      sync.Mutex
	reader  client.Reader
	clock   clock.PassiveClock
	elected <-chan struct{}
	owns    func(namespace, name string) bool
}

// ForgetState stops the Member and Delegation gauges until the next
// controllers start: a replica that owns no shard reports none, not those
// of the cache of its last ones.
func (m *Metrics) ForgetState() {
	if m == nil {
		return
	}
	m.stateMu.Lock()
	defer m.stateMu.Unlock()
	if m.state == nil {
		return
	}
	m.state.mu.Lock()
	defer m.state.mu.Unlock()
	m.state.elected = nil
}

// useState makes the Member and Delegation gauges report from reader, the
// cache of the controllers of owned shards.
func (m *Metrics) useState(reader client.Reader, clk clock.PassiveClock, elected <-chan struct{}, owns func(namespace, name string) bool) error {
	m.stateMu.Lock()
	defer m.stateMu.Unlock()
	if m.state == nil {
		m.state = &stateCollector{}
		if err := m.reg.Register(m.state); err != nil {
			m.state = nil
			return err
		}
	}
	m.state.mu.Lock()
	defer m.state.mu.Unlock()
	m.state.reader, m.state.clock, m.state.elected, m.state.owns = reader, clk, elected, owns
	return nil
}

var _ prometheus.Collector = (*stateCollector)(nil)

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{membersDesc, delegationsDesc, queueDepthDesc, oldestQueuedDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	reader, clk, elected, owns := c.reader, c.clock, c.elected, c.owns
	c.mu.Unlock()
	select {
	case <-elected:
	default:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stateListTimeout)
	defer cancel()
	// The scrape only reads: no copy of every object for it.
	var members fleetv1alpha1.MemberList
	if err := reader.List(ctx, &members, client.UnsafeDisableDeepCopy); err != nil {
		ch <- prometheus.NewInvalidMetric(membersDesc, err)
	} else {
		if owns != nil {
			members.Items = slices.DeleteFunc(members.Items, func(m fleetv1alpha1.Member) bool { return !owns(m.Namespace, m.Name) })
		}
		for k, n := range countMembers(members.Items) {
			ch <- prometheus.MustNewConstMetric(membersDesc, prometheus.GaugeValue, float64(n), k.namespace, k.phase, k.agentStatus)
		}
	}
	var delegations fleetv1alpha1.DelegationList
	if err := reader.List(ctx, &delegations, client.UnsafeDisableDeepCopy); err != nil {
		ch <- prometheus.NewInvalidMetric(delegationsDesc, err)
		return
	}
	counts := countDelegations(delegations.Items, clk.Now())
	for k, n := range counts.byPhase {
		ch <- prometheus.MustNewConstMetric(delegationsDesc, prometheus.GaugeValue, float64(n), k.namespace, k.phase)
	}
	for ns, n := range counts.queued {
		ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(n), ns)
	}
	for ns, age := range counts.oldestQueued {
		ch <- prometheus.MustNewConstMetric(oldestQueuedDesc, prometheus.GaugeValue, age.Seconds(), ns)
	}
}

// memberKey is one fleetd_members series.
type memberKey struct{ namespace, phase, agentStatus string }

// countMembers counts Members by namespace, phase and agent status; a
// Member nothing was recorded for yet is Pending and unknown.
func countMembers(ms []fleetv1alpha1.Member) map[memberKey]int {
	out := map[memberKey]int{}
	for i := range ms {
		s := &ms[i].Status
		phase := cmp.Or(s.Phase, fleetv1alpha1.MemberPending)
		if !ms[i].DeletionTimestamp.IsZero() {
			phase = fleetv1alpha1.MemberTerminating
		}
		out[memberKey{ms[i].Namespace, string(phase), string(cmp.Or(s.AgentStatus, fleetv1alpha1.AgentUnknown))}]++
	}
	return out
}

// phaseKey is one fleetd_delegations series.
type phaseKey struct{ namespace, phase string }

// delegationCounts is what the Delegations gauges report.
type delegationCounts struct {
	byPhase      map[phaseKey]int
	queued       map[string]int
	oldestQueued map[string]time.Duration
}

// countDelegations counts Delegations by namespace and phase, and the
// queued ones (delegation.Queued) with the age of the oldest, at now. Every
// namespace with a Delegation reports a queue depth, zero included.
func countDelegations(ds []fleetv1alpha1.Delegation, now time.Time) delegationCounts {
	c := delegationCounts{byPhase: map[phaseKey]int{}, queued: map[string]int{}, oldestQueued: map[string]time.Duration{}}
	for i := range ds {
		d := &ds[i]
		c.byPhase[phaseKey{d.Namespace, string(delegation.Phase(d))}]++
		c.queued[d.Namespace] += 0
		if !delegation.Queued(d) {
			continue
		}
		c.queued[d.Namespace]++
		if age := max(0, now.Sub(d.CreationTimestamp.Time)); age >= c.oldestQueued[d.Namespace] {
			c.oldestQueued[d.Namespace] = age
		}
	}
	return c
}
