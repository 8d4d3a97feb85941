package localcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// daemon is a long-running process of the cluster. It outlives the
// command that starts it (its own session, no parent-death signal) and is
// found again by its PID, recorded in the journal, and by its cgroup.
type daemon struct {
	name string
	path string
	args []string
	// netns, when set, is the network namespace file it runs in. nsenter
	// joins the namespace and execs the daemon under the same PID; `ip
	// netns exec` would also remount /sys, which empties /sys/fs/cgroup
	// for the kubelet.
	netns string
	// cgroup is the cgroup (relative to each hierarchy's root) it runs in.
	cgroup string
	log    string
}

// daemonEnv is every daemon's environment: a PATH with Debian's sbin
// directories for iptables, mount and runc, and nothing of the caller's.
func daemonEnv() []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root",
		"LANG=C.UTF-8",
	}
}

// start starts d in its cgroup and records it in the journal. The v2
// hierarchy holds it from birth; the v1 ones get it right after.
func (h *host) start(d daemon) (int, error) {
	if err := os.MkdirAll(filepath.Dir(d.log), 0o755); err != nil {
		return 0, err
	}
	log, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer log.Close()
	path, args := d.path, d.args
	if d.netns != "" {
		path, args = "nsenter", append([]string{"--net=" + d.netns, "--", d.path}, d.args...)
	}
	cmd := exec.Command(path, args...)
	cmd.Env = daemonEnv()
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cg, err := openCgroupDir(h.cgroups, d.cgroup)
	if err != nil {
		return 0, fmt.Errorf("opening cgroup %s: %w", d.cgroup, err)
	}
	if cg != nil {
		defer cg.Close()
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(cg.Fd())
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting %s: %w", d.name, err)
	}
	pid := cmd.Process.Pid
	// Reap it if it ends while this process lives; after that, init does.
	go func() { _ = cmd.Wait() }()
	if err := joinCgroup(h.v1(), d.cgroup, pid); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return 0, err
	}
	st, err := processStartTime(pid)
	if err != nil {
		return 0, fmt.Errorf("%s exited at once; see %s", d.name, d.log)
	}
	if err := h.journal.Append(Entry{Op: OpProcess, Name: d.name, PID: pid, StartTime: st}); err != nil {
		return 0, err
	}
	return pid, nil
}

// processStartTime is when pid started, in clock ticks after boot (field
// 22 of /proc/<pid>/stat), which tells a process from a later one that
// reuses its PID.
func processStartTime(pid int) (uint64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStartTime(string(data))
}

func parseStartTime(stat string) (uint64, error) {
	// The command name, field 2, is in parentheses and may hold spaces.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	fields := strings.Fields(stat[i+1:])
	// fields[0] is field 3 (state); start time is field 22.
	if len(fields) < 20 {
		return 0, errors.New("short stat")
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// alive says whether the process recorded as e still runs (and is not a
// zombie waiting to be reaped).
func alive(e Entry) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(e.PID) + "/stat")
	if err != nil {
		return false
	}
	st, err := parseStartTime(string(data))
	if err != nil || st != e.StartTime {
		return false
	}
	i := strings.LastIndexByte(string(data), ')')
	return !strings.HasPrefix(strings.TrimSpace(string(data)[i+1:]), "Z")
}

// killRecorded sends sig to the process recorded as e, if it is still
// that process.
func killRecorded(e Entry, sig syscall.Signal) {
	if alive(e) {
		_ = syscall.Kill(e.PID, sig)
	}
}

// waitGone waits until none of entries is alive.
func waitGone(entries []Entry, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var left []string
		for _, e := range entries {
			if alive(e) {
				left = append(left, fmt.Sprintf("%s (%d)", e.Name, e.PID))
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still running after %s: %s", timeout, strings.Join(left, ", "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
