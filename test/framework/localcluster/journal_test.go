package localcluster

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPlanTeardown(t *testing.T) {
	cases := map[string]struct {
		entries []Entry
		want    Teardown
	}{
		"empty journal undoes nothing": {},
		"an older journal's first sysctl original wins over one a restarted node saw": {
			entries: []Entry{
				{Op: OpSysctl, Name: "vm.overcommit_memory", Value: "0"},
				{Op: OpSysctl, Name: "vm.overcommit_memory", Value: "1"},
				{Op: OpDir, Path: "/var/lib/kubelet"},
				{Op: OpDir, Path: "/var/lib/kubelet"},
			},
			want: Teardown{Journaled: []Entry{
				{Op: OpSysctl, Name: "vm.overcommit_memory", Value: "0"},
				{Op: OpDir, Path: "/var/lib/kubelet"},
			}},
		},
		"a journal without the cluster's configuration names its own namespace and cgroups": {
			entries: []Entry{
				{Op: OpCgroups, Path: "/mine"},
				{Op: OpMachine, Name: "mine"},
				{Op: OpNetns, Name: "mine", Existed: true, Mounted: true},
			},
			want: Teardown{
				Cgroups:   []Entry{{Op: OpCgroups, Path: "/mine"}},
				Netns:     []Entry{{Op: OpNetns, Name: "mine", Existed: true, Mounted: true}},
				Machine:   true,
				Journaled: []Entry{{Op: OpNetnsDir, Path: netnsDir, Existed: true, Mounted: true}},
			},
		},
		"processes stop last started first, every one recorded": {
			entries: []Entry{
				{Op: OpNetns, Name: "c"},
				{Op: OpProcess, Name: "etcd", PID: 10, StartTime: 1},
				{Op: OpCgroups, Path: "/c"},
				{Op: OpProcess, Name: "kubelet", PID: 11, StartTime: 2},
				{Op: OpProcess, Name: "kubelet", PID: 12, StartTime: 3},
				{Op: OpNetns, Name: "c"},
			},
			want: Teardown{
				Processes: []Entry{
					{Op: OpProcess, Name: "kubelet", PID: 12, StartTime: 3},
					{Op: OpProcess, Name: "kubelet", PID: 11, StartTime: 2},
					{Op: OpProcess, Name: "etcd", PID: 10, StartTime: 1},
				},
				Cgroups:   []Entry{{Op: OpCgroups, Path: "/c"}},
				Netns:     []Entry{{Op: OpNetns, Name: "c"}},
				Journaled: []Entry{{Op: OpNetnsDir, Path: netnsDir}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, PlanTeardown(tc.entries)); diff != "" {
				t.Errorf("PlanTeardown (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJournalKilledMidLine(t *testing.T) {
	cases := map[string]struct {
		data    string
		want    []Entry
		wantErr bool
	}{
		"whole lines": {
			data: `{"op":"netns","name":"c"}` + "\n" + `{"op":"process","name":"etcd","pid":7}` + "\n",
			want: []Entry{{Op: OpNetns, Name: "c"}, {Op: OpProcess, Name: "etcd", PID: 7}},
		},
		"last line cut off by a kill is dropped": {
			data: `{"op":"netns","name":"c"}` + "\n" + `{"op":"proc`,
			want: []Entry{{Op: OpNetns, Name: "c"}},
		},
		"a damaged line in the middle is an error": {
			data:    `{"op":"netns"` + "\n" + `{"op":"netns","name":"c"}` + "\n",
			wantErr: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			if err := os.WriteFile(path, []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := Journal{path: path}.Load()
			if (err != nil) != tc.wantErr {
				t.Fatalf("Load: err = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Load (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJournalAppendLoad(t *testing.T) {
	j := Journal{path: filepath.Join(t.TempDir(), "journal.jsonl")}
	want := []Entry{
		{Op: OpDir, Path: "/var/log/containers", Existed: true, Entries: []string{"a"}},
		{Op: OpProcess, Name: "kubelet", PID: 42, StartTime: 99},
	}
	for _, e := range want {
		if err := j.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	got, err := j.Load()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestParseStartTime(t *testing.T) {
	cases := map[string]struct {
		stat    string
		want    uint64
		wantErr bool
	}{
		"plain name": {
			stat: "1234 (kubelet) S 1 1234 1234 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 12 0 98765 1000 500",
			want: 98765,
		},
		"name with spaces and parentheses": {
			stat: "77 (a (b) c) S 1 77 77 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 12 0 4242 1000 500",
			want: 4242,
		},
		"cut short": {stat: "77 (x) S 1", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := parseStartTime(tc.stat)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("start time = %d, want %d", got, tc.want)
			}
		})
	}
}
