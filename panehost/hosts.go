package panehost

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
	"github.com/fleetd/fleetd/herdr"
)

// DefaultPort is where a member Pod's pane host serves TLS.
const DefaultPort = 7443

// ErrNoPaneHost says a Member has no pane host to reach (yet): a pod
// member whose Pod is not running, or a shared member where fleetd runs
// without a shared pane server.
var ErrNoPaneHost = errors.New("no pane host")

// Hosts reaches the pane hosts of member Pods, over TLS with fleetd's
// client certificate, each checked by its Member's name. It keeps one
// client per pod, dropped when the Pod changes. Which Members run in Pods
// is not its to say: it reaches whichever pod it is asked for.
type Hosts struct {
	// Port is the pods' pane host port; DefaultPort if zero.
	Port int
	// OnError is each pod client's herdr.Client.OnError; set it before the
	// first For.
	OnError func(method string, err error)

	pool *x509.CertPool
	ca   *CA

	mu      sync.Mutex
	cert    *tls.Certificate
	clients map[string]*herdr.Client
}

// NewHosts reaches member Pods with credentials ca mints.
func NewHosts(ca *CA) *Hosts {
	h := &Hosts{ca: ca, clients: map[string]*herdr.Client{}}
	if ca != nil {
		h.pool = ca.Pool()
	}
	return h
}

// For returns the client of the pane host in m's Pod.
func (h *Hosts) For(m *fleetv1alpha1.Member) (*herdr.Client, error) {
	if h.ca == nil {
		return nil, fmt.Errorf("%w: member %s runs in a pod, and this fleetd has no pane host CA", ErrNoPaneHost, m.Name)
	}
	if m.Status.PodIP == "" {
		return nil, fmt.Errorf("%w: member %s's pod is not running", ErrNoPaneHost, m.Name)
	}
	port := h.Port
	if port == 0 {
		port = DefaultPort
	}
	addr := net.JoinHostPort(m.Status.PodIP, strconv.Itoa(port))
	key := string(m.UID) + "@" + addr + "/" + HostID(m)
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.clients[key]; ok {
		return c, nil
	}
	// A member's earlier pods are gone: their clients go too.
	h.forgetLocked(m.UID)
	c := herdr.NewTLSClient(addr, ClientConfig(h.pool, h.clientCert, HostID(m)))
	c.OnError = h.OnError
	h.clients[key] = c
	return c, nil
}

// ForWarmPod returns a client, not kept, of the pane host of the warm Pod
// name in namespace at ip, which no Member has claimed; close its idle
// connections when done with it.
func (h *Hosts) ForWarmPod(namespace, name, ip string) (*herdr.Client, error) {
	if h.ca == nil {
		return nil, fmt.Errorf("%w: this fleetd has no pane host CA", ErrNoPaneHost)
	}
	port := h.Port
	if port == 0 {
		port = DefaultPort
	}
	c := herdr.NewTLSClient(net.JoinHostPort(ip, strconv.Itoa(port)), ClientConfig(h.pool, h.clientCert, WarmHostID(namespace, name)))
	c.OnError = h.OnError
	return c, nil
}

// HostID is what m's pane host's certificate is minted for: the Member's
// UID for a Pod started for it, and the Pod's own name for a warm Pod it
// claimed (WarmHostID), minted before any Member had it.
func HostID(m *fleetv1alpha1.Member) string {
	if m.Status.PodPool != "" {
		return WarmHostID(m.Namespace, m.Status.PodName)
	}
	return string(m.UID)
}

// WarmHostID is the host ID of the warm Pod pod in namespace. Pod names
// are unique among a namespace's live Pods, and a warm Pod's credentials
// go with it.
func WarmHostID(namespace, pod string) string { return pod + "." + namespace + ".warm" }

// Forget drops the clients of a Member that is gone.
func (h *Hosts) Forget(uid types.UID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.forgetLocked(uid)
}

// forgetLocked drops uid's clients, and closes their connections once the
// calls on them end.
func (h *Hosts) forgetLocked(uid types.UID) {
	for k, c := range h.clients {
		if u, _, _ := strings.Cut(k, "@"); u == string(uid) {
			c.CloseIdleConnections()
			delete(h.clients, k)
		}
	}
}

// clientCert is fleetd's client certificate, minted from the CA and minted
// again before it expires.
func (h *Hosts) clientCert() (*tls.Certificate, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if h.cert != nil && h.cert.Leaf != nil && now.Add(RenewBefore).Before(h.cert.Leaf.NotAfter) {
		return h.cert, nil
	}
	cert, err := h.ca.IssueController(now)
	if err != nil {
		return nil, err
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, err
		}
	}
	h.cert = &cert
	return h.cert, nil
}

// Keys of the CA Secret.
const (
	caCertKey = "ca.crt"
	caKeyKey  = "ca.key"
)

// LoadCA reads fleetd's pane host CA from its Secret (uncached: fleetd
// caches only members' Secrets), making it on first use. Replicas that race
// to make it read the one that won.
func LoadCA(ctx context.Context, r client.Reader, w client.Writer, key types.NamespacedName) (*CA, error) {
	for range 2 {
		var s corev1.Secret
		err := r.Get(ctx, key, &s)
		if err == nil {
			return ParseCA(s.Data[caCertKey], s.Data[caKeyKey])
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading the pane host CA %s: %w", key, err)
		}
		ca, keyPEM, err := NewCA(time.Now())
		if err != nil {
			return nil, err
		}
		s = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{fleetv1alpha1.LabelInternal: "pane-host-ca"}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{caCertKey: ca.CertPEM, caKeyKey: keyPEM},
		}
		switch err := w.Create(ctx, &s); {
		case err == nil:
			return ca, nil
		case !apierrors.IsAlreadyExists(err):
			return nil, fmt.Errorf("creating the pane host CA %s: %w", key, err)
		}
	}
	return nil, fmt.Errorf("the pane host CA %s keeps changing", key)
}
