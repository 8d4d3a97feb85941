package gateway

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/identity"
	"github.com/fleetd/fleetd/gateway/toolerr"
)

// newMember says what member to start.
type newMember struct {
	// profile names the Profile; empty means the default Profile.
	profile string
	// name is the member's name; empty means a generated one.
	name string
	// team and role place the member in a team.
	team string
	role fleetv1alpha1.Role
}

// spawn creates a Member from a Profile, on the caller's behalf and within
// its billing mode. The Member controller starts its pane.
func (s *service) spawnMember(ctx context.Context, p *identity.Principal, r newMember) (*fleetv1alpha1.Member, error) {
	if err := s.allow(ctx, p, identity.CreateMembers); err != nil {
		return nil, err
	}
	profiles, err := s.profiles(ctx, p.Namespace)
	if err != nil {
		return nil, err
	}
	var to *fleetv1alpha1.Profile
	if r.profile == "" {
		if to = defaultProfile(profiles); to == nil {
			return nil, toolerr.New(toolerr.NotFound, "no profile given and namespace %s has no default profile (spec.default: true); bridge_profiles lists the profiles", p.Namespace)
		}
	} else {
		i := slices.IndexFunc(profiles, func(pr fleetv1alpha1.Profile) bool { return pr.Name == r.profile })
		if i < 0 {
			names := make([]string, 0, len(profiles))
			for _, pr := range profiles {
				names = append(names, pr.Name)
			}
			slices.Sort(names)
			return nil, toolerr.New(toolerr.NotFound, "no profile %q in namespace %s; profiles: %s", r.profile, p.Namespace, strings.Join(names, ", "))
		}
		to = &profiles[i]
	}
	var from *fleetv1alpha1.Profile
	if p.Member != nil && p.Member.Spec.Profile != "" {
		if i := slices.IndexFunc(profiles, func(pr fleetv1alpha1.Profile) bool { return pr.Name == p.Member.Spec.Profile }); i >= 0 {
			from = &profiles[i]
		}
	}
	if terr := checkSpawnBoundary(p, from, to); terr != nil {
		return nil, terr
	}
	// The count and the create are one step: a spawn counts the members
	// the last one created (roomToSpawn reads the API server), so no two
	// spawns in one namespace pass the bound together.
	defer s.spawnLocks.lock(p.Namespace)()
	if err := s.roomToSpawn(ctx, p); err != nil {
		return nil, err
	}
	m := &fleetv1alpha1.Member{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   p.Namespace,
			Name:        r.name,
			Annotations: map[string]string{fleetv1alpha1.AnnotationSpawnedBy: p.Key()},
		},
		Spec: fleetv1alpha1.MemberSpec{Profile: to.Name, Team: r.team, Role: r.role},
	}
	if m.Name == "" {
		m.GenerateName = memberGenerateName(to.Name)
	}
	if m.Spec.Role == "" {
		m.Spec.Role = fleetv1alpha1.RoleMember
	}
	if err := quotaRefusal(s.client.Create(ctx, m), "new member of profile "+to.Name); err != nil {
		return nil, fmt.Errorf("creating a member from profile %s: %w", to.Name, err)
	}
	return m, nil
}

// stopped says what stop did.
type stopped struct {
	name string
	// alreadyGone is set when no such member exists (any more): stopping is
	// idempotent, so a retried stop succeeds.
	alreadyGone bool
}

// stop deletes the member id addresses, if the caller may stop it. A member
// that is already gone, or already being deleted, is stopped.
func (s *service) stopMember(ctx context.Context, p *identity.Principal, id string) (stopped, error) {
	if id == "" {
		return stopped{}, toolerr.New(toolerr.InvalidArgument, "paneId must name a member: pane id, name, terminal id or agent session id")
	}
	if err := s.allow(ctx, p, identity.DeleteMembers); err != nil {
		return stopped{}, err
	}
	members, err := s.members(ctx, p.Namespace)
	if err != nil {
		return stopped{}, err
	}
	m, terr := findMember(members, id)
	if terr != nil && terr.Code == toolerr.NotFound {
		// The cache may trail a member created a moment ago: ask the API
		// server before calling it gone.
		var live fleetv1alpha1.Member
		err := s.live.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: id}, &live)
		switch {
		case apierrors.IsNotFound(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
			return stopped{name: id, alreadyGone: true}, nil
		case err != nil:
			return stopped{}, fmt.Errorf("reading member %s: %w", id, err)
		}
		m, terr = &live, nil
	}
	if terr != nil {
		return stopped{}, terr
	}
	if terr := mayStop(p, m); terr != nil {
		return stopped{}, terr
	}
	if m.DeletionTimestamp != nil {
		return stopped{name: m.Name, alreadyGone: true}, nil
	}
	return stopped{name: m.Name}, s.deleteMember(ctx, m)
}

// deleteMember deletes a Member; its controller closes the pane.
func (s *service) deleteMember(ctx context.Context, m *fleetv1alpha1.Member) error {
	// The UID precondition keeps a stale cache from deleting a newer
	// Member that reuses the name.
	if err := s.client.Delete(ctx, m, client.Preconditions{UID: &m.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting member %s: %w", m.Name, err)
	}
	return nil
}
