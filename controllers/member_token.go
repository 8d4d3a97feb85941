package controllers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// TokenSecretName is the name of a Member's token Secret.
func TokenSecretName(member string) string { return member + "-fleetd-token" }

// ensureToken returns the Member's gateway token, minting a Secret for it
// when there is none for this Member's UID. The token is the one whose hash
// the Member's status holds, which only fleetd writes: a Secret whose token
// hashes to anything else was written by someone else, and its value never
// authenticates. While a pane runs with fleetd's token, that token keeps
// working (the pass returns "" and marks the token stale, and a pane the
// pass starts gets a fresh one); with no pane running, a fresh token
// replaces the Secret's at once.
func (r *MemberReconciler) ensureToken(ctx context.Context, s *memberScope) (string, error) {
	m := s.member
	key := types.NamespacedName{Namespace: m.Namespace, Name: TokenSecretName(m.Name)}
	secret := &corev1.Secret{}
	err := r.Client.Get(ctx, key, secret)
	switch {
	case err == nil && secret.Labels[fleetv1alpha1.LabelMemberUID] == string(m.UID) && len(secret.Data[fleetv1alpha1.TokenSecretKey]) > 0:
		token := string(secret.Data[fleetv1alpha1.TokenSecretKey])
		hash := fleetv1alpha1.TokenHash(token)
		if m.Status.TokenHash == "" || m.Status.TokenHash == hash {
			m.Status.TokenSecretName, m.Status.TokenHash = key.Name, hash
			return token, nil
		}
		s.event(corev1.EventTypeWarning, fleetv1alpha1.ReasonTokenSecretReplaced,
			"Token secret %s holds a token fleetd did not write; it authenticates nobody, and the member keeps the token fleetd gave it", key.Name)
		if m.Status.PaneID != "" {
			s.tokenStale = true
			return "", nil
		}
		return r.mintToken(ctx, m, secret)
	case err == nil:
		// A Secret of an earlier Member with this name: its token must not
		// carry over.
		if err := r.Client.Delete(ctx, secret); client.IgnoreNotFound(err) != nil {
			return "", fmt.Errorf("deleting stale token secret %s: %w", key.Name, err)
		}
	case !apierrors.IsNotFound(err):
		return "", fmt.Errorf("getting token secret %s: %w", key.Name, err)
	}
	return r.mintToken(ctx, m, nil)
}

// freshToken is a new token for a pane the pass starts when the Secret's
// was written by someone else (ensureToken).
func (r *MemberReconciler) freshToken(ctx context.Context, s *memberScope) (string, error) {
	m := s.member
	secret := &corev1.Secret{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: TokenSecretName(m.Name)}, secret); err != nil {
		if !apierrors.IsNotFound(err) {
			return "", err
		}
		secret = nil
	}
	s.tokenStale = false
	return r.mintToken(ctx, m, secret)
}

// mintToken makes a new token for m and writes it to its Secret: existing
// (updated in place) or a new one.
func (r *MemberReconciler) mintToken(ctx context.Context, m *fleetv1alpha1.Member, existing *corev1.Secret) (string, error) {
	key := types.NamespacedName{Namespace: m.Namespace, Name: TokenSecretName(m.Name)}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("minting a token: %w", err)
	}
	token := hex.EncodeToString(raw)
	secret := existing
	if secret == nil {
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
	}
	secret.Labels = map[string]string{
		fleetv1alpha1.LabelMember:    m.Name,
		fleetv1alpha1.LabelMemberUID: string(m.UID),
		fleetv1alpha1.LabelShard:     r.shardOf(m.Namespace, m.Name),
	}
	secret.Type = corev1.SecretTypeOpaque
	secret.Data = map[string][]byte{fleetv1alpha1.TokenSecretKey: []byte(token)}
	if err := controllerutil.SetControllerReference(m, secret, r.Client.Scheme()); err != nil {
		return "", err
	}
	if existing != nil {
		if err := r.Client.Update(ctx, secret); err != nil {
			return "", fmt.Errorf("writing token secret %s: %w", key.Name, err)
		}
	} else if err := r.Client.Create(ctx, secret); err != nil {
		return "", fmt.Errorf("creating token secret %s: %w", key.Name, err)
	}
	m.Status.TokenSecretName, m.Status.TokenHash = key.Name, fleetv1alpha1.TokenHash(token)
	return token, nil
}

// deleteToken deletes the Member's token Secret, if there is one.
func (r *MemberReconciler) deleteToken(ctx context.Context, m *fleetv1alpha1.Member) error {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: TokenSecretName(m.Name)}}
	if err := r.Client.Delete(ctx, secret); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting token secret: %w", err)
	}
	return nil
}
