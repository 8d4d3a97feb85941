package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// guardedDirMode lets a directory's owner (the pane server) and group
// (fleetd's) change it, and everyone else only pass through it: to the
// socket, and to the directories of their own that lie within.
const guardedDirMode = 0o771

// guardDir makes dir the pane server's and group gid's only, mode 0771,
// creating it when missing. A volume the pane server shares with members
// comes world-writable (an emptyDir is 2777 where the Pod has an fsGroup,
// without the sticky bit): there any member's user could rename the
// server's files, or put a server of its own where fleetd looks for the
// socket. A link in dir's place is refused.
func guardDir(dir string, gid int) error {
	if err := os.Mkdir(dir, guardedDirMode); err != nil && !os.IsExist(err) {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening %s, which must be a directory: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, os.Geteuid(), gid); err != nil {
		return fmt.Errorf("giving %s to this server and group %d: %w", dir, gid, err)
	}
	// Fchmod with the plain mode also clears setgid and sticky bits.
	if err := unix.Fchmod(fd, guardedDirMode); err != nil {
		return fmt.Errorf("restricting %s: %w", dir, err)
	}
	return nil
}
