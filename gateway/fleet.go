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

// status shows the full record of one member, or of the calling
// member itself, and everything pending for the caller: its messages in
// progress, outcomes it has not acknowledged, questions open to it.
func (s *service) status(ctx context.Context, c *call, in StatusInput) (*StatusOutput, error) {
	if err := s.allow(ctx, c.who, identity.GetMembers); err != nil {
		return nil, err
	}
	out := &StatusOutput{Members: []MemberView{}, Pending: []DelegationView{}}
	id := in.SessionID
	if id == "" && c.who.Member != nil {
		id = c.who.Name
	}
	if id != "" {
		members, err := s.members(ctx, c.who.Namespace)
		if err != nil {
			return nil, err
		}
		m, terr := findMember(members, id)
		if terr != nil {
			return nil, terr
		}
		v, err := s.memberView(ctx, m, c.who)
		if err != nil {
			return nil, err
		}
		out.Members = []MemberView{v}
	}
	// What bridge_poll would show, and the caller's messages in progress.
	inbox, pending, err := s.inbox(ctx, c.who)
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

// spawn starts a member from a Profile.
func (s *service) spawn(ctx context.Context, c *call, in SpawnInput) (*SpawnOutput, error) {
	m, err := s.spawnMember(ctx, c.who, newMember{profile: in.Profile})
	if err != nil {
		return nil, err
	}
	v, err := s.memberView(ctx, m, c.who)
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

// list lists the members of the caller's namespace, compactly, with
// filters and pages.
func (s *service) list(ctx context.Context, c *call, in ListInput) (*ListOutput, error) {
	if err := s.allow(ctx, c.who, identity.GetMembers); err != nil {
		return nil, err
	}
	limit := defaultListLimit
	if in.Limit != nil {
		if *in.Limit < 1 || *in.Limit > maxListLimit {
			return nil, toolerr.New(toolerr.InvalidArgument, "limit must be from 1 to %d, got %d", maxListLimit, *in.Limit)
		}
		limit = *in.Limit
	}
	members, err := s.members(ctx, c.who.Namespace)
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
		q, err := s.queueOf(ctx, m.Namespace, m.Name)
		if err != nil {
			return nil, err
		}
		page, sums = append(page, m), append(sums, memberSummary(m, c.who, q))
	}
	out.Groups = groupSummaries(page, sums)
	return out, nil
}

// stop deletes a member the caller may stop.
func (s *service) stop(ctx context.Context, c *call, in StopInput) (*StopOutput, error) {
	st, err := s.stopMember(ctx, c.who, in.PaneID)
	if err != nil {
		return nil, err
	}
	return &StopOutput{Stopped: st.name, AlreadyGone: st.alreadyGone}, nil
}

// listProfiles lists the Profiles of the caller's namespace.
func (s *service) listProfiles(ctx context.Context, c *call, _ ProfilesInput) (*ProfilesOutput, error) {
	views, err := s.profileViews(ctx, c.who.Namespace)
	if err != nil {
		return nil, err
	}
	return &ProfilesOutput{Profiles: views}, nil
}

// profileViews shows the Profiles of a namespace, by name.
func (s *service) profileViews(ctx context.Context, namespace string) ([]ProfileView, error) {
	ps, err := s.profiles(ctx, namespace)
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

// whoami reports the caller's identity as the gateway resolved it.
func (s *service) whoami(ctx context.Context, c *call, _ WhoamiInput) (*WhoamiOutput, error) {
	p := c.who
	out := &WhoamiOutput{Kind: string(p.Kind), Name: p.Name, Namespace: p.Namespace, Primary: p.IsPrimary(), Namespaces: map[string]bool{}}
	for _, ns := range []ToolNamespace{ToolNamespaceBridge, ToolNamespaceTeam, ToolNamespaceProcess} {
		out.Namespaces[string(ns)] = s.opts.enabled(ns)
	}
	if p.Member != nil {
		// The member as it is now, not as it was when the token was checked.
		var m fleetv1alpha1.Member
		if err := s.cache.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, &m); err != nil {
			return nil, fmt.Errorf("reading member %s: %w", p.Name, err)
		}
		v, err := s.memberView(ctx, &m, p)
		if err != nil {
			return nil, err
		}
		out.Member, out.Team, out.Role = &v, v.Team, v.Role
	}
	return out, nil
}

// agents lists the members of the caller's namespace with their queues.
func (s *service) agents(ctx context.Context, p *identity.Principal) ([]MemberView, error) {
	if err := s.allow(ctx, p, identity.GetMembers); err != nil {
		return nil, err
	}
	members, err := s.members(ctx, p.Namespace)
	if err != nil {
		return nil, err
	}
	return s.memberViews(ctx, members, p, nil)
}

// capabilities says what is on for the caller p; tools lists a
// namespace's tools.
func (s *service) capabilities(ctx context.Context, p *identity.Principal, tools func(ToolNamespace) []string) (*Capabilities, error) {
	c := &Capabilities{
		SupportedNamespaces:   []ToolNamespace{},
		Tools:                 []string{},
		ProcessEnabled:        s.opts.enabled(ToolNamespaceProcess),
		TeamEnabled:           s.opts.enabled(ToolNamespaceTeam),
		TeamManagePermissions: TeamManagePermissions(s.opts.TeamPolicy),
		TeamModelPresets:      []ProfileView{},
	}
	for _, ns := range []ToolNamespace{ToolNamespaceBridge, ToolNamespaceTeam, ToolNamespaceProcess} {
		nc := NamespaceCapability{Name: ns, Enabled: s.opts.enabled(ns), Tools: []string{}}
		if nc.Enabled {
			nc.Tools = tools(ns)
			c.SupportedNamespaces = append(c.SupportedNamespaces, ns)
			c.Tools = append(c.Tools, nc.Tools...)
		}
		c.Namespaces = append(c.Namespaces, nc)
	}
	if c.TeamEnabled {
		profiles, err := s.profileViews(ctx, p.Namespace)
		if err != nil {
			return nil, err
		}
		c.TeamModelPresets = profiles
	}
	return c, nil
}
