//go:build !linux

package memberfs

import (
	"errors"
	"os"
)

// fsUID is the process's effective user: without Linux's file system ids,
// every thread reads as the process.
func fsUID() uint32 { return uint32(os.Geteuid()) }

// As is Linux's alone: elsewhere a thread cannot take another user's file
// system identity.
func As(uint32, func() error) error {
	return errors.New("reading as another user needs Linux")
}

// Self is the user whose files this process reads when it reads as itself.
func Self() uint32 { return uint32(os.Geteuid()) }
