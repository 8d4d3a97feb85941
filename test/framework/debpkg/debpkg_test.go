package debpkg

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMissing(t *testing.T) {
	reqs := []Requirement{
		{Path: "containerd", Package: "containerd", Command: true},
		{Path: "ctr", Package: "containerd", Command: true},
		{Path: "runc", Package: "runc", Command: true},
		{Path: "/usr/lib/cni/bridge", Package: "containernetworking-plugins"},
	}
	cases := map[string]struct {
		have []string
		want []string
	}{
		"everything there": {have: []string{"containerd", "ctr", "runc", "/usr/lib/cni/bridge"}},
		"each package once, in order": {
			have: []string{"runc"},
			want: []string{"containerd", "containernetworking-plugins"},
		},
		"one file of a package is enough to need it": {
			have: []string{"containerd", "runc", "/usr/lib/cni/bridge"},
			want: []string{"containerd"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			have := func(r Requirement) bool {
				for _, h := range tc.have {
					if h == r.Path {
						return true
					}
				}
				return false
			}
			if diff := cmp.Diff(tc.want, Missing(reqs, have)); diff != "" {
				t.Errorf("Missing (-want +got):\n%s", diff)
			}
		})
	}
}
