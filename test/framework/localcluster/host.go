package localcluster

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// host does the cluster's changes to the machine, each journaled first.
type host struct {
	layout  Layout
	journal Journal
	cgroups []hierarchy
}

func newHost(l Layout) (*host, error) {
	hs, err := cgroupHierarchies()
	if err != nil {
		return nil, err
	}
	if len(hs) == 0 {
		return nil, errors.New("no cgroup hierarchy is mounted")
	}
	return &host{layout: l, journal: Journal{path: l.JournalPath()}, cgroups: hs}, nil
}

// v1 are the hierarchies a process is moved into after it starts (the v2
// one has it from birth).
func (h *host) v1() []hierarchy {
	var out []hierarchy
	for _, c := range h.cgroups {
		if !c.V2 {
			out = append(out, c)
		}
	}
	return out
}

// diesWithUs makes a short-lived child die with the bring-up, so that a
// bring-up killed halfway leaves no ctr or ip behind: only the daemons,
// which the journal and the cgroups know, outlive it. The signal comes
// when the OS thread that started the child ends, so no thread of this
// process may end early (see DialInNetns).
func diesWithUs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// run runs a command to completion and returns its error with its output.
func run(name string, args ...string) error {
	return runInput(nil, name, args...)
}

func runInput(stdin []byte, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Env = daemonEnv()
	cmd.SysProcAttr = diesWithUs()
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// createNetns makes the cluster's network namespace and everything with
// an address in it: loopback with the control-plane and node addresses, one bridge per node with its pods' gateway, and the route that
// makes ClusterIPs answer in the namespace itself. Nothing links it to the
// machine's namespace.
func (h *host) createNetns() error {
	l := h.layout
	existed := exists(netnsDir)
	mounted := false
	if existed {
		var err error
		if mounted, err = isMountPoint(netnsDir); err != nil {
			return err
		}
	}
	if err := h.journal.Append(Entry{Op: OpNetns, Name: l.Name, Existed: existed, Mounted: mounted}); err != nil {
		return err
	}
	if err := run("ip", "netns", "add", l.Name); err != nil {
		return err
	}
	if err := runInput([]byte(netnsScript(l)), "ip", "-n", l.Name, "-batch", "-"); err != nil {
		return err
	}
	// net.* sysctls belong to the namespace.
	if err := run("nsenter", "--net="+l.NetnsPath(), "--", "sh", "-c",
		"echo 1 > /proc/sys/net/ipv4/ip_forward && echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables"); err != nil {
		return err
	}
	// Rules of the namespace too: gone with it.
	return runInput([]byte(netpolQueueRules(l)), "nsenter", "--net="+l.NetnsPath(), "--", "iptables-restore", "--noflush")
}

// netpolQueueRules is the iptables-restore input that hands the first
// packet of each pod connection to a NetworkPolicy engine (netpolArgs).
// kube-network-policies queues with nftables' own queue statement, which
// kernels built without CONFIG_NFT_QUEUE refuse (its rules then never
// load, and it enforces nothing); the xtables NFQUEUE target works there.
// These rules do what the engine's own would: in POSTROUTING, before
// source NAT, let DNS, root's own traffic (the kubelets' probes) and
// established connections pass, and queue the rest of a pod's traffic to
// the engine of the pod's node. Each engine sees every Pod and policy, so
// one verdict, from the first rule that queues, judges both the sender's
// egress and the receiver's ingress. The engine runs fail-closed, but the
// queue is bypassed while no engine listens (a node being started or
// stopped): unlike the engine's rules, these queue every pod's traffic,
// not only that of Pods a policy selects.
func netpolQueueRules(l Layout) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("*mangle")
	p(":%s - [0:0]", netpolChain)
	p("-A POSTROUTING -j %s", netpolChain)
	p("-A %s -p udp --dport 53 -j RETURN", netpolChain)
	p("-A %s -m owner --uid-owner 0 -j RETURN", netpolChain)
	p("-A %s -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN", netpolChain)
	for i, n := range l.Nodes {
		for _, dir := range []string{"-s", "-d"} {
			p("-A %s %s %s -j NFQUEUE --queue-num %d --queue-bypass", netpolChain, dir, n.PodCIDR, netpolQueueBase+i)
		}
	}
	p("COMMIT")
	return b.String()
}

// netpolChain is the mangle chain of netpolQueueRules.
const netpolChain = "FLEETD-NETPOL"

// netnsScript is the `ip -batch` input that lays out the namespace. The
// control-plane and node addresses sit on the namespace's loopback (this
// machine's kernel has no dummy links): local to every daemon, and routed
// to from every pod through its node's bridge.
func netnsScript(l Layout) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("link set lo up")
	p("addr add %s/32 dev lo", controlPlaneIP)
	for _, n := range l.Nodes {
		p("addr add %s/32 dev lo", n.IP)
	}
	for _, n := range l.Nodes {
		// The CNI bridge plugin takes over a bridge that exists; making it
		// here gives the kubelet its pods' gateway from the start.
		p("link add %s type bridge", n.Bridge)
		p("addr add %s dev %s", netip.PrefixFrom(n.Gateway, n.PodCIDR.Bits()), n.Bridge)
		p("link set %s up", n.Bridge)
	}
	p("route add %s dev %s", ServiceCIDR, l.Nodes[0].Bridge)
	return b.String()
}

// deleteNetns deletes the cluster's namespace, if it is there.
func deleteNetns(name string) error {
	if !exists(filepath.Join(netnsDir, name)) {
		return nil
	}
	return run("ip", "netns", "delete", name)
}

// restoreNetnsDir puts /run/netns back as it was before the first
// cluster: the first `ip netns add` makes it, and a shared bind mount of
// itself. A namespace someone else made there meanwhile keeps both.
func restoreNetnsDir(e Entry) error {
	others, _ := os.ReadDir(netnsDir)
	if len(others) > 0 {
		return nil
	}
	if !e.Mounted {
		if m, _ := isMountPoint(netnsDir); m {
			if err := unmountUnder(netnsDir); err != nil {
				return err
			}
		}
	}
	if !e.Existed {
		if err := os.Remove(netnsDir); err != nil && !errors.Is(err, fs.ErrNotExist) && !isNotEmpty(err) {
			return err
		}
	}
	return nil
}

func isNotEmpty(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "not empty")
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// kubeletSysctls are the global settings the kubelet sets at start
// (setupKernelTunables in its container manager), saved in the machine's
// record by the first cluster up and restored by the last one down.
var kubeletSysctls = []string{
	"vm.overcommit_memory",
	"vm.panic_on_oom",
	"kernel.panic",
	"kernel.panic_on_oops",
	"kernel.keys.root_maxkeys",
	"kernel.keys.root_maxbytes",
}

func sysctlPath(key string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
}

func readSysctl(key string) (string, error) {
	v, err := os.ReadFile(sysctlPath(key))
	return strings.TrimSpace(string(v)), err
}

func writeSysctl(key, value string) error {
	return os.WriteFile(sysctlPath(key), []byte(value), 0o644)
}

// globalDirs are the directories outside the state directory that the
// kubelets and containerds write to whatever their configuration says:
// the kubelet's /var/log/containers links and its device-plugin socket
// directory, CNI's result cache, and containerd's shim sockets. Parents
// come before their children.
var globalDirs = []string{
	"/var/log/containers",
	"/var/log/pods",
	"/var/lib/kubelet",
	"/var/lib/kubelet/device-plugins",
	"/var/lib/cni",
	"/var/lib/cni/results",
	"/run/containerd",
	"/run/containerd/s",
	"/run/containerd/fifo",
}

// restoreDir removes what the cluster added to a global directory, or the
// directory itself if the cluster made it.
func restoreDir(e Entry) error {
	if !exists(e.Path) {
		return nil
	}
	if err := unmountUnder(e.Path); err != nil {
		return err
	}
	if !e.Existed {
		return os.RemoveAll(e.Path)
	}
	entries, err := os.ReadDir(e.Path)
	if err != nil {
		return err
	}
	var now []string
	for _, de := range entries {
		now = append(now, de.Name())
	}
	var errs []error
	for _, n := range newEntries(e.Entries, now) {
		if slices.Contains(childDirs(e.Path), n) {
			// Recorded on its own; restored before this one.
			continue
		}
		errs = append(errs, os.RemoveAll(filepath.Join(e.Path, n)))
	}
	return errors.Join(errs...)
}

// childDirs are the names of the global directories recorded directly
// below dir.
func childDirs(dir string) []string {
	var out []string
	for _, d := range globalDirs {
		if filepath.Dir(d) == dir {
			out = append(out, filepath.Base(d))
		}
	}
	return out
}

// containerLogLinks is where every kubelet links its containers' logs,
// whatever its podLogsDir.
const containerLogLinks = "/var/log/containers"

// removeLinksInto removes the symbolic links in dir that point below
// target: the links a cluster's kubelets made to the logs in its state
// directory, and no one else's.
func removeLinksInto(dir, target string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		p := filepath.Join(dir, e.Name())
		dest, err := os.Readlink(p)
		if err != nil || !within(dest, target) {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// within says whether path is dir or below it.
func within(path, dir string) bool {
	path, dir = filepath.Clean(path), filepath.Clean(dir)
	return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}
