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
// on another thread, outside the namespace). The connection works from
// anywhere after.
func DialInNetns(ctx context.Context, nsPath, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNetns(nsPath, func() (err error) {
		var d net.Dialer
		// tcp4 to a literal address dials on this goroutine alone.
		c, err = d.DialContext(ctx, "tcp4", addr)
		return err
	})
	return c, err
}

// ListenInNetns listens on addr (an IP and port) inside the network
// namespace at nsPath: a server of the test's own that pods call. The
// listener works from anywhere after.
func ListenInNetns(nsPath, addr string) (net.Listener, error) {
	var ln net.Listener
	err := inNetns(nsPath, func() (err error) {
		ln, err = net.Listen("tcp4", addr)
		return err
	})
	return ln, err
}

// inNetns runs fn on an OS thread that joins the network namespace at
// nsPath for the call and then returns to the process's own: a socket fn
// makes belongs to the namespace for good.
func inNetns(nsPath string, fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer unix.Close(home)
		fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("opening %s: %w", nsPath, err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("joining %s: %w", nsPath, err)
			return
		}
		ch <- fn()
		// Back home, the thread serves other goroutines again. Were it to
		// end instead, a child it had started with a parent-death signal
		// (os/exec binds that signal to the starting thread) would die.
		// Should the way back fail, the thread stays locked and ends with
		// this goroutine rather than run others in the wrong namespace.
		if unix.Setns(home, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	return <-ch
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
