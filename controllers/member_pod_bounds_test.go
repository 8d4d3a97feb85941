package controllers

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// restrictedContext is a Pod security context within Pod Security
// restricted.
func restrictedContext() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](1000),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// TestMemberPodOutOfBounds: what a Member's own pod may ask for, and the
// message for each field it may not, which names the field.
func TestMemberPodOutOfBounds(t *testing.T) {
	with := func(f func(*corev1.PodSecurityContext)) *fleetv1alpha1.MemberPod {
		sc := restrictedContext()
		f(sc)
		return &fleetv1alpha1.MemberPod{SecurityContext: sc}
	}
	cases := map[string]struct {
		pod *fleetv1alpha1.MemberPod
		// want are the fields refused, each with words of its message; none
		// for a pod a Member may ask for.
		want map[string]string
	}{
		"no pod":  {},
		"nothing": {pod: &fleetv1alpha1.MemberPod{}},
		"scheduling, resources and a workspace": {pod: &fleetv1alpha1.MemberPod{
			ImagePullPolicy: corev1.PullAlways,
			Resources:       &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
			NodeSelector:    map[string]string{"pool": "agents"},
			Affinity:        &corev1.Affinity{},
			Workspace:       &fleetv1alpha1.Workspace{VolumeClaim: &fleetv1alpha1.WorkspaceVolumeClaim{Size: resource.MustParse("1Gi")}},
		}},
		"the default service account by name": {pod: &fleetv1alpha1.MemberPod{ServiceAccountName: "default"}},
		"a restricted security context":       {pod: &fleetv1alpha1.MemberPod{SecurityContext: restrictedContext()}},
		"a local seccomp and AppArmor profile and SELinux type": {pod: with(func(sc *corev1.PodSecurityContext) {
			sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("agents.json")}
			sc.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr.To("agents")}
			sc.SELinuxOptions = &corev1.SELinuxOptions{Type: "container_t", Level: "s0:c1,c2"}
			sc.FSGroup, sc.RunAsGroup, sc.SupplementalGroups = ptr.To[int64](1000), ptr.To[int64](1000), []int64{1000}
		})},

		"an image":                {pod: &fleetv1alpha1.MemberPod{Image: "evil:latest"}, want: map[string]string{"spec.pod.image": "only a Profile may name another image"}},
		"another service account": {pod: &fleetv1alpha1.MemberPod{ServiceAccountName: "deployer"}, want: map[string]string{"spec.pod.serviceAccountName": "default service account"}},
		"tolerations":             {pod: &fleetv1alpha1.MemberPod{Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}, want: map[string]string{"spec.pod.tolerations": "tainted nodes"}},
		"a runtime class":         {pod: &fleetv1alpha1.MemberPod{RuntimeClassName: ptr.To("runc")}, want: map[string]string{"spec.pod.runtimeClassName": "only a Profile may choose a runtime class"}},
		"egress":                  {pod: &fleetv1alpha1.MemberPod{Egress: &fleetv1alpha1.MemberEgress{Internet: ptr.To(false)}}, want: map[string]string{"spec.pod.egress": "only a Profile may say where"}},
		"root":                    {pod: with(func(sc *corev1.PodSecurityContext) { sc.RunAsUser = ptr.To[int64](0) }), want: map[string]string{"spec.pod.securityContext.runAsUser": "must not be 0"}},
		"runAsNonRoot left out":   {pod: with(func(sc *corev1.PodSecurityContext) { sc.RunAsNonRoot = nil }), want: map[string]string{"spec.pod.securityContext.runAsNonRoot": "must be true"}},
		"runAsNonRoot false":      {pod: with(func(sc *corev1.PodSecurityContext) { sc.RunAsNonRoot = ptr.To(false) }), want: map[string]string{"spec.pod.securityContext.runAsNonRoot": "must be true"}},
		"seccomp left out":        {pod: with(func(sc *corev1.PodSecurityContext) { sc.SeccompProfile = nil }), want: map[string]string{"spec.pod.securityContext.seccompProfile.type": "RuntimeDefault or Localhost"}},
		"seccomp Unconfined":      {pod: with(func(sc *corev1.PodSecurityContext) { sc.SeccompProfile.Type = corev1.SeccompProfileTypeUnconfined }), want: map[string]string{"spec.pod.securityContext.seccompProfile.type": "not Unconfined"}},
		"AppArmor Unconfined": {pod: with(func(sc *corev1.PodSecurityContext) {
			sc.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		}), want: map[string]string{"spec.pod.securityContext.appArmorProfile.type": "not Unconfined"}},
		"an SELinux user": {pod: with(func(sc *corev1.PodSecurityContext) { sc.SELinuxOptions = &corev1.SELinuxOptions{User: "system_u"} }), want: map[string]string{"spec.pod.securityContext.seLinuxOptions": "user or role"}},
		"an SELinux type": {pod: with(func(sc *corev1.PodSecurityContext) { sc.SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"} }), want: map[string]string{"spec.pod.securityContext.seLinuxOptions.type": "container_t"}},
		"sysctls":         {pod: with(func(sc *corev1.PodSecurityContext) { sc.Sysctls = []corev1.Sysctl{{Name: "kernel.msgmax", Value: "1"}} }), want: map[string]string{"spec.pod.securityContext.sysctls": "only a Profile may set sysctls"}},
		"a Windows host process": {pod: with(func(sc *corev1.PodSecurityContext) {
			sc.WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}
		}), want: map[string]string{"spec.pod.securityContext.windowsOptions.hostProcess": "must not be true"}},
		"an empty security context": {pod: &fleetv1alpha1.MemberPod{SecurityContext: &corev1.PodSecurityContext{}}, want: map[string]string{"spec.pod.securityContext.runAsNonRoot": "must be true", "spec.pod.securityContext.seccompProfile.type": "RuntimeDefault or Localhost"}},
		"the report's attack": {
			pod: &fleetv1alpha1.MemberPod{
				ServiceAccountName: "deployer",
				Tolerations:        []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
				SecurityContext:    &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](0), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}},
			},
			want: map[string]string{
				"spec.pod.serviceAccountName":                  "default service account",
				"spec.pod.tolerations":                         "tainted nodes",
				"spec.pod.securityContext.runAsNonRoot":        "must be true",
				"spec.pod.securityContext.runAsUser":           "must not be 0",
				"spec.pod.securityContext.seccompProfile.type": "not Unconfined",
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			errs := memberPodOutOfBounds(tc.pod)
			got := map[string]string{}
			for _, e := range errs {
				got[e.Field] = e.Error()
			}
			for f, words := range tc.want {
				if !strings.Contains(got[f], words) {
					t.Errorf("%s: %q, want a refusal saying %q", f, got[f], words)
				}
			}
			for f, msg := range got {
				if _, ok := tc.want[f]; !ok {
					t.Errorf("%s refused, want it allowed: %s", f, msg)
				}
			}
			if msg := fmt.Sprint(errs.ToAggregate()); len(tc.want) > 0 && !strings.Contains(msg, "only a Profile") {
				t.Errorf("the message %q does not say a Profile may open more", msg)
			}
		})
	}
}
