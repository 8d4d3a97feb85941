// Package scheme builds the runtime scheme fleetd runs with: the built-in
// kinds, CustomResourceDefinitions and fleetd's own.
package scheme

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// New returns a scheme with the built-in kinds, CRDs and fleetd's kinds.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, fleetv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}
