//go:build !linux

package herdr

import "net"

// checkServerPeer trusts the socket: without SO_PEERCRED the server's user
// is not known.
func checkServerPeer(net.Conn) error { return nil }
