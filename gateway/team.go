package gateway

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/toolerr"
)

// broadcast is the team_message recipient that means every other member.
const broadcast = "broadcast"

// TeamPolicy says what team members that are not its lead may do with
// team_manage in their own team. Leads and primaries may always add and
// remove.
type TeamPolicy struct {
	// NonLeadCanAdd lets them add members.
	NonLeadCanAdd bool
	// NonLeadCanRemove lets them remove members (never the lead).
	NonLeadCanRemove bool
}

// teamOf decides which team a team tool acts on: a member's own, or the one
// a primary names.
func teamOf(p *identity.Principal, requested string) (string, *toolerr.Error) {
	if p.IsPrimary() {
		if requested == "" {
			return "", toolerr.New(toolerr.InvalidArgument, "team is required for callers that are not fleet members")
		}
		return requested, nil
	}
	mine := p.Team()
	switch {
	case mine == "":
		return "", toolerr.New(toolerr.NotTeamMember, "you are not a member of any team; the team tools act in your own team")
	case requested != "" && requested != mine:
		return "", toolerr.New(toolerr.NotTeamMember, "you are not a member of team %s; you act in your own team %s", requested, mine)
	}
	return mine, nil
}

// mayManage decides whether p may take action (add or remove) on members
// of team, p's own team when p is a member.
func mayManage(p *identity.Principal, team, action string, policy TeamPolicy) *toolerr.Error {
	if p.IsPrimary() || p.IsLead() {
		return nil
	}
	switch {
	case action == "add" && policy.NonLeadCanAdd, action == "remove" && policy.NonLeadCanRemove:
		return nil
	}
	verb := map[string]string{"add": "add members to", "remove": "remove members from"}[action]
	return toolerr.New(toolerr.Forbidden, "only the lead of team %s may %s it on this gateway (GET /v1/mcp/capabilities shows teamManagePermissions)", team, verb)
}

func (s *service) teamMembers(ctx context.Context, p *identity.Principal, team string) ([]fleetv1alpha1.Member, error) {
	all, err := s.members(ctx, p.Namespace)
	if err != nil {
		return nil, err
	}
	var in []fleetv1alpha1.Member
	for _, m := range all {
		if m.Spec.Team == team {
			in = append(in, m)
		}
	}
	return in, nil
}

// teamStatus shows the members of a team.
func (s *service) teamStatus(ctx context.Context, c *call, in TeamStatusInput) (*TeamStatusOutput, error) {
	if err := s.allow(ctx, c.who, identity.GetMembers); err != nil {
		return nil, err
	}
	team, terr := teamOf(c.who, in.Team)
	if terr != nil {
		return nil, terr
	}
	ms, err := s.teamMembers(ctx, c.who, team)
	if err != nil {
		return nil, err
	}
	views, err := s.memberViews(ctx, ms, c.who, nil)
	if err != nil {
		return nil, err
	}
	return &TeamStatusOutput{Team: team, Members: views}, nil
}

// teamMessage sends detached Delegations to one team member or to all
// others.
func (s *service) teamMessage(ctx context.Context, c *call, in TeamMessageInput) (*TeamMessageOutput, error) {
	team, terr := teamOf(c.who, in.Team)
	if terr != nil {
		return nil, terr
	}
	if terr := checkContent("content", in.Content); terr != nil {
		return nil, terr
	}
	if in.Recipient == "" {
		return nil, toolerr.New(toolerr.InvalidArgument, "recipient must be a member of team %s or %q", team, broadcast)
	}
	ms, err := s.teamMembers(ctx, c.who, team)
	if err != nil {
		return nil, err
	}
	var to []*fleetv1alpha1.Member
	if in.Recipient == broadcast {
		for i := range ms {
			if (in.IncludeSelf || !isCaller(&ms[i], c.who)) && ms[i].DeletionTimestamp == nil {
				to = append(to, &ms[i])
			}
		}
		if len(to) == 0 {
			return nil, toolerr.New(toolerr.NotFound, "team %s has no other members to broadcast to", team)
		}
	} else {
		m, terr := findMemberFor(ms, in.Recipient, s.describerFor(ctx, c.who))
		if terr != nil {
			return nil, toolerr.New(terr.Code, "in team %s: %s", team, terr.Message)
		}
		if isCaller(m, c.who) {
			return nil, toolerr.New(toolerr.InvalidArgument, "you cannot message yourself")
		}
		to = append(to, m)
	}
	slices.SortFunc(to, func(a, b *fleetv1alpha1.Member) int { return strings.Compare(a.Name, b.Name) })
	imgs, err := s.readImages(ctx, c, in.ImagePaths, in.Images, to)
	if err != nil {
		return nil, err
	}
	ds := make([]*fleetv1alpha1.Delegation, len(to))
	for i, m := range to {
		ds[i] = s.newDelegation(c.who, m, in.Content, false, fleetv1alpha1.DefaultTimeoutSeconds)
	}
	n, err := s.createWithImages(ctx, c.who, ds, imgs, to)
	if err != nil {
		if n == 0 {
			return nil, err
		}
		return nil, fmt.Errorf("messaging %s (after %d of %d were sent): %w", to[n].Name, n, len(to), err)
	}
	out := &TeamMessageOutput{DispatchIDs: []string{}, Recipients: []string{}}
	for i, d := range ds {
		out.DispatchIDs = append(out.DispatchIDs, d.Name)
		out.Recipients = append(out.Recipients, to[i].Name)
	}
	return out, nil
}

// readImages reads the images a caller sends to members to, and refuses
// them when one of to cannot take images; nil when there are none.
func (s *service) readImages(ctx context.Context, c *call, paths []string, inline []ImageInput, to []*fleetv1alpha1.Member) ([]messageImage, error) {
	if len(paths)+len(inline) == 0 {
		return nil, nil
	}
	profiles, err := s.profiles(ctx, c.who.Namespace)
	if err != nil {
		return nil, err
	}
	if err := refuseImageless(to, profiles); err != nil {
		return nil, err
	}
	return s.messageImages(ctx, c, paths, inline)
}

// createWithImages creates ds, one call's messages from p to members to,
// carrying imgs: admitted first, then the images' Secret, then the
// Delegations, which then own it. It returns how many were created; a
// call that created none leaves no Secret.
func (s *service) createWithImages(ctx context.Context, p *identity.Principal, ds []*fleetv1alpha1.Delegation, imgs []messageImage, to []*fleetv1alpha1.Member) (int, error) {
	if len(imgs) == 0 {
		return s.createDelegations(ctx, p, ds, nil)
	}
	spec, secret := messageImagesSecret(p.Namespace, imgs, to)
	for _, d := range ds {
		d.Spec.Images = spec
	}
	n, err := s.createDelegations(ctx, p, ds, func() error { return s.storeImages(ctx, spec, secret) })
	s.settleImages(ctx, secret, ds[:n])
	return n, err
}

// teamManage adds a member to a team from a Profile, or removes members.
func (s *service) teamManage(ctx context.Context, c *call, in TeamManageInput) (*TeamManageOutput, error) {
	team, terr := teamOf(c.who, in.Team)
	if terr != nil {
		return nil, terr
	}
	if in.Action != "add" && in.Action != "remove" {
		return nil, toolerr.New(toolerr.InvalidArgument, "action must be add or remove, not %q", in.Action)
	}
	if terr := mayManage(c.who, team, in.Action, s.opts.TeamPolicy); terr != nil {
		return nil, terr
	}
	if in.Action == "add" {
		if len(in.RemoveAgentIDs) > 0 {
			return nil, toolerr.New(toolerr.InvalidArgument, "removeAgentIds is for action remove")
		}
		return s.teamAdd(ctx, c, in, team)
	}
	if in.Message != "" || len(in.ImagePaths)+len(in.Images) > 0 {
		return nil, toolerr.New(toolerr.InvalidArgument, "message, imagePaths and images are for action add")
	}
	ids := in.RemoveAgentIDs
	if in.Name != "" {
		ids = append([]string{in.Name}, ids...)
	}
	if len(ids) == 0 {
		return nil, toolerr.New(toolerr.InvalidArgument, "removeAgentIds (or name) must name the members to remove")
	}
	ms, err := s.teamMembers(ctx, c.who, team)
	if err != nil {
		return nil, err
	}
	// Every id is checked before any member is removed: a refused remove
	// removes nothing.
	var remove []*fleetv1alpha1.Member
	for _, id := range ids {
		m, terr := findMember(ms, id)
		if terr != nil {
			return nil, toolerr.New(terr.Code, "in team %s: %s; nothing was removed", team, terr.Message)
		}
		switch {
		case isCaller(m, c.who):
			return nil, toolerr.New(toolerr.InvalidArgument, "you cannot remove yourself; nothing was removed")
		case m.Spec.Role == fleetv1alpha1.RoleLead && !c.who.IsPrimary() && !c.who.IsLead():
			return nil, toolerr.New(toolerr.Forbidden, "only a lead or a primary may remove the lead %s; nothing was removed", m.Name)
		}
		if !slices.Contains(remove, m) {
			remove = append(remove, m)
		}
	}
	if err := s.allow(ctx, c.who, identity.DeleteMembers); err != nil {
		return nil, err
	}
	out := &TeamManageOutput{Action: in.Action, Removed: []string{}}
	for _, m := range remove {
		if err := s.deleteMember(ctx, m); err != nil {
			return nil, fmt.Errorf("%w (removed before it: %s)", err, strings.Join(out.Removed, ", "))
		}
		out.Removed = append(out.Removed, m.Name)
	}
	v := memberView(remove[0], c.who, queue{})
	out.Member = &v
	return out, nil
}

// teamAdd adds a member to a team from a Profile and, with a message,
// sends it that message (and its images) to start with: a detached
// Delegation, typed in once its agent is ready.
func (s *service) teamAdd(ctx context.Context, c *call, in TeamManageInput, team string) (*TeamManageOutput, error) {
	hasImages := len(in.ImagePaths)+len(in.Images) > 0
	switch {
	case in.Message == "" && hasImages:
		return nil, toolerr.New(toolerr.InvalidArgument, "imagePaths and images go with message, the new member's first message")
	case in.Message != "":
		if terr := checkContent("message", in.Message); terr != nil {
			return nil, terr
		}
	}
	var imgs []messageImage
	if hasImages {
		// Refused before the member is added: nothing is started or sent.
		profiles, err := s.profiles(ctx, c.who.Namespace)
		if err != nil {
			return nil, err
		}
		profile := in.Profile
		if def := defaultProfile(profiles); profile == "" && def != nil {
			profile = def.Name
		}
		if slices.ContainsFunc(profiles, func(p fleetv1alpha1.Profile) bool { return p.Name == profile }) {
			joining := &fleetv1alpha1.Member{Spec: fleetv1alpha1.MemberSpec{Profile: profile}}
			joining.Name = cmp.Or(in.Name, "of profile "+profile)
			if err := refuseImageless([]*fleetv1alpha1.Member{joining}, profiles); err != nil {
				return nil, err
			}
		}
		if imgs, err = s.messageImages(ctx, c, in.ImagePaths, in.Images); err != nil {
			return nil, err
		}
	}
	m, err := s.spawnMember(ctx, c.who, newMember{profile: in.Profile, name: in.Name, team: team, role: fleetv1alpha1.RoleMember})
	if err != nil {
		return nil, err
	}
	v := memberView(m, c.who, queue{})
	out := &TeamManageOutput{Action: in.Action, Member: &v, Removed: []string{}}
	if in.Message == "" {
		return out, nil
	}
	d := s.newDelegation(c.who, m, in.Message, false, fleetv1alpha1.DefaultTimeoutSeconds)
	if _, err := s.createWithImages(ctx, c.who, []*fleetv1alpha1.Delegation{d}, imgs, []*fleetv1alpha1.Member{m}); err != nil {
		return nil, fmt.Errorf("member %s was added, but not its first message: %w", m.Name, err)
	}
	out.DispatchID = d.Name
	return out, nil
}
