package herdr

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// checkServerPeer refuses a socket whose server runs as neither root nor
// this process's own user: in a directory a member could write to, a
// server of the member's may have taken the socket's name, and would
// receive every pane's environment and token.
func checkServerPeer(conn net.Conn) error {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return nil
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if credErr != nil {
		return fmt.Errorf("reading the server's credentials: %w", credErr)
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: the server on %s runs as user %d, neither root nor this process's user", ErrUntrustedServer, uc.RemoteAddr(), cred.Uid)
	}
	return nil
}
