package controllers

import (
	"cmp"
	"context"
	"errors"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
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
	allowed := map[string]string{fleetv1alpha1.LabelAllowMemberEnv: "true"}
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "ns", Labels: allowed}, Data: map[string][]byte{"token": []byte("s3cret")}}
	// A confused deputy: a user who may create Members but not read
	// Secrets had fleetd put any Secret of the namespace, its own among
	// them, into a pane's environment.
	private := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "private", Namespace: "ns"}, Data: map[string][]byte{"token": []byte("not yours")}}
	memberToken := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "w1-fleetd-token", Namespace: "ns", Labels: map[string]string{fleetv1alpha1.LabelMember: "w1", fleetv1alpha1.LabelAllowMemberEnv: "true"}}, Data: map[string][]byte{"token": []byte("w1's")}}
	staticTokens := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "fleetd-static-tokens", Namespace: "ns", Labels: map[string]string{fleetv1alpha1.LabelStaticToken: ""}}, Data: map[string][]byte{"primary": []byte("the primary's")}}
	cases := map[string]struct {
		vars        []fleetv1alpha1.EnvVar
		want        map[string]string
		wantMissing string
		wantReason  string
	}{
		"a secret that did not opt in": {
			vars:        []fleetv1alpha1.EnvVar{fromSecret("TOKEN", "private", "token", false)},
			wantMissing: `env TOKEN: secret "private" does not allow it: label it fleet.fleetd.dev/allow-member-env=true to let Members and Profiles put it in an agent's environment`,
			wantReason:  fleetv1alpha1.ReasonSecretNotAllowed,
		},
		"an optional one that did not opt in is still refused": {
			vars:        []fleetv1alpha1.EnvVar{fromSecret("TOKEN", "private", "token", true)},
			wantMissing: `env TOKEN: secret "private" does not allow it: label it fleet.fleetd.dev/allow-member-env=true to let Members and Profiles put it in an agent's environment`,
			wantReason:  fleetv1alpha1.ReasonSecretNotAllowed,
		},
		"another member's token, even labelled": {
			vars:        []fleetv1alpha1.EnvVar{fromSecret("TOKEN", "w1-fleetd-token", "token", false)},
			wantMissing: `env TOKEN: secret "w1-fleetd-token" is fleetd's own (it carries fleet.fleetd.dev/member) and never goes into a worker's environment`,
			wantReason:  fleetv1alpha1.ReasonSecretNotAllowed,
		},
		"the primary's static token": {
			vars:        []fleetv1alpha1.EnvVar{fromSecret("TOKEN", "fleetd-static-tokens", "primary", false)},
			wantMissing: `env TOKEN: secret "fleetd-static-tokens" is fleetd's own (it carries fleet.fleetd.dev/static-token) and never goes into a worker's environment`,
			wantReason:  fleetv1alpha1.ReasonSecretNotAllowed,
		},
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
	reader := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(creds, private, memberToken, staticTokens).Build()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := resolveEnv(context.Background(), reader, "ns", tc.vars)
			var missing *missingError
			switch {
			case tc.wantMissing != "":
				reason := cmp.Or(tc.wantReason, fleetv1alpha1.ReasonSecretNotFound)
				if !errors.As(err, &missing) || missing.Error() != tc.wantMissing || missing.reason != reason {
					t.Fatalf("resolveEnv() error = %v, want %s: %s", err, reason, tc.wantMissing)
				}
			case err != nil:
				t.Fatal(err)
			}
			if diff := gocmp.Diff(tc.want, got); tc.wantMissing == "" && diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}
