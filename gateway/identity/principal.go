package identity

import (
	authnv1 "k8s.io/api/authentication/v1"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// Principal is a caller as the gateway resolved it from the request's bearer
// token: never from an argument or an unauthenticated header.
type Principal struct {
	// Kind is Member, ServiceAccount or Static.
	Kind fleetv1alpha1.PrincipalKind
	// Name is the member's name, system:serviceaccount:<namespace>:<name>,
	// or the static token's key.
	Name string
	// Namespace is where the principal acts: a member's own namespace, a
	// service account's namespace, or the gateway's namespace for static
	// principals.
	Namespace string
	// Member is the calling Member as the cache held it at authentication,
	// for member principals; nil otherwise.
	Member *fleetv1alpha1.Member

	// user is the Kubernetes user a service account's token stands for,
	// whose RBAC decides what it may do; nil for other principals.
	user *authnv1.UserInfo
}

// API is the principal as a Delegation records it.
func (p *Principal) API() fleetv1alpha1.Principal {
	return fleetv1alpha1.Principal{Kind: p.Kind, Name: p.Name}
}

// Key identifies the principal in indexes and annotations: kind and name,
// which together are unique within a namespace.
func (p *Principal) Key() string { return Key(p.API()) }

// IsPrimary reports whether the principal is not a worker: pods and static
// clients act as primaries and may manage any member of their namespace.
func (p *Principal) IsPrimary() bool { return p.Kind != fleetv1alpha1.PrincipalMember }

// Team is the caller's team, empty for primaries and team-less members.
func (p *Principal) Team() string {
	if p.Member == nil {
		return ""
	}
	return p.Member.Spec.Team
}

// IsLead reports whether the caller is the lead of its team.
func (p *Principal) IsLead() bool {
	return p.Member != nil && p.Member.Spec.Team != "" && p.Member.Spec.Role == fleetv1alpha1.RoleLead
}

// Key is the index value and spawned-by annotation of a principal.
func Key(p fleetv1alpha1.Principal) string { return string(p.Kind) + ":" + p.Name }
