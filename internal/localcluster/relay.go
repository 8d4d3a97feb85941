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
// thread that has joined the namespace and is thrown away after, so the
// rest of the process stays where it is; the connection itself then works
// from anywhere.
func DialInNetns(ctx context.Context, nsPath, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		// Never unlocked: the goroutine ends locked, and the runtime ends
		// its thread with it rather than reuse a thread in the namespace.
		runtime.LockOSThread()
		fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{err: fmt.Errorf("opening %s: %w", nsPath, err)}
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			ch <- result{err: fmt.Errorf("joining %s: %w", nsPath, err)}
			return
		}
		var d net.Dialer
		// tcp4 to a literal address dials on this goroutine alone.
		c, err := d.DialContext(ctx, "tcp4", addr)
		ch <- result{conn: c, err: err}
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
