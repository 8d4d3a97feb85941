// Package testutil has builders for fleetd's objects, so tests say what is
// special about an object and nothing else.
package testutil

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// MemberWrapper builds a Member.
type MemberWrapper struct{ fleetv1alpha1.Member }

// MakeMember starts a Member named name in namespace ns.
func MakeMember(name, ns string) *MemberWrapper {
	return &MemberWrapper{fleetv1alpha1.Member{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}}
}

// Profile runs the Member from a Profile.
func (w *MemberWrapper) Profile(p string) *MemberWrapper { w.Spec.Profile = p; return w }

// Command runs the Member as a plain command.
func (w *MemberWrapper) Command(argv ...string) *MemberWrapper { w.Spec.Command = argv; return w }

// Agent runs the Member as a herdr agent kind.
func (w *MemberWrapper) Agent(kind fleetv1alpha1.AgentKind) *MemberWrapper {
	w.Spec.Agent = kind
	return w
}

// Env adds an environment variable.
func (w *MemberWrapper) Env(name, value string) *MemberWrapper {
	w.Spec.Env = append(w.Spec.Env, fleetv1alpha1.EnvVar{Name: name, Value: ptr.To(value)})
	return w
}

// Team puts the Member in a team with a role.
func (w *MemberWrapper) Team(team string, role fleetv1alpha1.Role) *MemberWrapper {
	w.Spec.Team, w.Spec.Role = team, role
	return w
}

// Obj returns the Member.
func (w *MemberWrapper) Obj() *fleetv1alpha1.Member { return &w.Member }

// ProfileWrapper builds a Profile.
type ProfileWrapper struct{ fleetv1alpha1.Profile }

// MakeProfile starts a Profile named name in namespace ns.
func MakeProfile(name, ns string) *ProfileWrapper {
	return &ProfileWrapper{fleetv1alpha1.Profile{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}}
}

// Command runs workers as a plain command.
func (w *ProfileWrapper) Command(argv ...string) *ProfileWrapper { w.Spec.Command = argv; return w }

// Agent runs workers as a herdr agent kind.
func (w *ProfileWrapper) Agent(kind fleetv1alpha1.AgentKind) *ProfileWrapper {
	w.Spec.Agent = kind
	return w
}

// Billing sets how workers are billed.
func (w *ProfileWrapper) Billing(b fleetv1alpha1.Billing) *ProfileWrapper {
	w.Spec.Billing = b
	return w
}

// Env adds an environment variable.
func (w *ProfileWrapper) Env(name, value string) *ProfileWrapper {
	w.Spec.Env = append(w.Spec.Env, fleetv1alpha1.EnvVar{Name: name, Value: ptr.To(value)})
	return w
}

// Default marks the Profile as the one bridge_send auto-spawns from.
func (w *ProfileWrapper) Default() *ProfileWrapper { w.Spec.Default = true; return w }

// WarmPool keeps size Pods started for members to claim; a pool's Pods
// are members' Pods, so its members run in Pods too.
func (w *ProfileWrapper) WarmPool(size int32) *ProfileWrapper {
	w.Spec.Runtime = fleetv1alpha1.RuntimePod
	w.Spec.WarmPool = &fleetv1alpha1.WarmPool{Size: size}
	return w
}

// Obj returns the Profile.
func (w *ProfileWrapper) Obj() *fleetv1alpha1.Profile { return &w.Profile }

// DelegationWrapper builds a Delegation.
type DelegationWrapper struct{ fleetv1alpha1.Delegation }

// MakeDelegation starts a Delegation named name in ns, from a static
// principal "test" to member to.
func MakeDelegation(name, ns, to, content string) *DelegationWrapper {
	return &DelegationWrapper{fleetv1alpha1.Delegation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: fleetv1alpha1.DelegationSpec{
			From:    fleetv1alpha1.Principal{Kind: fleetv1alpha1.PrincipalStatic, Name: "test"},
			To:      to,
			Content: content,
		},
	}}
}

// From sets the sender.
func (w *DelegationWrapper) From(kind fleetv1alpha1.PrincipalKind, name string) *DelegationWrapper {
	w.Spec.From = fleetv1alpha1.Principal{Kind: kind, Name: name}
	return w
}

// Detached makes the Delegation wait:false.
func (w *DelegationWrapper) Detached() *DelegationWrapper { w.Spec.Wait = ptr.To(false); return w }

// Timeout sets the deadline in seconds.
func (w *DelegationWrapper) Timeout(seconds int32) *DelegationWrapper {
	w.Spec.TimeoutSeconds = seconds
	return w
}

// Obj returns the Delegation.
func (w *DelegationWrapper) Obj() *fleetv1alpha1.Delegation { return &w.Delegation }
