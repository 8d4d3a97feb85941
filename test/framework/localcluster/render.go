package localcluster

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The images every node needs before its first pod: the sandbox image
// containerd pins, and the cluster DNS. They are built here (package
// ociimage) and imported into each containerd, so their names point at no
// registry anyone can pull from.
const (
	PauseImage   = "localhost/fleetd/pause:dev"
	CoreDNSImage = "localhost/fleetd/coredns:dev"
)

// renderContainerd is node n's containerd configuration: its own root,
// state, socket and runc root, so that several run side by side; pod
// network namespaces under its state directory rather than in /run/netns;
// the sandbox image pinned to the one imported here.
func renderContainerd(n NodeLayout) string {
	q := strconv.Quote
	return fmt.Sprintf(`version = 2
root = %s
state = %s
oom_score = 0
# Plugins that would look for storage drivers or write outside the state
# directory; the overlayfs snapshotter is the one used.
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = %s

[plugins."io.containerd.internal.v1.opt"]
  path = %s

# containerd 1.6's task service needs the v1 runtime loaded, though the
# CRI runs everything on runc v2.
[plugins."io.containerd.runtime.v1.linux"]
  runtime_root = %s

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  stream_server_address = %s
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  # The machine lacks CAP_SYS_RESOURCE: a container may not get a lower
  # oom_score_adj than containerd's own.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  # As containerd 2 does by default: CoreDNS binds port 53 as non-root.
  enable_unprivileged_ports = true
  enable_unprivileged_icmp = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %s

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %s
    conf_dir = %s
    max_conf_num = 1
`, q(n.containerdRoot()), q(n.containerdState()), q(n.ContainerdSocket()),
		q(n.path("containerd", "opt")), q(n.path("containerd", "runtime-v1")), PauseImage, q(n.IP.String()), q(n.runcRoot()),
		q(cniBinDir), q(n.cniConfDir()))
}

// cniBinDir is where Debian's containernetworking-plugins puts the plugins.
const cniBinDir = "/usr/lib/cni"

// renderCNI is node n's CNI network: a bridge of its own with the node's
// pod subnet, the bridge's address as the pods' gateway, hairpin mode so a
// pod reaches itself through a Service, and portmap for hostPorts.
func renderCNI(n NodeLayout) (string, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       n.Name,
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      n.Bridge,
				"isGateway":   true,
				"hairpinMode": true,
				// Nothing lies beyond the namespace to masquerade to.
				"ipMasq": false,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": n.cniIPAMDir(),
					"ranges":  [][]map[string]string{{{"subnet": n.PodCIDR.String(), "gateway": n.Gateway.String()}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	return string(b), err
}

// renderKubelet is node n's KubeletConfiguration. Every path that would be
// shared by the kubelets of one machine is its own; the node IP is bound
// rather than 0.0.0.0 so the kubelets share the usual ports.
func (l Layout) renderKubelet(n NodeLayout) string {
	q := strconv.Quote
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine mounts cgroup v1, which kubelet 1.37 refuses unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %s
address: %s
port: %d
healthzBindAddress: %s
healthzPort: %d
readOnlyPort: 0
containerRuntimeEndpoint: %s
podLogsDir: %s
volumePluginDir: %s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s}
authorization:
  mode: Webhook
clusterDomain: %s
clusterDNS: [%s]
# The pods' resolv.conf comes from cluster DNS alone: nothing upstream.
resolvConf: ""
# Images come from archives imported here, with no registry to pull them
# back from: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
failSwapOn: false
# A member's agent is hostile: a fork bomb in one Pod must not take the
# machine's pids.
podPidsLimit: 4096
serializeImagePulls: false
# Heartbeats often enough for kube-controller-manager's short grace period.
nodeStatusUpdateFrequency: 4s
nodeLeaseDurationSeconds: 8
# oom_score_adj needs CAP_SYS_RESOURCE, which the machine lacks.
oomScoreAdj: 0
`, q(l.NodeCgroup(n)), n.IP, kubeletPort, n.IP, kubeletHealthz,
		q("unix://"+n.ContainerdSocket()), q(n.podLogsDir()), q(n.volumePluginDir()),
		q(l.pkiPath(caCert)), ClusterDomain, DNSServiceIP)
}

// kubeletArgs are node n's kubelet flags: what the configuration file
// cannot say.
func (l Layout) kubeletArgs(n NodeLayout) []string {
	return []string{
		"--config=" + n.kubeletConfig(),
		"--kubeconfig=" + n.kubeconfig(),
		"--hostname-override=" + n.Name,
		"--node-ip=" + n.IP.String(),
		"--root-dir=" + n.kubeletRoot(),
		"--cert-dir=" + n.path("kubelet", "pki"),
	}
}

// renderKubeProxy is the one kube-proxy's configuration: it serves every
// node, since they share one network namespace. It touches no conntrack
// setting: the table size is global to the machine.
func (l Layout) renderKubeProxy() string {
	q := strconv.Quote
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
hostnameOverride: %s
mode: iptables
clusterCIDR: %s
detectLocalMode: ClusterCIDR
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, q(l.controlPlanePath(kubeProxyKubeconfig)), l.Nodes[0].Name, ClusterCIDR)
}

// The control plane's kubeconfigs.
const (
	kcmKubeconfig       = "kube-controller-manager.kubeconfig"
	schedulerKubeconfig = "kube-scheduler.kubeconfig"
	kubeProxyKubeconfig = "kube-proxy.kubeconfig"
	netpolKubeconfig    = "kube-network-policies.kubeconfig"
)

// netpolUser is who the NetworkPolicy engine is to the API server.
const netpolUser = "system:kube-network-policies"

// netpolArgs are node n's NetworkPolicy engine's flags. The nodes share
// one network namespace, so each engine has its own nftables table and
// queue; each queues only the packets to and from its node's Pods.
func (l Layout) netpolArgs(n NodeLayout) []string {
	i := slices.IndexFunc(l.Nodes, func(o NodeLayout) bool { return o.Name == n.Name })
	return []string{
		"--kubeconfig=" + l.controlPlanePath(netpolKubeconfig),
		"--hostname-override=" + n.Name,
		"--nfqueue-id=" + strconv.Itoa(netpolQueueBase+i),
		"--nftables-table=kube-network-policies-" + n.Name,
	}
}

// netpolQueueBase is node-1's NFQUEUE number.
const netpolQueueBase = 100

// renderNetpolRBAC lets the NetworkPolicy engine read what it enforces,
// as kube-network-policies' own manifest does.
func renderNetpolRBAC() string {
	return `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: kube-network-policies
rules:
- apiGroups: [""]
  resources: [pods, namespaces, nodes]
  verbs: [list, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kube-network-policies
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: kube-network-policies
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: ` + netpolUser + `
`
}

func (l Layout) controlPlanePath(f string) string { return l.path("control-plane", f) }

func (l Layout) etcdArgs() []string {
	client := "http://127.0.0.1:" + strconv.Itoa(etcdClientPort)
	peer := "http://127.0.0.1:" + strconv.Itoa(etcdPeerPort)
	return []string{
		"--name=" + l.Name,
		"--data-dir=" + l.etcdDir(),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=" + l.Name + "=" + peer,
		"--unsafe-no-fsync",
		"--quota-backend-bytes=" + strconv.Itoa(4<<30),
	}
}

func (l Layout) apiserverArgs() []string {
	p := l.pkiPath
	return []string{
		"--etcd-servers=http://127.0.0.1:" + strconv.Itoa(etcdClientPort),
		"--bind-address=0.0.0.0",
		"--secure-port=" + strconv.Itoa(l.Port),
		"--advertise-address=" + controlPlaneIP.String(),
		"--tls-cert-file=" + p(apiserverCert),
		"--tls-private-key-file=" + p(apiserverKey),
		"--client-ca-file=" + p(caCert),
		"--kubelet-client-certificate=" + p(kubeletClientCert),
		"--kubelet-client-key=" + p(kubeletClientKey),
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc." + ClusterDomain,
		"--service-account-key-file=" + p(saPub),
		"--service-account-signing-key-file=" + p(saKey),
		"--service-cluster-ip-range=" + ServiceCIDR.String(),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--profiling=false",
	}
}

func (l Layout) kcmArgs() []string {
	kc := l.controlPlanePath(kcmKubeconfig)
	return []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--service-account-private-key-file=" + l.pkiPath(saKey),
		"--root-ca-file=" + l.pkiPath(caCert),
		"--cluster-signing-cert-file=" + l.pkiPath(caCert),
		"--cluster-signing-key-file=" + l.pkiPath(caKeyFile),
		"--use-service-account-credentials=true",
		"--cluster-cidr=" + ClusterCIDR.String(),
		"--service-cluster-ip-range=" + ServiceCIDR.String(),
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--node-monitor-grace-period=" + l.NodeMonitorGracePeriod,
		"--node-monitor-period=2s",
		// The CNI configuration gives each node its subnet; node IPAM would
		// hand out others. Nothing here attaches cloud volumes.
		"--controllers=*,-node-ipam-controller,-persistentvolume-attach-detach-controller,-persistentvolume-expander-controller",
	}
}

func (l Layout) schedulerArgs() []string {
	kc := l.controlPlanePath(schedulerKubeconfig)
	return []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
	}
}

// renderCoreDNS is cluster DNS as kind runs it: the coredns Deployment in
// kube-system behind the kube-dns Service at DNSServiceIP, with the RBAC it
// needs to watch Services and EndpointSlices. There is no upstream to
// forward to, so the Corefile answers for the cluster's zones only (and
// has no loop plugin, which guards against forwarding loops).
func renderCoreDNS(replicas int) string {
	corefile := strings.Join([]string{
		".:53 {",
		"    errors",
		"    health {",
		"        lameduck 5s",
		"    }",
		"    ready",
		"    kubernetes " + ClusterDomain + " in-addr.arpa ip6.arpa {",
		"        pods insecure",
		"        fallthrough in-addr.arpa ip6.arpa",
		"        ttl 30",
		"    }",
		"    cache 30",
		"    reload",
		"    loadbalance",
		"}",
	}, "\n        ")
	return fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata:
  name: coredns
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:coredns
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:coredns
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:coredns
subjects:
- kind: ServiceAccount
  name: coredns
  namespace: kube-system
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
data:
  Corefile: |
        %s
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  replicas: %d
  selector:
    matchLabels: {k8s-app: kube-dns}
  template:
    metadata:
      labels: {k8s-app: kube-dns}
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      dnsPolicy: Default
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            podAffinityTerm:
              topologyKey: kubernetes.io/hostname
              labelSelector:
                matchLabels: {k8s-app: kube-dns}
      tolerations:
      - {key: CriticalAddonsOnly, operator: Exists}
      containers:
      - name: coredns
        image: %s
        imagePullPolicy: Never
        args: [-conf, /etc/coredns/Corefile]
        ports:
        - {name: dns, containerPort: 53, protocol: UDP}
        - {name: dns-tcp, containerPort: 53, protocol: TCP}
        livenessProbe:
          httpGet: {path: /health, port: 8080}
          initialDelaySeconds: 10
        readinessProbe:
          httpGet: {path: /ready, port: 8181}
          periodSeconds: 1
        securityContext:
          runAsNonRoot: true
          runAsUser: 65532
          runAsGroup: 65532
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
        resources:
          requests: {cpu: 50m, memory: 32Mi}
          limits: {memory: 170Mi}
        volumeMounts:
        - {name: config, mountPath: /etc/coredns, readOnly: true}
      volumes:
      - name: config
        configMap:
          name: coredns
          items: [{key: Corefile, path: Corefile}]
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS}
spec:
  selector: {k8s-app: kube-dns}
  clusterIP: %s
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
`, corefile, replicas, CoreDNSImage, DNSServiceIP)
}
