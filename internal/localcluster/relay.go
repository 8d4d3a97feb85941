package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// DialInNetns opens a TCP connection from inside the network namespace at
// nsPath, to an address there (an IP and port: a name would be resolved
// on another thread, outside the namespace). The socket is made on an OS
// thread that joins the namespace for the call and then returns to the
// process's own; the connection itself works from anywhere after.
func DialInNetns(ctx context.Context, nsPath, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer unix.Close(home)
		fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("opening %s: %w", nsPath, err)}
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("joining %s: %w", nsPath, err)}
			return
		}
		var d net.Dialer
		// tcp4 to a literal address dials on this goroutine alone.
		c, err := d.DialContext(ctx, "tcp4", addr)
		ch <- result{conn: c, err: err}
		// Back home, the thread serves other goroutines again. Were it to
		// end instead, a child it had started with a parent-death signal
		// (os/exec binds that signal to the starting thread) would die.
		// Should the way back fail, the thread stays locked and ends with
		// this goroutine rather than run others in the wrong namespace.
		if unix.Setns(home, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	r := <-ch
	return r.conn, r.err
}

// Relay forwards every connection accepted on ln to target inside the
// network namespace at nsPath, until ctx ends. It is how the machine's
// namespace reaches the cluster through loopback alone.
func Relay(ctx context.Context, ln net.Listener, nsPath, target string) error {
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		go func() {
			defer c.Close()
			up, err := DialInNetns(ctx, nsPath, target)
			if err != nil {
				return
			}
			defer up.Close()
			splice(c, up)
		}()
	}
}

// splice copies both ways until both directions end, passing a half
// close on so that a client's EOF reaches the server.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			dst.Close()
		}
	}
	wg.Add(2)
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
}
