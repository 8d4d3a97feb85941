package gateway

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/delegation"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/toolerr"
)

// The fleet tools: who is there (bridge_status, bridge_list,
// bridge_profiles, bridge_whoami), and starting and stopping members
// (bridge_spawn, bridge_stop).

// bridgeStatus shows the full record of one member, or of the calling
// member itself, and everything pending for the caller: its messages in
// progress, outcomes it has not acknowledged, questions open to it.
func (g *Gateway) bridgeStatus(ctx context.Context, c *call, in StatusInput) (*StatusOutput, error) {
	if err := g.allow(ctx, c.who, identity.GetMembers); err != nil {
		return nil, err
	}
	out := &StatusOutput{Members: []MemberView{}, Pending: []DelegationView{}}
	id := in.SessionID
	if id == "" && c.who.Member != nil {
		id = c.who.Name
	}
	if id != "" {
		members, err := g.members(ctx, c.who.Namespace)
		if err != nil {
			return nil, err
		}
		m, terr := findMember(members, id)
		if terr != nil {
			return nil, terr
		}
		v, err := g.memberView(ctx, m, c.who)
		if err != nil {
			return nil, err
		}
		out.Members = []MemberView{v}
	}
	// What bridge_poll would show, and the caller's messages in progress.
	inbox, pending, err := g.inbox(ctx, c.who)
	if err != nil {
		return nil, err
	}
	out.Outcomes, out.Questions = inbox.Outcomes, inbox.Questions
	for _, d := range pending {
		v := DelegationView{
			DispatchID: d.Name, Member: d.Spec.To, Phase: string(delegation.Phase(d)),
			Created: d.CreationTimestamp.UTC().Format(time.RFC3339), Deadline: delegation.Deadline(d).UTC().Format(time.RFC3339),
		}
		if delegation.OpenQuestion(d) != nil {
			q := openQuestionView(d)
			v.Question = &q
		}
		out.Pending = append(out.Pending, v)
	}
	return out, nil
}

// bridgeSpawn starts a member from a Profile.
func (g *Gateway) bridgeSpawn(ctx context.Context, c *call, in SpawnInput) (*SpawnOutput, error) {
	m, err := g.spawn(ctx, c.who, spawnRequest{profile: in.Profile})
	if err != nil {
		return nil, err
	}
	v, err := g.memberView(ctx, m, c.who)
	if err != nil {
		return nil, err
	}
	return &SpawnOutput{Member: &v}, nil
}

// Bounds of bridge_list's pages.
const (
	defaultListLimit = 100
	maxListLimit     = 500
)

// bridgeList lists the members of the caller's namespace, compactly, with
// filters and pages.
func (g *Gateway) bridgeList(ctx context.Context, c *call, in ListInput) (*ListOutput, error) {
	if err := g.allow(ctx, c.who, identity.GetMembers); err != nil {
		return nil, err
	}
	limit := defaultListLimit
	if in.Limit != nil {
		if *in.Limit < 1 || *in.Limit > maxListLimit {
			return nil, toolerr.New(toolerr.InvalidArgument, "limit must be from 1 to %d, got %d", maxListLimit, *in.Limit)
		}
		limit = *in.Limit
	}
	members, err := g.members(ctx, c.who.Namespace)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(members, func(a, b fleetv1alpha1.Member) int { return strings.Compare(a.Name, b.Name) })
	out := &ListOutput{}
	var page []*fleetv1alpha1.Member
	var sums []MemberSummary
	for i := range members {
		m := &members[i]
		if !strings.HasPrefix(m.Name, in.NamePrefix) || (in.Team != "" && m.Spec.Team != in.Team) || (in.Profile != "" && m.Spec.Profile != in.Profile) ||
			(in.Status != "" && !strings.EqualFold(summaryStatus(m), in.Status)) {
			continue
		}
		out.Total++
		if m.Name <= in.Continue {
			continue
		}
		if len(page) == limit {
			if out.Continue == "" {
				out.Continue = page[limit-1].Name
			}
			continue
		}
		// Only the members on the page need their queues.
		q, err := g.queueOf(ctx, m.Namespace, m.Name)
		if err != nil {
			return nil, err
		}
		page, sums = append(page, m), append(sums, memberSummary(m, c.who, q))
	}
	out.Groups = groupSummaries(page, sums)
	return out, nil
}

// bridgeStop deletes a member the caller may stop.
func (g *Gateway) bridgeStop(ctx context.Context, c *call, in StopInput) (*StopOutput, error) {
	s, err := g.stop(ctx, c.who, in.PaneID)
	if err != nil {
		return nil, err
	}
	return &StopOutput{Stopped: s.name, AlreadyGone: s.alreadyGone}, nil
}

// bridgeProfiles lists the Profiles of the caller's namespace.
func (g *Gateway) bridgeProfiles(ctx context.Context, c *call, _ ProfilesInput) (*ProfilesOutput, error) {
	views, err := g.profileViews(ctx, c.who.Namespace)
	if err != nil {
		return nil, err
	}
	return &ProfilesOutput{Profiles: views}, nil
}

// profileViews shows the Profiles of a namespace, by name.
func (g *Gateway) profileViews(ctx context.Context, namespace string) ([]ProfileView, error) {
	ps, err := g.profiles(ctx, namespace)
	if err != nil {
		return nil, err
	}
	def := defaultProfile(ps)
	views := make([]ProfileView, 0, len(ps))
	for i := range ps {
		p := &ps[i]
		views = append(views, ProfileView{
			Name: p.Name, Description: p.Spec.Description, Agent: string(p.Spec.Agent), Command: p.Spec.Command,
			Model: p.Spec.Model, Effort: string(p.Spec.Effort), Billing: string(fleetv1alpha1.BillingOf(p)), Default: def != nil && def.Name == p.Name,
		})
	}
	slices.SortFunc(views, func(a, b ProfileView) int { return strings.Compare(a.Name, b.Name) })
	return views, nil
}

// bridgeWhoami reports the caller's identity as the gateway resolved it.
func (g *Gateway) bridgeWhoami(ctx context.Context, c *call, _ WhoamiInput) (*WhoamiOutput, error) {
	p := c.who
	out := &WhoamiOutput{Kind: string(p.Kind), Name: p.Name, Namespace: p.Namespace, Primary: p.IsPrimary(), Namespaces: map[string]bool{}}
	for _, ns := range []ToolNamespace{ToolNamespaceBridge, ToolNamespaceTeam, ToolNamespaceProcess} {
		out.Namespaces[string(ns)] = g.enabled(ns)
	}
	if p.Member != nil {
		// The member as it is now, not as it was when the token was checked.
		var m fleetv1alpha1.Member
		if err := g.cache.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, &m); err != nil {
			return nil, fmt.Errorf("reading member %s: %w", p.Name, err)
		}
		v, err := g.memberView(ctx, &m, p)
		if err != nil {
			return nil, err
		}
		out.Member, out.Team, out.Role = &v, v.Team, v.Role
	}
	return out, nil
}
