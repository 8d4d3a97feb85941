package gateway

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/internal/textcut"
)

// memberSummary shows m compactly; its team and profile go with its group.
func memberSummary(m *fleetv1alpha1.Member, caller *identity.Principal, q queue) MemberSummary {
	sum := MemberSummary{Name: m.Name, Status: summaryStatus(m), QueueDepth: q.depth, Self: isCaller(m, caller)}
	if m.Status.AgentStatus == fleetv1alpha1.AgentBlocked {
		sum.Waiting = m.Status.AgentMessage
	}
	return sum
}

// summaryStatus is a member's status in one word: a ready member's agent
// status, else its phase in lower case.
func summaryStatus(m *fleetv1alpha1.Member) string {
	switch status := strings.ToLower(string(m.Status.Phase)); {
	case m.DeletionTimestamp != nil:
		return "terminating"
	case m.Status.Phase == fleetv1alpha1.MemberReady && m.Status.AgentStatus != "":
		return string(m.Status.AgentStatus)
	case status == "":
		return "pending"
	default:
		return status
	}
}

// queue is what a member's queue holds.
type queue struct {
	depth    int32
	inFlight string
}

// memberView converts a Member for display.
func memberView(m *fleetv1alpha1.Member, caller *identity.Principal, q queue) MemberView {
	s := m.Status
	v := MemberView{
		Name:             m.Name,
		Phase:            string(s.Phase),
		AgentStatus:      string(s.AgentStatus),
		AgentStatusSince: timeString(s.AgentStatusSince),
		Waiting:          s.AgentMessage,
		PaneID:           s.PaneID,
		TerminalID:       s.TerminalID,
		WorkspaceID:      s.WorkspaceID,
		SessionID:        s.AgentSessionID,
		Team:             m.Spec.Team,
		Role:             string(m.Spec.Role),
		Profile:          m.Spec.Profile,
		QueueDepth:       q.depth,
		InFlight:         q.inFlight,
		SpawnedBy:        m.Annotations[fleetv1alpha1.AnnotationSpawnedBy],
		Self:             isCaller(m, caller),
		Terminating:      m.DeletionTimestamp != nil,

		ContextRemainingPercent: s.ContextRemainingPercent,
	}
	if v.Role == "" {
		v.Role = string(fleetv1alpha1.RoleMember)
	}
	return v
}

// memberView shows m with its queue.
func (s *service) memberView(ctx context.Context, m *fleetv1alpha1.Member, caller *identity.Principal) (MemberView, error) {
	q, err := s.queueOf(ctx, m.Namespace, m.Name)
	if err != nil {
		return MemberView{}, err
	}
	return memberView(m, caller, q), nil
}

// memberViews shows the Members keep passes (all when nil) with their
// queues, sorted by name.
func (s *service) memberViews(ctx context.Context, ms []fleetv1alpha1.Member, caller *identity.Principal, keep func(*fleetv1alpha1.Member) bool) ([]MemberView, error) {
	views := make([]MemberView, 0, len(ms))
	for i := range ms {
		if keep != nil && !keep(&ms[i]) {
			continue
		}
		v, err := s.memberView(ctx, &ms[i], caller)
		if err != nil {
			return nil, err
		}
		views = append(views, v)
	}
	slices.SortFunc(views, func(a, b MemberView) int { return strings.Compare(a.Name, b.Name) })
	return views, nil
}

func timeString(t *metav1.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// excerpt shortens a message for display.
func excerpt(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return textcut.Head(s, n) + "…"
}

// groupSummaries puts the members of a page in groups by team, then
// profile; each group keeps its members in the page's order (by name).
func groupSummaries(ms []*fleetv1alpha1.Member, sums []MemberSummary) []MemberGroup {
	type key struct{ team, profile string }
	at := map[key]int{}
	groups := []MemberGroup{}
	for i, m := range ms {
		k := key{m.Spec.Team, m.Spec.Profile}
		j, ok := at[k]
		if !ok {
			j = len(groups)
			at[k] = j
			groups = append(groups, MemberGroup{Team: k.team, Profile: k.profile})
		}
		groups[j].Members = append(groups[j].Members, sums[i])
	}
	slices.SortFunc(groups, func(a, b MemberGroup) int {
		return cmp.Or(strings.Compare(a.Team, b.Team), strings.Compare(a.Profile, b.Profile))
	})
	return groups
}

// text shows the page a line per member under a line per team and
// profile, the header naming the columns.
func (o *ListOutput) text() string {
	var b strings.Builder
	n := 0
	for _, g := range o.Groups {
		n += len(g.Members)
	}
	fmt.Fprintf(&b, "%d of %d members (name status queueDepth), by team and profile:\n", n, o.Total)
	for _, g := range o.Groups {
		fmt.Fprintf(&b, "team %s, profile %s:\n", orDash(g.Team), orDash(g.Profile))
		for _, m := range g.Members {
			fmt.Fprintf(&b, "%s %s %d", m.Name, m.Status, m.QueueDepth)
			if m.Self {
				b.WriteString(" (you)")
			}
			b.WriteString("\n")
			if m.Waiting != "" {
				fmt.Fprintf(&b, "  waiting on: %s\n", strings.ReplaceAll(m.Waiting, "\n", "\n  "))
			}
		}
	}
	if o.Continue != "" {
		fmt.Fprintf(&b, "more: call bridge_list with continue=%q\n", o.Continue)
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
