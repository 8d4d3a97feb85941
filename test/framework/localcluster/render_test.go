package localcluster

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
)

func testLayout(nodes int) Layout {
	return NewLayout(Config{StateDir: "/state", BinDir: "/bin", Nodes: nodes}.WithDefaults())
}

func TestNewLayout(t *testing.T) {
	type node struct{ Name, IP, PodCIDR, Gateway, Bridge, Dir, Cgroup string }
	l := testLayout(3)
	var got []node
	for _, n := range l.Nodes {
		got = append(got, node{n.Name, n.IP.String(), n.PodCIDR.String(), n.Gateway.String(), n.Bridge, n.Dir, l.NodeCgroup(n)})
	}
	want := []node{
		{"node-1", "172.30.0.11", "10.244.1.0/24", "10.244.1.1", "br-node-1", "/state/nodes/node-1", "/fleetd-cluster/node-1"},
		{"node-2", "172.30.0.12", "10.244.2.0/24", "10.244.2.1", "br-node-2", "/state/nodes/node-2", "/fleetd-cluster/node-2"},
		{"node-3", "172.30.0.13", "10.244.3.0/24", "10.244.3.1", "br-node-3", "/state/nodes/node-3", "/fleetd-cluster/node-3"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
	if l.Server() != "https://127.0.0.1:26443" || l.NetnsPath() != "/run/netns/fleetd-cluster" {
		t.Errorf("server %s, netns %s", l.Server(), l.NetnsPath())
	}
	if _, err := l.Node("node-4"); err == nil {
		t.Error("Node(node-4) of a 3-node cluster: no error")
	}
}

func TestConfigValidate(t *testing.T) {
	cases := map[string]struct {
		cfg     Config
		wantErr string
	}{
		"defaults":          {cfg: Config{StateDir: "/s", BinDir: "/b"}},
		"relative state":    {cfg: Config{StateDir: "s", BinDir: "/b"}, wantErr: "absolute"},
		"too many nodes":    {cfg: Config{StateDir: "/s", BinDir: "/b", Nodes: 51}, wantErr: "nodes must be"},
		"port out of range": {cfg: Config{StateDir: "/s", BinDir: "/b", Port: 70000}, wantErr: "port must be"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.cfg.WithDefaults().Validate()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Validate = %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

// TestRenderContainerd checks what keeps several containerds apart and
// inside the state directory.
func TestRenderContainerd(t *testing.T) {
	n := testLayout(2).Nodes[1]
	var cfg struct {
		Root, State string
		GRPC        struct{ Address string }
		Plugins     map[string]map[string]any
	}
	if _, err := toml.Decode(renderContainerd(n), &cfg); err != nil {
		t.Fatalf("containerd's configuration is not TOML: %v", err)
	}
	cri := cfg.Plugins["io.containerd.grpc.v1.cri"]
	cni := cri["cni"].(map[string]any)
	got := map[string]any{
		"root": cfg.Root, "state": cfg.State, "address": cfg.GRPC.Address,
		"sandbox": cri["sandbox_image"], "stream": cri["stream_server_address"],
		"netnsUnderState": cri["netns_mounts_under_state_dir"], "cniConf": cni["conf_dir"],
		"opt": cfg.Plugins["io.containerd.internal.v1.opt"]["path"],
	}
	want := map[string]any{
		"root": "/state/nodes/node-2/containerd/root", "state": "/state/nodes/node-2/containerd/state",
		"address": "/state/nodes/node-2/containerd.sock", "sandbox": PauseImage, "stream": "172.30.0.12",
		"netnsUnderState": true, "cniConf": "/state/nodes/node-2/cni/net.d", "opt": "/state/nodes/node-2/containerd/opt",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("containerd configuration (-want +got):\n%s", diff)
	}
}

func TestRenderCNI(t *testing.T) {
	out, err := renderCNI(testLayout(1).Nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Name    string
		Plugins []struct {
			Type, Bridge string
			IPAM         struct {
				DataDir string
				Ranges  [][]struct{ Subnet, Gateway string }
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &conf); err != nil {
		t.Fatal(err)
	}
	b := conf.Plugins[0]
	got := []string{conf.Name, b.Type, b.Bridge, b.IPAM.DataDir, b.IPAM.Ranges[0][0].Subnet, b.IPAM.Ranges[0][0].Gateway}
	want := []string{"node-1", "bridge", "br-node-1", "/state/nodes/node-1/cni/ipam", "10.244.1.0/24", "10.244.1.1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CNI network (-want +got):\n%s", diff)
	}
}

// TestRenderKubelet checks what this machine needs of a kubelet (cgroup
// v1, cgroupfs, its own cgroupRoot) and what keeps kubelets apart.
func TestRenderKubelet(t *testing.T) {
	l := testLayout(2)
	var cfg map[string]any
	if err := k8syaml.Unmarshal([]byte(l.renderKubelet(l.Nodes[1])), &cfg); err != nil {
		t.Fatalf("the kubelet configuration is not YAML: %v", err)
	}
	want := map[string]any{
		"failCgroupV1": false, "cgroupDriver": "cgroupfs", "cgroupRoot": "/fleetd-cluster/node-2",
		"address": "172.30.0.12", "healthzBindAddress": "172.30.0.12", "podLogsDir": "/state/nodes/node-2/pod-logs",
		"volumePluginDir": "/state/nodes/node-2/volume-plugins", "containerRuntimeEndpoint": "unix:///state/nodes/node-2/containerd.sock",
		"clusterDNS": []any{"10.96.0.10"}, "imageGCHighThresholdPercent": int64(100),
	}
	got := map[string]any{}
	for k := range want {
		got[k] = cfg[k]
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kubelet configuration (-want +got):\n%s", diff)
	}
	args := strings.Join(l.kubeletArgs(l.Nodes[1]), " ")
	for _, w := range []string{"--hostname-override=node-2", "--root-dir=/state/nodes/node-2/kubelet", "--cert-dir=/state/nodes/node-2/kubelet/pki"} {
		if !strings.Contains(args, w) {
			t.Errorf("kubelet flags %q lack %s", args, w)
		}
	}
}

// TestNetnsScript checks that the namespace gets addresses, bridges and
// the Service route, and nothing that reaches out of it.
func TestNetnsScript(t *testing.T) {
	s := netnsScript(testLayout(2))
	for _, w := range []string{"addr add 172.30.0.2/32 dev lo", "addr add 172.30.0.12/32 dev lo", "link add br-node-2 type bridge", "addr add 10.244.2.1/24 dev br-node-2", "route add 10.96.0.0/16 dev br-node-1"} {
		if !strings.Contains(s, w) {
			t.Errorf("the namespace script lacks %q:\n%s", w, s)
		}
	}
	for _, bad := range []string{"veth", "netns", "master", "default"} {
		if strings.Contains(s, bad) {
			t.Errorf("the namespace script has %q, which would reach out of it:\n%s", bad, s)
		}
	}
}

// TestNetpolQueueRules: each node's pods' new connections go to that
// node's engine's queue, after what the engine's own rules let pass.
func TestNetpolQueueRules(t *testing.T) {
	got := netpolQueueRules(testLayout(2))
	want := `*mangle
:FLEETD-NETPOL - [0:0]
-A POSTROUTING -j FLEETD-NETPOL
-A FLEETD-NETPOL -p udp --dport 53 -j RETURN
-A FLEETD-NETPOL -m owner --uid-owner 0 -j RETURN
-A FLEETD-NETPOL -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
-A FLEETD-NETPOL -s 10.244.1.0/24 -j NFQUEUE --queue-num 100 --queue-bypass
-A FLEETD-NETPOL -d 10.244.1.0/24 -j NFQUEUE --queue-num 100 --queue-bypass
-A FLEETD-NETPOL -s 10.244.2.0/24 -j NFQUEUE --queue-num 101 --queue-bypass
-A FLEETD-NETPOL -d 10.244.2.0/24 -j NFQUEUE --queue-num 101 --queue-bypass
COMMIT
`
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("netpolQueueRules (-want +got):\n%s", diff)
	}
}

// TestNetpolArgs: the NetworkPolicy engines of one namespace keep apart,
// each with its own node, nftables table and queue.
func TestNetpolArgs(t *testing.T) {
	l := testLayout(2)
	got := [][]string{l.netpolArgs(l.Nodes[0]), l.netpolArgs(l.Nodes[1])}
	want := [][]string{
		{"--kubeconfig=/state/control-plane/kube-network-policies.kubeconfig", "--hostname-override=node-1", "--nfqueue-id=100", "--nftables-table=kube-network-policies-node-1"},
		{"--kubeconfig=/state/control-plane/kube-network-policies.kubeconfig", "--hostname-override=node-2", "--nfqueue-id=101", "--nftables-table=kube-network-policies-node-2"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("netpolArgs (-want +got):\n%s", diff)
	}
	var objs []map[string]any
	dec := k8syaml.NewYAMLOrJSONDecoder(strings.NewReader(renderNetpolRBAC()), 4096)
	for {
		var o map[string]any
		if err := dec.Decode(&o); err != nil {
			break
		}
		objs = append(objs, o)
	}
	if len(objs) != 2 || objs[1]["subjects"].([]any)[0].(map[string]any)["name"] != netpolUser {
		t.Errorf("the engine's RBAC does not bind %s: %v", netpolUser, objs)
	}
}
