// Package devenv runs a local Kubernetes control plane (etcd,
// kube-apiserver, kube-controller-manager, built from pinned modules by
// `make controlplane`) in a state directory that a second run reuses. It is
// what `fleetd dev` and the end-to-end tests stand on.
package devenv

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ControlPlane is a local etcd, kube-apiserver and kube-controller-manager.
type ControlPlane struct {
	// Dir holds the state: etcd data, certificates, kubeconfig and logs.
	Dir string
	// BinDir holds kube-apiserver, kube-controller-manager and etcd.
	BinDir string
	// EtcdPort and APIServerPort are on 127.0.0.1; EtcdPort+1 is etcd's peer
	// port. Each asks every caller for a certificate of the control plane's
	// CA (the API server also takes tokens); none answers anonymously.
	EtcdPort      int
	APIServerPort int

	etcd, apiserver, kcm *Process
}

// Defaults for the ports, chosen away from the well-known ones so a dev
// environment does not fight a real cluster on the same machine.
const (
	DefaultEtcdPort      = 22379
	DefaultAPIServerPort = 16443
)

// binaries the control plane needs.
var binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager"}

// CheckBinaries says clearly what is missing from a half-built control plane.
func CheckBinaries(dir string) error {
	var missing []string
	for _, b := range binaries {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	switch {
	case len(missing) == len(binaries):
		return fmt.Errorf("no control plane in %s: run `make controlplane` (or set KUBEBUILDER_ASSETS)", dir)
	case len(missing) > 0:
		return fmt.Errorf("the control plane in %s is half-built: %s missing; run `make controlplane` again", dir, strings.Join(missing, ", "))
	}
	return nil
}

// Kubeconfig is the path of the admin kubeconfig.
func (c *ControlPlane) Kubeconfig() string { return filepath.Join(c.Dir, "kubeconfig") }

// LogDir is where the processes log.
func (c *ControlPlane) LogDir() string { return filepath.Join(c.Dir, "logs") }

func (c *ControlPlane) pki() pki { return pki{dir: filepath.Join(c.Dir, "pki")} }

// Start brings the control plane up and waits until the API server is ready.
func (c *ControlPlane) Start(ctx context.Context) error {
	if c.EtcdPort == 0 {
		c.EtcdPort = DefaultEtcdPort
	}
	if c.APIServerPort == 0 {
		c.APIServerPort = DefaultAPIServerPort
	}
	if err := CheckBinaries(c.BinDir); err != nil {
		return err
	}
	for what, addr := range map[string]string{
		"etcd":           hostPort(c.EtcdPort),
		"etcd (peer)":    hostPort(c.EtcdPort + 1),
		"kube-apiserver": hostPort(c.APIServerPort),
	} {
		if err := checkPort(what, addr); err != nil {
			return err
		}
	}
	// The state holds the admin kubeconfig, every key and etcd's data; the
	// members' users must not even list it. MkdirAll keeps the mode of a
	// directory that exists, so set it.
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(c.Dir, 0o700); err != nil {
		return err
	}
	p := c.pki()
	if err := p.ensure(); err != nil {
		return fmt.Errorf("making certificates: %w", err)
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}

	// Every process on this machine reaches 127.0.0.1, the members' users
	// too, so etcd answers only a caller with a certificate of the control
	// plane's CA, on its client and its peer URL alike.
	etcdURL := "https://" + hostPort(c.EtcdPort)
	peerURL := "https://" + hostPort(c.EtcdPort+1)
	c.etcd = &Process{
		Name: "etcd", Path: filepath.Join(c.BinDir, "etcd"), Env: env, Log: filepath.Join(c.LogDir(), "etcd.log"),
		Args: []string{
			"--name=fleetd-dev",
			"--data-dir=" + filepath.Join(c.Dir, "etcd"),
			"--listen-client-urls=" + etcdURL,
			"--advertise-client-urls=" + etcdURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=fleetd-dev=" + peerURL,
			"--cert-file=" + p.path(etcdCert),
			"--key-file=" + p.path(etcdKey),
			"--trusted-ca-file=" + p.path(caCert),
			"--client-cert-auth",
			"--peer-cert-file=" + p.path(etcdCert),
			"--peer-key-file=" + p.path(etcdKey),
			"--peer-trusted-ca-file=" + p.path(caCert),
			"--peer-client-cert-auth",
			"--unsafe-no-fsync",
			"--quota-backend-bytes=" + strconv.Itoa(4<<30),
		},
	}
	etcdClient, err := p.etcdHTTPClient()
	if err != nil {
		return err
	}
	if err := c.etcd.Start(); err != nil {
		return err
	}
	if err := waitFor(ctx, c.etcd, "healthy", 60*time.Second, func() error { return httpOK(etcdClient, etcdURL+"/health") }); err != nil {
		c.Stop()
		return err
	}

	c.apiserver = &Process{
		Name: "kube-apiserver", Path: filepath.Join(c.BinDir, "kube-apiserver"), Env: env, Log: filepath.Join(c.LogDir(), "kube-apiserver.log"),
		Args: []string{
			"--etcd-servers=" + etcdURL,
			"--etcd-cafile=" + p.path(caCert),
			"--etcd-certfile=" + p.path(etcdClientCrt),
			"--etcd-keyfile=" + p.path(etcdClientKey),
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(c.APIServerPort),
			// Anonymous requests would read /version and the health
			// endpoints; no one here needs them without a certificate.
			"--anonymous-auth=false",
			"--tls-cert-file=" + p.path(serverCert),
			"--tls-private-key-file=" + p.path(serverKey),
			"--client-ca-file=" + p.path(caCert),
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + p.path(saPub),
			"--service-account-signing-key-file=" + p.path(saKey),
			"--service-cluster-ip-range=10.0.0.0/24",
			"--authorization-mode=RBAC",
			"--allow-privileged=true",
			"--profiling=false",
			"--endpoint-reconciler-type=none",
		},
	}
	if err := c.apiserver.Start(); err != nil {
		c.Stop()
		return err
	}
	if err := c.writeKubeconfig(); err != nil {
		c.Stop()
		return err
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		c.Stop()
		return err
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		c.Stop()
		return err
	}
	if err := waitFor(ctx, c.apiserver, "ready", 120*time.Second, func() error { return httpOK(hc, cfg.Host+"/readyz") }); err != nil {
		c.Stop()
		return err
	}

	c.kcm = &Process{
		Name: "kube-controller-manager", Path: filepath.Join(c.BinDir, "kube-controller-manager"), Env: env, Log: filepath.Join(c.LogDir(), "kube-controller-manager.log"),
		Args: []string{
			"--kubeconfig=" + c.Kubeconfig(),
			"--authentication-kubeconfig=" + c.Kubeconfig(),
			"--authorization-kubeconfig=" + c.Kubeconfig(),
			"--service-account-private-key-file=" + p.path(saKey),
			"--root-ca-file=" + p.path(caCert),
			"--use-service-account-credentials=false",
			"--leader-elect=false",
			// It serves nothing: no health, metrics or debug port.
			"--secure-port=0",
			"--controllers=*,-node-ipam-controller,-node-lifecycle-controller,-persistentvolume-binder-controller,-persistentvolume-attach-detach-controller,-persistentvolume-expander-controller,-ttl-controller",
		},
	}
	if err := c.kcm.Start(); err != nil {
		c.Stop()
		return err
	}
	return nil
}

// Stop stops every process, the API server before etcd.
func (c *ControlPlane) Stop() {
	for _, p := range []*Process{c.kcm, c.apiserver, c.etcd} {
		if p != nil {
			p.Stop(10 * time.Second)
		}
	}
}

// Exited is closed when any control-plane process ends on its own.
func (c *ControlPlane) Exited() <-chan *Process {
	ch := make(chan *Process, 1)
	for _, p := range []*Process{c.etcd, c.apiserver, c.kcm} {
		go func() {
			<-p.Exited()
			select {
			case ch <- p:
			default:
			}
		}()
	}
	return ch
}

// RESTConfig reaches the API server as an administrator.
func (c *ControlPlane) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig())
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", c.Kubeconfig(), err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	return cfg, nil
}

func (c *ControlPlane) writeKubeconfig() error {
	p := c.pki()
	return WriteKubeconfig(c.Kubeconfig(), "fleetd-dev", "https://"+hostPort(c.APIServerPort), p.path(caCert), p.path(adminCert), p.path(adminKey))
}

// WriteKubeconfig writes a kubeconfig whose one context, named name, reaches
// server with a client certificate; its namespace is default.
func WriteKubeconfig(path, name, server, caFile, certFile, keyFile string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: "default"}
	cfg.CurrentContext = name
	return clientcmd.WriteToFile(*cfg, path)
}

func httpOK(hc *http.Client, url string) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}
