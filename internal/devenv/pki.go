package devenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// pki is the control plane's certificates and keys, made once per state
// directory and reused after.
type pki struct {
	dir string
}

func (p pki) path(name string) string { return filepath.Join(p.dir, name) }

// CAFile and the other names are the files under the pki directory.
const (
	caCert     = "ca.crt"
	caKey      = "ca.key"
	serverCert = "apiserver.crt"
	serverKey  = "apiserver.key"
	adminCert  = "admin.crt"
	adminKey   = "admin.key"
	saKey      = "sa.key"
	saPub      = "sa.pub"
	// etcd serves its client and peer URLs with etcdCert and asks every
	// caller for a certificate of the CA: the API server's is etcdClient.
	etcdCert      = "etcd.crt"
	etcdKey       = "etcd.key"
	etcdClientCrt = "apiserver-etcd-client.crt"
	etcdClientKey = "apiserver-etcd-client.key"
)

// ensure writes whatever is missing. A partial set from an interrupted run
// is replaced whole, since its parts would not match.
func (p pki) ensure() error {
	all := []string{caCert, caKey, serverCert, serverKey, adminCert, adminKey, saKey, saPub, etcdCert, etcdKey, etcdClientCrt, etcdClientKey}
	missing := 0
	for _, f := range all {
		if _, err := os.Stat(p.path(f)); err != nil {
			missing++
		}
	}
	if missing == 0 {
		return nil
	}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	ca, err := NewCA("fleetd-dev-ca")
	if err != nil {
		return err
	}
	if err := ca.Write(p.path(caCert), p.path(caKey)); err != nil {
		return err
	}
	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if err := ca.Issue(server, p.path(serverCert), p.path(serverKey)); err != nil {
		return err
	}
	admin := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "fleetd-dev-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := ca.Issue(admin, p.path(adminCert), p.path(adminKey)); err != nil {
		return err
	}
	// etcd's own certificate is also its client certificate: its gateway
	// and its peer connections call itself.
	etcd := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "etcd"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if err := ca.Issue(etcd, p.path(etcdCert), p.path(etcdKey)); err != nil {
		return err
	}
	etcdClient := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver-etcd-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := ca.Issue(etcdClient, p.path(etcdClientCrt), p.path(etcdClientKey)); err != nil {
		return err
	}
	return WriteServiceAccountKey(p.path(saKey), p.path(saPub))
}

// etcdHTTPClient reaches etcd's HTTP endpoints as the API server does,
// with the certificate etcd asks for.
func (p pki) etcdHTTPClient() (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(p.path(etcdClientCrt), p.path(etcdClientKey))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(p.path(caCert))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in %s", p.path(caCert))
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}}, nil
}

// CA is a certificate authority that issues the certificates of a local
// control plane and its clients.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA makes a CA, valid for ten years, named commonName.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("creating the CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// LoadCA reads a CA that Write wrote.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("the CA's files hold no PEM block")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Write writes the CA's certificate and key as PEM files.
func (ca *CA) Write(certFile, keyFile string) error {
	if err := writePEM(certFile, "CERTIFICATE", ca.Cert.Raw); err != nil {
		return err
	}
	return writeKey(keyFile, ca.Key)
}

// Issue signs a certificate for tmpl (its subject, names and extended key
// usage; serial, validity and key usage are set here) with a new key, and
// writes both as PEM files.
func (ca *CA) Issue(tmpl *x509.Certificate, certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(5 * 365 * 24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return fmt.Errorf("issuing %s: %w", certFile, err)
	}
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return err
	}
	return writeKey(keyFile, key)
}

// WriteServiceAccountKey writes a new RSA key that signs service-account
// tokens, and its public half that the API server checks them with.
func WriteServiceAccountKey(keyFile, pubFile string) error {
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	if err := writePEM(keyFile, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(sa)); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return err
	}
	return writePEM(pubFile, "PUBLIC KEY", pub)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

func writePEM(path string, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
