package localcluster

import (
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var (
	clusterA = ClusterRef{Name: "a", StateDir: "/state/a"}
	clusterB = ClusterRef{Name: "b", StateDir: "/state/b"}
	// machineValues are the machine's own; kubeletValues what a machine
	// with a cluster up shows.
	machineValues = []Entry{{Op: OpSysctl, Name: "kernel.panic", Value: "1"}, {Op: OpDir, Path: "/var/lib/cni"}}
	kubeletValues = []Entry{{Op: OpSysctl, Name: "kernel.panic", Value: "10"}, {Op: OpDir, Path: "/var/lib/cni", Existed: true}}
)

func TestMachineRecordJoin(t *testing.T) {
	cases := map[string]struct {
		record  MachineRecord
		c       ClusterRef
		machine []Entry
		want    MachineRecord
	}{
		"the first cluster up records the machine's values": {
			c: clusterA, machine: machineValues,
			want: MachineRecord{Originals: machineValues, Clusters: []ClusterRef{clusterA}},
		},
		"a second cluster keeps the originals, not what the first changed": {
			record: MachineRecord{Originals: machineValues, Clusters: []ClusterRef{clusterA}},
			c:      clusterB, machine: kubeletValues,
			want: MachineRecord{Originals: machineValues, Clusters: []ClusterRef{clusterA, clusterB}},
		},
		"a bring-up retried joins once": {
			record: MachineRecord{Originals: machineValues, Clusters: []ClusterRef{clusterA}},
			c:      clusterA, machine: kubeletValues,
			want: MachineRecord{Originals: machineValues, Clusters: []ClusterRef{clusterA}},
		},
		"originals left by clusters gone without a teardown stay": {
			record: MachineRecord{Originals: machineValues},
			c:      clusterB, machine: kubeletValues,
			want: MachineRecord{Originals: machineValues, Clusters: []ClusterRef{clusterB}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.record.Join(tc.c, tc.machine)); diff != "" {
				t.Errorf("Join (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMachineRecordLeave(t *testing.T) {
	legacy := []Entry{{Op: OpSysctl, Name: "kernel.panic", Value: "10"}}
	cases := map[string]struct {
		record      MachineRecord
		stateDir    string
		journaled   []Entry
		want        MachineRecord
		wantRestore []Entry
	}{
		"the first cluster down while another runs restores nothing": {
			record:   MachineRecord{Originals: machineValues, Clusters: []ClusterRef{clusterA, clusterB}},
			stateDir: clusterA.StateDir,
			want:     MachineRecord{Originals: machineValues, Clusters: []ClusterRef{clusterB}},
		},
		"the last cluster down restores the originals and empties the record": {
			record:      MachineRecord{Originals: machineValues, Clusters: []ClusterRef{clusterB}},
			stateDir:    clusterB.StateDir,
			wantRestore: machineValues,
		},
		"a cluster never in the record leaves another's alone": {
			record:    MachineRecord{Originals: machineValues, Clusters: []ClusterRef{clusterB}},
			stateDir:  clusterA.StateDir,
			journaled: legacy,
			want:      MachineRecord{Originals: machineValues, Clusters: []ClusterRef{clusterB}},
		},
		"an older bring-up alone on the machine restores its own journal": {
			stateDir:    clusterA.StateDir,
			journaled:   legacy,
			wantRestore: legacy,
		},
		"a second teardown finds nothing to do": {
			stateDir: clusterA.StateDir,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, restore := tc.record.Leave(tc.stateDir, tc.journaled)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("record after Leave (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantRestore, restore); diff != "" {
				t.Errorf("restored by Leave (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMachineRecordPrune(t *testing.T) {
	r := MachineRecord{Originals: machineValues, Clusters: []ClusterRef{clusterA, clusterB}}
	got := r.Prune(func(c ClusterRef) bool { return c != clusterA })
	want := MachineRecord{Originals: machineValues, Clusters: []ClusterRef{clusterB}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Prune (-want +got):\n%s", diff)
	}
	if len(r.Clusters) != 2 {
		t.Errorf("Prune changed the record it was called on: %+v", r.Clusters)
	}
}

// TestUpdateMachineSerializes has many writers join at once under the
// lock: every join survives, and the last leave removes the directory.
func TestUpdateMachineSerializes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "clusters")
	old := machineDir
	machineDir = dir
	t.Cleanup(func() { machineDir = old })

	const n = 20
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			c := ClusterRef{Name: "c", StateDir: "/state/" + string(rune('a'+i))}
			errs[i] = updateMachine(func(r MachineRecord) (MachineRecord, error) {
				return r.Join(c, machineValues), nil
			})
		})
	}
	wg.Wait()
	var got MachineRecord
	if err := updateMachine(func(r MachineRecord) (MachineRecord, error) { got = r; return r, nil }); err != nil {
		t.Fatal(err)
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(got.Clusters) != n {
		t.Fatalf("%d clusters in the record after %d joins: %+v", len(got.Clusters), n, got.Clusters)
	}
	for _, c := range got.Clusters {
		var restore []Entry
		if err := updateMachine(func(r MachineRecord) (MachineRecord, error) {
			r, restore = r.Leave(c.StateDir, nil)
			return r, nil
		}); err != nil {
			t.Fatal(err)
		}
		if last := c == got.Clusters[n-1]; (restore != nil) != last {
			t.Errorf("leaving %s restored %v; last cluster: %v", c.StateDir, restore, last)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the record's directory is still there after the last leave: %v", err)
	}
}

func TestCheckNoHostContainerd(t *testing.T) {
	dir := t.TempDir()
	if err := checkNoHostContainerd(filepath.Join(dir, "missing.sock")); err != nil {
		t.Errorf("no socket: %v", err)
	}
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if err := checkNoHostContainerd(stale); err != nil {
		t.Errorf("a socket file nothing serves: %v", err)
	}
	serving := filepath.Join(dir, "containerd.sock")
	ln, err = net.Listen("unix", serving)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := checkNoHostContainerd(serving); err == nil {
		t.Error("a containerd answering on the socket was not refused")
	}
}

func TestRemoveLinksInto(t *testing.T) {
	dir := t.TempDir()
	ours, theirs := filepath.Join(dir, "ours"), filepath.Join(dir, "ours-too-long")
	links := filepath.Join(dir, "containers")
	if err := os.MkdirAll(links, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{
		"mine.log":   filepath.Join(ours, "pods", "p", "0.log"),
		"theirs.log": filepath.Join(theirs, "pods", "p", "0.log"),
	} {
		if err := os.Symlink(target, filepath.Join(links, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(links, "file.log"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := removeLinksInto(links, ours); err != nil {
		t.Fatal(err)
	}
	var left []string
	entries, _ := os.ReadDir(links)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if diff := cmp.Diff([]string{"file.log", "theirs.log"}, left); diff != "" {
		t.Errorf("left in the directory (-want +got):\n%s", diff)
	}
}
