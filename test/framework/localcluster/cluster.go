package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Cluster is a local cluster that Up started, as its state directory
// describes it. Tests load it with Load and reach it, and kill and start
// its nodes, through it.
type Cluster struct {
	Layout
}

// ErrNoCluster says the state directory holds no cluster.
var ErrNoCluster = errors.New("no local cluster is running (make cluster starts one)")

// Load reads the cluster whose state is in stateDir.
func Load(stateDir string) (*Cluster, error) {
	data, err := os.ReadFile(NewLayout(Config{StateDir: stateDir}).LayoutPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoCluster
	}
	if err != nil {
		return nil, err
	}
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("reading the cluster's configuration: %w", err)
	}
	c.StateDir = stateDir
	return &Cluster{Layout: NewLayout(c.WithDefaults())}, nil
}

func (l Layout) saveConfig() error {
	data, err := json.MarshalIndent(l.Config, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(l.LayoutPath(), append(data, '\n'), 0o644)
}

// NodeNames are the cluster's Node names, node-1 first.
func (c *Cluster) NodeNames() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Name
	}
	return out
}

// RESTConfig reaches the API server as an administrator, through the
// relay on 127.0.0.1.
func (c *Cluster) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig())
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", c.Kubeconfig(), err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	return cfg, nil
}

// Client is a clientset for the administrator.
func (c *Cluster) Client() (kubernetes.Interface, error) {
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// Dial opens a TCP connection to addr (IP:port) inside the cluster's
// network namespace: a ClusterIP, a pod IP, a node IP. The caller must be
// root.
func (c *Cluster) Dial(ctx context.Context, addr string) (net.Conn, error) {
	return DialInNetns(ctx, c.NetnsPath(), addr)
}

// Listen listens on a free port of the namespace's own address (the
// control plane's, which every pod reaches) for a server of the caller's
// that pods call, such as a stand-in for an outside API. It returns the
// listener and the URL host (IP:port) pods dial. The caller must be root.
func (c *Cluster) Listen() (net.Listener, string, error) {
	ln, err := ListenInNetns(c.NetnsPath(), netip.AddrPortFrom(controlPlaneIP, 0).String())
	if err != nil {
		return nil, "", err
	}
	return ln, ln.Addr().String(), nil
}

// Forward listens on a free port of 127.0.0.1 and relays each connection
// to target (IP:port) inside the cluster's network namespace, until ctx
// ends. It returns the address it listens on: how a test in the machine's
// namespace reaches a Service (see ServiceAddr) without port-forward.
func (c *Cluster) Forward(ctx context.Context, target string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go func() { _ = Relay(ctx, ln, c.NetnsPath(), target) }()
	return ln.Addr().String(), nil
}

// ServiceAddr is the ClusterIP and port of the Service's port named port
// (or its only port when port is empty), to Dial or Forward to.
func (c *Cluster) ServiceAddr(ctx context.Context, namespace, name, port string) (string, error) {
	kc, err := c.Client()
	if err != nil {
		return "", err
	}
	svc, err := kc.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	for _, p := range svc.Spec.Ports {
		if p.Name == port || (port == "" && len(svc.Spec.Ports) == 1) {
			return net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(p.Port))), nil
		}
	}
	return "", fmt.Errorf("service %s/%s has no port %q", namespace, name, port)
}

// Processes are the daemons the journal recorded, and whether each runs.
func (c *Cluster) Processes() ([]ProcessStatus, error) {
	entries, err := Journal{path: c.JournalPath()}.Load()
	if err != nil {
		return nil, err
	}
	latest := map[string]Entry{}
	var order []string
	for _, e := range entries {
		if e.Op != OpProcess {
			continue
		}
		if _, ok := latest[e.Name]; !ok {
			order = append(order, e.Name)
		}
		latest[e.Name] = e
	}
	var out []ProcessStatus
	for _, name := range order {
		e := latest[name]
		out = append(out, ProcessStatus{Name: name, PID: e.PID, Running: alive(e)})
	}
	return out, nil
}

// ProcessStatus is one daemon of the cluster.
type ProcessStatus struct {
	Name    string
	PID     int
	Running bool
}

// Healthy says whether the bring-up finished, the control plane's daemons
// run and the API server, through the relay, is ready. A node may be down:
// killing one is what tests do.
func (c *Cluster) Healthy(ctx context.Context) error {
	if !exists(c.completePath()) {
		return errors.New("its bring-up did not finish")
	}
	procs, err := c.Processes()
	if err != nil {
		return err
	}
	for _, p := range procs {
		if !p.Running && !strings.Contains(p.Name, "/") {
			return fmt.Errorf("%s (pid %d) is not running", p.Name, p.PID)
		}
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		return err
	}
	return apiReady(ctx, cfg)
}

func apiReady(ctx context.Context, cfg *rest.Config) error {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	hc.Timeout = 5 * time.Second
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the API server is not ready: %s", resp.Status)
	}
	return nil
}

// nodeReady says whether the Node's Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// NodeReady says whether the Node named name is Ready, as Kubernetes says.
func (c *Cluster) NodeReady(ctx context.Context, name string) (bool, error) {
	kc, err := c.Client()
	if err != nil {
		return false, err
	}
	n, err := kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	return nodeReady(n), nil
}

// Import imports an OCI archive into every node's containerd, the nodes in
// parallel.
func (c *Cluster) Import(ctx context.Context, img Image) error {
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Go(func() { errs[i] = importImage(ctx, n, img) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// WaitNodesReady waits until every node is Ready.
func (c *Cluster) WaitNodesReady(ctx context.Context, timeout time.Duration) error {
	return c.waitNodesReady(ctx, timeout)
}

// PodNetns is the network namespace file of the running pod whose UID is
// uid (/proc/<pid>/ns/net of a process in its cgroup), for DialInNetns and
// ListenInNetns: a test's connection from there is the pod's own, subject
// to the NetworkPolicies that select it. The caller must be root.
func (c *Cluster) PodNetns(uid string) (string, error) {
	hs, err := cgroupHierarchies()
	if err != nil {
		return "", err
	}
	// The kubelets' cgroupfs driver names a pod's cgroup pod<uid>.
	want := "pod" + uid
	for _, h := range hs {
		var found string
		_ = filepath.WalkDir(filepath.Join(h.Point, c.CgroupRoot()), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && d.Name() == want {
				found = path
				return filepath.SkipAll
			}
			return nil
		})
		if found == "" {
			continue
		}
		if pids := procsUnder([]hierarchy{h}, strings.TrimPrefix(found, h.Point)); len(pids) > 0 {
			return "/proc/" + strconv.Itoa(pids[0]) + "/ns/net", nil
		}
	}
	return "", fmt.Errorf("no process of pod %s runs in cluster %s", uid, c.Name)
}
