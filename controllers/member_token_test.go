package controllers

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/testutil"
)

// TestTokenSecretWrittenBySomeoneElseAuthenticatesNobody reproduces an
// attack: a member's token Secret overwritten with a chosen value made that
// value authenticate as the member, and locked out the member's real
// token. The status keeps the hash of the token fleetd wrote, so the chosen
// value authenticates nobody and the running pane's token goes on working;
// the Member says what happened.
func TestTokenSecretWrittenBySomeoneElseAuthenticatesNobody(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	create(t, testutil.MakeMember("w1", ns).Command(scriptedAgent).Obj())
	m := waitReady(t, ns, "w1")
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: TokenSecretName("w1")}
	var secret corev1.Secret
	if err := env.Client.Get(ctx, key, &secret); err != nil {
		t.Fatal(err)
	}
	real := string(secret.Data[fleetv1alpha1.TokenSecretKey])
	if m.Status.TokenHash != fleetv1alpha1.TokenHash(real) {
		t.Fatalf("status hash %s is not the Secret's token's", m.Status.TokenHash)
	}
	const chosen = "a-token-the-attacker-chose-0123456789"
	secret.Data[fleetv1alpha1.TokenSecretKey] = []byte(chosen)
	if err := env.Client.Update(ctx, &secret); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, ns, "w1", fleetv1alpha1.ReasonTokenSecretReplaced)
	m, err := getMember(t, ns, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if m.Status.TokenHash == fleetv1alpha1.TokenHash(chosen) || m.Status.TokenHash != fleetv1alpha1.TokenHash(real) {
		t.Errorf("status hash %s: want the real token's %s, never the chosen one's", m.Status.TokenHash, fleetv1alpha1.TokenHash(real))
	}
	if m.Status.PaneID == "" || m.Status.Restarts != 0 {
		t.Errorf("the member's pane was disturbed: %s", describe(m))
	}
}
