package gateway

import (
	"slices"
	"strings"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/toolerr"
)

// target is where a bridge_send goes: an existing member, or a member to
// spawn from a Profile because none is there.
type target struct {
	member string
	spawn  bool
	// profile is the Profile to spawn from; empty means the default one.
	profile string
}

// resolveTarget decides which member a bridge_send addresses. A sessionID
// names a member by name, agent session id, terminal id or pane id, or else
// a Profile: its one live member, or a new one when it has none. Without a
// sessionID, the sole member other than the caller is the target; with
// none, a member is to be spawned from the default Profile; with several,
// the caller has to choose.
//
// describe lists members in an error message; it says nothing to a caller
// who may not see members.
func resolveTarget(members []fleetv1alpha1.Member, profiles []string, sessionID string, caller *identity.Principal, describe memberDescriber) (target, *toolerr.Error) {
	if sessionID != "" {
		m, err := findMemberFor(members, sessionID, describe)
		if err != nil && err.Code == toolerr.NotFound && slices.Contains(profiles, sessionID) {
			return profileTarget(members, sessionID, caller, describe)
		}
		if err != nil {
			return target{}, err
		}
		if isCaller(m, caller) {
			return target{}, toolerr.New(toolerr.InvalidArgument, "sessionId %q is you: a member cannot send to itself", sessionID)
		}
		if m.DeletionTimestamp != nil {
			return target{}, toolerr.New(toolerr.WorkerGone, "member %s is being deleted", m.Name)
		}
		return target{member: m.Name}, nil
	}
	live := liveMembers(members, caller, func(*fleetv1alpha1.Member) bool { return true })
	switch len(live) {
	case 0:
		return target{spawn: true}, nil
	case 1:
		return target{member: live[0].Name}, nil
	}
	if list, shown := describe(live); shown {
		return target{}, toolerr.New(toolerr.InvalidArgument,
			"%d members could take this message: %s; pass sessionId with one of their names", len(live), list)
	}
	return target{}, toolerr.New(toolerr.InvalidArgument, "several members could take this message; pass sessionId with the name of the one you mean")
}

// profileTarget is where a message to a Profile goes: its one live member,
// or a new member of it.
func profileTarget(members []fleetv1alpha1.Member, profile string, caller *identity.Principal, describe memberDescriber) (target, *toolerr.Error) {
	live := liveMembers(members, caller, func(m *fleetv1alpha1.Member) bool { return m.Spec.Profile == profile })
	switch len(live) {
	case 0:
		return target{spawn: true, profile: profile}, nil
	case 1:
		return target{member: live[0].Name}, nil
	}
	if list, shown := describe(live); shown {
		return target{}, toolerr.New(toolerr.InvalidArgument,
			"profile %s has %d members: %s; pass sessionId with one of their names", profile, len(live), list)
	}
	return target{}, toolerr.New(toolerr.InvalidArgument, "profile %s has several members; pass sessionId with the name of the one you mean", profile)
}

// liveMembers are the members keep passes, other than the caller and those
// being deleted.
func liveMembers(members []fleetv1alpha1.Member, caller *identity.Principal, keep func(*fleetv1alpha1.Member) bool) []*fleetv1alpha1.Member {
	var live []*fleetv1alpha1.Member
	for i := range members {
		m := &members[i]
		if isCaller(m, caller) || m.DeletionTimestamp != nil || !keep(m) {
			continue
		}
		live = append(live, m)
	}
	return live
}

// findMember finds the member a sessionId or paneId addresses, for a caller
// who may see members. A name wins over the other ids; an id that several
// members share is ambiguous.
func findMember(members []fleetv1alpha1.Member, id string) (*fleetv1alpha1.Member, *toolerr.Error) {
	return findMemberFor(members, id, showMembers)
}

// findMemberFor is findMember, its errors listing members as describe
// does: not at all, for a caller who may not see them.
func findMemberFor(members []fleetv1alpha1.Member, id string, describe memberDescriber) (*fleetv1alpha1.Member, *toolerr.Error) {
	var byID []*fleetv1alpha1.Member
	for i := range members {
		m := &members[i]
		if m.Name == id {
			return m, nil
		}
		s := m.Status
		if slices.Contains([]string{s.AgentSessionID, s.TerminalID, s.PaneID}, id) {
			byID = append(byID, m)
		}
	}
	switch len(byID) {
	case 1:
		return byID[0], nil
	case 0:
		live := make([]*fleetv1alpha1.Member, 0, len(members))
		for i := range members {
			live = append(live, &members[i])
		}
		switch list, shown := describe(live); {
		case shown && len(live) == 0:
			return nil, toolerr.New(toolerr.NotFound, "no member %q: this namespace has no members", id)
		case shown:
			return nil, toolerr.New(toolerr.NotFound, "no member with name, agent session id, terminal id or pane id %q; members: %s", id, list)
		}
		return nil, toolerr.New(toolerr.NotFound, "no member with name, agent session id, terminal id or pane id %q that you may address", id)
	}
	if list, shown := describe(byID); shown {
		return nil, toolerr.New(toolerr.InvalidArgument, "%q is ambiguous: it is an id of %s; address the member by name", id, list)
	}
	return nil, toolerr.New(toolerr.InvalidArgument, "%q is ambiguous: it is an id of several members; address the member by name", id)
}

// memberDescriber lists members for an error message; shown is false for a
// caller who may not see them, and then the message names none.
type memberDescriber func([]*fleetv1alpha1.Member) (list string, shown bool)

// showMembers describes members to a caller who may see them.
func showMembers(ms []*fleetv1alpha1.Member) (string, bool) { return describeMembers(ms), true }

// isCaller reports whether m is the calling member itself.
func isCaller(m *fleetv1alpha1.Member, caller *identity.Principal) bool {
	return caller != nil && caller.Kind == fleetv1alpha1.PrincipalMember && caller.Name == m.Name
}

// describeMembers lists members with their status for an error message,
// so a model can pick one without another call.
func describeMembers(ms []*fleetv1alpha1.Member) string {
	parts := make([]string, 0, len(ms))
	for _, m := range ms {
		s := m.Name
		if st := m.Status.AgentStatus; st != "" {
			s += " (" + string(st) + ")"
		}
		parts = append(parts, s)
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// defaultProfile is the Profile bridge_send auto-spawns from: the oldest
// marked default, ties broken by name so every replica picks the same one.
func defaultProfile(profiles []fleetv1alpha1.Profile) *fleetv1alpha1.Profile {
	var best *fleetv1alpha1.Profile
	for i := range profiles {
		p := &profiles[i]
		if !p.Spec.Default || p.DeletionTimestamp != nil {
			continue
		}
		if best == nil || p.CreationTimestamp.Before(&best.CreationTimestamp) ||
			(p.CreationTimestamp.Equal(&best.CreationTimestamp) && p.Name < best.Name) {
			best = p
		}
	}
	return best
}

// checkSpawnBoundary decides whether caller may start a worker from profile to
// without crossing the subscription boundary. Primaries have no billing mode
// of their own. A member's mode is its Profile's; an inline member cannot
// carry an API endpoint, so it runs on a subscription. from is the caller's
// Profile, nil when the caller is inline or its Profile is gone.
func checkSpawnBoundary(caller *identity.Principal, from, to *fleetv1alpha1.Profile) *toolerr.Error {
	if caller.IsPrimary() || caller.Member == nil {
		return nil
	}
	if caller.Member.Spec.Profile != "" && from == nil {
		return toolerr.New(toolerr.SubscriptionBoundary, "your profile %s no longer exists, so your billing mode is unknown; a member may only spawn workers with its own billing mode", caller.Member.Spec.Profile)
	}
	// An inline member (from nil) runs on a subscription.
	mine := fleetv1alpha1.BillingOf(from)
	if theirs := fleetv1alpha1.BillingOf(to); theirs != mine {
		return toolerr.New(toolerr.SubscriptionBoundary, "profile %s bills by %s and you run on %s; a member may only spawn workers with its own billing mode", to.Name, theirs, mine)
	}
	return nil
}

// mayStop decides whether caller may stop member m: its spawner, a lead of
// its team, or any primary.
func mayStop(caller *identity.Principal, m *fleetv1alpha1.Member) *toolerr.Error {
	switch {
	case caller.IsPrimary():
		return nil
	case isCaller(m, caller):
		return toolerr.New(toolerr.Forbidden, "a member cannot stop itself")
	case m.Annotations[fleetv1alpha1.AnnotationSpawnedBy] == caller.Key():
		return nil
	case caller.IsLead() && caller.Team() == m.Spec.Team:
		return nil
	}
	return toolerr.New(toolerr.Forbidden, "member %s was not spawned by you and you do not lead its team", m.Name)
}
