package localcluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// hierarchy is one mounted cgroup hierarchy: a v1 controller (or a named
// one such as name=systemd), or the v2 unified hierarchy.
type hierarchy struct {
	Point string
	V2    bool
}

// cgroupHierarchies are the cgroup hierarchies mounted on the machine. The
// kubelet wants its cgroupRoot in every one.
func cgroupHierarchies() ([]hierarchy, error) {
	mounts, err := readMounts()
	if err != nil {
		return nil, err
	}
	return hierarchiesOf(mounts), nil
}

func hierarchiesOf(mounts []Mount) []hierarchy {
	var out []hierarchy
	seen := map[string]bool{}
	for _, m := range mounts {
		if (m.FSType != "cgroup" && m.FSType != "cgroup2") || m.Root != "/" || seen[m.Point] {
			continue
		}
		seen[m.Point] = true
		out = append(out, hierarchy{Point: m.Point, V2: m.FSType == "cgroup2"})
	}
	return out
}

// unified is the v2 hierarchy, if one is mounted.
func unified(hs []hierarchy) (hierarchy, bool) {
	for _, h := range hs {
		if h.V2 {
			return h, true
		}
	}
	return hierarchy{}, false
}

// ensureCgroup makes rel in every hierarchy. A new cpuset gets its parent's
// CPUs and memory nodes, without which no process may join it.
func ensureCgroup(hs []hierarchy, rel string) error {
	for _, h := range hs {
		dir := h.Point
		for _, part := range strings.Split(strings.Trim(rel, "/"), "/") {
			parent := dir
			dir = filepath.Join(dir, part)
			err := os.Mkdir(dir, 0o755)
			if errors.Is(err, fs.ErrExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("making cgroup %s: %w", dir, err)
			}
			if h.V2 {
				continue
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(parent, f))
				if errors.Is(err, fs.ErrNotExist) {
					break
				}
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("setting %s/%s: %w", dir, f, err)
				}
			}
		}
	}
	return nil
}

// joinCgroup moves pid into rel in every hierarchy.
func joinCgroup(hs []hierarchy, rel string, pid int) error {
	for _, h := range hs {
		p := filepath.Join(h.Point, rel, "cgroup.procs")
		if err := os.WriteFile(p, []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("moving %d into %s: %w", pid, p, err)
		}
	}
	return nil
}

// procsUnder are the processes in rel or below it, in any hierarchy.
func procsUnder(hs []hierarchy, rel string) []int {
	set := map[int]bool{}
	for _, h := range hs {
		root := filepath.Join(h.Point, rel)
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			data, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					set[pid] = true
				}
			}
			return nil
		})
	}
	out := make([]int, 0, len(set))
	for pid := range set {
		out = append(out, pid)
	}
	slices.Sort(out)
	return out
}

// killCgroup kills every process in rel and below, in every hierarchy, with
// SIGKILL, and waits until none is left: what a power loss does to a node.
// The v2 hierarchy's cgroup.kill takes a whole subtree at once, forks and
// all; the v1 hierarchies are swept until empty.
func killCgroup(hs []hierarchy, rel string, timeout time.Duration) error {
	if h, ok := unified(hs); ok {
		_ = os.WriteFile(filepath.Join(h.Point, rel, "cgroup.kill"), []byte("1"), 0o644)
	}
	deadline := time.Now().Add(timeout)
	for {
		pids := procsUnder(hs, rel)
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			if pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v in cgroup %s outlived SIGKILL for %s", pids, rel, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// removeCgroup removes rel and everything below it in every hierarchy,
// children first. A cgroup whose last process is still exiting is busy for
// a moment, so each is tried again until timeout.
func removeCgroup(hs []hierarchy, rel string, timeout time.Duration) error {
	var errs []error
	for _, h := range hs {
		root := filepath.Join(h.Point, rel)
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, d := range dirs {
			deadline := time.Now().Add(timeout)
			for {
				err := syscall.Rmdir(d)
				if err == nil || errors.Is(err, syscall.ENOENT) {
					break
				}
				if time.Now().After(deadline) {
					errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	return errors.Join(errs...)
}

// openCgroupDir opens rel in the v2 hierarchy, for starting a process in
// it (CLONE_INTO_CGROUP): it is there from its first instruction, so a
// kill of the bring-up between start and record cannot lose it.
func openCgroupDir(hs []hierarchy, rel string) (*os.File, error) {
	h, ok := unified(hs)
	if !ok {
		return nil, nil
	}
	return os.Open(filepath.Join(h.Point, rel))
}
