package herdr

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDefaultSocketPath(t *testing.T) {
	cases := map[string]struct {
		env     map[string]string
		want    string
		wantErr bool
	}{
		"explicit override wins": {
			env:  map[string]string{"HERDR_SOCKET_PATH": "/run/h.sock", "XDG_CONFIG_HOME": "/xdg", "HOME": "/home/a"},
			want: "/run/h.sock",
		},
		"xdg config home": {
			env:  map[string]string{"XDG_CONFIG_HOME": "/xdg", "HOME": "/home/a"},
			want: "/xdg/herdr/herdr.sock",
		},
		"home": {
			env:  map[string]string{"HOME": "/home/a"},
			want: "/home/a/.config/herdr/herdr.sock",
		},
		"empty xdg counts as unset": {
			env:  map[string]string{"XDG_CONFIG_HOME": "", "HOME": "/home/a"},
			want: "/home/a/.config/herdr/herdr.sock",
		},
		"nothing set": {
			wantErr: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			setEnv(t, tc.env)
			got, err := DefaultSocketPath()
			if (err != nil) != tc.wantErr {
				t.Fatalf("DefaultSocketPath() error = %v, wantErr %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("DefaultSocketPath() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSessionSocketPath(t *testing.T) {
	cases := map[string]struct {
		env     map[string]string
		name    string
		want    string
		wantErr bool
	}{
		"named session ignores the override": {
			env:  map[string]string{"HERDR_SOCKET_PATH": "/run/h.sock", "HOME": "/home/a"},
			name: "work",
			want: "/home/a/.config/herdr/sessions/work/herdr.sock",
		},
		"xdg config home": {
			env:  map[string]string{"XDG_CONFIG_HOME": "/xdg"},
			name: "ci-1.2_x",
			want: "/xdg/herdr/sessions/ci-1.2_x/herdr.sock",
		},
		"default session": {
			env:  map[string]string{"HOME": "/home/a"},
			name: "default",
			want: "/home/a/.config/herdr/herdr.sock",
		},
		"empty name":       {env: map[string]string{"HOME": "/h"}, name: "", wantErr: true},
		"dot dot":          {env: map[string]string{"HOME": "/h"}, name: "..", wantErr: true},
		"path separator":   {env: map[string]string{"HOME": "/h"}, name: "a/b", wantErr: true},
		"too long":         {env: map[string]string{"HOME": "/h"}, name: string(make([]byte, 65)), wantErr: true},
		"no home, no xdg ": {name: "work", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			setEnv(t, tc.env)
			got, err := SessionSocketPath(tc.name)
			if (err != nil) != tc.wantErr {
				t.Fatalf("SessionSocketPath(%q) error = %v, wantErr %v", tc.name, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("SessionSocketPath(%q) mismatch (-want +got):\n%s", tc.name, diff)
			}
		})
	}
}

// setEnv clears the variables socket resolution reads, then sets env.
func setEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, name := range []string{"HERDR_SOCKET_PATH", "XDG_CONFIG_HOME", "HOME"} {
		t.Setenv(name, "")
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
}
