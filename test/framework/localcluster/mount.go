package localcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Mount is one line of /proc/self/mountinfo.
type Mount struct {
	// Root is the mount's root within its filesystem.
	Root string
	// Point is where it is mounted.
	Point string
	// FSType is the filesystem type (cgroup, cgroup2, overlay, tmpfs...).
	FSType string
	// Source is the mount source.
	Source string
}

// ParseMountinfo reads the format of /proc/<pid>/mountinfo.
func ParseMountinfo(data string) []Mount {
	var out []Mount
	for _, line := range strings.Split(data, "\n") {
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			continue
		}
		out = append(out, Mount{
			Root:   unescapeMountinfo(fields[3]),
			Point:  unescapeMountinfo(fields[4]),
			FSType: fields[sep+1],
			Source: unescapeMountinfo(fields[sep+2]),
		})
	}
	return out
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) the kernel
// writes in paths.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// MountsUnder are the mount points at or below dir, deepest first, the
// order they can be unmounted in. A point mounted twice appears twice.
func MountsUnder(mounts []Mount, dir string) []string {
	dir = filepath.Clean(dir)
	var out []string
	for _, m := range mounts {
		if m.Point == dir || strings.HasPrefix(m.Point, dir+"/") {
			out = append(out, m.Point)
		}
	}
	// Later mounts stack on earlier ones: unmount in reverse mount order,
	// deeper paths before their parents.
	slices.Reverse(out)
	slices.SortStableFunc(out, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return out
}

func readMounts() ([]Mount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return ParseMountinfo(string(data)), nil
}

// isMountPoint says whether path is a mount point.
func isMountPoint(path string) (bool, error) {
	mounts, err := readMounts()
	if err != nil {
		return false, err
	}
	path = filepath.Clean(path)
	for _, m := range mounts {
		if m.Point == path {
			return true, nil
		}
	}
	return false, nil
}

// unmountUnder unmounts everything at or below dir (kubelet's bind mount
// of its root directory, volumes, containerd's rootfs and shm mounts),
// until nothing is left there.
func unmountUnder(dir string) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	for range 10 {
		mounts, err := readMounts()
		if err != nil {
			return err
		}
		points := MountsUnder(mounts, real)
		if len(points) == 0 {
			return nil
		}
		for _, p := range points {
			if err := unix.Unmount(p, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				// Busy: detach it, it goes once the last user does.
				_ = unix.Unmount(p, unix.MNT_DETACH)
			}
		}
	}
	mounts, err := readMounts()
	if err != nil {
		return err
	}
	if left := MountsUnder(mounts, real); len(left) > 0 {
		return fmt.Errorf("could not unmount %v", left)
	}
	return nil
}
