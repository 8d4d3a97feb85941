package panehost

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"sync"
	"time"
)

// Certificate lifetimes. A member's serving certificate is re-minted long
// before it expires and its pane host reloads it from the mounted Secret,
// so a long-lived agent never restarts for it.
const (
	caValidity     = 10 * 365 * 24 * time.Hour
	leafValidity   = 90 * 24 * time.Hour
	RenewBefore    = 30 * 24 * time.Hour
	clockSkewGrace = 5 * time.Minute
)

// ControllerName is the common name of the client certificate fleetd's
// controllers present to pane hosts; a pane host admits no other.
const ControllerName = "fleetd-controllers"

// Keys of the Secret that carries a member's pane host credentials, as
// kubernetes.io/tls names them, plus the CA a pane host trusts callers by.
const (
	CertKey = "tls.crt"
	KeyKey  = "tls.key"
	CAKey   = "ca.crt"
)

// ServerName is the name in a pane host's serving certificate, and what
// the controllers check it against: its host ID (HostID), so a pod that
// holds another member's address (an IP reused after a restart) is never
// taken for this one.
func ServerName(hostID string) string { return hostID + ".member.fleetd" }

// CA is the authority that mints pane host credentials.
type CA struct {
	cert *x509.Certificate
	key  crypto.Signer
	// CertPEM is the CA's certificate, which both sides trust.
	CertPEM []byte
}

// NewCA makes a CA with a fresh key. KeyPEM returns the key to store.
func NewCA(now time.Time) (*CA, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "fleetd pane host CA"},
		NotBefore:             now.Add(-clockSkewGrace),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	ca, err := ParseCA(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM)
	return ca, keyPEM, err
}

// ParseCA loads a CA from its PEM certificate and key.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("loading the pane host CA: %w", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("parsing the pane host CA: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("the pane host CA's certificate is not a CA")
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("the pane host CA's key cannot sign")
	}
	return &CA{cert: cert, key: signer, CertPEM: certPEM}, nil
}

// Pool is a pool that trusts only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// IssueServer mints the serving certificate of one pane host, by its host
// ID (HostID).
func (ca *CA) IssueServer(hostID string, now time.Time) (certPEM, keyPEM []byte, err error) {
	return ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: ServerName(hostID)},
		DNSNames:    []string{ServerName(hostID)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, now)
}

// IssueController mints the client certificate the controllers present.
func (ca *CA) IssueController(now time.Time) (tls.Certificate, error) {
	certPEM, keyPEM, err := ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: ControllerName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, now)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

func (ca *CA) issue(tmpl *x509.Certificate, now time.Time) ([]byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = now.Add(-clockSkewGrace)
	tmpl.NotAfter = now.Add(leafValidity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// NeedsRenewal reports whether a PEM certificate is missing, unreadable,
// not the CA's, or expires within RenewBefore.
func (ca *CA) NeedsRenewal(certPEM []byte, now time.Time) bool {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return true
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return true
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return true
	}
	return now.Add(RenewBefore).After(cert.NotAfter)
}

// ClientConfig is the controllers' TLS configuration for one pane host:
// trust only the CA, expect that host's name, present cert.
func ClientConfig(pool *x509.CertPool, cert func() (*tls.Certificate, error), hostID string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		RootCAs:    pool,
		ServerName: ServerName(hostID),
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return cert()
		},
	}
}

// ServerConfig is a pane host's TLS configuration from the files of its
// mounted Secret: it serves the certificate in certFile (reloaded when the
// file changes, as the kubelet updates a Secret volume) and admits only
// fleetd's controllers, by a client certificate the CA in caFile signed.
func ServerConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading the CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s holds no certificate", caFile)
	}
	kp := &reloadingPair{certFile: certFile, keyFile: keyFile}
	if _, err := kp.get(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      pool,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return kp.get() },
		VerifyPeerCertificate: func(_ [][]byte, chains [][]*x509.Certificate) error {
			for _, chain := range chains {
				if len(chain) > 0 && chain[0].Subject.CommonName == ControllerName {
					return nil
				}
			}
			return errors.New("only fleetd's controllers may call this pane host")
		},
	}, nil
}

// reloadingPair is a key pair read again when its files change.
type reloadingPair struct {
	certFile, keyFile string

	mu      sync.Mutex
	modTime time.Time
	pair    *tls.Certificate
}

func (p *reloadingPair) get() (*tls.Certificate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fi, err := os.Stat(p.certFile)
	if err != nil {
		if p.pair != nil {
			return p.pair, nil
		}
		return nil, fmt.Errorf("reading the serving certificate: %w", err)
	}
	if p.pair != nil && fi.ModTime().Equal(p.modTime) {
		return p.pair, nil
	}
	pair, err := tls.LoadX509KeyPair(p.certFile, p.keyFile)
	if err != nil {
		if p.pair != nil {
			// A Secret volume swaps both files at once; a read between
			// the two keeps the pair that worked.
			return p.pair, nil
		}
		return nil, fmt.Errorf("loading the serving certificate: %w", err)
	}
	p.pair, p.modTime = &pair, fi.ModTime()
	return p.pair, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n
}
