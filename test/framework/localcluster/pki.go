package localcluster

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/netip"
	"os"

	"github.com/fleetd/fleetd/internal/devenv"
)

// Files under the pki directory.
const (
	caCert            = "ca.crt"
	caKeyFile         = "ca.key"
	apiserverCert     = "apiserver.crt"
	apiserverKey      = "apiserver.key"
	kubeletClientCert = "apiserver-kubelet-client.crt"
	kubeletClientKey  = "apiserver-kubelet-client.key"
	saKey             = "sa.key"
	saPub             = "sa.pub"
)

// identity is a client certificate and the kubeconfig that uses it.
type identity struct {
	// file names the certificate, key and kubeconfig.
	file string
	cn   string
	orgs []string
	// kubeconfig is where its kubeconfig goes.
	kubeconfig string
}

// identities are the control plane's clients, the administrator and each
// node, with the names Kubernetes' default RBAC and the Node authorizer
// know them by.
func (l Layout) identities() []identity {
	ids := []identity{
		{file: "admin", cn: "kubernetes-admin", orgs: []string{"system:masters"}, kubeconfig: l.Kubeconfig()},
		{file: "kube-controller-manager", cn: "system:kube-controller-manager", kubeconfig: l.controlPlanePath(kcmKubeconfig)},
		{file: "kube-scheduler", cn: "system:kube-scheduler", kubeconfig: l.controlPlanePath(schedulerKubeconfig)},
		{file: "kube-proxy", cn: "system:kube-proxy", kubeconfig: l.controlPlanePath(kubeProxyKubeconfig)},
		{file: "kube-network-policies", cn: netpolUser, kubeconfig: l.controlPlanePath(netpolKubeconfig)},
	}
	for _, n := range l.Nodes {
		ids = append(ids, identity{file: n.Name, cn: "system:node:" + n.Name, orgs: []string{"system:nodes"}, kubeconfig: n.kubeconfig()})
	}
	return ids
}

// apiserverSANs are the names the API server's certificate holds: the
// loopback address the kubeconfig uses on both sides of the relay, the
// advertised address, and the kubernetes Service's ClusterIP and names.
func apiserverSANs() ([]string, []net.IP) {
	first := ServiceCIDR.Addr().Next()
	dns := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + ClusterDomain}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), ipOf(controlPlaneIP), ipOf(first)}
	return dns, ips
}

func ipOf(a netip.Addr) net.IP { return net.IP(a.AsSlice()) }

// writePKI makes the cluster's CA, certificates and kubeconfigs. A cluster
// is made anew each time, so nothing is reused.
func (l Layout) writePKI() error {
	for _, d := range []string{l.pkiDir(), l.controlPlaneDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	for _, n := range l.Nodes {
		if err := os.MkdirAll(n.Dir, 0o700); err != nil {
			return err
		}
	}
	ca, err := devenv.NewCA(l.Name + "-ca")
	if err != nil {
		return err
	}
	if err := ca.Write(l.pkiPath(caCert), l.pkiPath(caKeyFile)); err != nil {
		return err
	}
	dns, ips := apiserverSANs()
	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    dns,
		IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if err := ca.Issue(server, l.pkiPath(apiserverCert), l.pkiPath(apiserverKey)); err != nil {
		return err
	}
	kubeletClient := clientCert("kube-apiserver-kubelet-client", "system:masters")
	if err := ca.Issue(kubeletClient, l.pkiPath(kubeletClientCert), l.pkiPath(kubeletClientKey)); err != nil {
		return err
	}
	if err := devenv.WriteServiceAccountKey(l.pkiPath(saKey), l.pkiPath(saPub)); err != nil {
		return err
	}
	for _, id := range l.identities() {
		cert, key := l.pkiPath(id.file+".crt"), l.pkiPath(id.file+".key")
		if err := ca.Issue(clientCert(id.cn, id.orgs...), cert, key); err != nil {
			return err
		}
		if err := devenv.WriteKubeconfig(id.kubeconfig, l.Name, l.Server(), l.pkiPath(caCert), cert, key); err != nil {
			return err
		}
	}
	return nil
}

func clientCert(cn string, orgs ...string) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: orgs},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}
