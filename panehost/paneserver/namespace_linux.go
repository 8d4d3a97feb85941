package paneserver

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// paneView is what a pane's mount namespace shows in place of the
// machine's: files bound over /etc/passwd and /etc/group, and a directory
// over /tmp ("" leaves it the machine's).
type paneView struct {
	passwd, group, tmp string
}

// canMakeNamespaces reports whether this process may give a pane a mount
// namespace of its own: it tries on a thread that ends with the try.
func canMakeNamespaces() bool {
	return inNamespace(nil, func() error { return nil }) == nil
}

// inNamespace runs start on a thread of its own in a new mount namespace
// showing v (nil: the machine's mounts as they are): what start starts
// (a pane's shell) is born in that namespace. The thread ends with start,
// and the namespace with the last process in it; the machine's mounts are
// never changed, as the new namespace is a receiving copy (slave) of them.
func inNamespace(v *paneView, start func() error) error {
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the thread is in the new namespace, and ends
		// with this goroutine.
		runtime.LockOSThread()
		if err := enter(v); err != nil {
			done <- err
			return
		}
		done <- start()
	}()
	return <-done
}

// enter moves this thread into a new mount namespace showing v.
func enter(v *paneView) error {
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
		return fmt.Errorf("making a mount namespace: %w", err)
	}
	// Mounts made here never reach the machine; the machine's new mounts
	// still show here.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("making the mount namespace a receiving copy: %w", err)
	}
	if v == nil {
		return nil
	}
	binds := [][2]string{{v.passwd, "/etc/passwd"}, {v.group, "/etc/group"}}
	if v.tmp != "" {
		binds = append(binds, [2]string{v.tmp, "/tmp"})
	}
	for _, b := range binds {
		if _, err := os.Lstat(b[1]); err != nil {
			// Nothing to show it over, as in an image without one.
			continue
		}
		if err := unix.Mount(b[0], b[1], "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("showing %s as %s: %w", b[0], b[1], err)
		}
	}
	return nil
}
