// Package memberfs reads files a member owns. A member is the attacker:
// whatever lies in its directories (a hook record, a transcript, an image
// it sends, an agent's state file) may be a FIFO that blocks open(2), a
// sparse file of a terabyte, or a link to a file of someone else's. Every
// read of such a path goes through this package, which
//
//   - opens with O_NONBLOCK and O_NOFOLLOW, so a FIFO or device never
//     blocks the open and the last name is never a link;
//   - beneath a root, opens one name at a time, none of them a link, so
//     nothing leads out of the root;
//   - takes fstat of what it opened: regular files only, and no larger than
//     the caller's limit, refused before a byte is read;
//   - reads at most that limit, should the file grow meanwhile;
//   - lets each user have at most MaxInFlight reads at once (the user whose
//     file system identity the reading thread has), refusing more with
//     ErrBusy, so no member can pile up threads or memory in the reader.
//
// As runs a function with a member's file system identity and no
// supplementary groups, so what it reads is checked as that member's.
package memberfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Why a member's file is not read.
var (
	// ErrOutside says the path leaves the root by name.
	ErrOutside = errors.New("the path is not within the directory")
	// ErrLink says a name on the path is a symbolic link, which is never
	// followed. It comes with ErrNotRegular: a link is not a file to read.
	ErrLink = errors.New("a symbolic link, which is not followed")
	// ErrNotRegular says the path is a directory, a FIFO, a device or the
	// like.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge says the file is larger than the reader's limit.
	ErrTooLarge = errors.New("the file is too large")
	// ErrNotPrivate says a file that should be this process's alone is
	// another user's, or others may write or read it.
	ErrNotPrivate = errors.New("not this process's private file")
	// ErrBusy says the user already has MaxInFlight reads under way.
	ErrBusy = errors.New("too many reads of this user's files at once")
)

// MaxInFlight is how many reads of one user's files may be under way at
// once.
const MaxInFlight = 8

// inFlight counts the reads under way per user.
var inFlight = struct {
	sync.Mutex
	n map[uint32]int
}{n: map[uint32]int{}}

// reserve takes one of uid's read slots; release gives it back.
func reserve(uid uint32) (release func(), err error) {
	inFlight.Lock()
	defer inFlight.Unlock()
	if inFlight.n[uid] >= MaxInFlight {
		return nil, fmt.Errorf("%w: user %d has %d", ErrBusy, uid, MaxInFlight)
	}
	inFlight.n[uid]++
	return func() {
		inFlight.Lock()
		defer inFlight.Unlock()
		if inFlight.n[uid]--; inFlight.n[uid] == 0 {
			delete(inFlight.n, uid)
		}
	}, nil
}

// whileReading runs with a slot held and the file open; tests use it to
// hold reads under way.
var whileReading = func() {}

// ReadFile reads the file at path, at most maxBytes of it. Its last name
// must not be a link; the directories above it are the caller's to trust.
func ReadFile(path string, maxBytes int64) ([]byte, error) {
	return read(func() (int, error) { return openNoFollow(unix.AT_FDCWD, path, false) }, path, maxBytes, false, nil)
}

// ReadPrivateFile reads a file of this process's own (its state, say) as
// ReadFile does, checking before it reads a byte that the file is the
// process's effective user's and that no one else may read or write it
// (mode 0600 or less): in a directory a member could once write to, a
// file of the member's may have taken its place.
func ReadPrivateFile(path string, maxBytes int64) ([]byte, error) {
	private := func(st *unix.Stat_t) error {
		if st.Uid != uint32(os.Geteuid()) || st.Mode&0o077 != 0 {
			return fmt.Errorf("%w: %s is user %d's, mode %#o; want user %d's, mode 0600", ErrNotPrivate, path, st.Uid, st.Mode&0o7777, os.Geteuid())
		}
		return nil
	}
	return read(func() (int, error) { return openNoFollow(unix.AT_FDCWD, path, false) }, path, maxBytes, false, private)
}

// ReadFileWithin reads the file path within the directory root, at most
// maxBytes of it. A relative path is taken from root. No name beneath root
// may be a link.
func ReadFileWithin(root, path string, maxBytes int64) ([]byte, error) {
	return readWithin(root, path, maxBytes, false)
}

// ReadTailWithin reads the last n bytes of the file path within root (all
// of it when it is shorter), as ReadFileWithin opens it: a log or a
// transcript, which may legitimately grow large.
func ReadTailWithin(root, path string, n int64) ([]byte, error) {
	return readWithin(root, path, n, true)
}

func readWithin(root, path string, maxBytes int64, tail bool) ([]byte, error) {
	rel, err := relativeWithin(root, path)
	if err != nil {
		return nil, err
	}
	return read(func() (int, error) { return openWithin(root, rel) }, path, maxBytes, tail, nil)
}

// relativeWithin is path relative to root, refusing one that leaves it by
// name.
func relativeWithin(root, path string) (string, error) {
	if !filepath.IsAbs(root) {
		return "", fmt.Errorf("directory %q is not absolute", root)
	}
	rel := path
	if filepath.IsAbs(path) {
		var err error
		if rel, err = filepath.Rel(filepath.Clean(root), filepath.Clean(path)); err != nil {
			return "", fmt.Errorf("%w: %s", ErrOutside, path)
		}
	}
	rel = filepath.Clean(rel)
	if rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "", fmt.Errorf("%w: %s", ErrOutside, path)
	}
	return rel, nil
}

// read opens a file with open, checks it (with check too, when there is
// one) and reads it, holding one of the reading user's slots throughout.
func read(open func() (int, error), path string, maxBytes int64, tail bool, check func(*unix.Stat_t) error) ([]byte, error) {
	if maxBytes < 0 {
		return nil, fmt.Errorf("reading %s: negative limit %d", path, maxBytes)
	}
	var b []byte
	err := withRegular(open, path, check, func(f *os.File, size int64) error {
		if size > maxBytes && !tail {
			return fmt.Errorf("%w: %s has %d bytes, at most %d", ErrTooLarge, path, size, maxBytes)
		}
		if size > maxBytes {
			if _, err := f.Seek(size-maxBytes, io.SeekStart); err != nil {
				return err
			}
		}
		// The file may grow while it is read.
		var err error
		if b, err = io.ReadAll(io.LimitReader(f, maxBytes+1)); err != nil {
			return err
		}
		if int64(len(b)) > maxBytes {
			if !tail {
				return fmt.Errorf("%w: %s has more than %d bytes", ErrTooLarge, path, maxBytes)
			}
			b = b[:maxBytes]
		}
		return nil
	})
	return b, err
}

// ReadRangeWithin reads at most n bytes of the file path within root,
// from offset on, opened as ReadFileWithin opens it, and says how large
// the file was when opened: a transcript read on from where the last
// reading stopped. From an offset at or past the end it reads nothing.
func ReadRangeWithin(root, path string, offset, n int64) ([]byte, int64, error) {
	if n < 0 || offset < 0 {
		return nil, 0, fmt.Errorf("reading %s: negative offset %d or limit %d", path, offset, n)
	}
	rel, err := relativeWithin(root, path)
	if err != nil {
		return nil, 0, err
	}
	var (
		b    []byte
		size int64
	)
	err = withRegular(func() (int, error) { return openWithin(root, rel) }, path, nil, func(f *os.File, sz int64) error {
		size = sz
		if offset >= sz {
			return nil
		}
		var err error
		b, err = io.ReadAll(io.NewSectionReader(f, offset, min(n, sz-offset)))
		return err
	})
	return b, size, err
}

// withRegular opens a file with open, checks that it is a regular file
// (and check, when there is one) and reads it with f, holding one of the
// reading user's slots throughout.
func withRegular(open func() (int, error), path string, check func(*unix.Stat_t) error, f func(*os.File, int64) error) error {
	release, err := reserve(fsUID())
	if err != nil {
		return err
	}
	defer release()
	fd, err := open()
	if err != nil {
		return fmt.Errorf("opening %s: %w", path, err)
	}
	file := os.NewFile(uintptr(fd), path)
	defer file.Close()
	whileReading()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if check != nil {
		if err := check(&st); err != nil {
			return err
		}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%w: %s", ErrNotRegular, path)
	}
	return f(file, st.Size)
}

// openWithin opens rel beneath root one name at a time, refusing links.
func openWithin(root, rel string) (int, error) {
	dir, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, mapOpenError(err, false)
	}
	if rel == "." {
		return dir, nil
	}
	names := strings.Split(rel, string(filepath.Separator))
	for i, name := range names {
		next, err := openNoFollow(dir, name, i < len(names)-1)
		_ = unix.Close(dir)
		if err != nil {
			return -1, err
		}
		dir = next
	}
	return dir, nil
}

// openNoFollow opens name (relative to dir) without blocking and without
// following a link; a directory when asked for one.
func openNoFollow(dir int, name string, wantDir bool) (int, error) {
	flags := unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY
	if wantDir {
		flags |= unix.O_DIRECTORY
	}
	for {
		fd, err := unix.Openat(dir, name, flags, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			if wantDir && err == unix.ENOTDIR && isLink(dir, name) {
				err = unix.ELOOP
			}
			return -1, mapOpenError(err, wantDir)
		}
		return fd, nil
	}
}

func isLink(dir int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// mapOpenError says in this package's words why open failed; the errno
// stays in the chain (fs.ErrNotExist, fs.ErrPermission).
func mapOpenError(err error, dir bool) error {
	switch {
	case err == unix.ELOOP:
		return fmt.Errorf("%w: %w (%w)", ErrNotRegular, ErrLink, err)
	case err == unix.ENOTDIR && dir:
		return fmt.Errorf("%w: a name on the path is not a directory (%w)", ErrNotRegular, err)
	case err == unix.ENXIO || err == unix.ENODEV || err == unix.EISDIR:
		// A socket, or a device with nothing behind it.
		return fmt.Errorf("%w (%w)", ErrNotRegular, err)
	}
	return err
}

// RemoveTree removes dir, a member's directory, and everything in it,
// following no link: a link in it is removed, never what it names, and a
// directory swapped for a link while the removal runs is not entered (each
// name is opened relative to its parent, with O_NOFOLLOW). dir itself must
// lie in a directory of this process's own that no one else may write, so
// the member cannot put a link in its place; one that is missing is
// removed already.
func RemoveTree(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("removing %q: not an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	if parent == dir {
		return fmt.Errorf("removing %s: refusing the root", dir)
	}
	var st unix.Stat_t
	if err := unix.Lstat(parent, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != uint32(os.Geteuid()) || st.Mode&0o022 != 0 {
		return fmt.Errorf("%w: removing %s: its parent is user %d's, mode %#o; want a directory of user %d's that no one else may write", ErrNotPrivate, dir, st.Uid, st.Mode&0o7777, os.Geteuid())
	}
	// os.RemoveAll unlinks a link or a file by name from its parent, and
	// enters a directory only through openat(O_NOFOLLOW|O_DIRECTORY) on
	// its parent's descriptor.
	return os.RemoveAll(dir)
}
