package gateway

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/internal/textcut"
)

// What the dashboard shows, and to whom: pure functions of a Member, a
// Delegation and the viewer's scope.

// Bounds of what a member page sends.
const (
	// maxTimeline is how many messages a member page shows, newest first.
	maxTimeline = 200
	// maxTimelineContent bounds each message's content on the timeline; the
	// full text is in the Delegation.
	maxTimelineContent = 8 << 10
	// inFlightExcerpt bounds the start of the message in flight in a row.
	inFlightExcerpt = 120
)

// dashboardScope is what one dashboard viewer may see and do. A service
// account sees a namespace only with RBAC's get on members, as bridge_list
// asks; a member sees its own team (itself alone when it has none).
type dashboardScope struct {
	who *identity.Principal
	// screens: the viewer may watch terminals (primaries, as bridge_read).
	screens bool
	// othersMessages: the viewer may read messages it neither sent nor
	// received (RBAC's get on delegations for a service account, as
	// kubectl would ask; every message for a static primary).
	othersMessages bool
	// cancelOthers: the viewer may withdraw messages it did not send (as
	// bridge_cancel decides).
	cancelOthers bool
}

// showsMember reports whether the viewer sees m.
func (s *dashboardScope) showsMember(m *fleetv1alpha1.Member) bool {
	if s.who.Member == nil || isCaller(m, s.who) {
		return true
	}
	return s.who.Team() != "" && m.Spec.Team == s.who.Team()
}

// showsMessage reports whether the viewer may read d: its own messages,
// those sent to it, and the rest with othersMessages.
func (s *dashboardScope) showsMessage(d *fleetv1alpha1.Delegation) bool {
	if s.othersMessages || identity.Key(d.Spec.From) == s.who.Key() {
		return true
	}
	return s.who.Member != nil && d.Spec.To == s.who.Name
}

// mayCancel reports whether the viewer may withdraw d, as bridge_cancel
// decides: its sender, or a primary with the right to cancel others'.
func (s *dashboardScope) mayCancel(d *fleetv1alpha1.Delegation) bool {
	if delegation.Settled(d.Status.Phase) {
		return false
	}
	return identity.Key(d.Spec.From) == s.who.Key() || (s.who.Member == nil && s.cancelOthers)
}

// hello is the first event of a stream.
func (s *dashboardScope) hello() DashboardHello {
	return DashboardHello{
		Kind: string(s.who.Kind), Name: s.who.Name, Namespace: s.who.Namespace, Team: s.who.Team(),
		Screens: s.screens, CancelOthers: s.cancelOthers,
	}
}

// dashboardMember shows m with its queue; inFlight is the message in
// flight when there is one and the viewer may read it.
func dashboardMember(m *fleetv1alpha1.Member, s *dashboardScope, q queue, inFlight *fleetv1alpha1.Delegation, profiles map[string]*fleetv1alpha1.Profile) DashboardMember {
	v := DashboardMember{
		MemberView:        memberView(m, s.who, q),
		Status:            summaryStatus(m),
		Agent:             agentOf(m, profiles[m.Spec.Profile]),
		Restarts:          m.Status.Restarts,
		LastRestartReason: m.Status.LastRestartReason,
		NodeName:          m.Status.NodeName,
		PodName:           m.Status.PodName,
		PodPool:           m.Status.PodPool,
		SuspendedAt:       timeString(m.Status.SuspendedAt),
	}
	if m.Status.SuspendedAt != nil {
		if c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionSuspended); c != nil && c.Status == metav1.ConditionTrue {
			v.SuspendedReason = c.Reason
		}
	}
	if u := m.Status.Usage; u != nil {
		v.Usage, v.Cost = usageLine(u.TokenUsage, u.Cost, u.Currency)
	}
	if m.Status.AgentStatus != fleetv1alpha1.AgentBlocked {
		v.Waiting = ""
	}
	if inFlight != nil && s.showsMessage(inFlight) {
		v.InFlightContent = excerpt(firstLine(inFlight.Spec.Content), inFlightExcerpt)
	}
	return v
}

// dashboardPool shows p's warm pool; false when p has none. A pool is
// shown while its spec or its status says it has one: a pool taken out
// of the spec still counts the members running in Pods claimed from it.
func dashboardPool(p *fleetv1alpha1.Profile) (DashboardPool, bool) {
	if p.Spec.WarmPool == nil && p.Status.WarmPool == nil {
		return DashboardPool{}, false
	}
	v := DashboardPool{Name: p.Name}
	if p.Spec.WarmPool != nil {
		v.Size = p.Spec.WarmPool.Size
	}
	if st := p.Status.WarmPool; st != nil {
		v.Free, v.Starting, v.Claimed = st.Free, st.Starting, st.Claimed
	}
	return v, true
}

// usageLine says what a member's or a message's usage counts and costs,
// as the dashboard shows them; both empty before any call.
func usageLine(u fleetv1alpha1.TokenUsage, cost, currency string) (usage, priced string) {
	if u == (fleetv1alpha1.TokenUsage{}) {
		return "", ""
	}
	calls := "calls"
	if u.Calls == 1 {
		calls = "call"
	}
	usage = fmt.Sprintf("%d %s · %d in · %d out · %d cached", u.Calls, calls, u.InputTokens, u.OutputTokens, u.CachedTokens)
	if u.CacheCreationTokens > 0 {
		usage += fmt.Sprintf(" · %d cache writes", u.CacheCreationTokens)
	}
	if cost != "" {
		priced = cost + " " + currency
	}
	return usage, priced
}

// memberQueue is a member's queue and the message in flight in it.
type memberQueue struct {
	queue
	current *fleetv1alpha1.Delegation
}

// queuesOf is what each member's queue holds, by member, as queueOf says
// it for one: the messages queued for it (delegation.Queued), and the one
// in flight, the latest typed of those in its hands (delegation.InFlight).
func queuesOf(ds []fleetv1alpha1.Delegation) map[string]memberQueue {
	queues := map[string]memberQueue{}
	active := map[string][]fleetv1alpha1.Delegation{}
	for i := range ds {
		d := &ds[i]
		switch {
		case d.Spec.To == "":
		case delegation.Queued(d):
			q := queues[d.Spec.To]
			q.depth++
			queues[d.Spec.To] = q
		case delegation.InFlight(d):
			active[d.Spec.To] = append(active[d.Spec.To], *d)
		}
	}
	for to, in := range active {
		q := queues[to]
		q.current = currentDelegation(in)
		q.inFlight = q.current.Name
		queues[to] = q
	}
	return queues
}

// agentOf is what runs in m's pane: the agent kind, or the command line, as
// the Member or its Profile says.
func agentOf(m *fleetv1alpha1.Member, p *fleetv1alpha1.Profile) string {
	if m.Status.AgentKind != "" {
		return string(m.Status.AgentKind)
	}
	if m.Spec.Agent != "" {
		return string(m.Spec.Agent)
	}
	if len(m.Spec.Command) > 0 {
		return strings.Join(m.Spec.Command, " ")
	}
	if p == nil {
		return ""
	}
	if p.Spec.Agent != "" {
		return string(p.Spec.Agent)
	}
	return strings.Join(p.Spec.Command, " ")
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// dashboardMessage shows d on its member's timeline.
func dashboardMessage(d *fleetv1alpha1.Delegation, s *dashboardScope) DashboardMessage {
	m := DashboardMessage{
		DispatchID:  d.Name,
		FromKind:    string(d.Spec.From.Kind),
		FromName:    d.Spec.From.Name,
		FromYou:     identity.Key(d.Spec.From) == s.who.Key(),
		Content:     textcut.Head(d.Spec.Content, maxTimelineContent),
		Phase:       string(delegation.Phase(d)),
		Outcome:     string(delegation.Outcome(d)),
		Wait:        delegation.Waits(d),
		Deadline:    delegation.Deadline(d).UTC().Format(time.RFC3339),
		Steps:       messageSteps(d),
		Cancellable: s.mayCancel(d),
		created:     createdTime(d),
	}
	m.ContentTruncated = len(m.Content) < len(d.Spec.Content)
	if u := d.Status.Usage; u != nil {
		m.Usage, m.Cost = usageLine(u.TokenUsage, u.Cost, u.Currency)
	}
	return m
}

// createdTime is when d was created, with the nanoseconds of the
// sequence the gateway stamps where there is one.
func createdTime(d *fleetv1alpha1.Delegation) time.Time {
	if seq := d.Annotations[fleetv1alpha1.AnnotationSequence]; seq != "" {
		if t, err := time.Parse(time.RFC3339Nano, seq); err == nil {
			return t
		}
	}
	return d.CreationTimestamp.Time
}

// messageSteps is d's life so far, one step for each stage it reached, in
// the order of its life, with the time its status gives for it.
func messageSteps(d *fleetv1alpha1.Delegation) []DashboardStep {
	s := &d.Status
	phase := delegation.Phase(d)
	created := createdTime(d).UTC().Format(time.RFC3339Nano)
	steps := []DashboardStep{{Step: "created", At: created}}
	// A new Delegation is queued without a write; the injector records the
	// time when it first looks.
	queued := DashboardStep{Step: "queued", At: created}
	if s.QueuedAt != nil {
		queued.At = stamp(s.QueuedAt)
	}
	steps = append(steps, queued)
	if at := cmp.Or(s.DeliveredAt, s.DeliveringAt); at != nil {
		steps = append(steps, DashboardStep{Step: "delivered", At: stamp(at)})
	}
	if s.PickedUpAt != nil || phase == fleetv1alpha1.DelegationWorking || phase == fleetv1alpha1.DelegationAsking {
		steps = append(steps, DashboardStep{Step: "working", At: stamp(s.PickedUpAt)})
	}
	for _, q := range s.Questions {
		steps = append(steps, DashboardStep{Step: "asked", At: stamp(&q.AskedAt), Text: q.Text, TurnID: q.TurnID})
		switch {
		case q.Answer != nil:
			steps = append(steps, DashboardStep{Step: "answered", At: stamp(q.AnsweredAt), Text: *q.Answer, TurnID: q.TurnID})
		case q.WithdrawnAt != nil:
			steps = append(steps, DashboardStep{Step: "withdrawn", At: stamp(q.WithdrawnAt), TurnID: q.TurnID})
		}
	}
	if delegation.CancelRequested(d) {
		steps = append(steps, DashboardStep{Step: "cancel_requested", At: stamp(s.CancelRequestedAt)})
	}
	settled := stamp(s.SettledAt)
	switch phase {
	case fleetv1alpha1.DelegationReplied:
		steps = append(steps, DashboardStep{Step: "replied", At: cmp.Or(stamp(s.RepliedAt), settled), Text: deref(s.Reply)})
	case fleetv1alpha1.DelegationTurnDone:
		steps = append(steps, DashboardStep{Step: "turn_done", At: settled, Text: deref(s.Tail)})
	case fleetv1alpha1.DelegationTimedOut:
		steps = append(steps, DashboardStep{Step: "timed_out", At: settled})
		if s.Reply != nil {
			steps = append(steps, DashboardStep{Step: "late_reply", At: stamp(s.RepliedAt), Text: *s.Reply})
		}
	case fleetv1alpha1.DelegationFailed:
		steps = append(steps, DashboardStep{Step: "failed", At: settled, Text: delegation.SettledMessage(d, "")})
	case fleetv1alpha1.DelegationWorkerGone:
		steps = append(steps, DashboardStep{Step: "worker_gone", At: settled, Text: delegation.SettledMessage(d, "")})
	case fleetv1alpha1.DelegationCancelled:
		steps = append(steps, DashboardStep{Step: "cancelled", At: settled, Text: delegation.SettledMessage(d, "")})
	}
	return steps
}

// stamp is t in RFC 3339, empty for nil.
func stamp(t *metav1.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// newestFirst orders a timeline.
func newestFirst(ms []DashboardMessage) {
	slices.SortFunc(ms, func(a, b DashboardMessage) int {
		return cmp.Or(b.created.Compare(a.created), strings.Compare(b.DispatchID, a.DispatchID))
	})
}
