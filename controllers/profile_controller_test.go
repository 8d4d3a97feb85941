package controllers

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/internal/testutil"
)

func withSecretEnv(p *fleetv1alpha1.Profile, secret, key string) *fleetv1alpha1.Profile {
	p.Spec.Env = append(p.Spec.Env, fleetv1alpha1.EnvVar{Name: "TOKEN", ValueFrom: &fleetv1alpha1.EnvVarSource{
		SecretKeyRef: corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key},
	}})
	return p
}

func waitProfile(t *testing.T, ns, name string, cond func(*fleetv1alpha1.Profile) bool) *fleetv1alpha1.Profile {
	t.Helper()
	p := &fleetv1alpha1.Profile{}
	testutil.Eventually(t, "profile "+name, func() (bool, string) {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
			return false, err.Error()
		}
		return cond(p), fmt.Sprintf("members=%d conditions=%v", p.Status.Members, p.Status.Conditions)
	})
	return p
}

func TestProfileStatus(t *testing.T) {
	ns := env.Namespace(t)
	h := startHerdr(t)
	startControllers(t, ns, h.socket)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns, Labels: map[string]string{fleetv1alpha1.LabelAllowMemberEnv: "true"}}, Data: map[string][]byte{"token": []byte("x")}})
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "private", Namespace: ns}, Data: map[string][]byte{"token": []byte("x")}})
	create(t, withSecretEnv(testutil.MakeProfile("not-allowed", ns).Command(scriptedAgent).Obj(), "private", "token"))
	create(t, withSecretEnv(testutil.MakeProfile("good", ns).Command(scriptedAgent).Obj(), "creds", "token"))
	create(t, withSecretEnv(testutil.MakeProfile("no-secret", ns).Command(scriptedAgent).Obj(), "absent", "token"))
	create(t, withSecretEnv(testutil.MakeProfile("no-key", ns).Command(scriptedAgent).Obj(), "creds", "other"))

	waitProfile(t, ns, "good", func(p *fleetv1alpha1.Profile) bool {
		return meta.IsStatusConditionTrue(p.Status.Conditions, fleetv1alpha1.ConditionReady)
	})
	for _, name := range []string{"no-secret", "no-key"} {
		p := waitProfile(t, ns, name, func(p *fleetv1alpha1.Profile) bool {
			c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.ConditionReady)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == fleetv1alpha1.ReasonSecretNotFound
		})
		if c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.ConditionReady); c.Message == "" {
			t.Errorf("%s: no message says what is missing", name)
		}
	}

	// A Secret that did not opt in is refused, so a Member of that
	// Profile never starts with it.
	waitProfile(t, ns, "not-allowed", func(p *fleetv1alpha1.Profile) bool {
		c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == fleetv1alpha1.ReasonSecretNotAllowed
	})
	create(t, testutil.MakeMember("deputy", ns).Profile("not-allowed").Obj())
	testutil.Eventually(t, "the member of a profile whose secret did not opt in to be refused", func() (bool, string) {
		m, err := getMember(t, ns, "deputy")
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(m.Status.Conditions, fleetv1alpha1.ConditionPaneReady)
		return c != nil && c.Reason == fleetv1alpha1.ReasonSecretNotAllowed && m.Status.PaneID == "", fmt.Sprintf("pane %q, PaneReady %+v", m.Status.PaneID, c)
	})

	create(t, testutil.MakeMember("m1", ns).Profile("good").Obj())
	create(t, testutil.MakeMember("m2", ns).Profile("good").Obj())
	waitProfile(t, ns, "good", func(p *fleetv1alpha1.Profile) bool { return p.Status.Members == 2 })
	m, _ := getMember(t, ns, "m1")
	if err := env.Client.Delete(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	waitProfile(t, ns, "good", func(p *fleetv1alpha1.Profile) bool { return p.Status.Members == 1 })
}
