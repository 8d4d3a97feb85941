package identity

import (
	"context"
	"fmt"

	authzv1 "k8s.io/api/authorization/v1"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/gateway/toolerr"
)

// Access is what a call through the gateway amounts to in Kubernetes RBAC:
// a verb on a resource of fleet.fleetd.dev in the caller's namespace. The
// gateway asks RBAC about it (SubjectAccessReview) for every action of a
// service account, so that it never does more than its caller could do
// with kubectl.
type Access struct {
	Verb, Resource string
}

// The accesses the gateway's tools and REST endpoints amount to. Process
// tools have a resource of their own: no Kubernetes object stands behind
// it, and RBAC grants it like any other.
var (
	// CreateDelegations: send a message (bridge_send, team_message), and
	// use the gateway at all.
	CreateDelegations = Access{"create", "delegations"}
	// GetMembers: see members (bridge_list, bridge_status, bridge_read,
	// team_status, GET /agents).
	GetMembers = Access{"get", "members"}
	// GetDelegations: read messages someone else sent (the dashboard's
	// timelines); one's own messages need nothing more.
	GetDelegations = Access{"get", "delegations"}
	// CancelDelegations: withdraw a message someone else sent
	// (bridge_cancel); cancelling one's own needs nothing more.
	CancelDelegations = Access{"cancel", "delegations"}
	// CreateMembers: start members (bridge_spawn, team_manage add, a
	// bridge_send that spawns one, POST /members).
	CreateMembers = Access{"create", "members"}
	// DeleteMembers: stop members (bridge_stop, team_manage remove,
	// DELETE /members/{paneId}).
	DeleteMembers = Access{"delete", "members"}
	// CreateProcesses, GetProcesses and DeleteProcesses: process_run;
	// process_status and process_logs; process_kill.
	CreateProcesses = Access{"create", "processes"}
	GetProcesses    = Access{"get", "processes"}
	DeleteProcesses = Access{"delete", "processes"}
)

func (a Access) String() string {
	return a.Verb + " " + a.Resource + "." + fleetv1alpha1.GroupVersion.Group
}

// Authorize asks RBAC whether a service account may do what acc says in its
// namespace, reusing a recent answer. Other principals keep the gateway's
// own rules: a member acts for itself, a static token is trusted.
func (a *Authenticator) Authorize(ctx context.Context, p *Principal, acc Access) *Failure {
	if p.user == nil {
		return nil
	}
	user := p.user
	key := p.Name + "\x00" + p.Namespace + "\x00" + acc.Verb + "\x00" + acc.Resource
	allowed, ok := a.access.get(key)
	if !ok {
		_, ok = a.denied.get(key)
	}
	if !ok {
		extra := make(map[string]authzv1.ExtraValue, len(user.Extra))
		for k, v := range user.Extra {
			extra[k] = authzv1.ExtraValue(v)
		}
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User:   user.Username,
			Groups: user.Groups,
			UID:    user.UID,
			Extra:  extra,
			ResourceAttributes: &authzv1.ResourceAttributes{
				Namespace: p.Namespace,
				Verb:      acc.Verb,
				Group:     fleetv1alpha1.GroupVersion.Group,
				Resource:  acc.Resource,
			},
		}}
		if err := a.cfg.Reviews.Create(ctx, sar); err != nil {
			return internal("review_error", "checking access: %v", err)
		}
		allowed = sar.Status.Allowed && !sar.Status.Denied
		if allowed {
			a.access.put(key, true, reviewTTL)
		} else {
			a.denied.put(key, false, reviewNegativeTTL)
		}
	}
	if !allowed {
		return &Failure{Code: toolerr.Forbidden, Reason: "forbidden", Message: fmt.Sprintf("%s may not %s %s.%s in namespace %s; bind it to a Role that allows it (README: the tools and their RBAC verbs)",
			p.Name, acc.Verb, acc.Resource, fleetv1alpha1.GroupVersion.Group, p.Namespace)}
	}
	return nil
}
