package localcluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
)

// Op is a kind of change made to the machine, as the journal records it.
type Op string

// The changes Up makes outside its state directory. Each is journaled
// before it is made, so that a bring-up killed at any point leaves a
// journal that covers everything it did.
const (
	// OpNetns: the network namespace Name, and whether /run/netns was a
	// mount point (Mounted) and existed (Existed) before, since the first
	// `ip netns add` makes it a shared bind mount of itself.
	OpNetns Op = "netns"
	// OpCgroups: the cgroup Path (relative to each hierarchy's root) in
	// every hierarchy mounted at Hierarchies.
	OpCgroups Op = "cgroups"
	// OpMachine: the cluster Name joined the machine's record of the
	// clusters up (see MachineRecord), which holds the machine's own values
	// of the global sysctls and directories.
	OpMachine Op = "machine"
	// OpSysctl: the global sysctl Name had Value before the first kubelet.
	// Bring-ups before the machine's record journaled these; now only the
	// record holds them.
	OpSysctl Op = "sysctl"
	// OpDir: a directory outside the state directory that the daemons
	// write to (Path), whether it Existed and what it held (Entries). As
	// OpSysctl, only older journals and the machine's record hold these.
	OpDir Op = "dir"
	// OpNetnsDir: whether /run/netns existed and was a mount point before
	// any cluster came up; only in the machine's record.
	OpNetnsDir Op = "netns-dir"
	// OpProcess: a daemon Name started with PID, whose start time (clock
	// ticks after boot, /proc/<pid>/stat) tells it from a later process
	// that reuses the PID.
	OpProcess Op = "process"
)

// Entry is one line of the journal.
type Entry struct {
	Op          Op       `json:"op"`
	Name        string   `json:"name,omitempty"`
	Path        string   `json:"path,omitempty"`
	Value       string   `json:"value,omitempty"`
	Existed     bool     `json:"existed,omitempty"`
	Mounted     bool     `json:"mounted,omitempty"`
	Entries     []string `json:"entries,omitempty"`
	Hierarchies []string `json:"hierarchies,omitempty"`
	PID         int      `json:"pid,omitempty"`
	StartTime   uint64   `json:"startTime,omitempty"`
}

// Journal appends entries to a file, each synced to disk before the change
// it records is made.
type Journal struct {
	path string
}

// Append writes e as one line and syncs it.
func (j Journal) Append(e Entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(j.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Load reads the journal. A missing journal is empty. A last line cut off
// by a kill is dropped: the change it was to record had not begun.
func (j Journal) Load() ([]Entry, error) {
	data, err := os.ReadFile(j.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return parseJournal(data)
}

func parseJournal(data []byte) ([]Entry, error) {
	lines := bytes.Split(data, []byte("\n"))
	var out []Entry
	for i, raw := range lines {
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 {
			continue
		}
		var e Entry
		if err := json.Unmarshal(raw, &e); err != nil {
			// Only the last line, with no newline after it, can be a
			// write that a kill cut short.
			if i == len(lines)-1 {
				break
			}
			return nil, fmt.Errorf("journal line %d: %w", i+1, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// Teardown is what undoing a journal takes, in the order Down does it:
// stop the processes (recorded, and whatever else is in the cgroups and
// the network namespace), then unmount, remove the cgroups, delete the
// network namespace, and leave the machine's record. Everything in it is
// the cluster's own, named in its journal: nothing of another cluster.
type Teardown struct {
	Processes []Entry
	Cgroups   []Entry
	Netns     []Entry
	// Machine says the cluster joined the machine's record.
	Machine bool
	// Journaled are the machine's values an older bring-up saved in its
	// own journal (sysctls, directories, /run/netns), put back only if no
	// other cluster is up.
	Journaled []Entry
}

// PlanTeardown decides what undoing entries takes. Only the first record
// of a sysctl or a directory counts: a later one (a node started again)
// saw the cluster's own change, not the machine's original.
func PlanTeardown(entries []Entry) Teardown {
	var t Teardown
	seen := map[string]bool{}
	// first appends e to dst unless an entry of its kind and key came
	// before.
	first := func(dst *[]Entry, e Entry, key string) {
		if k := string(e.Op) + "\x00" + key; !seen[k] {
			seen[k] = true
			*dst = append(*dst, e)
		}
	}
	for _, e := range entries {
		switch e.Op {
		case OpProcess:
			t.Processes = append(t.Processes, e)
		case OpCgroups:
			first(&t.Cgroups, e, e.Path)
		case OpNetns:
			if len(t.Netns) == 0 {
				// What the first namespace saw of /run/netns.
				t.Journaled = append(t.Journaled, Entry{Op: OpNetnsDir, Path: netnsDir, Existed: e.Existed, Mounted: e.Mounted})
			}
			first(&t.Netns, e, e.Name)
		case OpMachine:
			t.Machine = true
		case OpSysctl:
			first(&t.Journaled, e, e.Name)
		case OpDir:
			first(&t.Journaled, e, e.Path)
		}
	}
	// The processes started last (pods' runtimes, then nodes) go first, so
	// nothing is left to restart what was stopped.
	slices.Reverse(t.Processes)
	return t
}

// newEntries are the names in now that were not in before: what a daemon
// added to a directory that existed.
func newEntries(before, now []string) []string {
	had := map[string]bool{}
	for _, b := range before {
		had[b] = true
	}
	var out []string
	for _, n := range now {
		if !had[n] {
			out = append(out, n)
		}
	}
	return out
}
