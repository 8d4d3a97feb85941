package localcluster

import (
	"errors"
	"io"
	"os"

	"github.com/fleetd/fleetd/test/framework/debpkg"
)

// requirements are what the cluster runs from Debian: the container
// runtime, CNI plugins, iptables and conntrack for kube-proxy, nftables, and the
// tools the bring-up itself uses.
var requirements = []debpkg.Requirement{
	{Path: "containerd", Package: "containerd", Command: true},
	{Path: "containerd-shim-runc-v2", Package: "containerd", Command: true},
	{Path: "ctr", Package: "containerd", Command: true},
	{Path: "runc", Package: "runc", Command: true},
	{Path: cniBinDir + "/bridge", Package: "containernetworking-plugins"},
	{Path: cniBinDir + "/host-local", Package: "containernetworking-plugins"},
	{Path: cniBinDir + "/loopback", Package: "containernetworking-plugins"},
	{Path: cniBinDir + "/portmap", Package: "containernetworking-plugins"},
	{Path: "iptables", Package: "iptables", Command: true},
	{Path: "iptables-restore", Package: "iptables", Command: true},
	{Path: "conntrack", Package: "conntrack", Command: true},
	// The NetworkPolicy engines program nftables themselves; nft is how
	// a person, or a test, reads what they did.
	{Path: "nft", Package: "nftables", Command: true},
	{Path: "ip", Package: "iproute2", Command: true},
	{Path: "nsenter", Package: "util-linux", Command: true},
	{Path: "mount", Package: "mount", Command: true},
}

// ErrNotRoot says the cluster needs root, and why.
var ErrNotRoot = errors.New("the local cluster needs root: it creates a network namespace, cgroups and mounts, and runs kubelets and containerd (run it as root, e.g. sudo make cluster)")

// CheckRoot fails with ErrNotRoot unless this process is root.
func CheckRoot() error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	return nil
}

func ensurePackages(out io.Writer) error {
	return debpkg.Ensure(out, "the local cluster", requirements)
}
