// Package v1alpha1 contains the fleet.fleetd.dev/v1alpha1 API: Member, Delegation
// and Profile.
// +kubebuilder:object:generate=true
// +kubebuilder:ac:generate=true
// +groupName=fleet.fleetd.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version used to register these objects.
	GroupVersion = schema.GroupVersion{Group: "fleet.fleetd.dev", Version: "v1alpha1"}

	// SchemeGroupVersion is GroupVersion under the name generated clients and
	// apply configurations expect.
	SchemeGroupVersion = GroupVersion

	// SchemeBuilder adds the types of this group and version to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this group and version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&Member{}, &MemberList{},
		&Delegation{}, &DelegationList{},
		&Profile{}, &ProfileList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
