package gateway

import (
	"context"
	"fmt"
	"slices"
	"strings"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
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

// TeamStatusInput is the input of team_status.
type TeamStatusInput struct {
	Team string `json:"team,omitempty" jsonschema:"the team; members may omit it (their own team), primaries must pass it"`
}

// TeamStatusOutput is the result of team_status.
type TeamStatusOutput struct {
	failure
	Team    string       `json:"team,omitempty" jsonschema:"the team"`
	Members []MemberView `json:"members" jsonschema:"members with their live status"`
}

// TeamMessageInput is the input of team_message.
type TeamMessageInput struct {
	Recipient string `json:"recipient" jsonschema:"a team member's name (or id), or \"broadcast\" for every other member"`
	Content   string `json:"content" jsonschema:"the message"`
	Team      string `json:"team,omitempty" jsonschema:"for primaries: the team"`
	// IncludeSelf makes a broadcast reach its sender too.
	IncludeSelf bool `json:"includeSelf,omitempty" jsonschema:"for broadcast: send to yourself as well; by default a broadcast goes to every member but you"`
}

// TeamMessageOutput is the result of team_message.
type TeamMessageOutput struct {
	failure
	DispatchIDs []string `json:"dispatchIds" jsonschema:"the ids of the messages sent, one per recipient"`
	Recipients  []string `json:"recipients" jsonschema:"the members the messages went to"`
}

// TeamManageInput is the input of team_manage.
type TeamManageInput struct {
	Action  string `json:"action" jsonschema:"add or remove"`
	Profile string `json:"profile,omitempty" jsonschema:"for add: the profile; default: the namespace's default profile"`
	Name    string `json:"name,omitempty" jsonschema:"for add: the new member's name (optional); for remove: a member to remove"`
	// RemoveAgentIDs names several members to remove at once.
	RemoveAgentIDs []string `json:"removeAgentIds,omitempty" jsonschema:"for remove: the members to remove (name, agent session id, terminal id or pane id); all or none are removed"`
	Team           string   `json:"team,omitempty" jsonschema:"for primaries: the team"`
}

// TeamManageOutput is the result of team_manage.
type TeamManageOutput struct {
	failure
	Action string      `json:"action,omitempty" jsonschema:"add or remove"`
	Member *MemberView `json:"member,omitempty" jsonschema:"the member added, or the first one removed"`
	// Removed names every member removed.
	Removed []string `json:"removed" jsonschema:"for remove: the names of the members removed"`
}

// teamOf decides which team a team tool acts on: a member's own, or the one
// a primary names.
func teamOf(p *Principal, requested string) (string, *ToolError) {
	if p.isPrimary() {
		if requested == "" {
			return "", errorf(CodeInvalidArgument, "team is required for callers that are not fleet members")
		}
		return requested, nil
	}
	mine := p.team()
	switch {
	case mine == "":
		return "", errorf(CodeNotTeamMember, "you are not a member of any team; the team tools act in your own team")
	case requested != "" && requested != mine:
		return "", errorf(CodeNotTeamMember, "you are not a member of team %s; you act in your own team %s", requested, mine)
	}
	return mine, nil
}

// mayManage decides whether p may take action (add or remove) on members
// of team, p's own team when p is a member.
func mayManage(p *Principal, team, action string, policy TeamPolicy) *ToolError {
	if p.isPrimary() || p.isLead() {
		return nil
	}
	switch {
	case action == "add" && policy.NonLeadCanAdd, action == "remove" && policy.NonLeadCanRemove:
		return nil
	}
	verb := map[string]string{"add": "add members to", "remove": "remove members from"}[action]
	return errorf(CodeForbidden, "only the lead of team %s may %s it on this gateway (GET /v1/mcp/capabilities shows teamManagePermissions)", team, verb)
}

func (g *Gateway) teamMembers(ctx context.Context, p *Principal, team string) ([]fleetv1alpha1.Member, error) {
	all, err := g.members(ctx, p.Namespace)
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
func (g *Gateway) teamStatus(ctx context.Context, c *call, in TeamStatusInput) (*TeamStatusOutput, error) {
	if err := g.allow(ctx, c.who, GetMembers); err != nil {
		return nil, err
	}
	team, terr := teamOf(c.who, in.Team)
	if terr != nil {
		return nil, terr
	}
	ms, err := g.teamMembers(ctx, c.who, team)
	if err != nil {
		return nil, err
	}
	views, err := g.memberViews(ctx, ms, c.who, nil)
	if err != nil {
		return nil, err
	}
	return &TeamStatusOutput{Team: team, Members: views}, nil
}

// teamMessage sends detached Delegations to one team member or to all
// others.
func (g *Gateway) teamMessage(ctx context.Context, c *call, in TeamMessageInput) (*TeamMessageOutput, error) {
	team, terr := teamOf(c.who, in.Team)
	if terr != nil {
		return nil, terr
	}
	if terr := checkContent("content", in.Content); terr != nil {
		return nil, terr
	}
	if in.Recipient == "" {
		return nil, errorf(CodeInvalidArgument, "recipient must be a member of team %s or %q", team, broadcast)
	}
	ms, err := g.teamMembers(ctx, c.who, team)
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
			return nil, errorf(CodeNotFound, "team %s has no other members to broadcast to", team)
		}
	} else {
		m, terr := findMember(ms, in.Recipient)
		if terr != nil {
			return nil, errorf(terr.Code, "in team %s: %s", team, terr.Message)
		}
		if isCaller(m, c.who) {
			return nil, errorf(CodeInvalidArgument, "you cannot message yourself")
		}
		to = append(to, m)
	}
	slices.SortFunc(to, func(a, b *fleetv1alpha1.Member) int { return strings.Compare(a.Name, b.Name) })
	out := &TeamMessageOutput{DispatchIDs: []string{}, Recipients: []string{}}
	for _, m := range to {
		d := g.newDelegation(c.who, m, in.Content, false, fleetv1alpha1.DefaultTimeoutSeconds)
		if err := g.client.Create(ctx, d); err != nil {
			return nil, fmt.Errorf("messaging %s (after %d of %d were sent): %w", m.Name, len(out.DispatchIDs), len(to), err)
		}
		out.DispatchIDs = append(out.DispatchIDs, d.Name)
		out.Recipients = append(out.Recipients, m.Name)
	}
	return out, nil
}

// teamManage adds a member to a team from a Profile, or removes members.
func (g *Gateway) teamManage(ctx context.Context, c *call, in TeamManageInput) (*TeamManageOutput, error) {
	team, terr := teamOf(c.who, in.Team)
	if terr != nil {
		return nil, terr
	}
	if in.Action != "add" && in.Action != "remove" {
		return nil, errorf(CodeInvalidArgument, "action must be add or remove, not %q", in.Action)
	}
	if terr := mayManage(c.who, team, in.Action, g.opts.TeamPolicy); terr != nil {
		return nil, terr
	}
	if in.Action == "add" {
		if len(in.RemoveAgentIDs) > 0 {
			return nil, errorf(CodeInvalidArgument, "removeAgentIds is for action remove")
		}
		m, err := g.spawn(ctx, c.who, spawnRequest{profile: in.Profile, name: in.Name, team: team, role: fleetv1alpha1.RoleMember})
		if err != nil {
			return nil, err
		}
		v := memberView(m, c.who, queue{})
		return &TeamManageOutput{Action: in.Action, Member: &v, Removed: []string{}}, nil
	}
	ids := in.RemoveAgentIDs
	if in.Name != "" {
		ids = append([]string{in.Name}, ids...)
	}
	if len(ids) == 0 {
		return nil, errorf(CodeInvalidArgument, "removeAgentIds (or name) must name the members to remove")
	}
	ms, err := g.teamMembers(ctx, c.who, team)
	if err != nil {
		return nil, err
	}
	// Every id is checked before any member is removed: a refused remove
	// removes nothing.
	var remove []*fleetv1alpha1.Member
	for _, id := range ids {
		m, terr := findMember(ms, id)
		if terr != nil {
			return nil, errorf(terr.Code, "in team %s: %s; nothing was removed", team, terr.Message)
		}
		switch {
		case isCaller(m, c.who):
			return nil, errorf(CodeInvalidArgument, "you cannot remove yourself; nothing was removed")
		case m.Spec.Role == fleetv1alpha1.RoleLead && !c.who.isPrimary() && !c.who.isLead():
			return nil, errorf(CodeForbidden, "only a lead or a primary may remove the lead %s; nothing was removed", m.Name)
		}
		if !slices.Contains(remove, m) {
			remove = append(remove, m)
		}
	}
	if err := g.allow(ctx, c.who, DeleteMembers); err != nil {
		return nil, err
	}
	out := &TeamManageOutput{Action: in.Action, Removed: []string{}}
	for _, m := range remove {
		if err := g.deleteMember(ctx, m); err != nil {
			return nil, fmt.Errorf("%w (removed before it: %s)", err, strings.Join(out.Removed, ", "))
		}
		out.Removed = append(out.Removed, m.Name)
	}
	v := memberView(remove[0], c.who, queue{})
	out.Member = &v
	return out, nil
}
