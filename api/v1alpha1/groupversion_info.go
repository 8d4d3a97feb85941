// Package v1alpha1 contains the fleet.fleetd.dev/v1alpha1 API: Member, Delegation
// and Profile.
// +kubebuilder:object:generate=true
// +kubebuilder:ac:generate=true
// +groupName=fleet.fleetd.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version used to register these objects.
	GroupVersion = schema.GroupVersion{Group: "fleet.fleetd.dev", Version: "v1alpha1"}

	// SchemeGroupVersion is GroupVersion under the name generated clients and
	// apply configurations expect.
	SchemeGroupVersion = GroupVersion

	// SchemeBuilder adds the types of this group and version to a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this group and version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
