package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Down stops the cluster whose state is in stateDir and undoes what its
// journal says it did to the machine: every process (by the PID it
// recorded, and whatever is still in the cluster's cgroups or network
// namespace), mounts under its state directory, its cgroups and its
// network namespace. It touches nothing its journal does not name, so a
// cluster beside it runs on. The global sysctls and directories the
// clusters share are the machine record's: the last cluster down puts them
// back. It is idempotent, and works as well on what a killed bring-up
// left. The state directory keeps only the logs and the relay's program.
func Down(ctx context.Context, stateDir string, out io.Writer) error {
	if out == nil {
		out = io.Discard
	}
	if err := CheckRoot(); err != nil {
		return err
	}
	l := NewLayout(Config{StateDir: stateDir})
	j := Journal{path: l.JournalPath()}
	entries, err := j.Load()
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		fmt.Fprintln(out, "No local cluster to tear down")
		return cleanStateDir(l)
	}
	t := PlanTeardown(entries)
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	note := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}

	// Everything dies at once, as in a power loss: the state goes anyway.
	for _, e := range t.Processes {
		killRecorded(e, syscall.SIGKILL)
	}
	for _, c := range t.Cgroups {
		note("killing the cluster's processes", killCgroup(hs, c.Path, 10*time.Second))
	}
	for _, n := range t.Netns {
		note("killing processes in the network namespace", killInNetns(filepath.Join(netnsDir, n.Name)))
	}
	note("waiting for the daemons", waitGone(t.Processes, 10*time.Second))
	waitReaped(t.Processes, 5*time.Second)

	note("unmounting", unmountUnder(l.StateDir))
	for _, c := range t.Cgroups {
		note("removing cgroups", removeCgroup(hs, c.Path, 5*time.Second))
	}
	var names []string
	for _, n := range t.Netns {
		names = append(names, n.Name)
		note("deleting network namespace "+n.Name, deleteNetns(n.Name))
	}
	note("removing the pods' log links", removeLinksInto(containerLogLinks, l.StateDir))
	if err := errors.Join(errs...); err != nil {
		// The journal stays, for a second try.
		return err
	}
	journaled := t.Journaled
	if t.Machine {
		journaled = nil
	}
	if err := leaveMachine(l.StateDir, journaled); err != nil {
		return fmt.Errorf("leaving the machine's record of its clusters: %w", err)
	}
	fmt.Fprintf(out, "Tore down the local cluster (%d processes, network namespace %s); logs stay in %s\n", len(t.Processes), strings.Join(names, ", "), l.LogDir())
	return cleanStateDir(l)
}

// cleanStateDir removes the cluster's state but its logs and bin (where
// the relay's program is put before Up), the journal last.
func cleanStateDir(l Layout) error {
	entries, err := os.ReadDir(l.StateDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == filepath.Base(l.LogDir()) || e.Name() == "bin" || e.Name() == filepath.Base(l.JournalPath()) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(l.StateDir, e.Name())); err != nil {
			return err
		}
	}
	return os.RemoveAll(l.JournalPath())
}

// killInNetns kills every process whose network namespace is the one at
// nsPath: a last sweep for anything that left the cluster's cgroups.
func killInNetns(nsPath string) error {
	var st syscall.Stat_t
	if err := syscall.Stat(nsPath, &st); err != nil {
		return nil
	}
	want := "net:[" + strconv.FormatUint(st.Ino, 10) + "]"
	for range 50 {
		pids := procsWithNetns(want)
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if left := procsWithNetns(want); len(left) > 0 {
		return fmt.Errorf("processes %v outlived SIGKILL", left)
	}
	return nil
}

func procsWithNetns(want string) []int {
	dirs, _ := os.ReadDir("/proc")
	var out []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		link, err := os.Readlink("/proc/" + d.Name() + "/ns/net")
		if err != nil || link != want {
			continue
		}
		// A zombie still shows its namespace until it is reaped.
		if stat, err := os.ReadFile("/proc/" + d.Name() + "/stat"); err == nil {
			if i := strings.LastIndexByte(string(stat), ')'); i > 0 && strings.HasPrefix(strings.TrimSpace(string(stat[i+1:])), "Z") {
				continue
			}
		}
		out = append(out, pid)
	}
	return out
}

// waitReaped gives init a moment to reap the killed daemons, so that none
// shows in a process list after Down, not even as a zombie. A process
// reparented elsewhere may take longer; that is not an error.
func waitReaped(entries []Entry, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for _, e := range entries {
		for time.Now().Before(deadline) {
			st, err := processStartTime(e.PID)
			if err != nil || st != e.StartTime {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
