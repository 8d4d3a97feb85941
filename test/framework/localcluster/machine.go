package localcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The clusters on one machine share its global state: the sysctls the
// kubelets set, the directories the kubelets and containerds write to
// whatever their configuration says, and /run/netns. No cluster's journal
// may hold the machine's values of these, since a cluster that comes up
// beside another sees the other's changes, not the machine's. So one
// record per machine holds them, taken by the first cluster to come up,
// with the list of the clusters up; the last to go down puts them back.
// It lives under /run, which a reboot empties as it resets the settings.

// MachineRecord is what the clusters up on the machine share.
type MachineRecord struct {
	// Originals are the machine's own values, read when no cluster was
	// up: the sysctls (OpSysctl), the global directories (OpDir, parents
	// before children) and /run/netns (OpNetnsDir).
	Originals []Entry `json:"originals,omitempty"`
	// Clusters are the clusters up, in the order they came.
	Clusters []ClusterRef `json:"clusters,omitempty"`
}

// ClusterRef names a cluster in the machine's record.
type ClusterRef struct {
	Name     string `json:"name"`
	StateDir string `json:"stateDir"`
}

// Join adds c to the record. The first cluster's machine (the values read
// now) become the originals; a later one's are the earlier clusters'
// changes and are ignored. Joining twice (a bring-up retried) is one join.
func (r MachineRecord) Join(c ClusterRef, machine []Entry) MachineRecord {
	if len(r.Originals) == 0 {
		r.Originals = slices.Clone(machine)
	}
	if !slices.ContainsFunc(r.Clusters, func(o ClusterRef) bool { return o.StateDir == c.StateDir }) {
		r.Clusters = append(slices.Clone(r.Clusters), c)
	}
	return r
}

// Leave takes the cluster of stateDir out of the record and says what to
// put back: the originals when it was the last cluster up, else nothing.
// journaled are the values a cluster brought up before this record
// existed saved in its own journal; they are put back only when no other
// cluster is up. The record that is left is empty when nothing is up.
func (r MachineRecord) Leave(stateDir string, journaled []Entry) (MachineRecord, []Entry) {
	was := slices.ContainsFunc(r.Clusters, func(o ClusterRef) bool { return o.StateDir == stateDir })
	r.Clusters = slices.DeleteFunc(slices.Clone(r.Clusters), func(o ClusterRef) bool { return o.StateDir == stateDir })
	if len(r.Clusters) > 0 {
		return r, nil
	}
	restore := journaled
	if was {
		restore = r.Originals
	}
	return MachineRecord{}, restore
}

// Prune drops the clusters that up says are gone (their state and
// namespace removed without a teardown), so they hold nothing forever.
// The originals stay: they are still the machine's.
func (r MachineRecord) Prune(up func(ClusterRef) bool) MachineRecord {
	r.Clusters = slices.DeleteFunc(slices.Clone(r.Clusters), func(c ClusterRef) bool { return !up(c) })
	return r
}

// Empty says whether the record holds nothing.
func (r MachineRecord) Empty() bool { return len(r.Originals) == 0 && len(r.Clusters) == 0 }

// machineDir holds the record and its lock.
var machineDir = "/run/fleetd-clusters"

// updateMachine changes the record under an exclusive lock that every
// cluster's Up and Down on the machine takes. An empty result removes the
// record and its directory.
func updateMachine(change func(MachineRecord) (MachineRecord, error)) error {
	unlock, err := lockMachine()
	if err != nil {
		return err
	}
	defer unlock()
	path := filepath.Join(machineDir, "record.json")
	var r MachineRecord
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(data, &r); err != nil {
			return fmt.Errorf("reading the machine's record of its clusters %s: %w", path, err)
		}
	}
	r, err = change(r)
	if err != nil {
		return err
	}
	if r.Empty() {
		// The lock file goes with the directory; a waiter notices (see
		// lockMachine).
		return os.RemoveAll(machineDir)
	}
	data, err = json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// lockMachine takes the machine's lock. The last cluster down removes the
// lock file, so a lock taken on a file that is no longer at its path is
// no lock: take it again on the new one.
func lockMachine() (func(), error) {
	lock := filepath.Join(machineDir, "lock")
	for {
		if err := os.MkdirAll(machineDir, 0o700); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(lock, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", lock, err)
		}
		var held, now syscall.Stat_t
		if syscall.Fstat(int(f.Fd()), &held) == nil && syscall.Stat(lock, &now) == nil && held.Ino == now.Ino && held.Dev == now.Dev {
			return func() { f.Close() }, nil
		}
		f.Close()
	}
}

// readMachine reads the machine's values of what the clusters change: the
// sysctls, the global directories and /run/netns.
func readMachine() ([]Entry, error) {
	existed := exists(netnsDir)
	mounted := false
	if existed {
		var err error
		if mounted, err = isMountPoint(netnsDir); err != nil {
			return nil, err
		}
	}
	out := []Entry{{Op: OpNetnsDir, Path: netnsDir, Existed: existed, Mounted: mounted}}
	for _, k := range kubeletSysctls {
		v, err := readSysctl(k)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, Entry{Op: OpSysctl, Name: k, Value: v})
	}
	for _, d := range globalDirs {
		e := Entry{Op: OpDir, Path: d}
		if entries, err := os.ReadDir(d); err == nil {
			e.Existed = true
			for _, de := range entries {
				e.Entries = append(e.Entries, de.Name())
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// clusterUp says whether a cluster in the record may still be up: its
// journal or its network namespace is there.
func clusterUp(c ClusterRef) bool {
	return exists(NewLayout(Config{StateDir: c.StateDir}).JournalPath()) || exists(filepath.Join(netnsDir, c.Name))
}

// joinMachine puts the cluster in the machine's record, the machine's
// values with it if it is the first.
func (h *host) joinMachine() error {
	l := h.layout
	if err := h.journal.Append(Entry{Op: OpMachine, Name: l.Name}); err != nil {
		return err
	}
	return updateMachine(func(r MachineRecord) (MachineRecord, error) {
		r = r.Prune(clusterUp)
		var machine []Entry
		if len(r.Originals) == 0 {
			var err error
			if machine, err = readMachine(); err != nil {
				return r, err
			}
		}
		return r.Join(ClusterRef{Name: l.Name, StateDir: l.StateDir}, machine), nil
	})
}

// leaveMachine takes the cluster of stateDir out of the machine's record
// and, if it was the last cluster up, puts the machine's values back.
func leaveMachine(stateDir string, journaled []Entry) error {
	return updateMachine(func(r MachineRecord) (MachineRecord, error) {
		r, restore := r.Prune(clusterUpBut(stateDir)).Leave(stateDir, journaled)
		return r, restoreMachine(restore)
	})
}

// clusterUpBut is clusterUp for every cluster but the one of stateDir,
// whose journal is there until its teardown ends.
func clusterUpBut(stateDir string) func(ClusterRef) bool {
	return func(c ClusterRef) bool { return c.StateDir == stateDir || clusterUp(c) }
}

// restoreMachine puts back the machine's values: the sysctls, /run/netns,
// then the directories, children before their parents.
func restoreMachine(originals []Entry) error {
	var errs []error
	var dirs []Entry
	for _, e := range originals {
		switch e.Op {
		case OpSysctl:
			if err := writeSysctl(e.Name, e.Value); err != nil {
				errs = append(errs, fmt.Errorf("restoring %s: %w", e.Name, err))
			}
		case OpNetnsDir:
			if err := restoreNetnsDir(e); err != nil {
				errs = append(errs, fmt.Errorf("restoring %s: %w", netnsDir, err))
			}
		case OpDir:
			dirs = append(dirs, e)
		}
	}
	slices.Reverse(dirs)
	for _, d := range dirs {
		if err := restoreDir(d); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s: %w", d.Path, err))
		}
	}
	return errors.Join(errs...)
}

// hostContainerdSocket is where a containerd of the machine listens.
const hostContainerdSocket = "/run/containerd/containerd.sock"

// checkNoHostContainerd refuses a machine where a containerd of its own
// answers at socket: the nodes' containerds put their shims' sockets and
// fifos under /run/containerd as well, and the last teardown removes what
// appeared there since the first cluster came up.
func checkNoHostContainerd(socket string) error {
	c, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return nil
	}
	c.Close()
	return fmt.Errorf("a containerd of the machine serves %s: the local cluster's containerds share /run/containerd with it, and its teardown could remove the machine's containerd's files; stop that containerd first", socket)
}
