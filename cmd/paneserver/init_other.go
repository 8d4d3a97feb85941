//go:build !linux

package main

import "errors"

// runInit needs Linux's child subreaper.
func runInit([]string) (int, error) {
	return 0, errors.New("--subreaper needs Linux")
}
