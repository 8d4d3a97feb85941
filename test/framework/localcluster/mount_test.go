package localcluster

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseMountinfo(t *testing.T) {
	data := `22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
40 30 0:35 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 22 0:40 / /work/state\040dir/kubelet rw shared:9 master:3 - tmpfs tmpfs rw
`
	want := []Mount{
		{Root: "/", Point: "/", FSType: "ext4", Source: "/dev/vda"},
		{Root: "/", Point: "/sys/fs/cgroup", FSType: "tmpfs", Source: "tmpfs"},
		{Root: "/", Point: "/sys/fs/cgroup/cpu", FSType: "cgroup", Source: "cgroup"},
		{Root: "/", Point: "/sys/fs/cgroup/unified", FSType: "cgroup2", Source: "cgroup2"},
		{Root: "/", Point: "/work/state dir/kubelet", FSType: "tmpfs", Source: "tmpfs"},
	}
	if diff := cmp.Diff(want, ParseMountinfo(data)); diff != "" {
		t.Errorf("ParseMountinfo (-want +got):\n%s", diff)
	}
}

func TestMountsUnder(t *testing.T) {
	cases := map[string]struct {
		mounts []string
		dir    string
		want   []string
	}{
		"nothing under the directory": {
			mounts: []string{"/", "/proc", "/state-other"},
			dir:    "/state",
		},
		"deepest first, the directory itself last": {
			mounts: []string{"/", "/state", "/state/a", "/state/a/b/c", "/state/d"},
			dir:    "/state",
			want:   []string{"/state/a/b/c", "/state/d", "/state/a", "/state"},
		},
		"a point mounted twice is unmounted twice": {
			mounts: []string{"/state/k", "/state/k"},
			dir:    "/state/",
			want:   []string{"/state/k", "/state/k"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var ms []Mount
			for _, p := range tc.mounts {
				ms = append(ms, Mount{Point: p})
			}
			if diff := cmp.Diff(tc.want, MountsUnder(ms, tc.dir)); diff != "" {
				t.Errorf("MountsUnder (-want +got):\n%s", diff)
			}
		})
	}
}
