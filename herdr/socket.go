package herdr

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// SocketPathEnv overrides the default socket path, as it does for herdr.
const SocketPathEnv = "HERDR_SOCKET_PATH"

// DefaultSessionName is the session herdr runs when none is named; its socket
// lives directly in the config directory.
const DefaultSessionName = "default"

const maxSessionNameLen = 64

// DefaultSocketPath resolves the socket of the default herdr session the way
// herdr does: $HERDR_SOCKET_PATH, else $XDG_CONFIG_HOME/herdr/herdr.sock, else
// $HOME/.config/herdr/herdr.sock.
func DefaultSocketPath() (string, error) {
	if path := os.Getenv(SocketPathEnv); path != "" {
		return path, nil
	}
	dir, err := configDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "herdr.sock"), nil
}

// SessionSocketPath resolves the socket of a named herdr session:
// <config>/herdr/sessions/<name>/herdr.sock. An explicit session ignores
// $HERDR_SOCKET_PATH, as herdr's --session does; "default" is the default
// session's socket.
func SessionSocketPath(name string) (string, error) {
	if err := validateSessionName(name); err != nil {
		return "", err
	}
	dir, err := configDir()
	if err != nil {
		return "", err
	}
	if name == DefaultSessionName {
		return filepath.Join(dir, "herdr.sock"), nil
	}
	return filepath.Join(dir, "sessions", name, "herdr.sock"), nil
}

// configDir is herdr's config directory. An empty variable counts as unset:
// herdr would otherwise resolve a relative path against its own cwd.
func configDir() (string, error) {
	if dir := os.Getenv("XDG_CONFIG_HOME"); dir != "" {
		return filepath.Join(dir, "herdr"), nil
	}
	if home := os.Getenv("HOME"); home != "" {
		return filepath.Join(home, ".config", "herdr"), nil
	}
	return "", errors.New("resolving herdr socket path: neither XDG_CONFIG_HOME nor HOME is set")
}

func validateSessionName(name string) error {
	switch {
	case name == "":
		return errors.New("herdr session name cannot be empty")
	case len(name) > maxSessionNameLen:
		return fmt.Errorf("herdr session name %q is longer than %d bytes", name, maxSessionNameLen)
	case name == "." || name == "..":
		return fmt.Errorf("herdr session name cannot be %q", name)
	}
	for _, b := range []byte(name) {
		ok := b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-'
		if !ok {
			return fmt.Errorf("herdr session name %q may only contain ASCII letters, digits, '.', '_' and '-'", name)
		}
	}
	return nil
}
