package controllers

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/testenv"
)

// TestResolveEnv: the one rule for a worker's env, which the Member
// controller starts panes with and the Profile controller reports on.
func TestResolveEnv(t *testing.T) {
	fromSecret := func(name, secret, key string, optional bool) fleetv1alpha1.EnvVar {
		ref := corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}
		if optional {
			ref.Optional = ptr.To(true)
		}
		return fleetv1alpha1.EnvVar{Name: name, ValueFrom: &fleetv1alpha1.EnvVarSource{SecretKeyRef: ref}}
	}
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "ns"}, Data: map[string][]byte{"token": []byte("s3cret")}}
	cases := map[string]struct {
		vars        []fleetv1alpha1.EnvVar
		want        map[string]string
		wantMissing string
	}{
		"values and a secret's key": {
			vars: []fleetv1alpha1.EnvVar{{Name: "COLOR", Value: ptr.To("blue")}, fromSecret("TOKEN", "creds", "token", false)},
			want: map[string]string{"COLOR": "blue", "TOKEN": "s3cret"},
		},
		"a secret that does not exist": {
			vars:        []fleetv1alpha1.EnvVar{fromSecret("TOKEN", "absent", "token", false)},
			wantMissing: `env TOKEN: secret "absent" does not exist`,
		},
		"a key the secret does not have": {
			vars:        []fleetv1alpha1.EnvVar{fromSecret("TOKEN", "creds", "other", false)},
			wantMissing: `env TOKEN: secret "creds" has no key "other"`,
		},
		"optional ones that are not there are left out": {
			vars: []fleetv1alpha1.EnvVar{fromSecret("A", "absent", "token", true), fromSecret("B", "creds", "other", true), {Name: "C", Value: ptr.To("")}},
			want: map[string]string{"C": ""},
		},
	}
	reader := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(creds).Build()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := resolveEnv(context.Background(), reader, "ns", tc.vars)
			var missing *missingError
			switch {
			case tc.wantMissing != "":
				if !errors.As(err, &missing) || missing.Error() != tc.wantMissing || missing.reason != fleetv1alpha1.ReasonSecretNotFound {
					t.Fatalf("resolveEnv() error = %v, want %s: %s", err, fleetv1alpha1.ReasonSecretNotFound, tc.wantMissing)
				}
			case err != nil:
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); tc.wantMissing == "" && diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}
