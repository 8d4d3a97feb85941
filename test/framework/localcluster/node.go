package localcluster

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"
)

// KillNode kills node name as a power loss would: its kubelet, its
// containerd, the shims and every container's processes, all with SIGKILL,
// found by the node's cgroup (and the kubelet and containerd also by the
// PIDs recorded for them). Nothing is cleaned up: that is for StartNode, as
// for a machine that boots again.
func (c *Cluster) KillNode(name string) error {
	n, h, entries, err := c.node(name)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Op == OpProcess && (e.Name == n.Name+"/kubelet" || e.Name == n.Name+"/containerd") {
			killRecorded(e, syscall.SIGKILL)
		}
	}
	return killCgroup(h.cgroups, c.NodeCgroup(n), 10*time.Second)
}

// KillKubelet kills node name's kubelet alone, with SIGKILL, by its
// recorded PID: its containers keep running, and the Node goes NotReady
// once kube-controller-manager's grace period passes.
func (c *Cluster) KillKubelet(name string) error {
	n, _, entries, err := c.node(name)
	if err != nil {
		return err
	}
	killed := false
	for _, e := range entries {
		if e.Op == OpProcess && e.Name == n.Name+"/kubelet" && alive(e) {
			killRecorded(e, syscall.SIGKILL)
			killed = true
			if err := waitGone([]Entry{e}, 10*time.Second); err != nil {
				return err
			}
		}
	}
	if !killed {
		return fmt.Errorf("the kubelet of %s is not running", name)
	}
	return nil
}

// StartNode boots node name again after KillNode (or starts its kubelet
// after KillKubelet): what a reboot clears goes first (mounts, containerd's
// run-time state, the pods' cgroups), what a disk keeps stays (images,
// the kubelet's directory), then containerd and the kubelet start.
func (c *Cluster) StartNode(ctx context.Context, name string) error {
	n, h, entries, err := c.node(name)
	if err != nil {
		return err
	}
	var kubelet, containerd, netpol bool
	for _, e := range entries {
		if e.Op == OpProcess && alive(e) {
			kubelet = kubelet || e.Name == n.Name+"/kubelet"
			containerd = containerd || e.Name == n.Name+"/containerd"
			netpol = netpol || e.Name == n.Name+"/kube-network-policies"
		}
	}
	if kubelet {
		return fmt.Errorf("node %s runs: its kubelet is alive", name)
	}
	if !containerd {
		if pids := procsUnder(h.cgroups, c.NodeCgroup(n)); len(pids) > 0 {
			return fmt.Errorf("node %s is half up: processes %v are in its cgroup; KillNode it first", name, pids)
		}
		if err := unmountUnder(n.Dir); err != nil {
			return err
		}
		if err := os.RemoveAll(n.containerdState()); err != nil {
			return err
		}
		if err := removeCgroup(h.cgroups, c.NodeCgroup(n), 5*time.Second); err != nil {
			return err
		}
		if err := ensureCgroup(h.cgroups, c.runtimeCgroup(n)); err != nil {
			return err
		}
		if err := h.startContainerd(ctx, n); err != nil {
			return err
		}
	}
	if netpol {
		// Only the kubelet was killed (KillKubelet).
		return h.startKubelet(n)
	}
	return h.startNode(n)
}

// node is what acting on node name takes: its layout, the machine's side
// of the cluster, and the journal so far.
func (c *Cluster) node(name string) (NodeLayout, *host, []Entry, error) {
	n, err := c.Node(name)
	if err != nil {
		return NodeLayout{}, nil, nil, err
	}
	h, err := newHost(c.Layout)
	if err != nil {
		return NodeLayout{}, nil, nil, err
	}
	entries, err := h.journal.Load()
	return n, h, entries, err
}
