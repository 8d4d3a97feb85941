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

// TeamPolicy says who may manage a team with team_manage.
type TeamPolicy struct {
	// MembersMayManage lets non-lead members add and remove members of their
	// own team. Leads and primaries always may.
	MembersMayManage bool
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
	Name    string `json:"name,omitempty" jsonschema:"for add: the new member's name (optional); for remove: the member to remove"`
	Team    string `json:"team,omitempty" jsonschema:"for primaries: the team"`
}

// TeamManageOutput is the result of team_manage.
type TeamManageOutput struct {
	failure
	Action string      `json:"action,omitempty" jsonschema:"add or remove"`
	Member *MemberView `json:"member,omitempty" jsonschema:"the member added or removed"`
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
		return "", errorf(CodeInvalidArgument, "you are not in a team")
	case requested != "" && requested != mine:
		return "", errorf(CodeForbidden, "you can only act in your own team %s", mine)
	}
	return mine, nil
}

// mayManage decides whether p may add or remove members of team.
func mayManage(p *Principal, team string, policy TeamPolicy) *ToolError {
	if p.isPrimary() || p.isLead() || (policy.MembersMayManage && p.team() == team) {
		return nil
	}
	return errorf(CodeForbidden, "only the lead of team %s may add or remove members here", team)
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
			if !isCaller(&ms[i], c.who) && ms[i].DeletionTimestamp == nil {
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

// teamManage adds a member to a team from a Profile or removes one.
func (g *Gateway) teamManage(ctx context.Context, c *call, in TeamManageInput) (*TeamManageOutput, error) {
	team, terr := teamOf(c.who, in.Team)
	if terr != nil {
		return nil, terr
	}
	if terr := mayManage(c.who, team, g.opts.TeamPolicy); terr != nil {
		return nil, terr
	}
	switch in.Action {
	case "add":
		m, err := g.spawn(ctx, c.who, spawnRequest{profile: in.Profile, name: in.Name, team: team, role: fleetv1alpha1.RoleMember})
		if err != nil {
			return nil, err
		}
		v := memberView(m, c.who, queue{})
		return &TeamManageOutput{Action: in.Action, Member: &v}, nil
	case "remove":
		if in.Name == "" {
			return nil, errorf(CodeInvalidArgument, "name is required to remove a member")
		}
		ms, err := g.teamMembers(ctx, c.who, team)
		if err != nil {
			return nil, err
		}
		m, terr := findMember(ms, in.Name)
		if terr != nil {
			return nil, errorf(terr.Code, "in team %s: %s", team, terr.Message)
		}
		switch {
		case isCaller(m, c.who):
			return nil, errorf(CodeInvalidArgument, "you cannot remove yourself")
		case m.Spec.Role == fleetv1alpha1.RoleLead && !c.who.isPrimary() && !c.who.isLead():
			return nil, errorf(CodeForbidden, "only a lead or a primary may remove the lead %s", m.Name)
		}
		if err := g.allow(ctx, c.who, DeleteMembers); err != nil {
			return nil, err
		}
		if err := g.deleteMember(ctx, m); err != nil {
			return nil, err
		}
		v := memberView(m, c.who, queue{})
		return &TeamManageOutput{Action: in.Action, Member: &v}, nil
	}
	return nil, errorf(CodeInvalidArgument, "action must be add or remove, not %q", in.Action)
}
