package memberfs

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// fsUID is the user whose file system identity this thread has: the
// process's, unless As gave it a member's.
func fsUID() uint32 {
	// A call that changes nothing answers the identity in force.
	uid, _ := unix.SetfsuidRetUid(-1)
	return uint32(uid)
}

// As runs fn with uid's file system identity (its user and group id both
// uid): what fn reads and writes is checked, and what it creates is owned,
// as that user's, so a link a member left in its directory reaches nothing
// the member may not. The thread drops the process's supplementary groups
// too: a file of root's group is not the member's to read. The identity
// is taken on a thread of its own, which ends with fn. It needs CAP_SETUID
// and CAP_SETGID.
func As(uid uint32, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the goroutine's end terminates the thread, and
		// the identity with it.
		runtime.LockOSThread()
		// x/sys's setgroups changes this thread's groups alone, unlike
		// syscall.Setgroups, which changes every thread's.
		if err := unix.Setgroups(nil); err != nil {
			done <- fmt.Errorf("dropping the supplementary groups for user %d: %w", uid, err)
			return
		}
		_, _ = unix.SetfsgidRetGid(int(uid))
		_, _ = unix.SetfsuidRetUid(int(uid))
		if got := fsUID(); got != uid {
			done <- fmt.Errorf("taking the file system identity of user %d failed (have %d)", uid, got)
			return
		}
		done <- fn()
	}()
	return <-done
}

// Self is the user whose files this process reads when it reads as itself.
func Self() uint32 { return uint32(os.Geteuid()) }
