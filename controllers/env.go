package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// missingError is a dependency of a spec that does not exist (yet): a
// Profile, a Secret or a key of one. reason is the condition reason that
// says which.
type missingError struct {
	reason string
	msg    string
}

func (e *missingError) Error() string { return e.msg }

// envSecretRefused says why a Secret may not be named in a worker's env,
// "" when it may: it opted in with LabelAllowMemberEnv, and it is not one
// of fleetd's own. Whoever may create a Member may otherwise read any
// Secret of the namespace through the agent's environment.
func envSecretRefused(s *corev1.Secret) string {
	for _, own := range []string{fleetv1alpha1.LabelMember, fleetv1alpha1.LabelMemberUID, fleetv1alpha1.LabelStaticToken, fleetv1alpha1.LabelInternal} {
		if _, ok := s.Labels[own]; ok {
			return "is fleetd's own (it carries " + own + ") and never goes into a worker's environment"
		}
	}
	if s.Labels[fleetv1alpha1.LabelAllowMemberEnv] != "true" {
		return "does not allow it: label it " + fleetv1alpha1.LabelAllowMemberEnv + "=true to let Members and Profiles put it in an agent's environment"
	}
	return ""
}

// resolveEnv reads the values of a worker's env in namespace: each literal
// value, and each Secret key it refers to, through reader (uncached:
// fleetd does not cache Secrets it does not own). A Secret or key that
// does not exist is a *missingError, unless the reference is optional:
// then the variable is left out; so is a Secret that does not allow it
// (envSecretRefused), optional or not. The Member controller starts panes with
// these values; the Profile controller reports whether they can be read.
func resolveEnv(ctx context.Context, reader client.Reader, namespace string, vars []fleetv1alpha1.EnvVar) (map[string]string, error) {
	env := make(map[string]string, len(vars))
	for _, e := range vars {
		if e.Value != nil {
			env[e.Name] = *e.Value
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		optional := ref.Optional != nil && *ref.Optional
		secret := &corev1.Secret{}
		err := reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: ref.Name}, secret)
		if apierrors.IsNotFound(err) {
			if optional {
				continue
			}
			return nil, &missingError{fleetv1alpha1.ReasonSecretNotFound, fmt.Sprintf("env %s: secret %q does not exist", e.Name, ref.Name)}
		}
		if err != nil {
			return nil, fmt.Errorf("getting secret %s for env %s: %w", ref.Name, e.Name, err)
		}
		if why := envSecretRefused(secret); why != "" {
			// Not skipped when optional: a refusal is not an absence.
			return nil, &missingError{fleetv1alpha1.ReasonSecretNotAllowed, fmt.Sprintf("env %s: secret %q %s", e.Name, ref.Name, why)}
		}
		v, ok := secret.Data[ref.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, &missingError{fleetv1alpha1.ReasonSecretNotFound, fmt.Sprintf("env %s: secret %q has no key %q", e.Name, ref.Name, ref.Key)}
		}
		env[e.Name] = string(v)
	}
	return env, nil
}
