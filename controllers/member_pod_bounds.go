package controllers

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// What a Member's author may ask of its Pod. fleetd creates the Pod with
// its own rights, for people who may create Members and not Pods, so a
// Member's own spec.pod stays within Pod Security "restricted" and the
// namespace's default service account. Whatever goes beyond is a
// Profile's to open: Profiles are written by the namespace's admins
// (fleetd's roles grant no one else that verb, and config/admission
// refuses a widening Profile from anyone who may not create Pods there).
// config/admission enforces the same bounds at the API server; fleetd
// checks them again before it creates a Pod, so a cluster without the
// policy is no less safe.
//
// The rest of "restricted" is fleetd's own and spec.pod does not expose
// it: every container runs without privilege escalation and with every
// capability dropped; the Pod has no host namespaces, ports or paths.

// safeSELinuxTypes are the SELinux types Pod Security allows.
var safeSELinuxTypes = []string{"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}

// memberPodOutOfBounds lists what a Member's own pod (spec.pod) asks for
// beyond what a Member may: each error names the field and says why.
// A Profile's pod is not checked: it may open all of these.
func memberPodOutOfBounds(pod *fleetv1alpha1.MemberPod) field.ErrorList {
	if pod == nil {
		return nil
	}
	p := field.NewPath("spec", "pod")
	var errs field.ErrorList
	if pod.Image != "" {
		errs = append(errs, field.Forbidden(p.Child("image"), "a Member runs fleetd's worker image or its Profile's; only a Profile may name another image"))
	}
	if pod.ServiceAccountName != "" && pod.ServiceAccountName != "default" {
		errs = append(errs, field.Forbidden(p.Child("serviceAccountName"), "a Member's Pod runs as the namespace's default service account; only a Profile may name another"))
	}
	if len(pod.Tolerations) > 0 {
		errs = append(errs, field.Forbidden(p.Child("tolerations"), "only a Profile may let its members' Pods onto tainted nodes"))
	}
	if pod.RuntimeClassName != nil {
		errs = append(errs, field.Forbidden(p.Child("runtimeClassName"), "only a Profile may choose a runtime class"))
	}
	if pod.Egress != nil {
		errs = append(errs, field.Forbidden(p.Child("egress"), "only a Profile may say where its members' Pods connect"))
	}
	if sc := pod.SecurityContext; sc != nil {
		errs = append(errs, podSecurityOutOfBounds(sc, p.Child("securityContext"))...)
	}
	return errs
}

// podSecurityOutOfBounds lists what a Pod security context asks for
// beyond Pod Security "restricted", as far as fleetd's Pod depends on it.
func podSecurityOutOfBounds(sc *corev1.PodSecurityContext, p *field.Path) field.ErrorList {
	const restricted = "a Member's Pod runs within Pod Security restricted; only a Profile may open more"
	var errs field.ErrorList
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		errs = append(errs, field.Forbidden(p.Child("runAsNonRoot"), "must be true: "+restricted))
	}
	if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
		errs = append(errs, field.Forbidden(p.Child("runAsUser"), "must not be 0 (root): "+restricted))
	}
	switch {
	case sc.SeccompProfile == nil:
		errs = append(errs, field.Required(p.Child("seccompProfile", "type"), "must be RuntimeDefault or Localhost: "+restricted))
	case sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault && sc.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost:
		errs = append(errs, field.Forbidden(p.Child("seccompProfile", "type"), "must be RuntimeDefault or Localhost, not "+string(sc.SeccompProfile.Type)+": "+restricted))
	}
	if a := sc.AppArmorProfile; a != nil && a.Type != corev1.AppArmorProfileTypeRuntimeDefault && a.Type != corev1.AppArmorProfileTypeLocalhost {
		errs = append(errs, field.Forbidden(p.Child("appArmorProfile", "type"), "must be RuntimeDefault or Localhost, not "+string(a.Type)+": "+restricted))
	}
	if se := sc.SELinuxOptions; se != nil {
		if se.User != "" || se.Role != "" {
			errs = append(errs, field.Forbidden(p.Child("seLinuxOptions"), "must not set user or role: "+restricted))
		}
		if !slices.Contains(safeSELinuxTypes, se.Type) {
			errs = append(errs, field.Forbidden(p.Child("seLinuxOptions", "type"), "must be container_t, container_init_t, container_kvm_t or container_engine_t: "+restricted))
		}
	}
	if len(sc.Sysctls) > 0 {
		errs = append(errs, field.Forbidden(p.Child("sysctls"), "only a Profile may set sysctls"))
	}
	if w := sc.WindowsOptions; w != nil && w.HostProcess != nil && *w.HostProcess {
		errs = append(errs, field.Forbidden(p.Child("windowsOptions", "hostProcess"), "must not be true: "+restricted))
	}
	return errs
}

// mergePod is the pod a Member runs in: each field its own pod sets
// replaces its Profile's, and what only a Profile may set (image, service
// account, tolerations, runtime class, egress) is always the Profile's. A Member
// that asks for more memory thus keeps its Profile's gVisor. Egress is the
// Profile's too.
func mergePod(profile, member *fleetv1alpha1.MemberPod) *fleetv1alpha1.MemberPod {
	if member == nil {
		return profile
	}
	merged := &fleetv1alpha1.MemberPod{}
	if profile != nil {
		merged = profile.DeepCopy()
	}
	m := member.DeepCopy()
	if m.ImagePullPolicy != "" {
		merged.ImagePullPolicy = m.ImagePullPolicy
	}
	if m.Resources != nil {
		merged.Resources = m.Resources
	}
	if m.NodeSelector != nil {
		merged.NodeSelector = m.NodeSelector
	}
	if m.Affinity != nil {
		merged.Affinity = m.Affinity
	}
	if m.SecurityContext != nil {
		merged.SecurityContext = m.SecurityContext
	}
	if m.Workspace != nil {
		merged.Workspace = m.Workspace
	}
	return merged
}
