package herdr

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

// TestStreamGivesUpOnASilentSubscription: a server that takes the
// subscription and never says it started holds the stream no longer than
// the client's Timeout; the stream then subscribes again.
func TestStreamGivesUpOnASilentSubscription(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "silent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	c := NewClient(sock)
	c.Timeout = 50 * time.Millisecond
	c.ReconnectMin, c.ReconnectMax = time.Millisecond, time.Millisecond
	stream := c.Subscribe(t.Context(), nil)
	defer stream.Close()
	for i := range 2 {
		select {
		case conn := <-accepted:
			defer conn.Close()
		case <-time.After(30 * time.Second):
			t.Fatalf("subscription %d never came: the silent one was held past the timeout", i+1)
		}
	}
}
