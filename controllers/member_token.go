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
// when there is none for this Member's UID.
func (r *MemberReconciler) ensureToken(ctx context.Context, s *memberScope) (string, error) {
	m := s.member
	key := types.NamespacedName{Namespace: m.Namespace, Name: TokenSecretName(m.Name)}
	secret := &corev1.Secret{}
	err := r.Client.Get(ctx, key, secret)
	switch {
	case err == nil && secret.Labels[fleetv1alpha1.LabelMemberUID] == string(m.UID) && len(secret.Data[fleetv1alpha1.TokenSecretKey]) > 0:
		token := string(secret.Data[fleetv1alpha1.TokenSecretKey])
		m.Status.TokenSecretName, m.Status.TokenHash = key.Name, fleetv1alpha1.TokenHash(token)
		return token, nil
	case err == nil:
		// A Secret of an earlier Member with this name: its token must not
		// carry over.
		if err := r.Client.Delete(ctx, secret); client.IgnoreNotFound(err) != nil {
			return "", fmt.Errorf("deleting stale token secret %s: %w", key.Name, err)
		}
	case !apierrors.IsNotFound(err):
		return "", fmt.Errorf("getting token secret %s: %w", key.Name, err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("minting a token: %w", err)
	}
	token := hex.EncodeToString(raw)
	secret = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      key.Name,
			Namespace: key.Namespace,
			Labels: map[string]string{
				fleetv1alpha1.LabelMember:    m.Name,
				fleetv1alpha1.LabelMemberUID: string(m.UID),
			},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{fleetv1alpha1.TokenSecretKey: []byte(token)},
	}
	if err := controllerutil.SetControllerReference(m, secret, r.Client.Scheme()); err != nil {
		return "", err
	}
	if err := r.Client.Create(ctx, secret); err != nil {
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
