package controllers

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"sync"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/panehost"
)

// The NetworkPolicies that wall member Pods in: one per namespace with
// member Pods, and one per member for where its Pod may connect.

// NetworkPolicyName is the policy fleetd keeps in each namespace with
// member Pods.
const NetworkPolicyName = "fleetd-member-pane-hosts"

// MemberNetworkPolicy is the policy that walls member Pods in namespace in both
// directions. In: only fleetd's own pods reach a member Pod, on the pane
// host port; nothing else reaches it at all, another member least of all.
// Out: a member Pod reaches cluster DNS and the gateway on fleetd's pods,
// and what its Member's egress policy (MemberEgressPolicy) adds; nothing
// else of the cluster or its network: not another member's pane host, nor
// a port another member serves, nor a node's or the cloud's metadata
// address.
func MemberNetworkPolicy(namespace string, set PodSettings) *networkingv1.NetworkPolicy {
	port := intstr.FromInt32(int32(cmp.Or(set.Port, panehost.DefaultPort)))
	gateway := intstr.FromString(fleetdGatewayPort)
	dns := intstr.FromInt32(53)
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	fleetd := networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": set.FleetdNamespace}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: set.FleetdPodLabels},
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: NetworkPolicyName, Namespace: namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "fleetd"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: memberPodLabels},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{fleetd},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			}},
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{
					To: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": metav1.NamespaceSystem}},
						PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
					}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
				},
				{
					To:    []networkingv1.NetworkPolicyPeer{fleetd},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &gateway}},
				},
			},
		},
	}
}

// EgressPolicyName is the NetworkPolicy that says where a pod member's Pod
// may connect.
func EgressPolicyName(member string) string { return member + "-fleetd-egress" }

// MemberEgressPolicy is where m's Pod may connect beyond what
// MemberNetworkPolicy lets every member Pod reach: the internet unless
// egress says otherwise, and egress's rules. Policies add up, so this one
// only opens. It selects m's Pods by m's uid, and goes with m.
func MemberEgressPolicy(m *fleetv1alpha1.Member, egress *fleetv1alpha1.MemberEgress) *networkingv1.NetworkPolicy {
	rules := []networkingv1.NetworkPolicyEgressRule{}
	if egress == nil || egress.Internet == nil || *egress.Internet {
		rules = append(rules, networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{
			{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: privateIPv4}},
			{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: privateIPv6}},
		}})
	}
	if egress != nil {
		for _, r := range egress.Rules {
			r := r.DeepCopy()
			for i := range r.Ports {
				// As the API server defaults it: the spec fleetd keeps
				// compares equal to the one it reads back.
				if r.Ports[i].Protocol == nil {
					r.Ports[i].Protocol = ptr.To(corev1.ProtocolTCP)
				}
			}
			rules = append(rules, *r)
		}
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name: EgressPolicyName(m.Name), Namespace: m.Namespace,
			Labels: map[string]string{fleetv1alpha1.LabelMember: m.Name, fleetv1alpha1.LabelMemberUID: string(m.UID), "app.kubernetes.io/managed-by": "fleetd"},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{fleetv1alpha1.LabelMemberUID: string(m.UID)}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      rules,
		},
	}
}

// fleetdGatewayPort names the gateway's container port on fleetd's pods
// (config/manager): the one port of theirs a member Pod reaches.
const fleetdGatewayPort = "gateway"

// privateIPv4 and privateIPv6 are the ranges a cluster's pods, Services
// and nodes live in (RFC 1918, shared address space, link-local with the
// cloud's metadata service, loopback, unique local), which a member Pod's
// egress to the internet leaves out.
var (
	privateIPv4 = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "127.0.0.0/8"}
	privateIPv6 = []string{"fc00::/7", "fe80::/10", "::1/128"}
)

// memberPodLabels select every member Pod.
var memberPodLabels = map[string]string{"app.kubernetes.io/name": "fleetd-member"}

// ensureNetworkPolicy keeps the policy in namespace, once per run of the
// controller: it is looked at again after a restart, or when it is deleted
// (it is not watched; a pass after a restart puts it back).
func (r *MemberReconciler) ensureNetworkPolicy(ctx context.Context, namespace string) error {
	return ensureNetworkPolicy(ctx, r.Client, r.Reader, r.Pods, &r.policies, namespace)
}

// ensureNetworkPolicy keeps the policy in namespace with c, reading it
// with reader, unless done (the namespaces this run has seen to) holds
// namespace. Both the Member reconciler and the Profile reconciler, which
// starts warm Pods, see to it.
func ensureNetworkPolicy(ctx context.Context, c client.Client, reader client.Reader, set PodSettings, done *sync.Map, namespace string) error {
	if set.FleetdNamespace == "" {
		return nil
	}
	if _, ok := done.Load(namespace); ok {
		return nil
	}
	want := MemberNetworkPolicy(namespace, set)
	var have networkingv1.NetworkPolicy
	err := reader.Get(ctx, client.ObjectKeyFromObject(want), &have)
	switch {
	case apierrors.IsNotFound(err):
		if err := c.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating network policy %s/%s: %w", namespace, want.Name, err)
		}
	case err != nil:
		return fmt.Errorf("getting network policy %s/%s: %w", namespace, want.Name, err)
	case !equality.Semantic.DeepEqual(have.Spec, want.Spec):
		have.Spec = want.Spec
		if err := c.Update(ctx, &have); err != nil {
			return fmt.Errorf("updating network policy %s/%s: %w", namespace, want.Name, err)
		}
	}
	done.Store(namespace, true)
	return nil
}

// ensureEgressPolicy keeps m's egress policy as its pod's egress says, and
// owned by m. What it last made for m is remembered by the policy's spec, so an
// unchanged Profile costs no read: it is looked at again after a restart,
// or when the Profile's egress changes. A Pod that runs takes a change at
// once; its network is the policy's, not the Pod's.
func (r *MemberReconciler) ensureEgressPolicy(ctx context.Context, m *fleetv1alpha1.Member, pod *fleetv1alpha1.MemberPod) error {
	var egress *fleetv1alpha1.MemberEgress
	if pod != nil {
		egress = pod.Egress
	}
	want := MemberEgressPolicy(m, egress)
	key := string(m.UID)
	if done, ok := r.egressPolicies.Load(key); ok && equality.Semantic.DeepEqual(done, want.Spec) {
		return nil
	}
	if err := controllerutil.SetControllerReference(m, want, r.Client.Scheme()); err != nil {
		return err
	}
	var have networkingv1.NetworkPolicy
	err := r.Reader.Get(ctx, client.ObjectKeyFromObject(want), &have)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.Client.Create(ctx, want); err != nil {
			return fmt.Errorf("creating egress policy %s: %w", want.Name, err)
		}
	case err != nil:
		return fmt.Errorf("getting egress policy %s: %w", want.Name, err)
	case !metav1.IsControlledBy(&have, m):
		return fmt.Errorf("network policy %s is not this Member's: delete or rename it", want.Name)
	case !equality.Semantic.DeepEqual(have.Spec, want.Spec) || !maps.Equal(have.Labels, want.Labels):
		have.Spec, have.Labels = want.Spec, want.Labels
		if err := r.Client.Update(ctx, &have); err != nil {
			return fmt.Errorf("updating egress policy %s: %w", want.Name, err)
		}
	}
	r.egressPolicies.Store(key, want.Spec)
	return nil
}
