package cluster

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// machine is what of the machine's own state the cluster must leave as it
// found it.
type machine struct {
	Addr, Route, Route6, IPTables, IP6Tables, NFTables, Netns string
	Sysctl                                                    map[string]string
	Mounts                                                    []string
	Cgroups                                                   []string
	Dirs                                                      map[string][]string
}

// globalDirs are where kubelets and containerds write outside their state
// directory, and what a bring-up could leave behind there.
var globalDirs = []string{
	"/var/log/containers", "/var/log/pods", "/var/lib/kubelet", "/var/lib/cni",
	"/run/containerd", "/run/netns", "/opt/containerd", "/etc/cni", "/var/lib/containerd",
}

func snapshot(tb testing.TB) machine {
	tb.Helper()
	m := machine{
		Addr:      cmdOut(tb, "ip", "-o", "addr"),
		Route:     cmdOut(tb, "ip", "route", "show", "table", "all"),
		Route6:    cmdOut(tb, "ip", "-6", "route", "show", "table", "all"),
		IPTables:  stripCounters(cmdOut(tb, "iptables-save")),
		IP6Tables: stripCounters(cmdOut(tb, "ip6tables-save")),
		Netns:     cmdOut(tb, "ip", "netns", "list"),
		// The NetworkPolicy engines' tables belong in the cluster's
		// namespace; without counters, which change by themselves.
		NFTables: cmdOut(tb, "nft", "--stateless", "list", "ruleset"),
		Sysctl:   sysctls(),
		Dirs:     map[string][]string{},
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		// Mount IDs change with every mount; where and what do not.
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		m.Mounts = append(m.Mounts, strings.Join([]string{f[3], f[4], f[sep+1], f[sep+2]}, " "))
	}
	slices.Sort(m.Mounts)
	m.Cgroups = cgroupDirs()
	home, _ := os.UserHomeDir()
	for _, d := range append(globalDirs, filepath.Join(home, ".kube")) {
		entries, err := os.ReadDir(d)
		if err != nil {
			m.Dirs[d] = []string{"<" + err.Error() + ">"}
			continue
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		m.Dirs[d] = names
	}
	return m
}

func cmdOut(tb testing.TB, name string, args ...string) string {
	tb.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// stripCounters drops what iptables-save prints that changes by itself:
// its comment lines and the packet counters.
func stripCounters(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, ":") {
			if i := strings.LastIndex(l, " ["); i > 0 {
				l = l[:i]
			}
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// sysctls reads every readable sysctl under /proc/sys, as sysctl -a does.
func sysctls() map[string]string {
	out := map[string]string{}
	_ = filepath.WalkDir("/proc/sys", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		v, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		out[strings.ReplaceAll(strings.TrimPrefix(p, "/proc/sys/"), "/", ".")] = strings.TrimSpace(string(v))
		return nil
	})
	return out
}

// volatileSysctls are the keys that change by themselves: those that
// differ between two readings a moment apart, and counters known to.
func volatileSysctls() map[string]bool {
	a := sysctls()
	time.Sleep(1500 * time.Millisecond)
	b := sysctls()
	v := map[string]bool{}
	for k := range a {
		if a[k] != b[k] {
			v[k] = true
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			v[k] = true
		}
	}
	for k := range a {
		for _, p := range []string{"kernel.random.", "fs.quota.", "fs.dentry-state", "fs.inode-", "fs.file-nr", "kernel.ns_last_pid", "nf_conntrack_count", "kernel.pty.nr", "fs.aio-nr", "kernel.keys.", "net.ipv4.tcp_mem", "net.ipv4.udp_mem", "net.core.netdev_rss_key"} {
			if strings.Contains(k, p) && !strings.Contains(k, "root_max") {
				v[k] = true
			}
		}
	}
	return v
}

func cgroupDirs() []string {
	var out []string
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if sep < 0 || (f[sep+1] != "cgroup" && f[sep+1] != "cgroup2") {
			continue
		}
		root := f[4]
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				out = append(out, p)
			}
			return nil
		})
	}
	slices.Sort(out)
	return out
}

// compareMachine fails tb for every difference between before and after
// that the cluster can have caused. Cgroups that other work on the machine
// made or removed meanwhile are only logged, unless they bear the
// cluster's name.
func compareMachine(tb testing.TB, what string, before, after machine, volatile map[string]bool) {
	tb.Helper()
	for k := range volatile {
		delete(before.Sysctl, k)
		delete(after.Sysctl, k)
	}
	cgBefore, cgAfter := before.Cgroups, after.Cgroups
	before.Cgroups, after.Cgroups = nil, nil
	if diff := cmp.Diff(before, after); diff != "" {
		tb.Errorf("%s: the machine differs (-before +after):\n%s", what, diff)
	}
	had := map[string]bool{}
	for _, c := range cgBefore {
		had[c] = true
	}
	for _, c := range cgAfter {
		if had[c] {
			continue
		}
		if strings.Contains(c, testName) || strings.Contains(c, "kubepods") {
			tb.Errorf("%s: cgroup %s was left behind", what, c)
		} else {
			tb.Logf("%s: cgroup %s appeared meanwhile (not the cluster's)", what, c)
		}
	}
}

// clusterProcesses are the processes of the test cluster still alive:
// those whose command line names its state directory (its daemons, and
// containerd's shims), those in one of its cgroups (the containers), and
// those in its network namespace (netnsInode, as /proc/<pid>/ns/net shows
// it).
func clusterProcesses(netnsInode string) []string {
	self, _ := os.Readlink("/proc/self/ns/net")
	var out []string
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && bytes.HasPrefix(bytes.TrimSpace(stat[i+1:]), []byte("Z")) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		cgroups, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
		if bytes.Contains(cmdline, []byte(stateDir)) || bytes.Contains(cgroups, []byte("/"+testName)) ||
			(netnsInode != "" && ns == netnsInode && ns != self) {
			out = append(out, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " ")))
		}
	}
	return out
}
