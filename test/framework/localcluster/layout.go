package localcluster

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
)

// Config says what cluster to run. The zero value of every field but
// StateDir and BinDir has a default (see WithDefaults).
type Config struct {
	// StateDir holds everything the cluster keeps: the journal, etcd's data,
	// certificates, kubeconfigs, each node's containerd and kubelet, logs.
	StateDir string `json:"stateDir"`
	// BinDir holds the Kubernetes binaries (bin/controlplane) and coredns.
	BinDir string `json:"binDir"`
	// Nodes is how many kubelets (each with its own containerd) to run.
	Nodes int `json:"nodes"`
	// Name names the network namespace and the cgroup root.
	Name string `json:"name"`
	// Port is the API server's port: on 127.0.0.1 in the machine's network
	// namespace (the relay) and in the cluster's (the API server itself).
	Port int `json:"port"`
	// NodeMonitorGracePeriod is how long a node may go silent before
	// kube-controller-manager marks it NotReady. Kubernetes' default is 50s;
	// the default here is shorter so that a test of a lost node is quick.
	NodeMonitorGracePeriod string `json:"nodeMonitorGracePeriod"`
}

// Defaults of Config.
const (
	DefaultNodes = 3
	DefaultName  = "fleetd-cluster"
	// DefaultPort keeps clear of `fleetd dev` (16443, 22379, 8080) and of
	// the ephemeral ports the tests take.
	DefaultPort                   = 26443
	DefaultNodeMonitorGracePeriod = "16s"
)

// WithDefaults returns c with its zero fields set to the defaults.
func (c Config) WithDefaults() Config {
	if c.Nodes == 0 {
		c.Nodes = DefaultNodes
	}
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.NodeMonitorGracePeriod == "" {
		c.NodeMonitorGracePeriod = DefaultNodeMonitorGracePeriod
	}
	return c
}

// Validate says what is wrong with a defaulted Config.
func (c Config) Validate() error {
	switch {
	case c.StateDir == "" || !filepath.IsAbs(c.StateDir):
		return fmt.Errorf("the state directory must be an absolute path, got %q", c.StateDir)
	case c.BinDir == "":
		return fmt.Errorf("no directory of Kubernetes binaries given")
	case c.Nodes < 1 || c.Nodes > maxNodes:
		return fmt.Errorf("nodes must be between 1 and %d, got %d", maxNodes, c.Nodes)
	case c.Port < 1 || c.Port > 65535:
		return fmt.Errorf("port must be between 1 and 65535, got %d", c.Port)
	case len(c.Name) == 0 || len(c.Name) > 32:
		return fmt.Errorf("name must be 1 to 32 characters, got %q", c.Name)
	}
	return nil
}

// maxNodes keeps node names, bridge names and pod subnets in range.
const maxNodes = 50

// The cluster's addresses, all inside its network namespace. They are
// private ranges that nothing outside the namespace ever sees.
var (
	// controlPlaneIP is where the API server is advertised (the endpoint of
	// the kubernetes Service).
	controlPlaneIP = netip.MustParseAddr("172.30.0.2")
	// nodeIPBase + i is node i's InternalIP.
	nodeIPBase = netip.MustParseAddr("172.30.0.10")
	// ClusterCIDR holds every pod; node i gets 10.244.i.0/24.
	ClusterCIDR = netip.MustParsePrefix("10.244.0.0/16")
	// ServiceCIDR holds every ClusterIP; the kubernetes Service has the
	// first address and kube-dns the tenth, as on kind.
	ServiceCIDR = netip.MustParsePrefix("10.96.0.0/16")
	// DNSServiceIP is the kube-dns Service's ClusterIP.
	DNSServiceIP = netip.MustParseAddr("10.96.0.10")
)

// ClusterDomain is the DNS domain of Services.
const ClusterDomain = "cluster.local"

// Ports inside the namespace. Each kubelet binds its own node IP, so the
// kubelets share the usual port numbers as nodes of a real cluster do.
const (
	etcdClientPort = 2379
	etcdPeerPort   = 2380
	kubeletPort    = 10250
	kubeletHealthz = 10248
)

// Layout is where everything of a cluster is: names, addresses and paths,
// all derived from its Config.
type Layout struct {
	Config
	Nodes []NodeLayout
}

// NodeLayout is one node: its kubelet and its containerd.
type NodeLayout struct {
	// Name is the Node's name.
	Name string
	// IP is the node's InternalIP; the kubelet and containerd's streaming
	// server listen on it.
	IP netip.Addr
	// PodCIDR is the subnet its pods get addresses from.
	PodCIDR netip.Prefix
	// Gateway is the bridge's address, the pods' default route.
	Gateway netip.Addr
	// Bridge is the CNI bridge its pods' veths join.
	Bridge string
	// Dir holds the node's files.
	Dir string
}

// NewLayout lays out the cluster of a defaulted, valid Config.
func NewLayout(c Config) Layout {
	l := Layout{Config: c}
	for i := 1; i <= c.Nodes; i++ {
		name := "node-" + strconv.Itoa(i)
		ip := nodeIPBase
		for range i {
			ip = ip.Next()
		}
		cidr := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i), 0}), 24)
		l.Nodes = append(l.Nodes, NodeLayout{
			Name:    name,
			IP:      ip,
			PodCIDR: cidr,
			Gateway: cidr.Addr().Next(),
			Bridge:  "br-" + name,
			Dir:     filepath.Join(c.StateDir, "nodes", name),
		})
	}
	return l
}

// Node returns the node named name.
func (l Layout) Node(name string) (NodeLayout, error) {
	for _, n := range l.Nodes {
		if n.Name == name {
			return n, nil
		}
	}
	names := make([]string, len(l.Nodes))
	for i, n := range l.Nodes {
		names[i] = n.Name
	}
	return NodeLayout{}, fmt.Errorf("no node %q in this cluster (it has %v)", name, names)
}

// NetnsPath is the network namespace's file, as `ip netns add` makes it.
func (l Layout) NetnsPath() string { return filepath.Join(netnsDir, l.Name) }

// netnsDir is where `ip netns` keeps its namespaces.
const netnsDir = "/run/netns"

// Paths in the state directory.
func (l Layout) path(elem ...string) string {
	return filepath.Join(append([]string{l.StateDir}, elem...)...)
}

// JournalPath is the record of every change made to the machine.
func (l Layout) JournalPath() string { return l.path("journal.jsonl") }

// completePath is there once a bring-up has finished.
func (l Layout) completePath() string { return l.path("up-complete") }

// LayoutPath holds the Config of the running cluster.
func (l Layout) LayoutPath() string { return l.path("cluster.json") }

// Kubeconfig is the administrator's kubeconfig: it reaches the API server
// at 127.0.0.1:Port from the machine's namespace (through the relay) and
// from the cluster's (directly).
func (l Layout) Kubeconfig() string { return l.path("kubeconfig") }

// LogDir holds every daemon's log.
func (l Layout) LogDir() string { return l.path("logs") }

func (l Layout) pkiDir() string          { return l.path("pki") }
func (l Layout) pkiPath(f string) string { return filepath.Join(l.pkiDir(), f) }
func (l Layout) etcdDir() string         { return l.path("etcd") }
func (l Layout) controlPlaneDir() string {
	return l.path("control-plane")
}

// Server is the API server's URL in the kubeconfigs.
func (l Layout) Server() string { return "https://127.0.0.1:" + strconv.Itoa(l.Port) }

// Cgroup paths, relative to each hierarchy's root.

// CgroupRoot holds every cgroup of the cluster.
func (l Layout) CgroupRoot() string { return "/" + l.Name }

// controlPlaneCgroup holds the control plane's daemons and the relay.
func (l Layout) controlPlaneCgroup() string { return l.CgroupRoot() + "/control-plane" }

// NodeCgroup holds everything of node n: its kubelet's cgroupRoot, under
// which the pods are, and runtimeCgroup.
func (l Layout) NodeCgroup(n NodeLayout) string { return l.CgroupRoot() + "/" + n.Name }

// runtimeCgroup holds node n's kubelet, containerd and containerd's shims.
func (l Layout) runtimeCgroup(n NodeLayout) string { return l.NodeCgroup(n) + "/runtime" }

// Node paths.
func (n NodeLayout) path(elem ...string) string {
	return filepath.Join(append([]string{n.Dir}, elem...)...)
}

// ContainerdSocket is the node's containerd's address, for ctr --address.
func (n NodeLayout) ContainerdSocket() string { return n.path("containerd.sock") }
func (n NodeLayout) containerdConfig() string { return n.path("containerd.toml") }
func (n NodeLayout) containerdRoot() string   { return n.path("containerd", "root") }
func (n NodeLayout) containerdState() string  { return n.path("containerd", "state") }
func (n NodeLayout) runcRoot() string         { return n.path("containerd", "runc") }
func (n NodeLayout) cniConfDir() string       { return n.path("cni", "net.d") }
func (n NodeLayout) cniIPAMDir() string       { return n.path("cni", "ipam") }
func (n NodeLayout) kubeletRoot() string      { return n.path("kubelet") }
func (n NodeLayout) kubeletConfig() string    { return n.path("kubelet.yaml") }
func (n NodeLayout) kubeconfig() string       { return n.path("kubeconfig") }
func (n NodeLayout) podLogsDir() string       { return n.path("pod-logs") }
func (n NodeLayout) volumePluginDir() string  { return n.path("volume-plugins") }
